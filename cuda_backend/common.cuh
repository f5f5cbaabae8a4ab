// Device helpers shared by the CUDA op files: dtype load/store with the contract's rounding,
// warp and block reductions, cp.async copies, mma.sync fragments, launch-size helpers.
//
// Kernels: none here. Layout conventions used by every op file: tensors are contiguous row-major
// views (core/tensor.h); element indices are int64_t wherever a tensor can exceed 2^31 elements.
// Conversions to f16/bf16 round to nearest even (__float2half_rn / __float2bfloat16_rn), the
// same bits as the CPU reference (core/dtype.h) for every non-NaN value.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "backend_cuda.h"

namespace kvcomp::cuda {

constexpr unsigned full_mask = 0xffffffffu;

// ---- dtype access --------------------------------------------------------------------------
// Storage types of kvcomp dtypes on the device: float, __half, __nv_bfloat16.
__device__ __forceinline__ float to_float(float v) {
    return v;
}
__device__ __forceinline__ float to_float(__half v) {
    return __half2float(v);
}
__device__ __forceinline__ float to_float(__nv_bfloat16 v) {
    return __bfloat162float(v);
}

template <typename T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ float from_float<float>(float v) {
    return v;
}
template <>
__device__ __forceinline__ __half from_float<__half>(float v) {
    return __float2half_rn(v);
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
    return __float2bfloat16_rn(v);
}

// ---- reductions ----------------------------------------------------------------------------
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(full_mask, v, o);
    return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(full_mask, v, o));
    return v;
}

// Block-wide sum / max for blockDim.x a multiple of 32 (<= 1024). `scratch` is 32 floats of
// shared memory; the result is returned to every thread. Safe to call repeatedly with the same
// scratch (the leading __syncthreads protects the previous call's readers).
__device__ __forceinline__ float block_sum(float v, float * scratch) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
    v = warp_sum(v);
    __syncthreads();
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    v = lane < n_warps ? scratch[lane] : 0.0f;
    return warp_sum(v);
}
__device__ __forceinline__ float block_max(float v, float * scratch) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    v = lane < n_warps ? scratch[lane] : -INFINITY;
    return warp_max(v);
}

