// rope: rotary embedding, one work-item per rotated pair or passed-through feature (cl_kernels/rope.cl).
#include "opencl/cl_common.h"

namespace kvcomp::cl {

void run_rope(cl_backend & be, const op_desc & op) {
    const auto & p = op.get<rope_params>();
    if (p.n_tokens == 0) return;
    defines defs;
    defs.add("STYLE", p.style == rope_style::neox ? 0 : 1);
    cl_kernel k = be.kernel("rope.cl", defs, "kvc_rope_f32");
    const bool has_ff = op.src[2].valid();
    // Without freq_factors the kernel never reads that argument; x stands in as a valid buffer.
    const view_arg ff = has_ff ? arg(op.src[2]) : arg(op.src[0]);
    set_args(k, arg(op.src[0]), arg(op.src[1]), ff, arg(op.dst[0]), to_int(p.n_heads), to_int(p.head_dim),
             to_int(p.rot_dim), cl_float(p.theta), cl_int(has_ff ? 1 : 0));
    const size_t width = size_t(p.head_dim - p.rot_dim / 2);
    const size_t lx = std::min<size_t>(64, round_up(width, 16));
    const size_t local[2] = {lx, 1};
    const size_t global[2] = {width, size_t(p.n_tokens * p.n_heads)};
    be.launch(k, 2, global, local);
}

}  // namespace kvcomp::cl
