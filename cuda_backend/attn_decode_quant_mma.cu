// attn_decode_quant, tensor-core kernel (the default; attn_decode_quant.cu picks it and keeps the
// SIMT kernel as fallback): the codes themselves are mma.sync m16n8k16 operands, so a token costs
// about one ALU operation per code instead of a dequantize-and-FMA per code and query head.
//
// Kernel attn_decode_quant_mma_kernel<D, CS, MPG>: one block of 128 threads (4 warps) per (request, KV
//   head, chunk of 4 query heads, split); D = head_dim (a multiple of 16 from 32 to 128: the models'
//   64 and 128, and the reduced caches of kivi / zipcache with lowrank=, rank=R), CS = channel scales
//   present, MPG = m-tiles per value group.
//   Items as in attn_decode_quant.cuh. Each warp streams its own items (warp w takes the split's
//   items w, w + 4, ...): it copies them (sm_90: one bulk copy per block on an mbarrier; else and for
//   window chunks cp.async) into a ring of its own (2 stages, 3 for
//   items of <= 4 KiB) and computes every 16-token tile of an item itself, so the item loop has
//   no block barrier, only __syncwarp. (The first version shared each item among the 4 warps with
//   two __syncthreads per item: 2 tiles per warp per ~10 KiB item left it latency-bound at 0.2
//   of the copy bandwidth on an H100.) The per-item q' fragments are the warp's too.
//
// Algebra. With F = 2^b + code (exact in f16: exponent b, the code in the top b mantissa bits, so
// a code becomes an f16 operand with one rotate and one and-or), a dequantized key is
//   k_c = kmin_c + kstep_c code_c = (kmin_c - 2^b kstep_c) + kstep_c F_c,
// so q.k = sum_c (q_c kstep_c) F_c + bias, bias = sum_c q_c (kmin_c - 2^b kstep_c) per segment.
// Values (per token t and channel group): v = (d_t + vstep_t F) vscale_c with d_t = vmin_t -
// 2^b vstep_t, so o_c = vscale_c (sum_t (p_t vstep_t) F_tc + sum_t p_t d_t).
// The constant 2^b inside F is of the size of the code part, so fp32 accumulation loses nothing
// to cancellation (unlike 1024 + code).
//
// Scores, per tile of 16 tokens: S^T = K Q'^T with M = 16 tokens (A = key codes, row-major), N = 8
//   columns = (hi, lo) f16 parts of q' = q kstep for 4 heads (column 2h = hi, 2h+1 = lo: q' is
//   split into two f16 so that scores keep ~fp32 accuracy at no extra mma), K = channels.
//   Lane (g = lane/4, t = lane%4) then holds c0 + c1 = score of head t for token g and c2 + c3 for
//   token g + 8: the online softmax runs per lane, the max over the 8 lanes of a head in 3 shuffles.
//   Channel order within a k16 step: B register b0 of lane t holds the channel pair number t, b1
//   pair t + 4, where pair p = (word w, index j) = (p / P, p % P), P = 16 / b pairs per 32-bit code
//   word, is channels (j, j + P) of word w: 16 bits apart, so one rotate of the word puts both
//   codes into the top mantissa bits of the two halves (setup_q_warp writes q' in this order).
// Values: O^T = V^T P'^T with M = 16 channels (A = value codes: row r < 8 is channel 16m + 2r,
//   row r + 8 is 16m + 2r + 1, i.e. lane g's two rows are one code pair), N = 8 columns = (hi, lo)
//   of p' = p vstep for 4 heads, K = 16 tokens. The A registers pair two tokens of one channel,
//   so the lane's code bytes of two token rows are merged with one byte_perm. The P' operand is
//   the score accumulator layout transposed: lane (g, t) packs (hi, lo) of head t, token g into
//   one register of an 8x8 matrix (rows tokens, columns head columns); movmatrix.trans gives the
//   B fragment (tokens 2t, 2t + 1 of column g). An m-tile lies in one value group (v_group % 16
//   == 0), whose p' it uses; sum_t p_t d_t is kept per lane (fp32) and added at the end.
//   The output accumulator is 32 registers for D = 128; lane (g, t) holds head t, channels
//   16m + 2g (c0 + c1) and 16m + 2g + 1 (c2 + c3).
// Channel scales (CS): vscale differs per block, so a block's contribution is accumulated apart
//   and added, times vscale, at the end of the item (with the running max it was computed with).
// Window chunks: f16 K/V rows used directly (same operand shapes; q split hi/lo in natural channel
//   order, in the block's window fragments, written once before the item loop).
// Per item the warp computes q' (hi, lo) of the item's segments into its own fragment slots (q'
// depends on the block's kstep; setup_q_warp), then __syncwarp; it loads its B fragments once per
// segment with 128-bit loads. A segment's tiles are software-pipelined (quant_segment), and a
// tile's tokens sit in permuted rows (tile_row) to halve shared-memory bank conflicts.
// Precision: scores as with fp32 q' (hi + lo), p' as hi + lo f16; error well below the 1e-6 NMSE
// budget of tests/backend_ops_quant_cases.cpp.
#include <climits>
#include <cstdint>
#include <type_traits>

#include "attn_decode_quant.cuh"
#include "decode_common.cuh"
#include "decode_mma.cuh"
#include "dependent_launch.cuh"
#include "head_dims.cuh"

