// Warp-level helpers of the split-KV decode kernels (attn_decode.cu, attn_decode_quant.cu,
// attn_decode_ragged.cu): the GQA score reduce-scatter, fp16 unpacking, and the end-of-kernel merge
// of the warps' online-softmax states through shared memory.
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

// ---- merging the warps of a block ----------------------------------------------------------
// State each lane carries out of the token loop: the running max m and sum l (log2 domain) of head
// lane_head<L, QP>(lj), shared by the warp's token groups, and o[i][k] = feature lj * CPL + k of
// head i for all QP heads. W = L * CPL features per head row.
//
// Shared memory of the merge, in floats: o [NW][QP][W], then m [NW][QP], then l [NW][QP].
template <int NW, int QP, int W>
__host__ __device__ constexpr size_t warp_merge_floats() {
    return size_t(NW) * QP * W + 2 * size_t(NW) * QP;
}

// Folds the token groups of each warp (they share m, so their l and o simply add) and publishes
// every warp's (m, l, o) in `sm` (warp_merge_floats floats). Every thread of the block must call it
// (it contains __syncthreads); the caller's last reads of `sm` as anything else must precede it
// (the first barrier protects them) and all cp.async copies into it must have landed.
// W: the row width (L * CPL, or less when the token group's last lanes hold no channels: those
// lanes, lj * CPL >= W, take part in the shuffles but write no o).
template <int L, int QP, int CPL, int NW, int W = L * CPL>
__device__ __forceinline__ void publish_warp_states(float m, float l, float (&o)[QP][CPL], float * sm) {
    static_assert(W % CPL == 0 && W <= L * CPL, "row width");
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int tg = lane / L, lj = lane % L;
#pragma unroll
    for (int off = L; off < 32; off <<= 1) {
        l += __shfl_xor_sync(full_mask, l, off);
#pragma unroll
        for (int i = 0; i < QP; ++i)
#pragma unroll
            for (int k = 0; k < CPL; ++k) o[i][k] += __shfl_xor_sync(full_mask, o[i][k], off);
    }
    __syncthreads();                    // every warp is done with whatever `sm` held before
    float * sm_o = sm;                  // [NW][QP][W]
    float * sm_m = sm_o + NW * QP * W;  // [NW][QP]
    float * sm_l = sm_m + NW * QP;      // [NW][QP]
    if (tg == 0) {
        if (lj * CPL < W)
#pragma unroll
            for (int i = 0; i < QP; ++i)
#pragma unroll
                for (int k = 0; k < CPL; ++k) sm_o[(warp * QP + i) * W + lj * CPL + k] = o[i][k];
        const int my_head = lane_head<L, QP>(lj);
        if (lj == head_lane<L, QP>(my_head)) {
            sm_m[warp * QP + my_head] = m;
            sm_l[warp * QP + my_head] = l;
        }
    }
    __syncthreads();
}

// Normalized output of head i, feature d (d < W) over the NW published warp states; lse2 receives
// the log2 of the softmax denominator in the q-prescaled units (m + log2 l), -inf with a 0 output
// when no warp saw a token.
template <int QP, int W, int NW>
__device__ __forceinline__ float merge_warp_states(const float * sm_o, const float * sm_m, const float * sm_l, int i,
                                                   int d, float & lse2) {
    float mx = -INFINITY;
#pragma unroll
    for (int w = 0; w < NW; ++w) mx = fmaxf(mx, sm_m[w * QP + i]);
    lse2 = -INFINITY;
    if (mx == -INFINITY) return 0.0f;
    float num = 0.0f, den = 0.0f;
#pragma unroll
    for (int w = 0; w < NW; ++w) {
        const float wt = exp2f(sm_m[w * QP + i] - mx);  // 0 for a warp that saw no token
        num = fmaf(wt, sm_o[(w * QP + i) * W + d], num);
        den = fmaf(wt, sm_l[w * QP + i], den);
    }
    lse2 = mx + log2f(den);
    return num / den;
}
template <int QP, int W, int NW>
__device__ __forceinline__ float merge_warp_states(const float * sm, int i, int d, float & lse2) {
    return merge_warp_states<QP, W, NW>(sm, sm + NW * QP * W, sm + NW * QP * W + NW * QP, i, d, lse2);
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

// Merges the n_splits partials of each of `rows` rows (store_block_result's part_o / part_lse) into
// out [rows, head_dim] and, where lse_out is given, the natural-log lse per row (decode_merge.cu; as
// the dependent of the decode kernel enqueued just before, dependent_launch.cuh).
void launch_split_merge(context & ctx, const float * part_o, const float * part_lse, float * out,
                        float * lse_out, int64_t rows, int n_splits, int head_dim);

// Writes heads i < nh (rows row0 + i) of the NW warp states in sm_o [NW][QP][D], sm_m / sm_l
// [NW][QP] (log2 units; a warp that saw no token has m = -inf) to dst; a head no warp saw gives
// o = 0 and lse = -inf. All threads of the block call it after the barrier that publishes them.
template <int D, int QP, int NW>
__device__ __forceinline__ void store_block_result(const float * sm_o, const float * sm_m, const float * sm_l,
                                                   int nh, int64_t row0, const decode_dst & dst) {
    constexpr float ln2 = 0.6931471805599453f;
    for (int idx = threadIdx.x; idx < nh * D; idx += blockDim.x) {
        const int i = idx / D, d = idx % D;
        float lse2;
        const float val = merge_warp_states<QP, D, NW>(sm_o, sm_m, sm_l, i, d, lse2);
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
// The same over the layout publish_warp_states writes (o, then m, then l).
template <int D, int QP, int NW>
__device__ __forceinline__ void store_block_result(const float * sm, int nh, int64_t row0, const decode_dst & dst) {
    store_block_result<D, QP, NW>(sm, sm + NW * QP * D, sm + NW * QP * D + NW * QP, nh, row0, dst);
}

}  // namespace kvcomp::cuda
