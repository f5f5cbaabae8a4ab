// gemm: row-major batched C_i = alpha * A_i * op(B_i) + beta * C_i through cuBLAS.
//
// Kernels: split_f16_kernel (f32 A -> f16 hi and scaled lo parts, for the mixed path).
// Grid: 1-D grid-stride loop, 256 threads.
//
// Row-major to cuBLAS (column-major): a row-major [r, c] matrix is the column-major [c, r]
// matrix with leading dimension c, i.e. its transpose. So C^T = op(B)^T * A^T is computed:
//   cuBLAS "A" = our B: [n, k] row-major (trans_b) seen as col-major k x n -> op T, lda = k
//                       [k, n] row-major (!trans_b) seen as col-major n x k -> op N, lda = n
//   cuBLAS "B" = our A: [m, k] row-major seen as col-major k x m -> op N, ldb = k
//   cuBLAS "C" = our C: [m, n] row-major seen as col-major n x m, ldc = n;  dims (n, m, k).
// Batch strides pass straight through (0 = broadcast of that operand).
//
// dtypes (cublasGemmStridedBatchedEx, compute CUBLAS_COMPUTE_32F, math mode set by the backend
// to CUBLAS_DEFAULT_MATH | DISALLOW_REDUCED_PRECISION_REDUCTION, so fp32 never uses TF32):
//   f32,f32->f32: plain fp32 (SGEMM kernels).
//   f16,f16->f32|f16: tensor cores, fp32 accumulation.
//   f32,f16->f32 (fp32 activations x fp16 weights): A is split in the workspace into
//     hi = f16(A) and lo = f16((A - hi) * 2^11), and C = alpha*hi*B + beta*C, then
//     C += (alpha*2^-11)*lo*B: two tensor-core GEMMs. hi + lo*2^-11 carries ~22 bits of A, so
//     the result is as accurate as fp32 math (nmse ~1e-13), where rounding A to f16 alone would
//     give ~1e-7 and fail the contract's fp32 accuracy. B (the large weight) is read twice.
//     Limit: |A| must stay below the fp16 range (65504); larger values saturate hi and lose the
//     low part.
#include <climits>

#include "common.cuh"

namespace kvcomp::cuda {

namespace {

constexpr float kLoScale = 2048.0f;  // 2^11: lifts the remainder back into fp16's normal range

__global__ void split_f16_kernel(const float * __restrict__ a, __half * __restrict__ hi,
                                 __half * __restrict__ lo, int64_t n) {
    const int64_t stride = int64_t(gridDim.x) * blockDim.x;
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
        const float v = a[i];
        __half h = __float2half_rn(v);
        if (__hisinf(h) && isfinite(v)) h = __float2half_rn(copysignf(65504.0f, v));
        hi[i] = h;
        // v - float(h) is exact in fp32 (both share the leading bits); the scaling is exact too.
        lo[i] = __float2half_rn((v - __half2float(h)) * kLoScale);
    }
}

cudaDataType cuda_type(dtype t) {
    return t == dtype::f16 ? CUDA_R_16F : CUDA_R_32F;
}

// One cuBLAS call in the row-major convention above. a/b are our A and B.
void gemm_ex(context & ctx, const gemm_params & p, const void * a, cudaDataType ta, int64_t stride_a,
             const void * b, cudaDataType tb, void * c, cudaDataType tc, float alpha, float beta) {
    const cublasOperation_t op_b = p.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    const int lda = int(p.trans_b ? p.k : p.n);
    KVCOMP_CUBLAS_CHECK(cublasGemmStridedBatchedEx(
        ctx.cublas, op_b, CUBLAS_OP_N, int(p.n), int(p.m), int(p.k), &alpha, b, tb, lda,
        (long long)p.stride_b, a, ta, int(p.k), (long long)stride_a, &beta, c, tc, int(p.n),
        (long long)p.stride_c, int(p.batch), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

}  // namespace

support supports_gemm(const op_desc & op) {
    const auto & p = op.get<gemm_params>();
    // cuBLAS takes 32-bit dimensions and batch counts (the _64 API would lift this if needed).
    if (p.m > INT_MAX || p.n > INT_MAX || p.k > INT_MAX || p.batch > INT_MAX)
        return support::no("m, n, k and batch must each fit in 32 bits for cuBLAS");
    return support::yes();
}

void run_gemm(context & ctx, const op_desc & op) {
    const auto & p = op.get<gemm_params>();
    const tensor & a = op.src[0];
    const tensor & b = op.src[1];
    const tensor & c = op.dst[0];
    if (!(a.type == dtype::f32 && b.type == dtype::f16)) {
        gemm_ex(ctx, p, dev_ptr<const void>(a), cuda_type(a.type), p.stride_a, dev_ptr<const void>(b),
                cuda_type(b.type), dev_ptr<void>(c), cuda_type(c.type), p.alpha, p.beta);
        return;
    }
    // Mixed f32 x f16: split A (every element the batch can touch, gaps included, so strides stay).
    const int64_t span = p.stride_a * (p.batch - 1) + p.m * p.k;
    const size_t half_bytes = (size_t(span) * sizeof(__half) + 255) & ~size_t(255);
    char * ws = static_cast<char *>(ctx.workspace(2 * half_bytes));
    __half * hi = reinterpret_cast<__half *>(ws);
    __half * lo = reinterpret_cast<__half *>(ws + half_bytes);
    constexpr int threads = 256;
    split_f16_kernel<<<grid_stride_blocks(span, threads, ctx), threads, 0, ctx.stream>>>(
        dev_ptr<const float>(a), hi, lo, span);
    KVCOMP_CUDA_CHECK_LAUNCH();
    const void * bp = dev_ptr<const void>(b);
    void * cp = dev_ptr<void>(c);
    gemm_ex(ctx, p, hi, CUDA_R_16F, p.stride_a, bp, CUDA_R_16F, cp, CUDA_R_32F, p.alpha, p.beta);
    gemm_ex(ctx, p, lo, CUDA_R_16F, p.stride_a, bp, CUDA_R_16F, cp, CUDA_R_32F, p.alpha / kLoScale, 1.0f);
}

}  // namespace kvcomp::cuda
