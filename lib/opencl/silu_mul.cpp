// silu_mul: dst = silu(gate) * up over f32 rows (cl_kernels/silu_mul.cl).
#include "opencl/cl_common.h"

namespace kvcomp::cl {

void run_silu_mul(cl_backend & be, const op_desc & op) {
    const auto & p = op.get<silu_mul_params>();
    const cl_ulong n = cl_ulong(p.rows) * cl_ulong(p.n);
    cl_kernel k = be.kernel("silu_mul.cl", defines(), "kvc_silu_mul_f32");
    set_args(k, arg(op.src[0]), arg(op.src[1]), arg(op.dst[0]), n);
    const size_t local = be.reduction_wg(256), global = size_t(n);
    be.launch(k, 1, &global, &local);
}

}  // namespace kvcomp::cl
