// kvcomp::cl::attn_decode_quant_kernel (lib/opencl/attn_decode_quant.cpp) on every OpenCL device listed:
// which kernel the quantized decode takes for the engine's default layouts at Llama-3-8B's head width.
// Where NVIDIA's driver passes the inline-PTX probe it must be the per-warp tensor-core kernel, so that a
// change to its conditions (local memory accounting, layout rules) cannot send the driver back to the
// portable kernel unnoticed: the op tests pass with either. On Hopper (H100, H200) ZipCache's 10.4 KiB
// block regions must come in by bulk copies and KIVI-2's 3 KiB ones by the lanes' loads, as measured
// (docs/RESULTS.md "The OpenCL quantized decode with bulk copies"). Elsewhere: the portable kernel.
// Skipped when no OpenCL device is listed, or when KVCOMP_CL_QUANT_WARPS / KVCOMP_CL_BULK_COPY /
// KVCOMP_CL_TENSOR_CORES override the choice.
#ifdef KVCOMP_USE_OPENCL

#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
#include "core/registry.h"
#include "opencl/backend_opencl.h"
#include "support/opencl_devices.h"

namespace {

kvcomp::qblock_layout zipcache_default() {  // 40 tokens at 4 bits, 60 at 2, channel-separable values
    kvcomp::qblock_layout q;
    q.n_kv_heads = 8, q.head_dim = 128, q.hi_tokens = 40, q.lo_tokens = 60;
    q.hi_bits = 4, q.lo_bits = 2, q.v_group = 128, q.channel_scale = true;
    return q;
}

kvcomp::qblock_layout kivi2_default() {  // 32 tokens at 2 bits, values in groups of 32 channels
    kvcomp::qblock_layout q;
    q.n_kv_heads = 8, q.head_dim = 128, q.hi_tokens = 32, q.lo_tokens = 0;
    q.hi_bits = 2, q.lo_bits = 2, q.v_group = 32;
    return q;
}

TEST(OpenCLQuantDecodeKernel, nvidia_takes_the_per_warp_kernel) {
    if (const char * v =
            kvcomp::test::first_set({"KVCOMP_CL_QUANT_WARPS", "KVCOMP_CL_BULK_COPY", "KVCOMP_CL_TENSOR_CORES"}))
        GTEST_SKIP() << v << " is set";
    const int tried = kvcomp::test::for_each_opencl_device([](kvcomp::backend & be, const std::string & where) {
        const std::string zip = kvcomp::cl::attn_decode_quant_kernel(be, zipcache_default());
        const std::string kivi = kvcomp::cl::attn_decode_quant_kernel(be, kivi2_default());
        if (!kvcomp::cl::inline_ptx_mma(be).ok) {
            EXPECT_EQ(zip, "kvc_adq_split") << where;
            EXPECT_EQ(kivi, "kvc_adq_split") << where;
            return;
        }
        const bool hopper = where.find("H100") != std::string::npos || where.find("H200") != std::string::npos;
        if (hopper)
            EXPECT_EQ(zip, "kvc_adq_warps (bulk copies)") << where;
        else
            EXPECT_EQ(zip.rfind("kvc_adq_warps", 0), 0u) << where << ": " << zip;
        EXPECT_EQ(kivi, "kvc_adq_warps") << where;
    });
    if (tried == 0) GTEST_SKIP() << "no OpenCL device listed";
}

TEST(OpenCLQuantDecodeKernel, rejects_other_backends) {
    for (const auto & d : kvcomp::list_devices()) {
        if (d.info.api == "OpenCL") continue;
        auto be = d.create();
        EXPECT_THROW(kvcomp::cl::attn_decode_quant_kernel(*be, kivi2_default()), kvcomp::error) << d.info.name;
        return;
    }
    GTEST_SKIP() << "no non-OpenCL device listed";
}

}  // namespace

#endif  // KVCOMP_USE_OPENCL