namespace kvcomp::cuda::dq {

namespace {

constexpr int QH = kMmaHeads;  // query heads per block: the 8 mma columns are their (hi, lo)
static_assert(QH == 4, "the column layout (2 per head, 8 per mma) assumes 4 heads");

// A q-fragment slot holds the B registers of k16 steps in pairs (one uint4 per lane and pair), so
// its size is D rounded up to 32 channels; at D = 48, 80 and 112 the last pair's second step is
// never written nor used.
template <int D>
constexpr int kFragPairs = (D + 31) / 32;
template <int D>
constexpr int kSlotChannels = 32 * kFragPairs<D>;

// Shared memory: q [QH][D] f32 | the window's q fragments [D/32 rounded up][32 lanes] uint4 | q in
// channel-pair order for each segment's bit width [2][QH][D/2] float2 (q_pairs) | the warps' ring
// mbarriers [kWarps][4] u64 (sm_90 bulk copies) | per warp: its q fragments [2 segments][D/32
// rounded up][32 lanes] uint4, then its ring of n_stages stages. The warps' area is reused by the
// final warp merge.
constexpr int kBarsPerWarp = 4;  // >= the most ring stages (mma_stages)
template <int D>
__host__ __device__ constexpr size_t fixed_smem() {
    return size_t(QH) * D * 4 + size_t(kSlotChannels<D>) * 16 + size_t(2) * QH * D * 4 +
           size_t(kWarps) * kBarsPerWarp * 8;
}
template <int D>
__host__ __device__ constexpr size_t warp_smem(int stage_bytes, int n_stages) {
    return size_t(2) * kSlotChannels<D> * 16 + size_t(stage_bytes) * size_t(n_stages);
}
template <int D>
__host__ __device__ constexpr size_t merge_smem() {
    return (size_t(kWarps) * QH * D + 2 * size_t(kWarps) * QH) * sizeof(float);
}

// Half index, within a q-fragment slot, of channel c in column col in the window's natural order:
// b0 = channels 2t, 2t + 1 and b1 = 2t + 8, 2t + 9 of the k16 step. (The segments' code order is
// written pairwise by setup_q_warp: pair_channel, pair_word.)
__device__ __forceinline__ int kfrag_pos(int c, int col) {
    const int kk = c >> 4, ci = c & 15;
    const int reg = ci >> 3, t = (ci & 7) >> 1, half = ci & 1;
    return ((kk >> 1) * 32 + 4 * col + t) * 8 + (kk & 1) * 4 + reg * 2 + half;
}

// The window's q fragments (q itself, natural channel order) into `qf`, by the whole block.
template <int D>
__device__ __forceinline__ void setup_window_q(const float * q_s, __half * qf) {
    for (int idx = threadIdx.x; idx < QH * D; idx += kThreads) {
        const int h = idx / D, c = idx % D;
        const float qv = q_s[idx];
        const __half hi = __float2half_rn(qv);
        qf[kfrag_pos(c, 2 * h)] = hi;
        qf[kfrag_pos(c, 2 * h + 1)] = __float2half_rn(qv - __half2float(hi));
    }
}

// Channel pairs. Pair p (0..7) of a k16 step is the two channels one B register of lane p % 4
// holds (register p / 4): for codes, channels (j, j + P) of the step's code word w = p / P, j = p % P
// (see the banner); pair pi = 8 kk + p of the head is pair p of step kk. Its first channel:
template <int BITS>
__device__ __forceinline__ int pair_channel(int pi) {
    constexpr int P = 16 / BITS, CPW = 32 / BITS;
    const int p = pi & 7;
    return 16 * (pi >> 3) + (p / P) * CPW + p % P;
}
// 32-bit word, within a q-fragment slot, of pair pi in column 0 (column col adds 16 * col): the
// word of kfrag_pos's halves 0 and 1.
__device__ __forceinline__ int pair_word(int pi) {
    const int kk = pi >> 3, p = pi & 7;
    return ((kk >> 1) * 32 + (p & 3)) * 4 + (kk & 1) * 2 + (p >> 2);
}

// q of each segment's bit width in channel-pair order, (q[c0], q[c0 + P]) per pair, by the whole
// block: qp[s][h][pi] (see setup_q_warp).
template <int D, int BITS>
__device__ __forceinline__ void setup_q_pairs(const float * q_s, float2 * qp) {
    for (int idx = threadIdx.x; idx < QH * D / 2; idx += kThreads) {
        const int h = idx / (D / 2), c0 = pair_channel<BITS>(idx % (D / 2));
        qp[idx] = make_float2(q_s[h * D + c0], q_s[h * D + c0 + 16 / BITS]);
    }
}

// The four heads' partial sums of this lane into the total of head lane % 4 over the warp:
// halving exchanges over lane bits 0 and 1 (each lane keeps the heads that match its bits), then
// plain sums over bits 2..4; 6 shuffles instead of 4 x 5.
__device__ __forceinline__ float head_totals(const float (&v)[QH], int lane) {
    const bool b0 = lane & 1, b1 = lane & 2;
    // bit 0: keep heads b0 and 2 + b0
    const float s0 = __shfl_xor_sync(full_mask, b0 ? v[0] : v[1], 1);
    const float s1 = __shfl_xor_sync(full_mask, b0 ? v[2] : v[3], 1);
    const float k0 = (b0 ? v[1] : v[0]) + s0, k1 = (b0 ? v[3] : v[2]) + s1;
    // bit 1: keep head b0 + 2 b1
    float k = (b1 ? k1 : k0) + __shfl_xor_sync(full_mask, b1 ? k0 : k1, 2);
    k += __shfl_xor_sync(full_mask, k, 4);
    k += __shfl_xor_sync(full_mask, k, 8);
    return k + __shfl_xor_sync(full_mask, k, 16);
}

// One warp: q' = q * kstep of a segment as hi/lo f16 in fragment order into the warp's slot `qf`
// (lane l takes the channel pairs l, l + 32, ... below D / 2 of every head, so each hi or lo pair
// is one packed conversion and one 32-bit store; qp = the segment width's q pairs); returns the
// segment's bias sum_c q_c (kmin_c - 2^BITS kstep_c) of head lane % 4.
template <int D, int BITS>
__device__ __forceinline__ float setup_q_warp(const float2 * qp, const __half * kmin, const __half * kstep,
                                              uint32_t * qf, int lane) {
    constexpr int P = 16 / BITS;
    float bp[QH];
#pragma unroll
    for (int h = 0; h < QH; ++h) bp[h] = 0.0f;
#pragma unroll
    for (int i = 0; i < (D / 2 + 31) / 32; ++i) {
        const int pi = i * 32 + lane, c0 = pair_channel<BITS>(pi), w = pair_word(pi);
        if (D % 64 != 0 && pi >= D / 2) break;  // the last round of a width that is no multiple of 64
        const float ks0 = __half2float(kstep[c0]), ks1 = __half2float(kstep[c0 + P]);
        const float d0 = __half2float(kmin[c0]) - float(1 << BITS) * ks0;
        const float d1 = __half2float(kmin[c0 + P]) - float(1 << BITS) * ks1;
#pragma unroll
        for (int h = 0; h < QH; ++h) {
            const float2 q = qp[h * (D / 2) + pi];
            const float a0 = q.x * ks0, a1 = q.y * ks1;
            const __half2 hi = __floats2half2_rn(a0, a1);
            const float2 hf = __half22float2(hi);
            const __half2 lo = __floats2half2_rn(a0 - hf.x, a1 - hf.y);
            qf[w + 32 * h] = *reinterpret_cast<const uint32_t *>(&hi);
            qf[w + 32 * h + 16] = *reinterpret_cast<const uint32_t *>(&lo);
            bp[h] = fmaf(q.x, d0, fmaf(q.y, d1, bp[h]));
        }
    }
    return head_totals(bp, lane);
}

// Per-warp running state; lane (g, t) keeps head t (see the banner).
template <int D, bool CS>
struct wstate {
    static constexpr int MT = D / 16;
    float o[MT][4];            // output accumulator (rows: channels 16m + 2g, + 1; columns hi, lo)
    float ob[CS ? MT : 1][4];  // CS: the current item's part, scaled by vscale at its end
    float vb[MT];              // sum p_t d_t of the group starting at m-tile m (this lane's tokens)
    float m = -INFINITY, l = 0.0f, m_item = -INFINITY;

