// kv_append: scatter new K/V tokens into the paged fp16 pools (cl_kernels/kv_append.cl).
#include "opencl/cl_common.h"

namespace kvcomp::cl {

void run_kv_append(cl_backend & be, const op_desc & op) {
    const auto & p = op.get<kv_append_params>();
    if (p.n_tokens == 0) return;
    defines defs;
    defs.add("K_DT", dtype_code(op.src[0].type)).add("V_DT", dtype_code(op.src[1].type));
    cl_kernel k = be.kernel("kv_append.cl", defs, "kvc_kv_append");
    set_args(k, arg(op.src[0]), arg(op.src[1]), arg(op.src[2]), arg(op.src[3]), arg(op.src[4]),
             arg(op.src[5]), arg(op.dst[0]), arg(op.dst[1]), to_int(p.kv.n_kv_heads), to_int(p.kv.page_size),
             to_int(p.kv.head_dim), to_int(p.batch), to_int(p.kv.n_pages));
    const size_t lx = std::min<size_t>(128, round_up(size_t(p.kv.head_dim), 32));
    const size_t local[2] = {lx, 1};
    const size_t global[2] = {size_t(p.kv.head_dim), size_t(p.n_tokens * p.kv.n_kv_heads)};
    be.launch(k, 2, global, local);
}

}  // namespace kvcomp::cl
