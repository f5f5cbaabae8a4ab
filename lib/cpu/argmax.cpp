// argmax: index of the row maximum; lowest index on ties, NaN never wins (0 if all NaN).
#include "cpu/cpu_common.h"

namespace kvcomp::cpu {

void run_argmax(const op_desc & op) {
    const auto & p = op.get<argmax_params>();
    const float * x = ptr<const float>(op.src[0]);
    int32_t * d = ptr<int32_t>(op.dst[0]);
    for (int64_t r = 0; r < p.rows; ++r) {
        int64_t best = -1;
        for (int64_t i = 0; i < p.n; ++i) {
            const float v = x[r * p.n + i];
            if (v != v) continue;
            if (best < 0 || v > x[r * p.n + best]) best = i;
        }
        d[r] = int32_t(best < 0 ? 0 : best);
    }
}

}  // namespace kvcomp::cpu
