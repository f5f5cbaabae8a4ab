// kvcomp::cl::attn_decode_ragged_kernel (lib/opencl/attn_decode_ragged.cpp) on every OpenCL device listed:
// which kernel the low-rank decode (ZACK / FDC) takes. Where NVIDIA's driver passes the inline-PTX probe,
// f16 and 4-bit pages of heads up to 128 wide (every rank of Llama-3-8B's head_dim) must take the per-warp
// tensor-core kernels, so that a change to their conditions cannot send the driver back to the portable
// kernels unnoticed (the op tests pass with either); wider heads keep the portable kernels. Elsewhere: the
// portable kernel. Skipped when no OpenCL device is listed, or when KVCOMP_CL_RAGGED_WARPS /
// KVCOMP_CL_TENSOR_CORES override the choice.
#ifdef KVCOMP_USE_OPENCL

#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
#include "core/registry.h"
#include "opencl/backend_opencl.h"
#include "support/opencl_devices.h"

namespace {

// 8 KV heads, GQA 4, fp16 pages of 16 tokens, the widest head max_width wide.
kvcomp::attn_decode_ragged_params ragged_params(int64_t max_width, int32_t bits) {
    kvcomp::attn_decode_ragged_params p;
    p.kv.n_pages = 64, p.kv.n_kv_heads = 8, p.kv.page_size = 16;
    p.kv.k_total = 8 * max_width, p.kv.v_total = 8 * max_width, p.kv.max_width = max_width;
    p.kv.bits = bits;
    p.batch = 1, p.n_q_heads = 32, p.n_tasks = 8, p.max_seq_len = 1024;
    return p;
}

TEST(OpenCLRaggedDecodeKernel, nvidia_takes_the_per_warp_kernel) {
    if (const char * v = kvcomp::test::first_set({"KVCOMP_CL_RAGGED_WARPS", "KVCOMP_CL_TENSOR_CORES"}))
        GTEST_SKIP() << v << " is set";
    const int tried = kvcomp::test::for_each_opencl_device([](kvcomp::backend & be, const std::string & where) {
        const bool mma = kvcomp::cl::inline_ptx_mma(be).ok;
        for (int64_t w : {int64_t(64), int64_t(128)})
            EXPECT_EQ(kvcomp::cl::attn_decode_ragged_kernel(be, ragged_params(w, 16)),
                      mma ? "kvc_adr_warps" : "kvc_attn_decode_ragged")
                << where << ", max_width " << w;
        EXPECT_EQ(kvcomp::cl::attn_decode_ragged_kernel(be, ragged_params(256, 16)), "kvc_attn_decode_ragged") << where;
        EXPECT_EQ(kvcomp::cl::attn_decode_ragged_kernel(be, ragged_params(128, 4)),
                  mma ? "kvc_adr_q4_warps" : "kvc_attn_decode_ragged_q4")
            << where;
        EXPECT_EQ(kvcomp::cl::attn_decode_ragged_kernel(be, ragged_params(256, 4)), "kvc_attn_decode_ragged_q4") << where;
    });
    if (tried == 0) GTEST_SKIP() << "no OpenCL device listed";
}

TEST(OpenCLRaggedDecodeKernel, rejects_other_backends) {
    for (const auto & d : kvcomp::list_devices()) {
        if (d.info.api == "OpenCL") continue;
        auto be = d.create();
        EXPECT_THROW(kvcomp::cl::attn_decode_ragged_kernel(*be, ragged_params(128, 16)), kvcomp::error)
            << d.info.name;
        return;
    }
    GTEST_SKIP() << "no non-OpenCL device listed";
}

}  // namespace

#endif  // KVCOMP_USE_OPENCL
