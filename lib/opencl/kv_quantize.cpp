// kv_quantize: quantizes planned blocks of K/V tokens into pool slots (cl_kernels/kv_quantize.cl).
//
// One work-group per (block, KV head). The slots must match the CPU reference byte for byte, so the
// program gets its own build options: correctly rounded fp32 division and sqrt, and nothing that
// relaxes fp32 (no -cl-mad-enable / -cl-fast-relaxed-math; $KVCOMP_CL_BUILD_OPTIONS still applies,
// so a user who sets those there gives up the guarantee). A device that cannot round division and
// sqrt correctly reports the op unsupported.
#include <algorithm>

#include "opencl/cl_common.h"
#include "opencl/qblock_defines.h"

namespace kvcomp::cl {

namespace {

constexpr const char * kExactOptions = "-cl-fp32-correctly-rounded-divide-sqrt";
constexpr size_t kWorkGroup = 128;  // channels of a head / bytes of a code row per pass

bool correctly_rounded_div_sqrt(cl_device_id d) {
    cl_device_fp_config cfg = 0;
    if (clGetDeviceInfo(d, CL_DEVICE_SINGLE_FP_CONFIG, sizeof(cfg), &cfg, nullptr) != CL_SUCCESS) return false;
    return (cfg & CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT) != 0;
}

}  // namespace

support supports_kv_quantize(const cl_backend & be, const op_desc & op) {
    const auto & p = op.get<kv_quantize_params>();
    if (!correctly_rounded_div_sqrt(be.dev().device))
        return support::no(
            "device does not report CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT in CL_DEVICE_SINGLE_FP_CONFIG: slots "
            "could not match the reference bit for bit");
    if (op.dst[0].offset % 16 != 0)
        return support::no("pool view must start on a 16-byte boundary (slot arrays are 16-byte aligned)");
    if (p.q.slot_bytes() > 0x7fffffff || p.n_src_tokens > 0x7fffffff || p.n_slots > 0x7fffffff)
        return support::no("slot size, source tokens and slots must fit in 32-bit ints");
    const size_t local = sizeof(float) * 3 * size_t(p.q.head_dim) + sizeof(int32_t) * size_t(p.q.block_tokens());
    if (local > be.dev().local_mem_bytes) return support::no("not enough local memory for this block layout");
    return support::yes();
}

void run_kv_quantize(cl_backend & be, const op_desc & op) {
    const auto & p = op.get<kv_quantize_params>();
    if (p.n_blocks == 0) return;
    defines defs;
    add_qblock_defines(defs, p.q);
    defs.add("K_DT", dtype_code(op.src[0].type)).add("V_DT", dtype_code(op.src[1].type));
    cl_kernel k = be.kernel("kv_quantize.cl", defs, "kvc_kv_quantize", kExactOptions);
    // The kernel works with any work-group size; stay within what the device allows for it.
    size_t wg = be.reduction_wg(kWorkGroup);
    while (wg > 1 && wg > be.kernel_wg_limit(k)) wg /= 2;
    set_args(k, arg(op.src[0]), arg(op.src[1]), arg(op.src[2]), arg(op.src[3]), arg(op.dst[0]),
             to_int(p.n_src_tokens), to_int(p.row_tokens), to_int(p.q.n_kv_heads), to_int(p.n_slots));
    const size_t local[3] = {wg, 1, 1};
    const size_t global[3] = {wg, size_t(p.q.n_kv_heads), size_t(p.n_blocks)};
    be.launch(k, 3, global, local);
}

}  // namespace kvcomp::cl
