// attn_decode_ragged on tensor cores: decode attention in the reduced (per-head width) dims of
// ZACK / FDC over fp16 ragged pages, for layouts whose widest head is <= 128 (every rank of a
// head_dim <= 128 model). attn_decode_ragged.cu picks it, keeps its SIMT kernel for wider heads,
// and defines the merge kernel both use.
//
// Why: the SIMT kernel gives each token's dot products, butterfly, softmax and p shuffles to
// the lanes of a token group; with narrow heads that work falls on 2-4x fewer bytes than in the
// fp16 decode, and it stayed issue-bound at 0.49 of the copy bandwidth on an H100 (16 x 32K,
// balanced ~50 % ranks). Here a 16-token tile costs one ldmatrix and one mma per 16 channels of
// K' and of V', plus one softmax step per lane.
//
// Kernel attn_decode_ragged_mma_kernel<W, SB>: one block of 4 warps per (schedule row, chunk of 4 query
//   heads); W = 64 or 128, the widths it is compiled for; SB = bytes of a warp's ring stage (7 KiB: 4
//   blocks per SM, 9 KiB: 3; kSmallStage). Each warp streams its own tiles (ragged_stream.cuh, padded
//   rows: 8 rows at one column in 8 bank groups) and runs every 16-row step of a tile itself, its
//   loops unrolled to the task's head (step_bound); warps merge through shared memory at the end, as
//   the SIMT kernel.
// Scores (decode_mma.cuh): S^T = K' Q'^T with M = 16 tile rows (ldmatrix.x4 of K' rows: A
//   fragments directly), N = 8 = (hi, lo) of q for 4 heads (B fragments built once per block, in
//   registers), K = 16 channels per step. A head whose width is not a multiple of 16 has a last
//   step whose channels past the width are zeros in q and, where the copy left them stale, zeroed
//   in the A registers (stale halves may be any bit pattern: 0 * NaN would poison the score).
// Values: O^T = V'^T P'^T with M = 16 channels (ldmatrix.x4.trans of V' rows gives the A fragment
//   of the transpose), N = 8 = (hi, lo) of p for 4 heads (p_frag), K = the 16 rows. Lane (g, t)
//   accumulates head t, channels 16m + g (c0 + c1) and 16m + g + 8 (c2 + c3); channels past the
//   width only ever reach rows that are not stored.
// Masking: rows past the task's tokens read the last valid row (clamped addresses) and get score
//   -inf, so weight 0 times finite values; every row a step reads was copied for this tile.
#include <algorithm>
#include <climits>

#include "decode_common.cuh"
#include "decode_mma.cuh"
#include "dependent_launch.cuh"
#include "ragged_common.cuh"
#include "ragged_stream.cuh"

