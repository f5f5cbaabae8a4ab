// softmax: dst0[r,:] = softmax(scale * src0[r,:]), f32 [rows, n].
//
// Kernels: softmax_kernel. Grid: one block per row (block-stride loop when rows > 65535) of
// 256 threads, 1024 when n >= 4096 (row_block_threads). Three passes over the row (max, sum
// of exp, write); the row stays in L1/L2.
// Layout: contiguous f32; dst0 may alias src0 (each element is read and written by one thread,
// after both reductions are complete).
// Numerics: max-subtracted, expf (full precision) and an fp32 tree sum: nmse ~1e-13 vs fp64.
#include "common.cuh"

namespace kvcomp::cuda {

namespace {

__global__ void softmax_kernel(const float * x, float * y, int64_t rows, int64_t n, float scale) {
    __shared__ float scratch[32];
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const float * xr = x + r * n;
        float * yr = y + r * n;
        float mx = -INFINITY;
        for (int64_t i = threadIdx.x; i < n; i += blockDim.x) mx = fmaxf(mx, scale * xr[i]);
        mx = block_max(mx, scratch);
        float sum = 0.0f;
        for (int64_t i = threadIdx.x; i < n; i += blockDim.x) sum += expf(scale * xr[i] - mx);
        sum = block_sum(sum, scratch);
        const float inv = 1.0f / sum;
        for (int64_t i = threadIdx.x; i < n; i += blockDim.x) yr[i] = expf(scale * xr[i] - mx) * inv;
    }
}

}  // namespace

void run_softmax(context & ctx, const op_desc & op) {
    const auto & p = op.get<softmax_params>();
    if (p.rows == 0) return;
    const int threads = row_block_threads(p.n);
    const unsigned grid = unsigned(std::min<int64_t>(p.rows, 65535));
    softmax_kernel<<<grid, threads, 0, ctx.stream>>>(dev_ptr<const float>(op.src[0]),
                                                     dev_ptr<float>(op.dst[0]), p.rows, p.n, p.scale);
    KVCOMP_CUDA_CHECK_LAUNCH();
}

}  // namespace kvcomp::cuda
