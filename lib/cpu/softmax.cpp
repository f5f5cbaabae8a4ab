// softmax: row softmax of scale * x, max-subtracted.
#include <cmath>

#include "cpu/cpu_common.h"

namespace kvcomp::cpu {

void run_softmax(const op_desc & op) {
    const auto & p = op.get<softmax_params>();
    const float * x = ptr<const float>(op.src[0]);
    float * y = ptr<float>(op.dst[0]);
    for (int64_t r = 0; r < p.rows; ++r) {
        const float * xr = x + r * p.n;
        float * yr = y + r * p.n;
        double mx = -INFINITY;
        for (int64_t i = 0; i < p.n; ++i) mx = std::fmax(mx, double(p.scale) * xr[i]);
        double sum = 0.0;
        for (int64_t i = 0; i < p.n; ++i) sum += std::exp(double(p.scale) * xr[i] - mx);
        for (int64_t i = 0; i < p.n; ++i) yr[i] = float(std::exp(double(p.scale) * xr[i] - mx) / sum);
    }
}

}  // namespace kvcomp::cpu
