// UTF-8 decoding and Unicode character classes. See unicode.h.
#include "host/model/unicode.h"

#include <algorithm>
#include <iterator>

namespace kvcomp::host {

namespace {

struct code_range {
    uint32_t first, last;  // inclusive
};

#include "host/model/unicode_ranges_table.inc"

bool in_ranges(const code_range * begin, const code_range * end, uint32_t cp) {
    // First range whose last >= cp; cp is inside when first <= cp.
    const code_range * it =
        std::lower_bound(begin, end, cp, [](const code_range & r, uint32_t v) { return r.last < v; });
    return it != end && it->first <= cp;
}

bool is_white_space(uint32_t cp) {
    if (cp <= 0x20) return cp == 0x20 || (cp >= 0x09 && cp <= 0x0D);
    if (cp < 0x85) return false;
    return cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 ||
           cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

inline bool is_cont(uint8_t b) {
    return (b & 0xC0) == 0x80;
}

}  // namespace

size_t utf8_next(std::string_view s, size_t i, uint32_t & cp) {
    const size_t n = s.size();
    const uint8_t b0 = uint8_t(s[i]);
    cp = k_invalid_code_point;
    if (b0 < 0x80) {
        cp = b0;
        return 1;
    }
    int need;
    uint32_t v;
    uint8_t lo = 0x80, hi = 0xBF;  // allowed range of the second byte (Unicode Table 3-7)
    if (b0 >= 0xC2 && b0 <= 0xDF) {
        need = 1;
        v = b0 & 0x1F;
    } else if (b0 >= 0xE0 && b0 <= 0xEF) {
        need = 2;
        v = b0 & 0x0F;
        if (b0 == 0xE0) lo = 0xA0;  // no overlong forms
        if (b0 == 0xED) hi = 0x9F;  // no surrogates
    } else if (b0 >= 0xF0 && b0 <= 0xF4) {
        need = 3;
        v = b0 & 0x07;
        if (b0 == 0xF0) lo = 0x90;
        if (b0 == 0xF4) hi = 0x8F;  // <= U+10FFFF
    } else {
        return 1;  // continuation byte or C0, C1, F5..FF: never valid as a lead
    }
    size_t k = 1;
    for (; k <= size_t(need); ++k) {
        if (i + k >= n) return k;
        const uint8_t b = uint8_t(s[i + k]);
        if (k == 1 ? (b < lo || b > hi) : !is_cont(b)) return k;
        v = (v << 6) | (b & 0x3F);
    }
    cp = v;
    return k;
}

void utf8_append(std::string & out, uint32_t cp) {
    if (cp < 0x80) {
        out += char(cp);
    } else if (cp < 0x800) {
        out += char(0xC0 | (cp >> 6));
        out += char(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        out += char(0xE0 | (cp >> 12));
        out += char(0x80 | ((cp >> 6) & 0x3F));
        out += char(0x80 | (cp & 0x3F));
    } else {
        out += char(0xF0 | (cp >> 18));
        out += char(0x80 | ((cp >> 12) & 0x3F));
        out += char(0x80 | ((cp >> 6) & 0x3F));
        out += char(0x80 | (cp & 0x3F));
    }
}

char_class classify(uint32_t cp) {
    if (cp < 0x80) {  // fast path for ASCII
        if ((cp | 0x20) >= 'a' && (cp | 0x20) <= 'z') return char_class::letter;
        if (cp >= '0' && cp <= '9') return char_class::number;
        return is_white_space(cp) ? char_class::space : char_class::other;
    }
    if (cp == k_invalid_code_point) return char_class::other;
    if (is_white_space(cp)) return char_class::space;
    if (in_ranges(std::begin(k_letter_ranges), std::end(k_letter_ranges), cp)) return char_class::letter;
    if (in_ranges(std::begin(k_number_ranges), std::end(k_number_ranges), cp)) return char_class::number;
    return char_class::other;
}

uint32_t fold_case_ascii(uint32_t cp) {
    if (cp >= 'A' && cp <= 'Z') return cp + 32;
    if (cp == 0x17F) return 's';
    if (cp == 0x212A) return 'k';
    return cp;
}

}  // namespace kvcomp::host
