// rms_norm: one work-group per row (cl_kernels/rms_norm.cl).
#include "opencl/cl_common.h"

namespace kvcomp::cl {

void run_rms_norm(cl_backend & be, const op_desc & op) {
    const auto & p = op.get<rms_norm_params>();
    if (p.rows == 0) return;
    // Rows are short (hidden size): 256 work-items give a few elements each and a short reduction.
    const size_t wg = be.reduction_wg(256);
    defines defs;
    defs.add("WG_SIZE", wg).add("W_DT", dtype_code(op.src[1].type));
    cl_kernel k = be.kernel("rms_norm.cl", defs, "kvc_rms_norm");
    set_args(k, arg(op.src[0]), arg(op.src[1]), arg(op.dst[0]), to_int(p.n), cl_float(p.eps));
    const size_t global = size_t(p.rows) * wg;
    be.launch(k, 1, &global, &wg);
}

}  // namespace kvcomp::cl
