// Helpers of the split-KV decode kernels (attn_decode.cu, attn_decode_quant*.cu): the GQA score
// reduce-scatter, fp16 unpacking and the final merge of a block's warps (store_block_result).
//
// Mapping they assume: L lanes (a power of two <= 32) share one token row, each holding a slice of
// the features; a warp holds 32 / L token groups. For QP query heads (QP <= L) every lane has QP
// partial dot products over its slice; butterfly<L, QP>() turns them into full dot products with
// each lane left holding the score of one head, lane_head<L, QP>(lj) (lj = lane index within its
// group); head_lane<L, QP>(h) is the lowest lane of the group holding head h's score.
#pragma once

#include "common.cuh"

namespace kvcomp::cuda {

__host__ __device__ constexpr int ilog2(int x) {
    return x <= 1 ? 0 : 1 + ilog2(x / 2);
}

// Which head's full score a lane holds after the butterfly (see the banner), and the lowest lane
// holding head h. Both only depend on the lane's index within its token group.
template <int L, int QP>
__device__ __forceinline__ int lane_head(int lj) {
    int h = 0;
#pragma unroll
    for (int k = 0; k < ilog2(L); ++k) {
        const int n = QP >> k;
        if (n > 1 && (lj & (L >> (k + 1)))) h += n / 2;
    }
    return h;
}
template <int L, int QP>
__device__ __forceinline__ constexpr int head_lane(int h) {
    int lj = 0;
    for (int k = 0; k < ilog2(L); ++k) {
        const int n = QP >> k;
        if (n > 1 && h >= n / 2) {
            lj |= L >> (k + 1);
            h -= n / 2;
        }
    }
    return lj;
}

// Reduce-scatter of QP partial sums across the L lanes of a token group; returns the full sum
// for head lane_head(lj). Step k exchanges half of the n = QP >> k values still held.
template <int L, int QP>
__device__ __forceinline__ float butterfly(float (&v)[QP], int lj) {
    static_assert(QP <= L, "each lane must end with one head's score");
#pragma unroll
    for (int k = 0; k < ilog2(L); ++k) {
        const int dist = L >> (k + 1);
        const int n = QP >> k;
        if (n > 1) {
            const bool up = (lj & dist) != 0;
#pragma unroll
            for (int i = 0; i < n / 2; ++i) {
                const float send = up ? v[i] : v[i + n / 2];
                const float keep = up ? v[i + n / 2] : v[i];
                v[i] = keep + __shfl_xor_sync(full_mask, send, dist);
            }
        } else {
            v[0] += __shfl_xor_sync(full_mask, v[0], dist);
        }
    }
    return v[0];
}

// Eight fp16 values (one 16-byte chunk) to float.
__device__ __forceinline__ void unpack8(const uint4 & r, float (&f)[8]) {
    const __half2 * h = reinterpret_cast<const __half2 *>(&r);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        const float2 t = __half22float2(h[k]);
        f[2 * k] = t.x;
        f[2 * k + 1] = t.y;
    }
}

// Where a decode block writes its result: with one split the final out [rows, D] (and lse [rows]
// in natural log when lse is not null); else its split's normalized partial part_o [rows,
// n_splits, D] and log2 lse part_lse [rows, n_splits] for the split merge kernel.
struct decode_dst {
    float * out;
    float * lse;
    float * part_o;
    float * part_lse;
    int n_splits, split;
};

// Merges the NW warps of a block. Each warp has left in shared memory its unnormalized o
// sm_o [NW][QP][D] (relative to its own running max), the max sm_m [NW][QP] and the sum
// sm_l [NW][QP], in log2 units; a warp that saw no token has m = -inf. Writes heads i < nh
// (rows row0 + i) to dst; a head no warp saw gives o = 0 and lse = -inf. All threads of the
// block call it after a barrier that makes the warps' values visible.
template <int D, int QP, int NW>
__device__ __forceinline__ void store_block_result(const float * sm_o, const float * sm_m, const float * sm_l,
                                                   int nh, int64_t row0, const decode_dst & dst) {
    constexpr float ln2 = 0.6931471805599453f;
    for (int idx = threadIdx.x; idx < nh * D; idx += blockDim.x) {
        const int i = idx / D, d = idx % D;
        float mx = -INFINITY;
#pragma unroll
        for (int w = 0; w < NW; ++w) mx = fmaxf(mx, sm_m[w * QP + i]);
        float val = 0.0f, lse2 = -INFINITY;
        if (mx != -INFINITY) {
            float num = 0.0f, den = 0.0f;
#pragma unroll
            for (int w = 0; w < NW; ++w) {
                const float wt = exp2f(sm_m[w * QP + i] - mx);  // 0 for a warp that saw no token
                num = fmaf(wt, sm_o[(w * QP + i) * D + d], num);
                den = fmaf(wt, sm_l[w * QP + i], den);
            }
            val = num / den;
            lse2 = mx + log2f(den);
        }
        const int64_t row = row0 + i;
        if (dst.n_splits == 1) {
            dst.out[row * D + d] = val;
            if (dst.lse && d == 0) dst.lse[row] = lse2 * ln2;  // -inf stays -inf
        } else {
            dst.part_o[(row * dst.n_splits + dst.split) * D + d] = val;
            if (d == 0) dst.part_lse[row * dst.n_splits + dst.split] = lse2;
        }
    }
}

}  // namespace kvcomp::cuda
