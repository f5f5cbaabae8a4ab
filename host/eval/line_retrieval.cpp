#include "host/eval/line_retrieval.h"

#include <random>
#include <set>

#include "core/error.h"

namespace kvcomp::host {

namespace {

std::string record_line(int64_t key, int64_t value) {
    return "line " + std::to_string(key) + ": REGISTER_CONTENT is <" + std::to_string(value) + ">\n";
}

std::string question(int64_t key) { return "What is the REGISTER_CONTENT in line " + std::to_string(key) + "?\n"; }

}  // namespace

std::vector<retrieval_example> make_line_retrieval(const tokenizer & tok, int64_t context, int64_t count,
                                                   uint64_t seed) {
    KVCOMP_CHECK_ARG(count > 0, "line_retrieval: count must be positive, got ", count);
    std::mt19937_64 rng(seed ^ (uint64_t(context) * 0x9e3779b97f4a7c15ull));
    auto uniform = [&](int64_t lo, int64_t hi) { return lo + int64_t(rng() % uint64_t(hi - lo + 1)); };
    encode_options with_bos;
    with_bos.add_special = true;
    std::vector<retrieval_example> out;
    for (int64_t e = 0; e < count; ++e) {
        // Draw lines until the next one would not fit; the question and answer are sized with the
        // longest key so every candidate record leaves room for them.
        std::vector<int64_t> keys, values;
        std::set<int64_t> seen;
        const int64_t reserve = int64_t(tok.encode(question(999) + "<99999>").size());
        int64_t used = int64_t(tok.encode("", with_bos).size());
        while (seen.size() < 999) {
            const int64_t key = uniform(1, 999);
            if (!seen.insert(key).second) continue;
            const int64_t value = uniform(10000, 99999);
            const int64_t n = int64_t(tok.encode(record_line(key, value)).size());
            if (used + n + reserve > context) break;
            keys.push_back(key);
            values.push_back(value);
            used += n;
        }
        KVCOMP_CHECK_ARG(keys.size() >= 2, "line_retrieval: context ", context, " tokens holds fewer than two lines");
        retrieval_example ex;
        ex.n_lines = int64_t(keys.size());
        ex.asked_line = uniform(0, ex.n_lines - 1);
        std::string text;
        for (size_t i = 0; i < keys.size(); ++i) text += record_line(keys[i], values[i]);
        text += question(keys[size_t(ex.asked_line)]);
        ex.prompt = tok.encode(text, with_bos);
        ex.answer = "<" + std::to_string(values[size_t(ex.asked_line)]) + ">";
        out.push_back(std::move(ex));
    }
    return out;
}

}  // namespace kvcomp::host
