// The parts of a tensor-core decode block over f16 ragged pages that do not depend on where its
// scores come from: attn_decode_ragged_mma.cu (scores from the staged K' rows) and
// attn_decode_palu_mma.cu (scores from keys rebuilt from the staged latent rows). Both stream
// their tiles through tile_stream (ragged_stream.cuh, padded rows), run the online softmax per
// lane (decode_mma.cuh) and accumulate V'^T P'^T on the tensor cores; only the 16-row score step
// differs, and it is passed to stream_tiles as a function.
#pragma once

#include "decode_common.cuh"
#include "decode_mma.cuh"
#include "ragged_stream.cuh"

namespace kvcomp::cuda {

constexpr int kRaggedMmaHeads = 4;  // query heads per block: the 8 mma columns are their (hi, lo)
constexpr int kRaggedMmaStages = 2;

// B fragments of one query row (scaled by qscale) for K-steps kk < MK: lane (g, t) holds column g
// (head g / 2, hi part for even g, lo for odd) at channels 16kk + 2t, + 1 (b0) and + 8, + 9 (b1).
// qrow(h) is head h's row of `width` channels; zeros past the width and for heads h >= nh.
template <int MK, typename QRow>
__device__ __forceinline__ void load_q_frags(QRow qrow, int nh, int width, float qscale, int lane,
                                             uint32_t (&bq)[MK][2]) {
    const int g = lane >> 2, tq = lane & 3, h = g >> 1;
    const bool lo_part = g & 1, live = h < nh;
    const float * q = qrow(live ? h : 0);
    auto part = [&](int c) {
        const float x = live && c < width ? q[c] * qscale : 0.0f;
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
    __device__ __forceinline__ rstate() {
#pragma unroll
        for (int mm = 0; mm < MV; ++mm)
#pragma unroll
            for (int k = 0; k < 4; ++k) o[mm][k] = 0.0f;
    }
};

// The geometry of one staged tile as a warp reads it.
struct tile_view {
    unsigned k;  // shared address of row 0 of K' (or of the latent K) in the stage
    unsigned v;  // of row 0 of V'
    int k_row, v_row;   // row strides (bytes)
    int nk, nv;         // 16-channel steps of K' and of V'
    bool k_tail;        // the last K' step has <= 8 channels: zero its upper A registers
};

// A fragments of rows r0 .. r0 + 15 of the staged K' (rows past hi - 1 read row hi - 1), K-steps
// kk < min(MK, tv.nk); the halves past the width of a tail step are zeroed (a chunk copy leaves
// them stale, and 0 * NaN would poison a product).
template <int MK>
__device__ __forceinline__ void load_k_frags(const tile_view & tv, int r0, int hi, int lane, uint32_t (&af)[MK][4]) {
    // ldmatrix rows: lanes 0-15 give rows 0-15 at the step's first 8 channels, lanes 16-31 the
    // same rows at its last 8 (matrices 0..3 = a0..a3 of the A fragment).
    const unsigned row = tv.k + unsigned(min(r0 + (lane & 15), hi - 1) * tv.k_row + (lane >> 4) * 16);
#pragma unroll
    for (int kk = 0; kk < MK; ++kk) {
        if (kk < tv.nk) {  // uniform
            ldmatrix_x4(af[kk], row + unsigned(32 * kk));
            // A mask, not a conditional store: the compiler turned the store into one to af[nk - 1]
            // at a run-time index, which put the whole array in local memory.
            const uint32_t keep = kk == tv.nk - 1 && tv.k_tail ? 0u : ~0u;
            af[kk][2] &= keep;
            af[kk][3] &= keep;
        }
    }
}

// Adds rows r0 .. r0 + 15 of V' weighted by this lane's p0 (row r0 + g) and p1 (row r0 + g + 8).
// Lane (g, t) accumulates head t, channels 16m + g (c0 + c1) and 16m + g + 8 (c2 + c3).
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

// The warp's part of a block's task over f16 pages with padded rows: streams its tiles (SB bytes a
// stage, at most t_max rows of K' and V' each) and runs every 16-row step of them.
// scores(tv, r0, hi, pos0): as run_tile_steps' scores, with the tile's view and the token index pos0
// of the tile's row 0 in its request. tv's strides and step counts are set by the caller.
template <int SB, int MV, typename Scores>
__device__ __forceinline__ void stream_tiles(const rdecode_args & a, const rtask & t, uint8_t * ring, int t_max,
                                             rstate<MV> & st, tile_view & tv, Scores && scores) {
    const int lane = int(threadIdx.x) & 31, warp = int(threadIdx.x) >> 5;
    tile_stream<kRaggedMmaStages, SB, true> ts(a, t, ring + warp * kRaggedMmaStages * SB, t_max);
    int pos0 = 0;
    run_tile_steps(
        ts,
        [&](int k) {
            tv.k = ts.k_stage_s(k);
            tv.v = ts.v_stage_s(k);
            pos0 = ts.tile_start(k);
        },
        [&](int r0, int hi) { return scores(tv, r0, hi, pos0); },
        [&](float2 s, float & p0, float & p1) { rescale_mma_out(st.o, softmax_pair(st.m, st.l, s.x, s.y, p0, p1)); },
        [&](int r0, int hi, float p0, float p1) { tile_values<MV>(st, tv, r0, hi, p0, p1, lane); });
}

// The end of the block: the warps' states merge through the rings (W = the merge area's row
// width, >= the head's V' width; nv = its 16-channel steps).
template <int W, int MV>
__device__ __forceinline__ void finish_ragged_mma_task(const rdecode_args & a, const rtask & t, rstate<MV> & st,
                                                       int nv, uint8_t * ring) {
    const int lane = int(threadIdx.x) & 31, warp = int(threadIdx.x) >> 5, g = lane >> 2, t4 = lane & 3;
    st.l = head_sum(st.l);
    __syncthreads();  // every warp is done with its ring
    float * sm = reinterpret_cast<float *>(ring);
#pragma unroll
    for (int m = 0; m < MV; ++m) {
        if (m < nv) {
            float * dst = sm + (warp * kRaggedMmaHeads + t4) * W + 16 * m + g;
            dst[0] = st.o[m][0] + st.o[m][1];
            dst[8] = st.o[m][2] + st.o[m][3];
        }
    }
    finish_mma_block<kRaggedMmaHeads, W>(a, t, sm, st.m, st.l);
}

}  // namespace kvcomp::cuda
