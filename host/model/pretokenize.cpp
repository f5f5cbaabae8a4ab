// Hand-written equivalents of the pre-tokenizer regexes and the GPT-2 byte alphabet. See
// pretokenize.h for the patterns; each alternative below is commented with the regex it stands for.
#include "host/model/pretokenize.h"

#include "host/model/unicode.h"

namespace kvcomp::host {

namespace {

const char * const k_gpt2_regex =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
const char * const k_llama3_regex =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const char * const k_qwen2_regex =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

// The text as code points with their byte offsets; off has one extra entry (text size).
struct char_seq {
    std::vector<uint32_t> cp;
    std::vector<char_class> cls;
    std::vector<size_t> off;

    explicit char_seq(std::string_view s) {
        for (size_t i = 0; i < s.size();) {
            uint32_t c;
            const size_t len = utf8_next(s, i, c);
            cp.push_back(c);
            cls.push_back(classify(c));
            off.push_back(i);
            i += len;
        }
        off.push_back(s.size());
    }
    size_t size() const { return cp.size(); }
    bool is(size_t k, char_class c) const { return k < cp.size() && cls[k] == c; }
    bool is_nl(size_t k) const { return k < cp.size() && (cp[k] == '\r' || cp[k] == '\n'); }
    bool is_char(size_t k, uint32_t c) const { return k < cp.size() && cp[k] == c; }
    size_t run(size_t k, char_class c) const {
        while (k < cp.size() && cls[k] == c) ++k;
        return k;
    }
};

// 's|'t|'re|'ve|'m|'ll|'d, case-insensitive or not. Returns the end, or 0 for no match.
size_t match_contraction(const char_seq & s, size_t i, bool ignore_case) {
    if (!s.is_char(i, '\'') || i + 1 >= s.size()) return 0;
    auto at = [&](size_t k) -> uint32_t {
        if (k >= s.size()) return 0;
        return ignore_case ? fold_case_ascii(s.cp[k]) : s.cp[k];
    };
    const uint32_t a = at(i + 1);
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return i + 2;
    const uint32_t b = at(i + 2);
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return i + 3;
    return 0;
}

// \s+(?!\S) then \s+ : a whitespace run, minus its last char when a non-space follows and the
// run is longer than one (the lookahead backtracks one step); the second alternative takes it all.
size_t match_space_run(const char_seq & s, size_t i) {
    const size_t j = s.run(i, char_class::space);
    if (j == s.size()) return j;
    return j - i >= 2 ? j - 1 : j;
}

size_t next_gpt2(const char_seq & s, size_t i) {
    if (size_t e = match_contraction(s, i, false)) return e;
    // ` ?\p{L}+`, ` ?\p{N}+`, ` ?[^\s\p{L}\p{N}]+`: optional space, then a run of one class.
    for (char_class c : {char_class::letter, char_class::number, char_class::other}) {
        size_t j = i;
        if (s.is_char(j, ' ') && s.is(j + 1, c)) ++j;
        if (s.is(j, c)) return s.run(j, c);
    }
    return match_space_run(s, i);
}

size_t next_llama3(const char_seq & s, size_t i, size_t max_digits) {
    if (size_t e = match_contraction(s, i, true)) return e;
    // [^\r\n\p{L}\p{N}]?\p{L}+ : one optional char that is not a newline, letter or number
    // (a space or punctuation), then letters.
    {
        size_t j = i;
        if (!s.is(j, char_class::letter) && !s.is(j, char_class::number) && !s.is_nl(j) &&
            s.is(j + 1, char_class::letter))
            ++j;
        if (s.is(j, char_class::letter)) return s.run(j, char_class::letter);
    }
    // \p{N}{1,3} (llama3) or \p{N} (qwen2)
    if (s.is(i, char_class::number)) {
        size_t j = i;
        while (j < s.size() && j - i < max_digits && s.is(j, char_class::number)) ++j;
        return j;
    }
    // ` ?[^\s\p{L}\p{N}]+[\r\n]*`
    {
        size_t j = i;
        if (s.is_char(j, ' ') && s.is(j + 1, char_class::other)) ++j;
        if (s.is(j, char_class::other)) {
            j = s.run(j, char_class::other);
            while (s.is_nl(j)) ++j;
            return j;
        }
    }
    // \s*[\r\n]+ : \s* backtracks from the end of the run to its last newline, then [\r\n]+ takes
    // that newline (the chars after it in the run are not newlines).
    if (s.is(i, char_class::space)) {
        const size_t j = s.run(i, char_class::space);
        for (size_t k = j; k > i; --k)
            if (s.is_nl(k - 1)) return k;
        return match_space_run(s, i);
    }
    return i + 1;  // unreachable: every char is a letter, number, space or other
}

}  // namespace

const char * split_pattern_name(split_pattern p) {
    switch (p) {
        case split_pattern::gpt2:
            return "gpt2";
        case split_pattern::llama3:
            return "llama3";
        case split_pattern::qwen2:
            return "qwen2";
    }
    return "?";
}

bool split_pattern_from_regex(const std::string & regex, split_pattern & out) {
    if (regex == k_gpt2_regex)
        out = split_pattern::gpt2;
    else if (regex == k_llama3_regex)
        out = split_pattern::llama3;
    else if (regex == k_qwen2_regex)
        out = split_pattern::qwen2;
    else
        return false;
    return true;
}

void split_text(split_pattern p, std::string_view text, std::vector<std::pair<size_t, size_t>> & out) {
    const char_seq s(text);
    for (size_t i = 0; i < s.size();) {
        size_t e;
        switch (p) {
            case split_pattern::gpt2:
                e = next_gpt2(s, i);
                break;
            case split_pattern::llama3:
                e = next_llama3(s, i, 3);
                break;
            default:
                e = next_llama3(s, i, 1);
                break;
        }
        if (e <= i) e = i + 1;  // defensive: always make progress
        out.emplace_back(s.off[i], s.off[e]);
        i = e;
    }
}

const std::array<std::string, 256> & byte_to_unicode() {
    static const std::array<std::string, 256> table = [] {
        std::array<std::string, 256> t;
        uint32_t next = 256;
        for (uint32_t b = 0; b < 256; ++b) {
            const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
            utf8_append(t[b], printable ? b : next++);
        }
        return t;
    }();
    return table;
}

int unicode_to_byte(uint32_t cp) {
    static const std::array<int, 324> inverse = [] {
        std::array<int, 324> inv;
        inv.fill(-1);
        const auto & fwd = byte_to_unicode();
        for (int b = 0; b < 256; ++b) {
            uint32_t c;
            utf8_next(fwd[size_t(b)], 0, c);
            inv[c] = b;
        }
        return inv;
    }();
    return cp < inverse.size() ? inverse[cp] : -1;
}

std::string bytes_to_byte_level(std::string_view bytes) {
    const auto & t = byte_to_unicode();
    std::string out;
    out.reserve(bytes.size() * 2);
    for (unsigned char b : bytes) out += t[b];
    return out;
}

}  // namespace kvcomp::host
