// Warp-level pieces of the tensor-core decode kernels (attn_decode_quant_mma.cu,
// attn_decode_ragged_mma.cu; attn_prefill.cu takes ldmatrix and kLazyMax). Both decodes compute a
// 16-token tile's scores as S^T = K Q'^T with mma.m16n8k16: M = 16 tokens, N = 8 columns = the
// (hi, lo) f16 parts of q for 4 query heads (column 2h = hi, 2h + 1 = lo, so scores keep about fp32
// accuracy at no extra mma). Lane (g = lane / 4, t = lane % 4) then holds head t's scores of tile
// tokens g and g + 8, and the online softmax runs per lane; the 8 lanes of a head (lane bits 2..4)
// share its running max.
#pragma once

#include "common.cuh"

namespace kvcomp::cuda {

// Four 8x8 matrices of 16-bit values from shared memory: lane l gives the address of row l % 8 of
// matrix l / 8 (16 bytes, 16-byte aligned) and receives, in r[i], row l/4, columns 2(l%4) and
// 2(l%4)+1 of matrix i (the mma fragment positions). _trans: columns l/4, rows 2(l%4) and 2(l%4)+1.
// The "memory" clobber keeps them after the cp.async waits and __syncwarp that publish the rows.
// Shared addresses as 32-bit values (smem_addr): see cp_async16 in common.cuh.
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], unsigned s) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(s)
                 : "memory");
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], unsigned s) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(s)
                 : "memory");
}
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void * row) {
    ldmatrix_x4(r, smem_addr(row));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void * row) {
    ldmatrix_x4_trans(r, smem_addr(row));
}

// Sum over the 8 lanes holding the same head (lane bits 2..4).
__device__ __forceinline__ float head_sum(float v) {
    v += __shfl_xor_sync(full_mask, v, 4);
    v += __shfl_xor_sync(full_mask, v, 8);
    return v + __shfl_xor_sync(full_mask, v, 16);
}

// Online softmax step for this lane's two scores s0, s1 (log2 units, -inf when masked): updates
// the running max m (shared by the head's lanes) and this lane's part of the sum l, gives the two
// weights, and returns the factor the accumulators must be scaled by (1 when the max held).
// The max is lazy: m moves only when some score of the warp exceeds its head's m by more than
// kLazyMax, so most steps skip the max over the head's 8 lanes (3 dependent shuffles, ~100 cycles
// on the step's critical path in kernels bound by such latencies). Weights then reach 2^kLazyMax:
// the (hi, lo) f16 split keeps their relative precision, and fp32 sums of them lose nothing.
constexpr float kLazyMax = 8.0f;
__device__ __forceinline__ float softmax_pair(float & m, float & l, float s0, float s1, float & p0, float & p1) {
    float alpha = 1.0f;
    float mt = fmaxf(s0, s1);
    if (__any_sync(full_mask, mt > m + kLazyMax)) {  // -inf + kLazyMax: the first finite score
        mt = fmaxf(mt, __shfl_xor_sync(full_mask, mt, 4));
        mt = fmaxf(mt, __shfl_xor_sync(full_mask, mt, 8));
        mt = fmaxf(mt, __shfl_xor_sync(full_mask, mt, 16));
        const float m_new = fmaxf(m, mt);
        alpha = exp2_ftz(m - (m_new == -INFINITY ? 0.0f : m_new));  // a head with nothing seen yet: 0
        m = m_new;
    }
    const float m_use = m == -INFINITY ? 0.0f : m;
    p0 = exp2_ftz(s0 - m_use);
    p1 = exp2_ftz(s1 - m_use);
    l = l * alpha + (p0 + p1);
    return alpha;
}

// Scales a warp's mma output accumulators by this lane's factor alpha from softmax_pair. The max
// settles quickly, so the whole warp skips it unless some head's max moved; returns whether it
// scaled (a kernel with more per-row state scales that too).
template <int MV>
__device__ __forceinline__ bool rescale_mma_out(float (&o)[MV][4], float alpha) {
    if (!__any_sync(full_mask, alpha != 1.0f)) return false;
#pragma unroll
    for (int m = 0; m < MV; ++m)
#pragma unroll
        for (int k = 0; k < 4; ++k) o[m][k] *= alpha;
    return true;
}

// B fragments of P' for the values' mma (O^T = V^T P'^T: K = the tile's 16 tokens, N = the (hi, lo)
// columns of 4 heads) from this lane's weights of head t for tokens g and g + 8: lane (g, t) packs
// (hi, lo) of its weight into one register of an 8x8 matrix (rows tokens, columns head columns),
// and movmatrix.trans turns it into the B fragment (tokens 2t, 2t + 1 of column g).
__device__ __forceinline__ void p_frag(float w0, float w1, uint32_t & b0, uint32_t & b1) {
    const float h0 = __half2float(__float2half_rn(w0)), h1 = __half2float(__float2half_rn(w1));
    b0 = movmatrix_trans(pack_half2(h0, w0 - h0));
    b1 = movmatrix_trans(pack_half2(h1, w1 - h1));
}

// Codes as mma operands (attn_decode_quant_mma.cu, attn_decode_ragged_q4_mma.cu): a BITS-bit code
// placed in the top BITS mantissa bits of an f16 with exponent 2^BITS reads as F = 2^BITS + code,
// exact, and the constant 2^BITS is of the size of the code, so fp32 sums of F * x lose nothing to
// cancellation (unlike 1024 + code); the kernels subtract 2^BITS times the same sums of x.
// The exponent bits of the f16 pair (2^BITS, 2^BITS), as a register: code_pair's and-or is one
// LOP3 only when one of its two constants is a register (a LOP3 has one immediate operand; with
// both immediate the compiler emitted two LOP3 per pair, 25 % of the kernel's instructions in
// Nsight Compute on an H100). The empty asm keeps the compiler from folding it back.
template <int BITS>
__device__ __forceinline__ uint32_t code_exponents() {
    uint32_t e = (uint32_t(15 + BITS) << 10) * 0x10001u;
    asm volatile("" : "+r"(e));
    return e;
}

// Two codes (at bits [o, o + BITS) and [o + 16, o + 16 + BITS) of x, o = (10 - BITS - rot) mod 32)
// as the f16 pair (2^BITS + code, 2^BITS + code'); ex = code_exponents<BITS>().
template <int BITS>
__device__ __forceinline__ uint32_t code_pair(uint32_t x, int rot, uint32_t ex) {
    constexpr uint32_t m = ((1u << BITS) - 1u) << (10 - BITS);
    uint32_t r;
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(r) : "r"(__funnelshift_l(x, x, rot)), "n"(m | m << 16), "r"(ex));
    return r;  // 0xEA: (a & b) | c
}

}  // namespace kvcomp::cuda
