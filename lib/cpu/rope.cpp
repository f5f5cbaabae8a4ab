// rope: rotary position embedding, neox (half split) or interleaved pairs, optional per-frequency
// divisors (Llama 3 rope_scaling). Angles in double: the oracle should not carry fp32 phase error.
#include <cmath>
#include <vector>

#include "cpu/cpu_common.h"

namespace kvcomp::cpu {

void run_rope(const op_desc & op) {
    const auto & p = op.get<rope_params>();
    const float * x = ptr<const float>(op.src[0]);
    const int32_t * pos = ptr<const int32_t>(op.src[1]);
    const float * ff = op.src[2].valid() ? ptr<const float>(op.src[2]) : nullptr;
    float * y = ptr<float>(op.dst[0]);
    const int64_t half = p.rot_dim / 2;
    std::vector<double> inv_freq(static_cast<size_t>(half));
    for (int64_t i = 0; i < half; ++i) {
        inv_freq[size_t(i)] = std::pow(double(p.theta), -2.0 * double(i) / double(p.rot_dim));
        if (ff) inv_freq[size_t(i)] /= double(ff[i]);
    }
    std::vector<float> tmp(size_t(p.head_dim));
    for (int64_t t = 0; t < p.n_tokens; ++t) {
        for (int64_t h = 0; h < p.n_heads; ++h) {
            const int64_t base = (t * p.n_heads + h) * p.head_dim;
            for (int64_t i = 0; i < p.head_dim; ++i) tmp[size_t(i)] = x[base + i];  // dst may alias x
            for (int64_t i = 0; i < half; ++i) {
                const double a = double(pos[t]) * inv_freq[size_t(i)];
                const double c = std::cos(a), s = std::sin(a);
                const int64_t i0 = p.style == rope_style::neox ? i : 2 * i;
                const int64_t i1 = p.style == rope_style::neox ? i + half : 2 * i + 1;
                const double x0 = tmp[size_t(i0)], x1 = tmp[size_t(i1)];
                y[base + i0] = float(x0 * c - x1 * s);
                y[base + i1] = float(x1 * c + x0 * s);
            }
            for (int64_t i = p.rot_dim; i < p.head_dim; ++i) y[base + i] = tmp[size_t(i)];
        }
    }
}

}  // namespace kvcomp::cpu
