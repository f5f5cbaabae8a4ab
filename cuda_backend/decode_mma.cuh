// Warp-level pieces of the tensor-core decode kernels (attn_decode_quant_mma.cu,
// attn_decode_ragged_mma.cu). Both compute a 16-token tile's scores as S^T = K Q'^T with
// mma.m16n8k16: M = 16 tokens, N = 8 columns = the (hi, lo) f16 parts of q for 4 query heads
// (column 2h = hi, 2h + 1 = lo, so scores keep about fp32 accuracy at no extra mma). Lane
// (g = lane / 4, t = lane % 4) then holds head t's scores of tile tokens g and g + 8, and the
// online softmax runs per lane; the 8 lanes of a head (lane bits 2..4) share its running max.
#pragma once

#include "common.cuh"

namespace kvcomp::cuda {

// Four 8x8 matrices of 16-bit values from shared memory: lane l gives the address of row l % 8 of
// matrix l / 8 (16 bytes, 16-byte aligned) and receives, in r[i], row l/4, columns 2(l%4) and
// 2(l%4)+1 of matrix i (the mma fragment positions). _trans: columns l/4, rows 2(l%4) and 2(l%4)+1.
// The "memory" clobber keeps them after the cp.async waits and __syncwarp that publish the rows.
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void * row) {
    const unsigned s = unsigned(__cvta_generic_to_shared(row));
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(s)
                 : "memory");
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void * row) {
    const unsigned s = unsigned(__cvta_generic_to_shared(row));
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(s)
                 : "memory");
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
__device__ __forceinline__ float softmax_pair(float & m, float & l, float s0, float s1, float & p0, float & p1) {
    float mt = fmaxf(s0, s1);
    mt = fmaxf(mt, __shfl_xor_sync(full_mask, mt, 4));
    mt = fmaxf(mt, __shfl_xor_sync(full_mask, mt, 8));
    mt = fmaxf(mt, __shfl_xor_sync(full_mask, mt, 16));
    const float m_new = fmaxf(m, mt);
    const float m_use = m_new == -INFINITY ? 0.0f : m_new;  // nothing seen yet: avoid inf - inf
    const float alpha = exp2f(m - m_use);
    p0 = exp2f(s0 - m_use);
    p1 = exp2f(s1 - m_use);
    l = l * alpha + (p0 + p1);
    m = m_new;
    return alpha;
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

}  // namespace kvcomp::cuda
