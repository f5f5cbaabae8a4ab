// copy: same-dtype copies are clEnqueueCopyBuffer (bit exact, DMA engine); conversions run
// cl_kernels/copy.cl.
#include "opencl/cl_common.h"

namespace kvcomp::cl {

void run_copy(cl_backend & be, const op_desc & op) {
    const auto & p = op.get<copy_params>();
    const tensor & src = op.src[0];
    const tensor & dst = op.dst[0];
    if (p.n == 0) return;
    if (src.type == dst.type) {
        cl_event * ev = be.event_slot();
        const cl_int err = clEnqueueCopyBuffer(be.queue(), mem_of(src), mem_of(dst), src.offset, dst.offset,
                                               size_t(p.n) * dtype_size(src.type), 0, nullptr, ev);
        if (err != CL_SUCCESS) be.cancel_event_slot(ev);
        KVCOMP_CL_CHECK(err);
        return;
    }
    defines defs;
    defs.add("SRC_DT", dtype_code(src.type)).add("DST_DT", dtype_code(dst.type));
    cl_kernel k = be.kernel("copy.cl", defs, "kvc_copy");
    set_args(k, arg(src), arg(dst), cl_ulong(p.n));
    const size_t local = be.reduction_wg(256), global = size_t(p.n);
    be.launch(k, 1, &global, &local);
}

}  // namespace kvcomp::cl
