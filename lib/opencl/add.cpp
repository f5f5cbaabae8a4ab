// add: dst = a + b over f32 arrays (cl_kernels/add.cl).
#include "opencl/cl_common.h"

namespace kvcomp::cl {

void run_add(cl_backend & be, const op_desc & op) {
    const auto & p = op.get<add_params>();
    cl_kernel k = be.kernel("add.cl", defines(), "kvc_add_f32");
    set_args(k, arg(op.src[0]), arg(op.src[1]), arg(op.dst[0]), cl_ulong(p.n));
    const size_t local = be.reduction_wg(256), global = size_t(p.n);
    be.launch(k, 1, &global, &local);
}

}  // namespace kvcomp::cl
