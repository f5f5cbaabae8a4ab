// head_project: per-head basis products (cl_kernels/head_project.cl).
#include <algorithm>

#include "opencl/cl_common.h"

namespace kvcomp::cl {

void run_head_project(cl_backend & be, const op_desc & op) {
    const auto & p = op.get<head_project_params>();
    if (p.n_tokens == 0) return;
    cl_kernel k = be.kernel("head_project.cl", defines{}, "kvc_head_project");
    set_args(k, arg(op.src[0]), arg(op.src[1]), arg(op.src[2]), arg(op.dst[0]), to_int(p.in_total),
             to_int(p.out_total));
    // The widths live in the device table: cover the widest a head may have (or the row).
    const size_t cols = size_t(std::min<int64_t>(p.out_total, max_ragged_width));
    const size_t lx = std::min<size_t>(64, round_up(cols, 32));
    const size_t local[3] = {lx, 1, 1};
    const size_t global[3] = {cols, size_t(p.n_heads), size_t(p.n_tokens)};
    be.launch(k, 3, global, local);
}

}  // namespace kvcomp::cl
