// Salient-token selection: see saliency.h.
#include "host/quant/saliency.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

namespace kvcomp::host::quant {

std::vector<int32_t> prompt_probes(int64_t len, double recent_frac, double random_frac, uint64_t seed) {
    if (len <= 0) return {};
    const int64_t n_recent =
        std::min<int64_t>(len, std::max<int64_t>(1, len - int64_t(std::floor((1.0 - recent_frac) * double(len)))));
    const int64_t older = len - n_recent;
    const int64_t n_random = std::min<int64_t>(older, int64_t(std::floor(random_frac * double(len))));
    std::vector<int32_t> probes;
    // Distinct random picks from [0, older): a seeded partial Fisher-Yates shuffle.
    std::vector<int32_t> pool(static_cast<size_t>(older));
    std::iota(pool.begin(), pool.end(), 0);
    std::mt19937_64 rng(seed);
    for (int64_t i = 0; i < n_random; ++i) {
        const int64_t j = i + int64_t(rng() % uint64_t(older - i));
        std::swap(pool[size_t(i)], pool[size_t(j)]);
        probes.push_back(pool[size_t(i)]);
    }
    for (int64_t t = older; t < len; ++t) probes.push_back(int32_t(t));
    std::sort(probes.begin(), probes.end());
    return probes;
}

std::vector<int64_t> normalization_counts(const std::vector<int32_t> & key_pos,
                                          const std::vector<int32_t> & probe_pos, nnz_mode mode,
                                          int32_t last_pos) {
    // The prefill calls this per prompt, with ascending keys and probes: then the probe count is one
    // merge walk, not a search per key.
    const bool probes_sorted = std::is_sorted(probe_pos.begin(), probe_pos.end());
    std::vector<int32_t> sorted_copy;
    if (!probes_sorted) sorted_copy = probe_pos, std::sort(sorted_copy.begin(), sorted_copy.end());
    const std::vector<int32_t> & sorted = probes_sorted ? probe_pos : sorted_copy;
    const bool keys_sorted = std::is_sorted(key_pos.begin(), key_pos.end());
    std::vector<int64_t> out(key_pos.size());
    size_t first = 0;  // first probe at or after the current key (keys_sorted)
    for (size_t i = 0; i < key_pos.size(); ++i) {
        if (mode == nnz_mode::causal) {
            out[i] = int64_t(last_pos) - key_pos[i] + 1;
        } else if (keys_sorted) {
            while (first < sorted.size() && sorted[first] < key_pos[i]) ++first;
            out[i] = int64_t(sorted.size() - first);
        } else {
            out[i] = int64_t(sorted.end() - std::lower_bound(sorted.begin(), sorted.end(), key_pos[i]));
        }
    }
    return out;
}

std::vector<double> normalized_scores(const float * sums, const std::vector<int32_t> & key_pos,
                                      const std::vector<int32_t> & probe_pos, nnz_mode mode,
                                      int32_t last_pos) {
    const std::vector<int64_t> count = normalization_counts(key_pos, probe_pos, mode, last_pos);
    std::vector<double> out(key_pos.size());
    for (size_t i = 0; i < key_pos.size(); ++i)
        out[i] = count[i] > 0 ? double(sums[i]) / double(count[i]) : 0.0;
    return out;
}

int64_t regular_count(int64_t n, double ratio) {
    // The small epsilon keeps e.g. (1 - 0.6) * 100 = 39.999... from flooring to 39.
    return std::min<int64_t>(n, std::max<int64_t>(0, int64_t(std::floor((1.0 - ratio) * double(n) + 1e-9))));
}

std::vector<int32_t> split_by_saliency(const std::vector<double> & scores, double ratio) {
    const int64_t n = int64_t(scores.size());
    const int64_t n_hi = n - regular_count(n, ratio);
    // The salient set is the first n_hi indices in the order (score descending, index ascending),
    // the order a stable sort by score gives. A selection (linear on average) finds that set; the
    // prefill ranks every prompt's tokens per KV head and layer, so this runs on the host between
    // device steps and an O(n log n) sort there showed up in the prefill time.
    // Selection over (score, index) pairs held together: comparisons read one contiguous array
    // instead of chasing indices into the scores (several times faster at 32K tokens).
    struct keyed {
        double s;
        int32_t i;
    };
    std::vector<keyed> keys(static_cast<size_t>(n));
    for (int32_t i = 0; i < int32_t(n); ++i) keys[size_t(i)] = keyed{scores[size_t(i)], i};
    if (n_hi > 0 && n_hi < n)
        std::nth_element(keys.begin(), keys.begin() + (n_hi - 1), keys.end(), [](const keyed & a, const keyed & b) {
            return a.s > b.s || (a.s == b.s && a.i < b.i);
        });
    std::vector<int32_t> order(static_cast<size_t>(n));
    std::vector<char> salient(static_cast<size_t>(n), 0);
    for (int64_t i = 0; i < n_hi; ++i) salient[size_t(keys[size_t(i)].i)] = 1;
    // Salient indices ascending, then regular ones ascending.
    int64_t hi = 0, lo = n_hi;
    for (int32_t i = 0; i < int32_t(n); ++i) order[size_t(salient[size_t(i)] ? hi++ : lo++)] = i;
    return order;
}

}  // namespace kvcomp::host::quant
