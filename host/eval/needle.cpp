#include "host/eval/needle.h"

#include <cmath>
#include <cstdlib>
#include <random>
#include <set>
#include <sstream>

#include "core/error.h"

namespace kvcomp::host {

namespace {

// Longer filler lines are broken: the needle can only go between lines, and a depth sweep needs
// boundaries every few hundred tokens even in a text that is one long paragraph.
constexpr size_t k_max_line_bytes = 256;

// The same strings as tools/model/tasks.py, so the needle reads like a training record.
std::string needle_line(int64_t key, int64_t value) {
    return "line " + std::to_string(key) + ": REGISTER_CONTENT is <" + std::to_string(value) + ">\n";
}
std::string question(int64_t key) { return "What is the REGISTER_CONTENT in line " + std::to_string(key) + "?\n"; }

// Non-blank lines of the text, each ending in '\n', none longer than k_max_line_bytes (+1).
std::vector<std::string> filler_lines(const std::string & text) {
    std::vector<std::string> out;
    size_t pos = 0;
    while (pos < text.size()) {
        const size_t nl = text.find('\n', pos);
        std::string line = text.substr(pos, nl == std::string::npos ? std::string::npos : nl - pos);
        pos = nl == std::string::npos ? text.size() : nl + 1;
        if (!line.empty() && line.back() == '\r') line.pop_back();
        if (line.find_first_not_of(" \t\r\f\v") == std::string::npos) continue;
        while (line.size() > k_max_line_bytes) {
            size_t cut = line.rfind(' ', k_max_line_bytes);
            size_t next = cut + 1;  // drop the space we break at
            if (cut == std::string::npos || cut == 0) {
                // No space: break between UTF-8 characters (never inside one).
                cut = k_max_line_bytes;
                while (cut > 1 && (static_cast<unsigned char>(line[cut]) & 0xC0) == 0x80) --cut;
                next = cut;
            }
            out.push_back(line.substr(0, cut) + "\n");
            line.erase(0, next);
        }
        if (!line.empty()) out.push_back(line + "\n");
    }
    return out;
}

}  // namespace

std::vector<needle_example> make_needle(const tokenizer & tok, const std::string & filler, int64_t context,
                                        double depth, int64_t count, uint64_t seed) {
    KVCOMP_CHECK_ARG(count > 0, "needle: count must be positive, got ", count);
    KVCOMP_CHECK_ARG(depth >= 0.0 && depth <= 1.0, "needle: depth ", depth, " is outside [0, 1]");
    const auto lines = filler_lines(filler);
    KVCOMP_CHECK_ARG(filler.empty() || !lines.empty(), "needle: the filler text has no non-blank line");
    encode_options with_bos;
    with_bos.add_special = true;
    const int64_t bos_tokens = int64_t(tok.encode("", with_bos).size());

    std::vector<needle_example> out;
    for (int64_t e = 0; e < count; ++e) {
        // One generator per example, seeded without the depth: every depth sees the same haystack
        // and needle, and example i is the same whatever `count` is.
        std::mt19937_64 rng(seed ^ (uint64_t(context) * 0x9e3779b97f4a7c15ull) ^ (uint64_t(e + 1) * 0xbf58476d1ce4e5b9ull));
        auto uniform = [&](int64_t lo, int64_t hi) { return lo + int64_t(rng() % uint64_t(hi - lo + 1)); };
        const int64_t key = uniform(1, 999), value = uniform(10000, 99999);
        const std::string needle = needle_line(key, value), ask = question(key);
        const std::string answer = "<" + std::to_string(value) + ">";
        const int64_t reserve = bos_tokens + int64_t(tok.encode(needle).size() + tok.encode(ask).size() +
                                                     tok.encode(answer).size());
        const int64_t budget = context - reserve;

        // Haystack lines while they fit: whole lines of the filler from a random start (wrapping
        // around), or distractor records with other keys.
        std::vector<std::string> hay;
        std::vector<int64_t> hay_tokens;
        int64_t used = 0;
        const size_t start = lines.empty() ? 0 : size_t(uniform(0, int64_t(lines.size()) - 1));
        std::set<int64_t> keys_used = {key};
        for (size_t i = start;; ++i) {
            std::string l;
            if (!lines.empty()) {
                l = lines[i % lines.size()];
            } else {
                if (keys_used.size() == 999) break;  // every other key is in the record
                int64_t k = uniform(1, 999);
                while (!keys_used.insert(k).second) k = uniform(1, 999);
                l = needle_line(k, uniform(10000, 99999));
            }
            const int64_t n = int64_t(tok.encode(l).size());
            if (used + n > budget) break;
            hay.push_back(std::move(l));
            hay_tokens.push_back(n);
            used += n;
        }
        KVCOMP_CHECK_ARG(!hay.empty(), "needle: context ", context, " tokens leaves no room for a haystack line next to ",
                         "the needle and the question (", reserve, " tokens)");

        // Line boundary nearest to depth x haystack tokens; then build, and for tokenizers that
        // merge across line joins (BPE) drop filler lines away from the needle until it fits.
        auto build = [&](size_t & at, double & actual) {
            int64_t total = 0;
            for (int64_t n : hay_tokens) total += n;
            const double target = depth * double(total);
            at = 0;
            int64_t before = 0, best_before = 0;
            double best = std::abs(target);
            for (size_t k = 1; k <= hay.size(); ++k) {
                before += hay_tokens[k - 1];
                if (std::abs(double(before) - target) < best) best = std::abs(double(before) - target), at = k, best_before = before;
            }
            actual = total > 0 ? double(best_before) / double(total) : depth;
            std::string text;
            for (size_t k = 0; k < hay.size(); ++k) {
                if (k == at) text += needle;
                text += hay[k];
            }
            if (at == hay.size()) text += needle;
            return tok.encode(text + ask, with_bos);
        };
        needle_example ex;
        size_t at = 0;
        ex.prompt = build(at, ex.depth);
        const int64_t answer_tokens = int64_t(tok.encode(answer).size());
        while (int64_t(ex.prompt.size()) + answer_tokens > context && hay.size() > 1) {
            if (at < hay.size()) hay.pop_back(), hay_tokens.pop_back();
            else hay.erase(hay.begin()), hay_tokens.erase(hay_tokens.begin());
            ex.prompt = build(at, ex.depth);
        }
        KVCOMP_CHECK_ARG(int64_t(ex.prompt.size()) + answer_tokens <= context, "needle: context ", context,
                         " tokens is too short for the needle and the question");
        ex.answer = answer;
        out.push_back(std::move(ex));
    }
    return out;
}

std::vector<double> parse_depths(const std::string & s, const char * option) {
    std::vector<double> out;
    std::stringstream ss(s);
    std::string item;
    while (std::getline(ss, item, ',')) {
        char * end = nullptr;
        const double v = std::strtod(item.c_str(), &end);
        KVCOMP_CHECK_ARG(!item.empty() && *end == 0 && std::isfinite(v) && v >= 0.0 && v <= 1.0, option, ": '", item,
                         "' is not a depth in [0, 1]");
        out.push_back(v);
    }
    KVCOMP_CHECK_ARG(!out.empty(), option, ": empty list");
    return out;
}

}  // namespace kvcomp::host