// 2^x with denormal results flushed to zero: one MUFU.EX2 (exp2f wraps it in a range fix-up of
// three more instructions). For softmax weights and rescale factors: a weight below 2^-126 of the
// running max's adds nothing an fp32 sum could keep.
__device__ __forceinline__ float exp2_ftz(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

// ---- asynchronous copies (sm_80+) ---------------------------------------------------------
// Per-lane 16-byte copy global -> shared. src_bytes = 0 writes zeros without reading global
// memory (masked tokens); gmem must still be a valid address. Both addresses 16-byte aligned.
__device__ __forceinline__ void cp_async16(unsigned smem, const void * gmem, int src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem), "l"(gmem), "r"(src_bytes)
                 : "memory");
}
// The same with a generic pointer to shared memory. Hot loops should convert their base once
// (smem_addr) and pass 32-bit addresses: each conversion re-reads SR_CgaCtaId (an S2R) and adds a
// LEA and a MOV per copy in the SASS of a loop with asm volatile statements.
__device__ __forceinline__ void cp_async16(void * smem, const void * gmem, int src_bytes) {
    cp_async16(unsigned(__cvta_generic_to_shared(smem)), gmem, src_bytes);
}
// The 32-bit shared-memory address of a generic pointer into shared memory.
__device__ __forceinline__ unsigned smem_addr(const void * p) {
    return unsigned(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void cp_async_commit() {
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}
// Waits until at most N of this thread's committed groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// ---- launch set-up ----------------------------------------------------------------------------
// Raises a kernel's dynamic shared-memory limit when it needs more than the default 48 KiB (a
// per-device attribute; cheap, so launchers call it before every launch).
inline void allow_dynamic_smem(const void * kernel, size_t smem) {
    if (smem > 48 * 1024)
        KVCOMP_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
}

// The largest dynamic shared memory a block of the current device may opt in to (227 KiB on
// sm_90, 163 KiB on sm_80, 99 KiB on sm_86 / sm_89): kernels that need more than a fixed amount
// check it before they take an op.
inline int smem_optin_limit() {
    int dev = 0, v = 0;
    KVCOMP_CUDA_CHECK(cudaGetDevice(&dev));
    KVCOMP_CUDA_CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    return v;
}

// ---- bulk copies completing on an mbarrier (sm_90+) ----------------------------------------
// One instruction copies a contiguous global range into shared memory (the copy engine, not the
// lanes, moves it); the mbarrier's phase completes when every expected byte has landed. Callers
// compile these only where KVCOMP_BULK_COPY is defined (sm_90 and later) and keep a cp.async path.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define KVCOMP_BULK_COPY 1
__device__ __forceinline__ void mbar_init(unsigned bar, unsigned arrivals) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(arrivals) : "memory");
}
// Makes initialized mbarriers visible to the copy engine (before the block barrier that follows).
__device__ __forceinline__ void mbar_fence_init() {
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
// One arrival that also announces `bytes` still to land in the current phase.
__device__ __forceinline__ void mbar_arrive_expect(unsigned bar, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
// Waits until the phase of parity `parity` has completed.
__device__ __forceinline__ void mbar_wait(unsigned bar, unsigned parity) {
    asm volatile(
        "{\n"
        ".reg .pred done;\n"
        "wait_%=:\n"
        "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
        "@!done bra wait_%=;\n"
        "}\n" ::"r"(bar),
        "r"(parity)
        : "memory");
}
// bytes (a multiple of 16; both addresses 16-byte aligned) from gmem to smem, counted on bar.
__device__ __forceinline__ void bulk_copy(unsigned smem, const void * gmem, unsigned bytes, unsigned bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(smem),
                 "l"(gmem), "r"(bytes), "r"(bar)
                 : "memory");
}
#endif

// ---- tensor cores (mma.sync, sm_80+) --------------------------------------------------------
// c (16x8 f32) += a (16x16 f16, row-major) * b (16x8 f16, "col": b stored as 8 columns of 16).
// Fragments, with g = lane/4, t = lane%4 (PTX ISA, mma.m16n8k16 floating point):
//   a[0]: row g,   k 2t..2t+1     a[1]: row g+8, k 2t..2t+1
//   a[2]: row g,   k 2t+8..2t+9   a[3]: row g+8, k 2t+8..2t+9
//   b[0]: k 2t..2t+1, column g    b[1]: k 2t+8..2t+9, column g
//   c[0..1]: row g, columns 2t..2t+1    c[2..3]: row g+8, columns 2t..2t+1
__device__ __forceinline__ void mma_16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    // Not volatile: a pure register operation, so the compiler may schedule it freely.
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two floats as one half2 register, each rounded to nearest even.
__device__ __forceinline__ uint32_t pack_half2(float lo, float hi) {
    const __half2 h = __floats2half2_rn(lo, hi);  // .x (lower address, lower k) = lo
    return *reinterpret_cast<const uint32_t *>(&h);
}

// 8x8 matrix of 16-bit values transposed across the warp: lane l holds (as in an mma fragment) row
// l/4, columns 2(l%4) and 2(l%4)+1 (lower column in the low half), and gets the same positions of
// the transposed matrix, i.e. column l/4, rows 2(l%4) and 2(l%4)+1 of the original.
__device__ __forceinline__ uint32_t movmatrix_trans(uint32_t x) {
    uint32_t y;
    asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(y) : "r"(x));
    return y;
}

// ---- launch helpers ------------------------------------------------------------------------
// Blocks for a grid-stride loop over n items: enough to fill the GPU several times over, never
// more than needed and never above the grid limit.
inline unsigned grid_stride_blocks(int64_t n, int threads, const context & ctx) {
    const int64_t needed = (n + threads - 1) / threads;
    const int64_t cap = int64_t(ctx.sm_count) * 32;
    return unsigned(std::max<int64_t>(1, std::min(needed, cap)));
}

// Threads per block for the one-block-per-row kernels (rms_norm, softmax, argmax): long rows (a
// vocabulary of 128K logits, few rows) get 1024 threads so a handful of blocks still keeps many
// loads in flight; short rows keep 256 so more rows run at once.
inline int row_block_threads(int64_t n) { return n >= 4096 ? 1024 : 256; }

}  // namespace kvcomp::cuda
