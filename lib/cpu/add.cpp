// add: dst = a + b (f32).
#include "cpu/cpu_common.h"

namespace kvcomp::cpu {

void run_add(const op_desc & op) {
    const auto & p = op.get<add_params>();
    const float * a = ptr<const float>(op.src[0]);
    const float * b = ptr<const float>(op.src[1]);
    float * d = ptr<float>(op.dst[0]);
    for (int64_t i = 0; i < p.n; ++i) d[i] = a[i] + b[i];
}

}  // namespace kvcomp::cpu
