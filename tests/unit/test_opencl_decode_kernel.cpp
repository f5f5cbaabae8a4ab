// kvcomp::cl::attn_decode_kernel (lib/opencl/attn_decode.cpp) on every OpenCL device listed: which kernel the
// fp16 paged decode (the uncompressed cache every method is compared with) takes. Where NVIDIA's driver
// passes the inline-PTX probe, head_dim 64 and 128 with GQA groups of 1, 2, 4 and 8 must take the per-warp
// kernel, so that a change to its conditions cannot send the driver back to the portable kernel unnoticed
// (the op tests pass with either); other widths and groups of 3 keep the portable kernel. Elsewhere: the
// portable kernel. Skipped when no OpenCL device is listed, or when KVCOMP_CL_DECODE_WARPS /
// KVCOMP_CL_TENSOR_CORES override the choice.
#ifdef KVCOMP_USE_OPENCL

#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
#include "core/registry.h"
#include "opencl/backend_opencl.h"
#include "support/opencl_devices.h"

namespace {

// 8 KV heads, `group` query heads each, fp16 pages of 16 tokens.
kvcomp::attn_decode_params decode_params(int64_t head_dim, int64_t group) {
    kvcomp::attn_decode_params p;
    p.kv.n_pages = 64, p.kv.n_kv_heads = 8, p.kv.page_size = 16, p.kv.head_dim = head_dim;
    p.batch = 1, p.n_q_heads = 8 * group, p.max_seq_len = 1024;
    return p;
}

TEST(OpenCLDecodeKernel, nvidia_takes_the_per_warp_kernel) {
    if (const char * v = kvcomp::test::first_set({"KVCOMP_CL_DECODE_WARPS", "KVCOMP_CL_TENSOR_CORES"}))
        GTEST_SKIP() << v << " is set";
    const int tried =
        kvcomp::test::for_each_opencl_device([](kvcomp::backend & be, const std::string & where) {
            const bool ptx = kvcomp::cl::inline_ptx_mma(be).ok;
            for (int64_t d : {int64_t(64), int64_t(128)})
                for (int64_t group : {int64_t(1), int64_t(2), int64_t(4), int64_t(8)})
                    EXPECT_EQ(kvcomp::cl::attn_decode_kernel(be, decode_params(d, group)),
                              ptx ? "kvc_attn_decode_warps" : "kvc_attn_decode_split")
                        << where << ", head_dim " << d << ", group " << group;
            EXPECT_EQ(kvcomp::cl::attn_decode_kernel(be, decode_params(96, 4)), "kvc_attn_decode_split")
                << where;
            EXPECT_EQ(kvcomp::cl::attn_decode_kernel(be, decode_params(256, 4)), "kvc_attn_decode_split")
                << where;
            EXPECT_EQ(kvcomp::cl::attn_decode_kernel(be, decode_params(128, 3)), "kvc_attn_decode_split")
                << where;
        });
    if (tried == 0) GTEST_SKIP() << "no OpenCL device listed";
}

TEST(OpenCLDecodeKernel, rejects_other_backends) {
    for (const auto & d : kvcomp::list_devices()) {
        if (d.info.api == "OpenCL") continue;
        auto be = d.create();
        EXPECT_THROW(kvcomp::cl::attn_decode_kernel(*be, decode_params(128, 4)), kvcomp::error)
            << d.info.name;
        return;
    }
    GTEST_SKIP() << "no non-OpenCL device listed";
}

}  // namespace

#endif  // KVCOMP_USE_OPENCL
