// copy: element-wise copy with dtype conversion (f32/f16/bf16), rounding to nearest even.
#include "cpu/cpu_common.h"

namespace kvcomp::cpu {

void run_copy(const op_desc & op) {
    const auto & p = op.get<copy_params>();
    const tensor & src = op.src[0];
    const tensor & dst = op.dst[0];
    for (int64_t i = 0; i < p.n; ++i) store_float(dst, i, load_float(src, i));
}

}  // namespace kvcomp::cpu
