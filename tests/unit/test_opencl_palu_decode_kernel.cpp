// kvcomp::cl::attn_decode_palu_kernel (lib/opencl/attn_decode_palu.cpp) on every OpenCL device listed: which
// kernel Palu's decode takes. Where NVIDIA's driver passes the inline-PTX probe, Llama-3-8B's Palu shapes
// (head_dim 128, full neox rotary, latents up to 128 wide, GQA 4) and the other shapes of CUDA's tensor-core
// Palu must take the per-warp tensor-core kernel, so that a change to its conditions cannot send the driver
// back to the portable kernel unnoticed (the op tests pass with either); shapes that CUDA's tensor-core
// kernel does not take keep the portable kernel. Elsewhere (PoCL, other drivers): the portable kernel.
// Skipped when no OpenCL device is listed, or when KVCOMP_CL_PALU_WARPS / KVCOMP_CL_TENSOR_CORES override the
// choice.
#ifdef KVCOMP_USE_OPENCL

#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
#include "core/registry.h"
#include "opencl/backend_opencl.h"
#include "support/opencl_devices.h"

namespace {

// 8 KV heads, GQA 4, f16 latent pages of 16 tokens, the widest latent max_width wide.
kvcomp::attn_decode_palu_params palu_params(int64_t max_width, int64_t head_dim, int64_t rot_dim,
                                            kvcomp::rope_style style) {
    kvcomp::attn_decode_palu_params p;
    p.kv.n_pages = 64, p.kv.n_kv_heads = 8, p.kv.page_size = 16;
    p.kv.k_total = 8 * max_width, p.kv.v_total = 8 * max_width, p.kv.max_width = max_width;
    p.batch = 1, p.n_q_heads = 32, p.head_dim = head_dim, p.rot_dim = rot_dim, p.n_tasks = 8,
    p.max_seq_len = 1024;
    p.style = style;
    return p;
}

TEST(OpenCLPaluDecodeKernel, nvidia_takes_the_per_warp_kernel) {
    if (const char * v = kvcomp::test::first_set({"KVCOMP_CL_PALU_WARPS", "KVCOMP_CL_TENSOR_CORES"}))
        GTEST_SKIP() << v << " is set";
    using kvcomp::rope_style;
    const int tried = kvcomp::test::for_each_opencl_device([](kvcomp::backend & be,
                                                              const std::string & where) {
        const bool mma = kvcomp::cl::inline_ptx_mma(be).ok;
        const std::string warps = mma ? "kvc_adp_warps" : "kvc_attn_decode_palu";
        // Llama-3-8B (head_dim 128, full neox rotary) at every latent width up to 128, and the shapes of the
        // op tests: partial rotary, interleaved pairs, head_dim 64.
        for (int64_t w : {int64_t(17), int64_t(64), int64_t(128)})
            EXPECT_EQ(kvcomp::cl::attn_decode_palu_kernel(be, palu_params(w, 128, 128, rope_style::neox)),
                      warps)
                << where << ", max_width " << w;
        EXPECT_EQ(kvcomp::cl::attn_decode_palu_kernel(be, palu_params(128, 128, 64, rope_style::neox)), warps)
            << where;
        EXPECT_EQ(kvcomp::cl::attn_decode_palu_kernel(be, palu_params(128, 128, 96, rope_style::interleaved)),
                  warps)
            << where;
        EXPECT_EQ(kvcomp::cl::attn_decode_palu_kernel(be, palu_params(64, 64, 64, rope_style::interleaved)),
                  warps)
            << where;
        EXPECT_EQ(kvcomp::cl::attn_decode_palu_kernel(be, palu_params(40, 64, 32, rope_style::neox)), warps)
            << where;
        // What CUDA's tensor-core Palu does not take either: latents above 128, other head dims, neox halves
        // that are not whole 16-channel blocks.
        const std::string portable = "kvc_attn_decode_palu";
        EXPECT_EQ(kvcomp::cl::attn_decode_palu_kernel(be, palu_params(256, 128, 128, rope_style::neox)),
                  portable)
            << where;
        EXPECT_EQ(kvcomp::cl::attn_decode_palu_kernel(be, palu_params(64, 96, 96, rope_style::neox)),
                  portable)
            << where;
        EXPECT_EQ(kvcomp::cl::attn_decode_palu_kernel(be, palu_params(64, 128, 48, rope_style::neox)),
                  portable)
            << where;
    });
    if (tried == 0) GTEST_SKIP() << "no OpenCL device listed";
}

TEST(OpenCLPaluDecodeKernel, rejects_other_backends) {
    for (const auto & d : kvcomp::list_devices()) {
        if (d.info.api == "OpenCL") continue;
        auto be = d.create();
        EXPECT_THROW(
            kvcomp::cl::attn_decode_palu_kernel(*be, palu_params(128, 128, 128, kvcomp::rope_style::neox)),
            kvcomp::error)
            << d.info.name;
        return;
    }
    GTEST_SKIP() << "no non-OpenCL device listed";
}

}  // namespace

#endif  // KVCOMP_USE_OPENCL
