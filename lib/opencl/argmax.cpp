// argmax: one work-group per row (cl_kernels/argmax.cl); ties -> lowest index, NaN never wins.
#include "opencl/cl_common.h"

namespace kvcomp::cl {

void run_argmax(cl_backend & be, const op_desc & op) {
    const auto & p = op.get<argmax_params>();
    if (p.rows == 0) return;
    const size_t wg = be.reduction_wg(256);
    defines defs;
    defs.add("WG_SIZE", wg);
    cl_kernel k = be.kernel("argmax.cl", defs, "kvc_argmax_f32");
    set_args(k, arg(op.src[0]), arg(op.dst[0]), to_int(p.n));
    const size_t global = size_t(p.rows) * wg;
    be.launch(k, 1, &global, &wg);
}

}  // namespace kvcomp::cl
