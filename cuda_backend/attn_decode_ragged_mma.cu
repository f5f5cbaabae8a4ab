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

#include "block_timeline.cuh"
#include "ragged_mma.cuh"

namespace kvcomp::cuda {

namespace {

constexpr int QH = kRaggedMmaHeads;
constexpr int kStages = kRaggedMmaStages;
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

// One block's task: MK / MV = the 16-channel steps its loops are unrolled for (>= the head's K' / V'
// steps, <= W / 16; step_bound); W = the merge area's row width.
template <int W, int SB, int MK, int MV>
__device__ __forceinline__ void run_task(const rdecode_args & a, const rtask & t, uint8_t * ring) {
    const int lane = int(threadIdx.x) & 31;
    const int kw = t.hd.k_width, vw = t.hd.v_width;

    uint32_t bq[MK][2];
    const float * q0 = a.q + int64_t(t.b) * a.group * a.k_total + int64_t(a.group) * t.hd.k_offset +
                       int64_t(t.h0) * kw;
    load_q_frags<MK>([&](int h) { return q0 + int64_t(h) * kw; }, t.nh, kw, a.qscale, lane, bq);
    rstate<MV> st;

    const int rs_k = stage_row_halves<true>(kw), rs_v = stage_row_halves<true>(vw);
    tile_view tv;
    tv.k_row = 2 * rs_k, tv.v_row = 2 * rs_v;
    tv.nk = (kw + 15) / 16, tv.nv = (vw + 15) / 16;
    tv.k_tail = (kw & 15) != 0 && (kw & 15) <= 8;
    // Rows of both heads that fit a stage, in whole 16-row mma steps.
    stream_tiles<SB>(a, t, ring, (SB / (2 * (rs_k + rs_v))) & ~15, st, tv,
                     [&](const tile_view & v, int r0, int hi, int) { return tile_scores<MK>(v, r0, hi, bq, lane); });
    finish_ragged_mma_task<W>(a, t, st, tv.nv, ring);
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
    stamp_start(a.timeline);
    rtask t;
    if (!load_mma_task<W>(a, QH, t)) return;  // uniform
    stamp_info(a.timeline, uint64_t(t.end - t.first) << 32 | uint64_t(t.hd.k_width) << 16 | uint64_t(t.hd.v_width));
    const int nk = (t.hd.k_width + 15) / 16, nv = (t.hd.v_width + 15) / 16;
    switch (step_bound<W>(max(nk, nv))) {
        case 2: run_task<W, SB, 2, 2>(a, t, ring); break;
        case 4: run_task<W, SB, 4, 4>(a, t, ring); break;
        default: run_task<W, SB, W / 16, W / 16>(a, t, ring); break;
    }
    stamp_end(a.timeline);
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