namespace kvcomp::cuda {

namespace {

constexpr int QH = 4;  // query heads per block: the 8 mma columns are their (hi, lo)
constexpr int kStages = 2;
// Stage sizes. A stage holds 16 rows of K' and V' of the task's head; narrower heads get longer
// tiles (up to kMaxTileTokens). kLargeStage fits 16 rows of the widest pair the kernel takes (2 x 17
// chunks of 16 bytes per row at widths 128 + 128: 8.5 KiB) in rings of 72 KiB a block, 3 blocks per
// SM. kSmallStage (rings of 56 KiB) lets 4 blocks share an SM's 228 KiB, as registers (<= 128 at
// 4 blocks, no spills with CUDA 13.0) allow: the warps wait on their own instruction chains
// (Nsight Compute: `wait` and `short_scoreboard` stalls), so a fourth warp per scheduler hides
// latency. The host picks it where 16 rows of the widest K and V heads fit (kernel_fits_small);
// a head whose rows do not fit gets 8-row tiles (tile_stream's minimum), correct at half the mma use.
constexpr int kLargeStage = 9 * 1024;
constexpr int kSmallStage = 7 * 1024;
template <int SB>
constexpr size_t smem_bytes() {
    return size_t(kRaggedWarps) * kStages * SB;
}
static_assert(16 * 2 * stage_row_halves<true>(128) * 2 <= kLargeStage, "16 rows of the widest head per stage");
static_assert(8 * 2 * stage_row_halves<true>(128) * 2 <= kSmallStage, "8 rows of the widest head per stage");
static_assert(warp_merge_floats<kRaggedWarps, QH, 128>() * sizeof(float) <= smem_bytes<kSmallStage>(),
              "the warps' merge area must fit in the rings it reuses");

// B fragments of q (scaled by scale * log2 e) for K-step kk: lane (g, t) holds column g (head
// g / 2, hi part for even g, lo for odd) at channels 16kk + 2t, + 1 (b0) and + 8, + 9 (b1). Zeros
// past the width and for heads past the group.
template <int MK>
__device__ __forceinline__ void load_q_frags(const rdecode_args & a, const rtask & t, int lane,
                                             uint32_t (&bq)[MK][2]) {
    const int g = lane >> 2, tq = lane & 3, h = g >> 1;
    const bool lo_part = g & 1, live = h < t.nh;
    const int kw = t.hd.k_width;
    const float * qrow = a.q + int64_t(t.b) * a.group * a.k_total + int64_t(a.group) * t.hd.k_offset +
                         int64_t(t.h0 + (live ? h : 0)) * kw;
    auto part = [&](int c) {
        const float x = live && c < kw ? qrow[c] * a.qscale : 0.0f;
        const float hi = __half2float(__float2half_rn(x));
        return lo_part ? x - hi : hi;
    };
#pragma unroll
    for (int kk = 0; kk < MK; ++kk) {
        const int c = 16 * kk + 2 * tq;
        bq[kk][0] = pack_half2(part(c), part(c + 1));
        bq[kk][1] = pack_half2(part(c + 8), part(c + 9));
    }
}

// Per-warp state: lane (g, t) keeps head t's running max (shared by its 8 lanes) and its part of
// the sum, and the output accumulators of the m-tiles.
template <int MV>
struct rstate {
    float o[MV][4];
    float m = -INFINITY, l = 0.0f;
};

// The geometry of one staged tile as a warp reads it.
struct tile_view {
    unsigned k;  // shared address of row 0 of K' in the stage
    unsigned v;  // of row 0 of V'
    int k_row, v_row;   // row strides (bytes)
    int nk, nv;         // 16-channel steps of K' and of V'
    bool k_tail;        // the last K' step has <= 8 channels: zero its upper A registers
};

// Scores of rows r0 .. r0 + 15 (rows < hi are the task's): this lane's head t for rows r0 + g (.x)
// and r0 + g + 8 (.y), -inf past hi.
template <int MK>
__device__ __forceinline__ float2 tile_scores(const tile_view & tv, int r0, int hi, const uint32_t (&bq)[MK][2],
                                              int lane) {
    // ldmatrix rows: lanes 0-15 give rows 0-15 at the step's first 8 channels, lanes 16-31 the
    // same rows at its last 8 (matrices 0..3 = a0..a3 of the A fragment).
    const unsigned row = tv.k + unsigned(min(r0 + (lane & 15), hi - 1) * tv.k_row + (lane >> 4) * 16);
    float s[4] = {0.0f, 0.0f, 0.0f, 0.0f}, s2[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int kk = 0; kk < MK; ++kk) {
        if (kk < tv.nk) {  // uniform
            uint32_t af[4];
            ldmatrix_x4(af, row + unsigned(32 * kk));
            if (kk == tv.nk - 1 && tv.k_tail) af[2] = af[3] = 0u;
            mma_16816(kk & 1 ? s2 : s, af, bq[kk][0], bq[kk][1]);  // two chains of dependent mma
        }
    }
    const int g = lane >> 2;
    return make_float2(r0 + g < hi ? (s[0] + s2[0]) + (s[1] + s2[1]) : -INFINITY,
                       r0 + g + 8 < hi ? (s[2] + s2[2]) + (s[3] + s2[3]) : -INFINITY);
}

// Adds rows r0 .. r0 + 15 of V' weighted by this lane's p0 (row r0 + g) and p1 (row r0 + g + 8).
template <int MV>
__device__ __forceinline__ void tile_values(rstate<MV> & st, const tile_view & tv, int r0, int hi, float p0,
                                            float p1, int lane) {
    uint32_t b0, b1;
    p_frag(p0, p1, b0, b1);
    // ldmatrix.trans rows: matrix i = lane / 8 is rows 8 (i / 2) + 0..7 at channels 8 (i % 2) + 0..7
    // of the m-tile: a0 = channels 0-7 x rows 0-7, a1 = channels 8-15, a2 / a3 = rows 8-15.
    const unsigned row =
        tv.v + unsigned(min(r0 + (lane & 7) + ((lane >> 4) << 3), hi - 1) * tv.v_row + ((lane >> 3) & 1) * 16);
#pragma unroll
    for (int m = 0; m < MV; ++m) {
        if (m < tv.nv) {  // uniform
            uint32_t af[4];
            ldmatrix_x4_trans(af, row + unsigned(32 * m));
            mma_16816(st.o[m], af, b0, b1);
        }
    }
}

// One block's task: MK / MV = the 16-channel steps its loops are unrolled for (>= the head's K' / V'
// steps, <= W / 16; step_bound); W = the merge area's row width.
template <int W, int SB, int MK, int MV>
__device__ __forceinline__ void run_task(const rdecode_args & a, const rtask & t, uint8_t * ring) {
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t4 = lane & 3;
    const int kw = t.hd.k_width, vw = t.hd.v_width;

    uint32_t bq[MK][2];
    load_q_frags<MK>(a, t, lane, bq);
    rstate<MV> st;
#pragma unroll
    for (int m = 0; m < MV; ++m)
#pragma unroll
        for (int k = 0; k < 4; ++k) st.o[m][k] = 0.0f;

    const int rs_k = stage_row_halves<true>(kw), rs_v = stage_row_halves<true>(vw);
    // Rows of both heads that fit a stage, in whole 16-row mma steps.
    tile_stream<kStages, SB, true> ts(a, t, ring + warp * kStages * SB, (SB / (2 * (rs_k + rs_v))) & ~15);
    tile_view tv;
    tv.k_row = 2 * rs_k, tv.v_row = 2 * rs_v;
    tv.nk = (kw + 15) / 16, tv.nv = (vw + 15) / 16;
    tv.k_tail = (kw & 15) != 0 && (kw & 15) <= 8;

    ts.locate(0);
#pragma unroll
    for (int s = 0; s < kStages - 1; ++s) ts.issue(s);
    for (int k = 0; k < ts.n_mine; ++k) {  // uniform per warp
        ts.wait(k);                        // tile k is in its stage for every lane
        ts.issue(k + kStages - 1);         // refills tile k - 1's stage

        tv.k = ts.k_stage_s(k);
        tv.v = ts.v_stage_s(k);
        int lo, hi;
        ts.rows(k, lo, hi);
        // Software-pipelined: the next step's scores are independent of this step's softmax and
        // values, so the scheduler can interleave them (a warp streams alone: its own ILP hides
        // the mma and shared-memory latencies).
        float2 s = tile_scores<MK>(tv, lo, hi, bq, lane);
        for (int r0 = lo; r0 < hi; r0 += 16) {
            float p0, p1;
            rescale_mma_out(st.o, softmax_pair(st.m, st.l, s.x, s.y, p0, p1));
            float2 next = make_float2(-INFINITY, -INFINITY);
            if (r0 + 16 < hi) next = tile_scores<MK>(tv, r0 + 16, hi, bq, lane);
            tile_values<MV>(st, tv, r0, hi, p0, p1, lane);
            s = next;
        }
    }
    cp_async_wait<0>();  // outstanding groups are empty; nothing may land in the merge area
    allow_consumer_launch();  // the merge may now be launched (dependent_launch.cuh)

    // The warps' states merge through the rings.
    st.l = head_sum(st.l);
    __syncthreads();  // every warp is done with its ring
    float * sm = reinterpret_cast<float *>(ring);
#pragma unroll
    for (int m = 0; m < MV; ++m) {
        if (m < tv.nv) {
            float * dst = sm + (warp * QH + t4) * W + 16 * m + g;
            dst[0] = st.o[m][0] + st.o[m][1];
            dst[8] = st.o[m][2] + st.o[m][3];
        }
    }
    finish_mma_block<QH, W>(a, t, sm, st.m, st.l);
}

// The unroll bound of the K' and V' step loops for a head of n = max(K' steps, V' steps) 16-channel
// steps (n <= W / 16): 2, 4 or 8. A task's head is fixed, so a block's loops need not run to the
// widest head's bound: at the 70 % profile's widths (16-80) each 16-row step otherwise passed 4-7
// skipped k-steps of K' and of V' (a compare and branch each). One bound for both loops: separate
// ones (9 variants at W = 128) made ptxas spill at 4 blocks per SM; these 3 need 125 registers.
template <int W>
__device__ __forceinline__ int step_bound(int n) {
    return n <= 2 ? 2 : (n <= 4 || W == 64) ? 4 : 8;
}

// W: widest head the kernel handles (64 or 128); SB: bytes of a stage (kSmallStage: 4 blocks per SM,
// kLargeStage: 3, as the shared memory allows).
template <int W, int SB>
__global__ void __launch_bounds__(kRaggedThreads, SB == kSmallStage ? 4 : 3)
    attn_decode_ragged_mma_kernel(const rdecode_args a) {
    extern __shared__ uint4 smem[];
    uint8_t * ring = reinterpret_cast<uint8_t *>(smem);
    rtask t;
    if (!load_mma_task<W>(a, QH, t)) return;  // uniform
    const int nk = (t.hd.k_width + 15) / 16, nv = (t.hd.v_width + 15) / 16;
    switch (step_bound<W>(max(nk, nv))) {
        case 2: return run_task<W, SB, 2, 2>(a, t, ring);
        case 4: return run_task<W, SB, 4, 4>(a, t, ring);
        default: return run_task<W, SB, W / 16, W / 16>(a, t, ring);
    }
}

}  // namespace

bool ragged_mma_handles(int64_t max_width) {
    return max_width <= 128;
}

namespace {

// Whether 16 rows of every head fit a small stage: the widest K and the widest V head (the layout's
// hints, else max_width for both) bound every head's pair.
bool fits_small_stage(const ragged_layout & l) {
    const auto widest = [&](int64_t hint) { return int(hint > 0 ? std::min(hint, l.max_width) : l.max_width); };
    const int rows_halves = stage_row_halves<true>(widest(l.max_k_width)) + stage_row_halves<true>(widest(l.max_v_width));
    return 16 * 2 * rows_halves <= kSmallStage;
}

}  // namespace

task_kernel<rdecode_args> attn_decode_ragged_mma_kernel_for(const ragged_layout & l, int group) {
    const unsigned chunks = unsigned((group + QH - 1) / QH);
    if (fits_small_stage(l))
        return {l.max_width <= 64 ? attn_decode_ragged_mma_kernel<64, kSmallStage>
                                  : attn_decode_ragged_mma_kernel<128, kSmallStage>,
                kRaggedThreads, smem_bytes<kSmallStage>(), chunks};
    return {attn_decode_ragged_mma_kernel<128, kLargeStage>, kRaggedThreads, smem_bytes<kLargeStage>(), chunks};
}

}  // namespace kvcomp::cuda
