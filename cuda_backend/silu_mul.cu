// silu_mul: dst0 = silu(src0) * src1 with silu(x) = x / (1 + exp(-x)); all f32 [rows, n].
//
// Kernels: silu_mul_kernel. Grid: 1-D grid-stride loop over rows*n, 256 threads.
// Layout: contiguous f32. dst0 may alias either source (same-thread read then write).
// expf (not __expf): full precision, the test compares with an fp64 oracle at nmse 1e-9. For
// x << 0, expf(-x) = inf and x / inf = -0, the correct limit.
#include "common.cuh"

namespace kvcomp::cuda {

namespace {

__global__ void silu_mul_kernel(const float * g, const float * u, float * d, int64_t n) {
    const int64_t stride = int64_t(gridDim.x) * blockDim.x;
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
        const float x = g[i];
        d[i] = x / (1.0f + expf(-x)) * u[i];
    }
}

}  // namespace

void run_silu_mul(context & ctx, const op_desc & op) {
    const auto & p = op.get<silu_mul_params>();
    const int64_t n = p.rows * p.n;
    if (n == 0) return;
    constexpr int threads = 256;
    silu_mul_kernel<<<grid_stride_blocks(n, threads, ctx), threads, 0, ctx.stream>>>(
        dev_ptr<const float>(op.src[0]), dev_ptr<const float>(op.src[1]), dev_ptr<float>(op.dst[0]), n);
    KVCOMP_CUDA_CHECK_LAUNCH();
}

}  // namespace kvcomp::cuda
