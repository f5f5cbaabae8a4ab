#include "engine/sampling.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "core/error.h"

namespace kvcomp::engine {

void check_sampling(const sampling_params & p) {
    KVCOMP_CHECK_ARG(p.temperature >= 0.0f && std::isfinite(p.temperature), "sampling: temperature must be >= 0, got ",
                     p.temperature);
    KVCOMP_CHECK_ARG(p.top_k >= 0, "sampling: top_k must be >= 0, got ", p.top_k);
    KVCOMP_CHECK_ARG(p.top_p > 0.0f && p.top_p <= 1.0f, "sampling: top_p must be in (0, 1], got ", p.top_p);
}

int32_t sample_token(const float * logits, int64_t vocab, const sampling_params & p, std::mt19937_64 & rng) {
    if (p.temperature == 0.0f) {
        int64_t best = 0;
        for (int64_t i = 1; i < vocab; ++i)
            if (logits[i] > logits[best]) best = i;
        return int32_t(best);
    }
    std::vector<int32_t> idx(static_cast<size_t>(vocab));
    std::iota(idx.begin(), idx.end(), 0);
    // Highest logits first; stable on ties so the order (and the draw) is reproducible.
    std::stable_sort(idx.begin(), idx.end(), [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
    size_t keep = size_t(vocab);
    if (p.top_k > 0) keep = std::min(keep, size_t(p.top_k));
    std::vector<double> prob(keep);
    const double mx = logits[idx[0]];
    double sum = 0.0;
    for (size_t i = 0; i < keep; ++i) sum += prob[i] = std::exp((double(logits[idx[i]]) - mx) / p.temperature);
    if (p.top_p < 1.0f) {
        double acc = 0.0;
        size_t cut = keep;
        for (size_t i = 0; i < keep; ++i) {
            acc += prob[i] / sum;
            if (acc >= double(p.top_p)) {
                cut = i + 1;
                break;
            }
        }
        keep = cut;
        sum = std::accumulate(prob.begin(), prob.begin() + long(keep), 0.0);
    }
    const double u = std::uniform_real_distribution<double>(0.0, sum)(rng);
    double acc = 0.0;
    for (size_t i = 0; i < keep; ++i) {
        acc += prob[i];
        if (u < acc) return idx[i];
    }
    return idx[keep - 1];
}

}  // namespace kvcomp::engine
