// copy: element-wise copy with dtype conversion between f32, f16 and bf16.
//
// Kernels: copy_kernel<Src, Dst> (one per dtype pair that converts).
// Grid: 1-D grid-stride loop, 256 threads, grid_stride_blocks(n).
// Layout: src0 and dst0 are n contiguous elements; they do not overlap (contract).
// Same-dtype copies are a cudaMemcpyAsync (bit exact, NaN payloads kept). Conversions round to
// nearest even (__float2half_rn, __float2bfloat16_rn), matching core/dtype.h for non-NaN values.
#include "common.cuh"

namespace kvcomp::cuda {

namespace {

template <typename Src, typename Dst>
__global__ void copy_kernel(const Src * __restrict__ src, Dst * __restrict__ dst, int64_t n) {
    const int64_t stride = int64_t(gridDim.x) * blockDim.x;
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
        dst[i] = from_float<Dst>(to_float(src[i]));
}

template <typename Src, typename Dst>
void launch_copy(context & ctx, const tensor & s, const tensor & d, int64_t n) {
    constexpr int threads = 256;
    copy_kernel<Src, Dst><<<grid_stride_blocks(n, threads, ctx), threads, 0, ctx.stream>>>(
        dev_ptr<const Src>(s), dev_ptr<Dst>(d), n);
    KVCOMP_CUDA_CHECK_LAUNCH();
}

template <typename Src>
void launch_copy_from(context & ctx, const tensor & s, const tensor & d, int64_t n) {
    switch (d.type) {
        case dtype::f32: return launch_copy<Src, float>(ctx, s, d, n);
        case dtype::f16: return launch_copy<Src, __half>(ctx, s, d, n);
        case dtype::bf16: return launch_copy<Src, __nv_bfloat16>(ctx, s, d, n);
        default: KVCOMP_THROW(status::internal, "copy: bad destination dtype");
    }
}

}  // namespace

void run_copy(context & ctx, const op_desc & op) {
    const int64_t n = op.get<copy_params>().n;
    const tensor & s = op.src[0];
    const tensor & d = op.dst[0];
    if (n == 0) return;
    if (s.type == d.type) {
        KVCOMP_CUDA_CHECK(cudaMemcpyAsync(dev_ptr<char>(d), dev_ptr<const char>(s),
                                          size_t(n) * dtype_size(s.type), cudaMemcpyDeviceToDevice,
                                          ctx.stream));
        return;
    }
    switch (s.type) {
        case dtype::f32: return launch_copy_from<float>(ctx, s, d, n);
        case dtype::f16: return launch_copy_from<__half>(ctx, s, d, n);
        case dtype::bf16: return launch_copy_from<__nv_bfloat16>(ctx, s, d, n);
        default: KVCOMP_THROW(status::internal, "copy: bad source dtype");
    }
}

}  // namespace kvcomp::cuda
