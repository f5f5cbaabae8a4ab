// Exact softmax attention of one query row against n keys/values, in double (CPU oracle).
#pragma once

#include <cmath>
#include <vector>

#include "core/dtype.h"

namespace kvcomp::cpu {

// key(j) and value(j) return pointers to head_dim fp16 values (uint16_t); out gets head_dim floats.
template <typename KeyFn, typename ValFn>
void attend_row(const float * q, int64_t n, int64_t head_dim, float scale, KeyFn key, ValFn value, float * out,
                std::vector<double> & scores) {
    if (n == 0) {
        for (int64_t d = 0; d < head_dim; ++d) out[d] = 0.0f;
        return;
    }
    scores.resize(size_t(n));
    double mx = -INFINITY;
    for (int64_t j = 0; j < n; ++j) {
        const uint16_t * k = key(j);
        double s = 0.0;
        for (int64_t d = 0; d < head_dim; ++d) s += double(q[d]) * double(half_to_float(k[d]));
        scores[size_t(j)] = s * double(scale);
        mx = std::fmax(mx, scores[size_t(j)]);
    }
    double sum = 0.0;
    for (int64_t j = 0; j < n; ++j) sum += (scores[size_t(j)] = std::exp(scores[size_t(j)] - mx));
    std::vector<double> acc(size_t(head_dim), 0.0);
    for (int64_t j = 0; j < n; ++j) {
        const uint16_t * v = value(j);
        for (int64_t d = 0; d < head_dim; ++d) acc[size_t(d)] += scores[size_t(j)] * double(half_to_float(v[d]));
    }
    for (int64_t d = 0; d < head_dim; ++d) out[d] = float(acc[size_t(d)] / sum);
}

}  // namespace kvcomp::cpu
