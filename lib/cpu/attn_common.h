// Exact softmax attention of one query row against n keys/values, in double (CPU oracle).
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "core/dtype.h"

namespace kvcomp::cpu {

// Key/value elements come as fp16 pages (uint16_t) or as values the caller computed (float, double).
inline double attn_elem(uint16_t h) {
    return double(half_to_float(h));
}
inline double attn_elem(float v) {
    return double(v);
}
inline double attn_elem(double v) {
    return v;
}

// Attention with different key and value widths (low-rank heads: k_dim for q.k, v_dim outputs).
// key(j) returns a pointer to k_dim elements and value(j) to v_dim elements (uint16_t fp16, float
// or double); each pointer is read before the next call, so a callback may reuse one scratch row.
// out gets v_dim floats; n == 0 gives zeros. Returns the log-denominator of the row (natural log of
// the sum of exp(scale * q.k) over its keys; -inf when n == 0).
template <typename KeyFn, typename ValFn>
double attend_row_kv(const float * q, int64_t n, int64_t k_dim, int64_t v_dim, float scale, KeyFn key,
                     ValFn value, float * out, std::vector<double> & scores) {
    if (n == 0) {
        for (int64_t d = 0; d < v_dim; ++d) out[d] = 0.0f;
        return -INFINITY;
    }
    scores.resize(size_t(n));
    double mx = -INFINITY;
    for (int64_t j = 0; j < n; ++j) {
        const auto * k = key(j);
        double s = 0.0;
        for (int64_t d = 0; d < k_dim; ++d) s += double(q[d]) * attn_elem(k[d]);
        scores[size_t(j)] = s * double(scale);
        mx = std::fmax(mx, scores[size_t(j)]);
    }
    double sum = 0.0;
    for (int64_t j = 0; j < n; ++j) sum += (scores[size_t(j)] = std::exp(scores[size_t(j)] - mx));
    std::vector<double> acc(size_t(v_dim), 0.0);
    for (int64_t j = 0; j < n; ++j) {
        const auto * v = value(j);
        for (int64_t d = 0; d < v_dim; ++d) acc[size_t(d)] += scores[size_t(j)] * attn_elem(v[d]);
    }
    for (int64_t d = 0; d < v_dim; ++d) out[d] = float(acc[size_t(d)] / sum);
    return mx + std::log(sum);
}

// key(j) and value(j) return pointers to head_dim fp16 values (uint16_t); out gets head_dim floats.
template <typename KeyFn, typename ValFn>
double attend_row(const float * q, int64_t n, int64_t head_dim, float scale, KeyFn key, ValFn value,
                  float * out, std::vector<double> & scores) {
    return attend_row_kv(q, n, head_dim, head_dim, scale, key, value, out, scores);
}

}  // namespace kvcomp::cpu
