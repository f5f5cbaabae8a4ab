// silu_mul: the SwiGLU activation, silu(gate) * up.
#include <cmath>

#include "cpu/cpu_common.h"

namespace kvcomp::cpu {

void run_silu_mul(const op_desc & op) {
    const auto & p = op.get<silu_mul_params>();
    const float * g = ptr<const float>(op.src[0]);
    const float * u = ptr<const float>(op.src[1]);
    float * d = ptr<float>(op.dst[0]);
    for (int64_t i = 0; i < p.rows * p.n; ++i) {
        const double x = g[i];
        d[i] = float(x / (1.0 + std::exp(-x)) * double(u[i]));
    }
}

}  // namespace kvcomp::cpu
