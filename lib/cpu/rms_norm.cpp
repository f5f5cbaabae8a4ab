// rms_norm: y = x / sqrt(mean(x^2) + eps) * w, row by row.
#include <cmath>

#include "cpu/cpu_common.h"

namespace kvcomp::cpu {

void run_rms_norm(const op_desc & op) {
    const auto & p = op.get<rms_norm_params>();
    const float * x = ptr<const float>(op.src[0]);
    float * y = ptr<float>(op.dst[0]);
    for (int64_t r = 0; r < p.rows; ++r) {
        double ss = 0.0;
        for (int64_t i = 0; i < p.n; ++i) ss += double(x[r * p.n + i]) * x[r * p.n + i];
        const double inv = 1.0 / std::sqrt(ss / double(p.n) + double(p.eps));
        for (int64_t i = 0; i < p.n; ++i)
            y[r * p.n + i] = float(double(x[r * p.n + i]) * inv * double(load_float(op.src[1], i)));
    }
}

}  // namespace kvcomp::cpu
