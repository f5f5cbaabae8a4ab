// kv_append_ragged: scatter new tokens into ragged fp16 pools (cl_kernels/kv_append_ragged.cl).
#include <algorithm>

#include "opencl/cl_common.h"

namespace kvcomp::cl {

void run_kv_append_ragged(cl_backend & be, const op_desc & op) {
    const auto & p = op.get<kv_append_ragged_params>();
    if (p.n_tokens == 0) return;
    cl_kernel k = be.kernel("kv_append_ragged.cl", defines{}, "kvc_kv_append_ragged");
    set_args(k, arg(op.src[0]), arg(op.src[1]), arg(op.src[2]), arg(op.src[3]), arg(op.src[4]),
             arg(op.src[5]), arg(op.src[6]), arg(op.dst[0]), arg(op.dst[1]), to_int(p.kv.n_kv_heads),
             to_int(p.kv.page_size), to_int(p.kv.k_total), to_int(p.kv.v_total), to_int(p.batch),
             to_int(p.kv.n_pages));
    const size_t cols = size_t(std::max(p.kv.k_total, p.kv.v_total));
    const size_t local[2] = {std::min<size_t>(128, round_up(cols, 32)), 1};
    const size_t global[2] = {cols, size_t(p.n_tokens)};
    be.launch(k, 2, global, local);
}

}  // namespace kvcomp::cl
