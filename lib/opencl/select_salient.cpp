// select_salient: ZipCache's salient-token split on the device (cl_kernels/select_salient.cl), one
// work-group per (prompt, KV head). The scores are compared as fp64 quotients, exactly as the host
// ranks them, so devices without cl_khr_fp64 are refused here and the engine keeps its host path.
#include "opencl/cl_common.h"

namespace kvcomp::cl {

namespace {

constexpr size_t kWorkGroup = 256;

}  // namespace

support supports_select_salient(const cl_backend & be, const op_desc & op) {
    const auto & p = op.get<select_salient_params>();
    if (!be.dev().fp64)
        return support::no(
            "the device has no cl_khr_fp64 (scores are fp64 quotients, ranked exactly as on the host)");
    if (p.n_tokens > 0x7fffffff || p.n_prompts > 0x7fffffff || p.n_blocks > 0x7fffffff ||
        p.n_kv_heads > 0x7fffffff || int64_t(p.hi_tokens) + p.lo_tokens > 0x7fffffff)
        return support::no("tokens, prompts, blocks, KV heads and block size must fit in 32-bit ints");
    return support::yes();
}

void run_select_salient(cl_backend & be, const op_desc & op) {
    const auto & p = op.get<select_salient_params>();
    if (p.n_prompts == 0 || p.n_blocks == 0) return;
    // The scan in the kernel needs a fixed work-group size (WG_SIZE): the largest power of two the
    // device and the compiled kernel allow, from 256 down.
    cl_kernel k = nullptr;
    size_t wg = be.reduction_wg(kWorkGroup);
    for (;; wg /= 2) {
        defines defs;
        defs.add("WG_SIZE", wg);
        k = be.kernel("select_salient.cl", defs, "kvc_select_salient");
        if (wg == 1 || be.kernel_wg_limit(k) >= wg) break;
    }
    set_args(k, arg(op.src[0]), arg(op.src[1]), arg(op.src[2]), arg(op.dst[0]), to_int(p.n_tokens),
             to_int(p.n_kv_heads), to_int(p.n_blocks), cl_int(p.hi_tokens), cl_int(p.lo_tokens));
    const size_t local[3] = {wg, 1, 1};
    const size_t global[3] = {wg, size_t(p.n_kv_heads), size_t(p.n_prompts)};
    be.launch(k, 3, global, local);
}

}  // namespace kvcomp::cl
