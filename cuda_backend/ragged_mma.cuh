// The block both tensor-core kernels of attn_decode_ragged run (attn_decode_ragged_mma.cu on f16
// pages, attn_decode_ragged_q4_mma.cu on 4-bit pages): read the task, stream its tiles through the
// warp's ring (ragged_stream.cuh), run every 16-row step (scores, online softmax, values) with the
// next step's scores software-pipelined, and merge the warps. A page format supplies only the math
// on a staged tile, as a class PAGES with
//   kStages, kStageBytes, stream        the warp's ring and its tile_stream type
//   PAGES(a, t, lane)                   the task's q operands (t's widths already clamped to W)
//   int t_max() const                   rows of K and V that fit a stage, in whole 16-row steps
//   void bind(const stream &, int k)    the addresses of the warp's staged tile k
//   float2 scores(int r0, int hi)       this lane's head t for rows r0 + g (.x), r0 + g + 8 (.y),
//                                       log2 units, -inf for rows >= hi
//   void values(r0, hi, p0, p1)         adds those rows' values weighted by p0, p1
//   void rescale(float alpha)           scales its accumulators (called when some head's max grew)
//   void store(float * row)             writes this lane's head's outputs (channels < v_width) to
//                                       row [W]; every lane of the warp calls it
// Lane (g = lane / 4, t = lane % 4) keeps head t's running max and sum (decode_mma.cuh).
#pragma once

#include "decode_common.cuh"
#include "decode_mma.cuh"
#include "ragged_stream.cuh"

namespace kvcomp::cuda {

constexpr int kMmaHeadsPerBlock = 4;  // query heads per block: the 8 mma columns are their (hi, lo)

// The end of the block: lane (g, t) of each warp holds head t's running max m and
// its sum l (already summed over the head's 8 lanes); the caller has written the warps' outputs to
// sm (o [warps][QH][W], decode_common.cuh's layout) after a __syncthreads that ended the tile loop.
// Publishes m and l, then merges the warps per (head, channel) and stores the block's results.
template <int QH, int W>
__device__ __forceinline__ void finish_mma_block(const rdecode_args & a, const rtask & t, float * sm, float m, float l) {
    const int lane = int(threadIdx.x) & 31, warp = int(threadIdx.x) >> 5;
    float * sm_m = sm + kRaggedWarps * QH * W;
    float * sm_l = sm_m + kRaggedWarps * QH;
    if ((lane >> 2) == 0) {
        sm_m[warp * QH + (lane & 3)] = m;
        sm_l[warp * QH + (lane & 3)] = l;
    }
    __syncthreads();
    const int vw = t.hd.v_width;
    for (int idx = int(threadIdx.x); idx < t.nh * vw; idx += kRaggedThreads) {
        const int i = idx / vw, d = idx % vw;
        float lse2;
        const float val = merge_warp_states<QH, W, kRaggedWarps>(sm, i, d, lse2);
        store_ragged_value(a, t, t.h0 + i, d, val, lse2);
    }
}

template <int W, class PAGES>
__device__ __forceinline__ void ragged_mma_block(const rdecode_args & a, uint8_t * ring) {
    constexpr int QH = kMmaHeadsPerBlock, S = PAGES::kStages;
    const int lane = int(threadIdx.x) & 31, warp = int(threadIdx.x) >> 5;
    rtask t;
    if (!load_task(a, QH, t)) return;  // uniform
    t.hd.k_width = min(t.hd.k_width, W);  // the launch checked max_width <= W
    t.hd.v_width = min(t.hd.v_width, W);

    PAGES pg(a, t, lane);
    typename PAGES::stream ts(a, t, ring + warp * S * PAGES::kStageBytes, pg.t_max());
    float m = -INFINITY, l = 0.0f;
    ts.locate(0);
#pragma unroll
    for (int s = 0; s < S - 1; ++s) ts.issue(s);
    for (int k = 0; k < ts.n_mine; ++k) {  // uniform per warp
        ts.wait(k);                        // tile k is in its stage for every lane
        ts.issue(k + S - 1);               // refills tile k - 1's stage
        pg.bind(ts, k);
        int lo, hi;
        ts.rows(k, lo, hi);
        // Software-pipelined: the next step's scores are independent of this step's softmax and
        // values, so the scheduler can interleave them (a warp streams alone: its own ILP hides the
        // mma and shared-memory latencies).
        float2 s = pg.scores(lo, hi);
        for (int r0 = lo; r0 < hi; r0 += 16) {
            float p0, p1;
            const float alpha = softmax_pair(m, l, s.x, s.y, p0, p1);
            // The max settles quickly; skip the rescale for the whole warp unless some head's grew.
            if (__any_sync(full_mask, alpha != 1.0f)) pg.rescale(alpha);
            float2 next = make_float2(-INFINITY, -INFINITY);
            if (r0 + 16 < hi) next = pg.scores(r0 + 16, hi);
            pg.values(r0, hi, p0, p1);
            s = next;
        }
    }
    cp_async_wait<0>();  // outstanding groups are empty; nothing may land in the merge area

    // The warps' states merge through the rings (decode_common.cuh's layout: o [warps][QH][W]).
    l = head_sum(l);
    __syncthreads();  // every warp is done with its ring
    float * sm = reinterpret_cast<float *>(ring);
    pg.store(sm + (warp * QH + (lane & 3)) * W);
    finish_mma_block<QH, W>(a, t, sm, m, l);
}

}  // namespace kvcomp::cuda
