// kv_dequantize: quantized blocks back to K/V rows (cl_kernels/kv_dequantize.cl).
//
// One work-group per (listed block, KV head). The rows must match the CPU reference bit for bit; the
// kernel uses only multiplications and additions (no division or sqrt), so the default build options
// suffice as long as they do not allow contraction or relaxed math (the kernel turns FP_CONTRACT
// off; $KVCOMP_CL_BUILD_OPTIONS with -cl-mad-enable would give up the guarantee).
#include "opencl/cl_common.h"
#include "opencl/qblock_defines.h"

namespace kvcomp::cl {

namespace {

constexpr size_t kWorkGroup = 128;

}  // namespace

support supports_kv_dequantize(const cl_backend & be, const op_desc & op) {
    (void)be;
    const auto & p = op.get<kv_dequantize_params>();
    if (op.src[0].offset % 16 != 0)
        return support::no("pool view must start on a 16-byte boundary (slot arrays are 16-byte aligned)");
    if (p.q.slot_bytes() > 0x7fffffff || p.n_slots > 0x7fffffff || p.row_tokens > 0x7fffffff ||
        p.n_blocks * p.q.block_tokens() > 0x7fffffff)
        return support::no("slot size, slots, row_tokens and output tokens must fit in 32-bit ints");
    return support::yes();
}

void run_kv_dequantize(cl_backend & be, const op_desc & op) {
    const auto & p = op.get<kv_dequantize_params>();
    if (p.n_blocks == 0) return;
    defines defs;
    add_qblock_defines(defs, p.q);
    defs.add("O_DT", dtype_code(op.dst[0].type));
    cl_kernel k = be.kernel("kv_dequantize.cl", defs, "kvc_kv_dequantize");
    size_t wg = be.reduction_wg(kWorkGroup);
    while (wg > 1 && wg > be.kernel_wg_limit(k)) wg /= 2;
    set_args(k, arg(op.src[0]), arg(op.src[1]), arg(op.dst[0]), arg(op.dst[1]), to_int(p.row_tokens),
             to_int(p.q.n_kv_heads), to_int(p.n_slots));
    const size_t local[3] = {wg, 1, 1};
    const size_t global[3] = {wg, size_t(p.q.n_kv_heads), size_t(p.n_blocks)};
    be.launch(k, 3, global, local);
}

}  // namespace kvcomp::cl
