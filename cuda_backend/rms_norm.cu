// rms_norm: dst0[r,:] = src0[r,:] / sqrt(mean(src0[r,:]^2) + eps) * src1[:].
//
// Kernels: rms_norm_kernel<W> (W = float or __half weight).
// Grid: one block per row (block-stride loop when rows > 65535) of 256 threads, 1024 when
// n >= 4096 (row_block_threads).
// Layout: src0/dst0 f32 [rows, n] contiguous, src1 [n]. dst0 may alias src0: the sum of squares
// is complete (block_sum synchronizes) before any element is written, and each element is read
// and written by the same thread.
// Numerics: fp32 partial sums per thread, then a tree reduction; 1/sqrtf (not rsqrtf, which is
// ~2 ulp) to stay within nmse 1e-9 of the fp64 oracle.
#include "common.cuh"

namespace kvcomp::cuda {

namespace {

template <typename W>
__global__ void rms_norm_kernel(const float * x, const W * __restrict__ w, float * y, int64_t rows, int64_t n,
                                float eps) {
    __shared__ float scratch[32];
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const float * xr = x + r * n;
        float * yr = y + r * n;
        float ss = 0.0f;
        for (int64_t i = threadIdx.x; i < n; i += blockDim.x) ss = fmaf(xr[i], xr[i], ss);
        ss = block_sum(ss, scratch);
        const float inv = 1.0f / sqrtf(ss / float(n) + eps);
        for (int64_t i = threadIdx.x; i < n; i += blockDim.x) yr[i] = xr[i] * inv * to_float(w[i]);
    }
}

}  // namespace

void run_rms_norm(context & ctx, const op_desc & op) {
    const auto & p = op.get<rms_norm_params>();
    if (p.rows == 0) return;
    const int threads = row_block_threads(p.n);
    const unsigned grid = unsigned(std::min<int64_t>(p.rows, 65535));
    const float * x = dev_ptr<const float>(op.src[0]);
    float * y = dev_ptr<float>(op.dst[0]);
    if (op.src[1].type == dtype::f16)
        rms_norm_kernel<__half>
            <<<grid, threads, 0, ctx.stream>>>(x, dev_ptr<const __half>(op.src[1]), y, p.rows, p.n, p.eps);
    else
        rms_norm_kernel<float>
            <<<grid, threads, 0, ctx.stream>>>(x, dev_ptr<const float>(op.src[1]), y, p.rows, p.n, p.eps);
    KVCOMP_CUDA_CHECK_LAUNCH();
}

}  // namespace kvcomp::cuda