    __device__ __forceinline__ auto acc() -> float (&)[MT][4] {
        if constexpr (CS)
            return ob;
        else
            return o;
    }
};

// Online softmax for this lane's two scores (log2 units, -inf when masked); returns their weights.
template <int D, bool CS>
__device__ __forceinline__ void softmax2(wstate<D, CS> & st, float s0, float s1, float & p0, float & p1) {
    const float alpha = softmax_pair(st.m, st.l, s0, s1, p0, p1);
    // The max settles quickly; skip the rescale for the whole warp unless some head's max grew.
    if (__any_sync(full_mask, alpha != 1.0f)) {
        auto & acc = st.acc();
#pragma unroll
        for (int m = 0; m < wstate<D, CS>::MT; ++m) {
#pragma unroll
            for (int k = 0; k < 4; ++k) acc[m][k] *= alpha;
            st.vb[m] *= alpha;
        }
    }
}

// The B fragments of a q-fragment slot: k16 steps 2 kp and 2 kp + 1 from one 128-bit load (at D =
// 48, 80, 112 the last load's second step is unused).
template <int D>
using qfrag_regs = uint32_t[2 * kFragPairs<D>][2];
template <int D>
__device__ __forceinline__ void load_qfrag(const uint4 * qf, qfrag_regs<D> & bq, int lane) {
#pragma unroll
    for (int kp = 0; kp < kFragPairs<D>; ++kp) {
        const uint4 v = qf[kp * 32 + lane];
        bq[2 * kp][0] = v.x, bq[2 * kp][1] = v.y, bq[2 * kp + 1][0] = v.z, bq[2 * kp + 1][1] = v.w;
    }
}

struct seg_view {
    const uint8_t * seg;  // segment start in the stage
    int vstep, kcodes, vcodes;  // offsets from seg
    int n;                      // tokens stored
};

// Row of a segment tile's token j (j < 16): tokens 2i and 2i + 1 trade rows when i is odd. Softmax
// does not care about token order, and scores and values use the same rows, so any permutation is
// exact; this one spreads a 4-bit value fragment's four rows (tokens 2t, 2t+1, 2t+8, 2t+9 of the
// four t, 64-byte rows) over two bank groups instead of one: 2-way shared-memory conflicts, not 4.
__device__ __forceinline__ int tile_row(int j) {
    return j ^ ((j >> 1) & 1);
}

// The RB / 4 words of a code row in shared memory, in the widest loads the row's alignment allows:
// a segment's rows start at multiples of RB = D * bits / 8 bytes from a 16-byte aligned array, so
// 16 bytes at a time where RB is a multiple of 16 (D a multiple of 64 at 2 bits, of 32 at 4), else
// 8 or 4.
template <int RB>
__device__ __forceinline__ void load_row(const uint8_t * row, uint32_t (&w)[RB / 4]) {
    if constexpr (RB % 16 == 0) {
#pragma unroll
        for (int i = 0; i < RB / 16; ++i) {
            const uint4 x = reinterpret_cast<const uint4 *>(row)[i];
            w[4 * i] = x.x, w[4 * i + 1] = x.y, w[4 * i + 2] = x.z, w[4 * i + 3] = x.w;
        }
    } else if constexpr (RB % 8 == 0) {
#pragma unroll
        for (int i = 0; i < RB / 8; ++i) {
            const uint2 x = reinterpret_cast<const uint2 *>(row)[i];
            w[2 * i] = x.x, w[2 * i + 1] = x.y;
        }
    } else {
#pragma unroll
        for (int i = 0; i < RB / 4; ++i) w[i] = reinterpret_cast<const uint32_t *>(row)[i];
    }
}

// Scores of the 16-token tile at tok0 of a quantized segment: this lane's head t for tile tokens g
// (.x) and g + 8 (.y), i.e. rows tok0 + tile_row(g), + tile_row(g + 8); log2 units, -inf for rows
// past the segment. Those are read clamped to its last row (always in the stage), so a tile past the
// end is harmless.
template <int D, int BITS>
__device__ __forceinline__ float2 quant_scores(const seg_view & sv, int tok0, const qfrag_regs<D> & bq,
                                               float bias, uint32_t ex, int lane) {
    constexpr int MT = D / 16, RB = D * BITS / 8, P = 16 / BITS;
    const int g = lane >> 2, t = lane & 3;
    // Pair t: word w0, index j0; pair t + 4: word w1, index j1 (of each k16 step).
    const int w0 = P >= 4 ? 0 : t / P, j0 = t % P;
    const int w1 = P >= 8 ? 0 : (t + 4) / P, j1 = (t + 4) % P;
    const int rot0 = (10 - BITS - j0 * BITS) & 31, rot1 = (10 - BITS - j1 * BITS) & 31;
    const int ta = tok0 + tile_row(g), tb = tok0 + tile_row(g + 8);
    const int ra = min(ta, sv.n - 1), rb = min(tb, sv.n - 1);  // masked: a valid row
    const uint8_t * ka = sv.seg + sv.kcodes + ra * RB;
    const uint8_t * kb = sv.seg + sv.kcodes + rb * RB;
    // At 2 and 4 bits the pairs t and t + 4 of all k16 steps cover every word of the two rows:
    // read them whole (load_row). At 8 bits the lane needs half of the words: read those one by one.
    constexpr int WPK = BITS / 2;  // code words per k16 step
    constexpr int RW = BITS <= 4 ? RB / 4 : 1;
    uint32_t kwa[RW], kwb[RW];
    if constexpr (BITS <= 4) {
        load_row<RB>(ka, kwa);
        load_row<RB>(kb, kwb);
    }
    auto kword = [&](const uint8_t * row, const uint32_t (&w)[RW], int i) {
        if constexpr (BITS <= 4)
            return w[i];
        else
            return reinterpret_cast<const uint32_t *>(row)[i];
    };
    // Two accumulators (even and odd k16 steps) halve the chain of dependent mma.
    float s[4] = {0.0f, 0.0f, 0.0f, 0.0f}, s2[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int kk = 0; kk < MT; ++kk) {
        const uint32_t af[4] = {code_pair<BITS>(kword(ka, kwa, kk * WPK + w0), rot0, ex),
                                code_pair<BITS>(kword(kb, kwb, kk * WPK + w0), rot0, ex),
                                code_pair<BITS>(kword(ka, kwa, kk * WPK + w1), rot1, ex),
                                code_pair<BITS>(kword(kb, kwb, kk * WPK + w1), rot1, ex)};
        mma_16816(kk & 1 ? s2 : s, af, bq[kk][0], bq[kk][1]);
    }
    return make_float2(ta < sv.n ? (s[0] + s2[0]) + (s[1] + s2[1]) + bias : -INFINITY,
                       tb < sv.n ? (s[2] + s2[2]) + (s[3] + s2[3]) + bias : -INFINITY);
}

// The G f16 value parameters of one token row (G groups, G * 2 bytes, aligned to that) as floats,
// in one shared-memory load where G is a power of two (else, at D = 48 ... 112, one per group).
template <int G>
__device__ __forceinline__ void load_group_params(const __half * row, float (&out)[G]) {
    if constexpr (G == 1) {
        out[0] = __half2float(row[0]);
    } else if constexpr (G != 2 && G != 4 && G != 8) {
#pragma unroll
        for (int i = 0; i < G; ++i) out[i] = __half2float(row[i]);
    } else {
        using word = std::conditional_t<G == 2, uint32_t, std::conditional_t<G == 4, uint2, uint4>>;
        const word w = *reinterpret_cast<const word *>(row);
        const __half2 * h = reinterpret_cast<const __half2 *>(&w);
#pragma unroll
        for (int i = 0; i < G / 2; ++i) {
            const float2 f = __half22float2(h[i]);
            out[2 * i] = f.x, out[2 * i + 1] = f.y;
        }
    }
}

// Values of the tile at tok0 weighted by this lane's softmax weights p0 (tile token g) and p1
// (tile token g + 8) of head t; MPG = m-tiles per value group (v_group / 16).
template <int D, int BITS, bool CS, int MPG>
__device__ __forceinline__ void quant_values(wstate<D, CS> & st, const seg_view & sv, const args & a, int tok0,
                                             float p0, float p1, uint32_t ex, int lane) {
    constexpr int MT = D / 16, RB = D * BITS / 8;
    const int g = lane >> 2, t = lane & 3;
    const int ra = min(tok0 + tile_row(g), sv.n - 1), rb = min(tok0 + tile_row(g + 8), sv.n - 1);
    // Lane g's code pair of m-tile m is at bit 2g*BITS of the m-tile's BITS/2 words.
    const int wv = (g * BITS) / 16;                         // word within the m-tile
    const int bb = ((2 * g * BITS) % 32) / 8;               // its first byte
    const int o = (2 * g * BITS) % 8;                       // bit offset within that byte
    // Token a's bytes bb, bb+1 to bytes 0-1, token b's to 2-3 (selector nibbles < 8: no sign mode).
    const int sel = bb | ((bb + 1) & 7) << 4 | (bb + 4) << 8 | ((bb + 5) & 7) << 12;
    const int rot_a = (10 - BITS - o) & 31, rot_b = (10 - 2 * BITS - o) & 31;
    const uint32_t * vr[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        const int tok = tok0 + tile_row(2 * t + (k & 1) + (k >> 1) * 8);  // tile tokens 2t, 2t+1, 2t+8, 2t+9
        vr[k] = reinterpret_cast<const uint32_t *>(sv.seg + sv.vcodes + min(tok, sv.n - 1) * RB);
    }
    // At 2 bits the lane needs every word of its four rows (wv = 0): read them whole.
    constexpr int VW = BITS == 2 ? RB / 4 : 1;
    uint32_t vw[4][VW];
    if constexpr (BITS == 2) {
#pragma unroll
        for (int k = 0; k < 4; ++k) load_row<RB>(reinterpret_cast<const uint8_t *>(vr[k]), vw[k]);
    }
    auto vword = [&](int k, int i) {
        if constexpr (BITS == 2)
            return vw[k][i];
        else
            return vr[k][i];
    };
    constexpr int G = MT / MPG;  // value groups per token row
    const __half * vstep = reinterpret_cast<const __half *>(sv.seg + sv.vstep);
    const __half * vmin = reinterpret_cast<const __half *>(sv.seg + a.seg_vmin);
    float vs_a[G], vs_b[G], vm_a[G], vm_b[G];  // tokens ra and rb: each row's parameters in one load
    load_group_params<G>(vstep + ra * G, vs_a);
    load_group_params<G>(vstep + rb * G, vs_b);
    load_group_params<G>(vmin + ra * G, vm_a);
    load_group_params<G>(vmin + rb * G, vm_b);
    auto & acc = st.acc();
    uint32_t b0 = 0, b1 = 0;
#pragma unroll
    for (int m = 0; m < MT; ++m) {
        if (m % MPG == 0) {  // a new value group: its p' operand
            const int gi = m / MPG;
            const float d0 = vm_a[gi] - float(1 << BITS) * vs_a[gi];
            const float d1 = vm_b[gi] - float(1 << BITS) * vs_b[gi];
            p_frag(p0 * vs_a[gi], p1 * vs_b[gi], b0, b1);
            st.vb[m] = fmaf(p0, d0, fmaf(p1, d1, st.vb[m]));
        }
        const int wi = m * (BITS / 2) + wv;
        const uint32_t x01 = __byte_perm(vword(0, wi), vword(1, wi), sel);
        const uint32_t x23 = __byte_perm(vword(2, wi), vword(3, wi), sel);
        const uint32_t af[4] = {code_pair<BITS>(x01, rot_a, ex), code_pair<BITS>(x01, rot_b, ex),
                                code_pair<BITS>(x23, rot_a, ex), code_pair<BITS>(x23, rot_b, ex)};
        mma_16816(acc[m], af, b0, b1);
    }
}

// Every tile of a quantized segment (n > 0), software-pipelined: the next tile's scores are
// computed between this tile's softmax and its values, independent work the scheduler can
// interleave (a warp streams alone through its items, so its own ILP hides the mma and shared-
// memory latencies).
template <int D, int BITS, bool CS, int MPG>
__device__ __forceinline__ void quant_segment(wstate<D, CS> & st, const seg_view & sv, const args & a,
                                              const uint4 * qf, float bias, int lane) {
    qfrag_regs<D> bq;
    load_qfrag<D>(qf, bq, lane);
    const uint32_t ex = code_exponents<BITS>();
    float2 s = quant_scores<D, BITS>(sv, 0, bq, bias, ex, lane);
    for (int tok0 = 0; tok0 < sv.n; tok0 += 16) {
        float p0, p1;
        softmax2<D, CS>(st, s.x, s.y, p0, p1);
        if (tok0 + 16 < sv.n) s = quant_scores<D, BITS>(sv, tok0 + 16, bq, bias, ex, lane);  // warp-uniform
        quant_values<D, BITS, CS, MPG>(st, sv, a, tok0, p0, p1, ex, lane);
    }
}

// One tile of 16 window tokens [tok0, tok0 + 16) of a chunk staged as K rows then V rows (f16).
template <int D, bool CS>
__device__ __forceinline__ void window_tile(wstate<D, CS> & st, const uint8_t * stage, int win_chunk, int tok0,
                                            int n, const uint4 * qf, int lane) {
    constexpr int MT = D / 16;
    const int g = lane >> 2, t = lane & 3;
    qfrag_regs<D> bq;
    load_qfrag<D>(qf, bq, lane);
    const __half * K = reinterpret_cast<const __half *>(stage);
    const __half * V = K + int64_t(win_chunk) * D;
    const int ra = min(tok0 + g, n - 1), rb = min(tok0 + g + 8, n - 1);
    float s[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int kk = 0; kk < MT; ++kk) {
        const int c = 16 * kk + 2 * t;
        const uint32_t af[4] = {*reinterpret_cast<const uint32_t *>(K + ra * D + c),
                                *reinterpret_cast<const uint32_t *>(K + rb * D + c),
                                *reinterpret_cast<const uint32_t *>(K + ra * D + c + 8),
                                *reinterpret_cast<const uint32_t *>(K + rb * D + c + 8)};
        mma_16816(s, af, bq[kk][0], bq[kk][1]);
    }
    const float s0 = tok0 + g < n ? s[0] + s[1] : -INFINITY;
    const float s1 = tok0 + g + 8 < n ? s[2] + s[3] : -INFINITY;
    float p0, p1;
    softmax2<D, CS>(st, s0, s1, p0, p1);
    uint32_t b0, b1;
    p_frag(p0, p1, b0, b1);
    const __half * vr[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) vr[k] = V + min(tok0 + 2 * t + (k & 1) + (k >> 1) * 8, n - 1) * D + 2 * g;
    auto & acc = st.acc();
#pragma unroll
    for (int m = 0; m < MT; ++m) {
        // Channels 16m + 2g, + 1 of two tokens; A pairs the tokens per channel.
        const uint32_t x0 = *reinterpret_cast<const uint32_t *>(vr[0] + 16 * m);
        const uint32_t x1 = *reinterpret_cast<const uint32_t *>(vr[1] + 16 * m);
        const uint32_t x2 = *reinterpret_cast<const uint32_t *>(vr[2] + 16 * m);
        const uint32_t x3 = *reinterpret_cast<const uint32_t *>(vr[3] + 16 * m);
        const uint32_t af[4] = {__byte_perm(x0, x1, 0x5410), __byte_perm(x0, x1, 0x7632), __byte_perm(x2, x3, 0x5410),
                                __byte_perm(x2, x3, 0x7632)};
        mma_16816(acc[m], af, b0, b1);
    }
}

// CS: start / finish an item's separate accumulation (see the banner). vscale null: none (window).
template <int D, bool CS>
__device__ __forceinline__ void item_begin(wstate<D, CS> & st) {
    st.m_item = st.m;
#pragma unroll
    for (int m = 0; m < wstate<D, CS>::MT; ++m) {
#pragma unroll
        for (int k = 0; k < 4; ++k) st.ob[m][k] = 0.0f;
        st.vb[m] = 0.0f;
    }
}
template <int D, bool CS, int MPG>
__device__ __forceinline__ void item_end(wstate<D, CS> & st, const __half * vscale, int lane) {
    const int g = lane >> 2;
    const float m_use = st.m == -INFINITY ? 0.0f : st.m;
    const float fa = exp2f(st.m_item - m_use);  // the running max may have grown during the item
    float vbg = 0.0f;
#pragma unroll
    for (int m = 0; m < wstate<D, CS>::MT; ++m) {
        float vs0 = 1.0f, vs1 = 1.0f;
        if (vscale) {
            if (m % MPG == 0) vbg = head_sum(st.vb[m]);
            const float2 v = __half22float2(*reinterpret_cast<const __half2 *>(vscale + 16 * m + 2 * g));
            vs0 = v.x, vs1 = v.y;
        }
        st.o[m][0] = fmaf(st.o[m][0], fa, vs0 * (st.ob[m][0] + vbg));
        st.o[m][1] = fmaf(st.o[m][1], fa, vs0 * st.ob[m][1]);
        st.o[m][2] = fmaf(st.o[m][2], fa, vs1 * (st.ob[m][2] + vbg));
        st.o[m][3] = fmaf(st.o[m][3], fa, vs1 * st.ob[m][3]);
    }
}

// Blocks per SM the registers must allow: ZipCache's per-warp rings (~105 KiB a block at hd 128)
// fit 2 blocks per SM, KIVI's (~58 KiB) 3. MPG = m-tiles per value group (v_group / 16: 1, 2, 4, 8),
// a template parameter so a token row's value parameters are one load and the group loop unrolls.
template <int D, bool CS, int MPG>
__global__ void __launch_bounds__(kThreads, CS ? 2 : 3) attn_decode_quant_mma_kernel(const args a) {
    constexpr int MT = D / 16;
    extern __shared__ uint4 smem[];
    float * q_s = reinterpret_cast<float *>(smem);
    uint4 * qf_win = smem + QH * D / 4;
    float2 * q_pairs = reinterpret_cast<float2 *>(qf_win + kSlotChannels<D>);  // [2 segments][QH][D / 2]
    uint8_t * warps_area = reinterpret_cast<uint8_t *>(smem) + fixed_smem<D>();

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, t = lane & 3, g = lane >> 2;
    uint8_t * my_area = warps_area + size_t(warp) * warp_smem<D>(a.stage_bytes, a.n_stages);
    uint4 * qf_seg = reinterpret_cast<uint4 *>(my_area);  // [2 segments][kSlotChannels<D>] uint4
    uint8_t * ring = my_area + size_t(2) * kSlotChannels<D> * 16;
#ifdef KVCOMP_BULK_COPY
    uint64_t * bars = reinterpret_cast<uint64_t *>(q_pairs + QH * D);  // [kWarps][kBarsPerWarp]
    const unsigned my_bars = smem_addr(bars + warp * kBarsPerWarp);   // stage s: my_bars + 8 s
#endif

    int64_t bid = blockIdx.x;
    const int split = int(bid % a.n_splits);
    bid /= a.n_splits;
    const int chunk = int(bid % a.head_chunks);
    bid /= a.head_chunks;
    const int kvh = int(bid % a.n_kv_heads);
    const int b = int(bid / a.n_kv_heads);
    const int h0 = kvh * a.group + chunk * QH;
    const int nh = min(QH, a.group - chunk * QH);
    const items its(a, b, split);

    for (int idx = tid; idx < QH * D; idx += kThreads) {
        const int i = idx / D;  // padding heads past the group are never read (may lie past q)
        q_s[idx] = i < nh ? a.q[(int64_t(b) * a.n_q_heads + h0 + i) * D + idx % D] * a.qscale : 0.0f;
    }
    __syncthreads();
    setup_window_q<D>(q_s, reinterpret_cast<__half *>(qf_win));
#pragma unroll
    for (int s = 0; s < 2; ++s) {
        float2 * qp = q_pairs + s * (QH * D / 2);
        switch (a.bits[s]) {
            case 2: setup_q_pairs<D, 2>(q_s, qp); break;
            case 4: setup_q_pairs<D, 4>(q_s, qp); break;
            default: setup_q_pairs<D, 8>(q_s, qp); break;
        }
    }
#ifdef KVCOMP_BULK_COPY
    if (lane == 0)
        for (int s = 0; s < a.n_stages; ++s) mbar_init(my_bars + 8 * s, 1);
    mbar_fence_init();
#endif
    __syncthreads();  // the window fragments, q pairs and mbarriers are visible to every warp; the
                      // last block-wide barrier before the merge

    // This warp's items: the split's items warp + k * kWarps, k < n_mine; item k in stage k % ns,
    // tracked as the next stage to fill (w_stage) and to read (r_stage) without a division.
    // On sm_90 a block item is two bulk copies (header, head region) issued by lane 0 and awaited
    // on the stage's mbarrier (phase bit per stage in `phases`): per item a handful of instructions
    // instead of a cp.async with its address arithmetic per 16 bytes and lane (13 % of the kernel's
    // instructions at KIVI-2 16 x 32K on an H100). Window items (strided rows, zero-filled past the
    // window) keep the per-lane cp.async, whose groups are committed for every item alike.
    const int ns = a.n_stages;
    const int n_mine = its.n_it > warp ? (its.n_it - warp + kWarps - 1) / kWarps : 0;
    auto rel = [&](int k) { return warp + k * kWarps; };
    int w_stage = 0, r_stage = 0;
    auto next_stage = [ns](int s) { return s + 1 == ns ? 0 : s + 1; };
    auto issue = [&](int k, int slot_nr) {  // one cp.async group per call, empty past the items
        if (k < n_mine) {
            uint8_t * dst = ring + w_stage * a.stage_bytes;
            const int item = its.it_begin + rel(k);
#ifdef KVCOMP_BULK_COPY
            if (item < its.n_blk) {
                if (lane == 0) {
                    const unsigned bar = my_bars + 8 * w_stage, d = smem_addr(dst);
                    const uint8_t * src = a.pool + int64_t(slot_nr) * a.slot_bytes;
                    mbar_arrive_expect(bar, unsigned(16 + a.head_bytes));
                    bulk_copy(d, src, 16, bar);
                    bulk_copy(d + 16, src + 16 + int64_t(kvh) * a.head_bytes, unsigned(a.head_bytes), bar);
                }
            } else
#endif
                its.template copy_item<D>(a, kvh, dst, item, slot_nr, lane, 32);
        }
        cp_async_commit();
        w_stage = next_stage(w_stage);
    };
#ifdef KVCOMP_BULK_COPY
    unsigned phases = 0;  // bit s: parity of stage s's next mbarrier phase
#endif
    int next_slot = its.slot(a, rel(0));
    for (int k = 0; k < ns - 1; ++k) {
        issue(k, next_slot);
        next_slot = its.slot(a, rel(k + 1));
    }

    wstate<D, CS> st;
#pragma unroll
    for (int m = 0; m < MT; ++m) {
#pragma unroll
        for (int k = 0; k < 4; ++k) st.o[m][k] = 0.0f;
        st.vb[m] = 0.0f;
    }

    for (int k = 0; k < n_mine; ++k) {
        const int item = its.it_begin + rel(k);
        if (ns == 3)
            cp_async_wait<1>();
        else
            cp_async_wait<0>();
#ifdef KVCOMP_BULK_COPY
        if (item < its.n_blk) {
            mbar_wait(my_bars + 8 * r_stage, (phases >> r_stage) & 1u);
            phases ^= 1u << r_stage;
        }
#endif
        __syncwarp();  // item k has landed for every lane; every lane is done with item k-1
        issue(k + ns - 1, next_slot);
        next_slot = its.slot(a, rel(k + ns));

        const uint8_t * stage = ring + r_stage * a.stage_bytes;
        r_stage = next_stage(r_stage);
        if constexpr (CS) item_begin(st);
        if (item < its.n_blk) {
            const int32_t * hdr = reinterpret_cast<const int32_t *>(stage);
            const int n_hi = min(max(hdr[0], 0), a.cap[0]), n_lo = min(max(hdr[1], 0), a.cap[1]);
            const uint8_t * head = stage + 16;
            float bias[2] = {0.0f, 0.0f};
#pragma unroll
            for (int s = 0; s < 2; ++s) {
                if ((s ? n_lo : n_hi) == 0) continue;  // warp-uniform
                const uint8_t * seg = head + a.seg_off[s];
                const __half * kmin = reinterpret_cast<const __half *>(seg);
                const __half * kstep = reinterpret_cast<const __half *>(seg + a.seg_kstep);
                uint32_t * dst = reinterpret_cast<uint32_t *>(qf_seg + s * kSlotChannels<D>);
                const float2 * qp = q_pairs + s * (QH * D / 2);
                switch (a.bits[s]) {
                    case 2: bias[s] = setup_q_warp<D, 2>(qp, kmin, kstep, dst, lane); break;
                    case 4: bias[s] = setup_q_warp<D, 4>(qp, kmin, kstep, dst, lane); break;
                    default: bias[s] = setup_q_warp<D, 8>(qp, kmin, kstep, dst, lane); break;
                }
            }
            __syncwarp();  // the fragments are visible to the whole warp
#pragma unroll
            for (int s = 0; s < 2; ++s) {
                const int n = s ? n_lo : n_hi;
                if (n == 0) continue;
                const seg_view sv{head + a.seg_off[s], a.seg_vstep[s], a.seg_kcodes[s], a.seg_vcodes[s], n};
                const uint4 * q = qf_seg + s * kSlotChannels<D>;
                switch (a.bits[s]) {
                    case 2: quant_segment<D, 2, CS, MPG>(st, sv, a, q, bias[s], lane); break;
                    case 4: quant_segment<D, 4, CS, MPG>(st, sv, a, q, bias[s], lane); break;
                    default: quant_segment<D, 8, CS, MPG>(st, sv, a, q, bias[s], lane); break;
                }
            }
            if constexpr (CS) item_end<D, CS, MPG>(st, reinterpret_cast<const __half *>(head), lane);
        } else {
            const int n_w = its.window_tokens(a, item);
            for (int tok0 = 0; tok0 < n_w; tok0 += 16) window_tile<D, CS>(st, stage, a.win_chunk, tok0, n_w, qf_win, lane);
            if constexpr (CS) item_end<D, CS, MPG>(st, nullptr, lane);
        }
    }
    // Groups still outstanding are empty; wait anyway so no copy lands in the area reused below.
    cp_async_wait<0>();
    allow_consumer_launch();  // the merge may now be launched (dependent_launch.cuh)

    if constexpr (!CS) {  // the values' group offsets, summed over the head's lanes
        float vbg = 0.0f;
#pragma unroll
        for (int m = 0; m < MT; ++m) {
            if (m % MPG == 0) vbg = head_sum(st.vb[m]);
            st.o[m][0] += vbg;
            st.o[m][2] += vbg;
        }
    }
    st.l = head_sum(st.l);
    __syncthreads();  // every warp is done with its area
    float * sm_o = reinterpret_cast<float *>(warps_area);  // [kWarps][QH][D]
    float * sm_m = sm_o + kWarps * QH * D;                 // [kWarps][QH]
    float * sm_l = sm_m + kWarps * QH;                     // [kWarps][QH]
#pragma unroll
    for (int m = 0; m < MT; ++m) {
        float2 v = make_float2(st.o[m][0] + st.o[m][1], st.o[m][2] + st.o[m][3]);
        *reinterpret_cast<float2 *>(sm_o + (warp * QH + t) * D + 16 * m + 2 * g) = v;
    }
    if (g == 0) {
        sm_m[warp * QH + t] = st.m;
        sm_l[warp * QH + t] = st.l;
    }
    __syncthreads();
    store_block_result<D, QH, kWarps>(sm_o, sm_m, sm_l, nh, int64_t(b) * a.n_q_heads + h0,
                                      decode_dst{a.out, a.lse, a.part_o, a.part_lse, a.n_splits, split});
}

template <int D, bool CS, int MPG>
const void * kernel_ptr() {
    return reinterpret_cast<const void *>(attn_decode_quant_mma_kernel<D, CS, MPG>);
}
// The m-tiles per value group compiled for width D: 1, 2 and 4 where they divide D / 16 (v_group 16,
// 32, 64: KIVI's groups) and D / 16 itself (one group per token row: ZipCache).
template <int D>
constexpr bool mpg_compiled(int mpg) {
    constexpr int MT = D / 16;
    return mpg == MT || ((mpg == 1 || mpg == 2 || mpg == 4) && MT % mpg == 0);
}
bool mpg_compiled(int head_dim, int mpg) {
    return with_head_dim(head_dim, [&](auto dc) { return mpg_compiled<decltype(dc)::value>(mpg); });
}
template <int D, bool CS>
const void * pick_mpg(int mpg) {
    constexpr int MT = D / 16;
    if (mpg == MT) return kernel_ptr<D, CS, MT>();
    if constexpr (MT % 4 == 0 && MT != 4)
        if (mpg == 4) return kernel_ptr<D, CS, 4>();
    if constexpr (MT % 2 == 0 && MT != 2)
        if (mpg == 2) return kernel_ptr<D, CS, 2>();
    if constexpr (MT != 1)
        if (mpg == 1) return kernel_ptr<D, CS, 1>();
    KVCOMP_THROW(status::internal, "attn_decode_quant: no tensor-core kernel for head_dim ", D, " with ", mpg,
                 " m-tiles per value group");
}
// The kernel for a head_dim (a multiple of 16 from 32 to 128), channel scales or not, and v_group
// (mma_handles: 16 times one of mpg_compiled's counts).
const void * pick(int head_dim, bool cscale, int v_group) {
    const int mpg = v_group / 16;
    return with_head_dim(head_dim, [&](auto dc) {
        constexpr int D = decltype(dc)::value;
        return cscale ? pick_mpg<D, true>(mpg) : pick_mpg<D, false>(mpg);
    });
}


}  // namespace

bool mma_handles(const qblock_layout & q, std::string * why) {
    if (q.head_dim < 32 || q.head_dim > 128 || q.head_dim % 16 != 0) {
        if (why) *why = "head_dim " + std::to_string(q.head_dim) + " (tensor-core kernel: multiples of 16 from 32 to 128)";
        return false;
    }
    if (q.v_group <= 0 || q.v_group % 16 != 0 || q.head_dim % q.v_group != 0 ||
        !mpg_compiled(int(q.head_dim), q.v_group / 16)) {
        if (why)
            *why = "v_group " + std::to_string(q.v_group) + " (tensor-core kernel: 16, 32 or 64 dividing head_dim " +
                   std::to_string(q.head_dim) + ", or head_dim itself)";
        return false;
    }
    const int64_t stage = stage_bytes_for(q);
    const size_t need = stage > (INT_MAX / 4) ? SIZE_MAX : mma_smem_bytes(int(q.head_dim), int(stage), mma_stages(int(stage)));
    if (need > size_t(smem_optin_limit())) {
        if (why)
            *why = "a block's region of one KV head (" + std::to_string(q.head_bytes()) +
                   " bytes) needs " + std::to_string(need) + " bytes of shared memory for the tensor-core kernel's " +
                   "per-warp rings, more than the device allows (" + std::to_string(smem_optin_limit()) + ")";
        return false;
    }
    return true;
}

int mma_stages(int stage_bytes) {  // at most kBarsPerWarp
    return stage_bytes <= 4096 ? 3 : 2;
}

size_t mma_smem_bytes(int head_dim, int stage_bytes, int n_stages) {
    return with_head_dim(head_dim, [&](auto dc) {
        constexpr int D = decltype(dc)::value;
        return fixed_smem<D>() + std::max(kWarps * warp_smem<D>(stage_bytes, n_stages), merge_smem<D>());
    });
}

int mma_blocks_per_sm(const args & a, int head_dim, size_t smem) {
    const void * kernel = pick(head_dim, a.cscale, a.v_group);
    allow_dynamic_smem(kernel, smem);
    int n = 0;
    KVCOMP_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, kThreads, smem));
    return n > 0 ? n : 1;
}

void mma_launch(context & ctx, const args & a, int head_dim, int64_t blocks, size_t smem) {
    const void * kernel = pick(head_dim, a.cscale, a.v_group);
    allow_dynamic_smem(kernel, smem);
    args arg = a;
    void * params[] = {&arg};
    KVCOMP_CUDA_CHECK(cudaLaunchKernel(kernel, dim3(unsigned(blocks)), dim3(kThreads), params, smem, ctx.stream));
}

}  // namespace kvcomp::cuda::dq
