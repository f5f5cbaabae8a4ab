// attn_decode_ragged over 4-bit pages (zack / fdc kv_bits=4; row format in core/ragged_q4.h) on
// tensor cores, for layouts whose widest head is <= 128: the codes themselves are the mma operands,
// as in attn_decode_quant_mma.cu, over the per-warp tile stream of the f16 kernels
// (ragged_stream.cuh, unpadded rows). attn_decode_ragged_q4.cu picks it and keeps its SIMT kernel
// for wider heads and KVCOMP_RAGGED_DECODE=simt.
//
// Why: the SIMT kernel unpacks every code and multiplies it per query head; at 16 x 32K on an H200
// it read its 3.5x smaller pages in 1.25 ms, 2.4x the fp16 ragged decode (0.058 of the copy rate).
//
// Kernel attn_decode_ragged_q4_mma_kernel<W>: one block of 4 warps per (schedule row, chunk of 4
//   query heads), W = 64 or 128. Each warp streams its own tiles and runs their 16-row steps.
// Algebra (F = 16 + code, decode_mma.cuh code_pair; a row's min mn and step st are per token):
//   k = mn + st code = (mn - 16 st) + st F, so q.k = st (sum_c q_c F_c) + (mn - 16 st) sum_c q_c;
//   o_c = sum_t p_t v_tc = sum_t (p_t st_t) F_tc + sum_t p_t (mn_t - 16 st_t).
// Scores: S^T = K Q'^T with M = 16 rows (A = key codes), N = 8 = (hi, lo) of q for 4 heads, K = 16
//   channels. Channel order: for 32-channel group G, lane (g, t) reads code word 4G + t of rows g
//   and g + 8 (channels 8w .. 8w + 7 of word w = 4G + t, channel 8w + j at bits 4j) and makes its
//   4 code pairs j = 0..3 (channels 8w + j and 8w + j + 4, 16 bits apart: one rotate and one
//   LOP3 each); k-step 2G + s takes pairs 2s (a0 / a1: rows g / g + 8) and 2s + 1 (a2 / a3), and
//   the q fragments (load_q_frags) hold q at the same channels. Codes past the width (padding, or
//   the next row's bytes when the words of a group run past the row) meet q = 0 and F is always a
//   finite number in [16, 32), so they add exactly 0.
// Values: O^T = V^T P'^T with M = 16 channels: row r < 8 is channel 16m + 2r, row r + 8 channel
//   16m + 2r + 1, so lane g's two rows are the low and high nibble of code byte 8m + g; K = 16
//   rows (tokens); N = (hi, lo) of p' = p st for 4 heads (p_frag). Lane (g, t) reads the code word
//   holding that byte in rows 2t, 2t + 1, 2t + 8, 2t + 9 and merges the two rows' bytes with one
//   byte_perm per pair of rows. The sum_t p_t (mn_t - 16 st_t) is kept per lane (bias) and added
//   to every channel at the end. Lane (g, t) accumulates head t, channels 16m + 2g (c0 + c1) and
//   16m + 2g + 1 (c2 + c3); channels past the width only reach outputs that are not stored.
// Masking: rows past the task's tokens read the last valid row (clamped addresses) and get score
//   -inf, so weight 0 times finite values; every row a step reads was copied for this tile. Code
//   words read past a row's end stay inside the stage (kSlack bytes after its V rows).
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
// A stage: 7 KiB (48 rows of the widest heads, 128 + 128: 68 + 68 bytes a row), of which the last
// kSlack bytes stay free for code words read past the last V row. Rings of 56 KiB a block let 4
// blocks share an SM's 228 KiB, as registers (<= 128 at 4 blocks, no spills with CUDA 13.0) allow
// (8 KiB stages allowed 3; attn_decode_ragged_mma.cu says why more warps help).
constexpr int kStageBytes = 7 * 1024;
constexpr int kSlack = 16;
constexpr int kWarpRingBytes = kStages * kStageBytes;
constexpr size_t kSmemBytes = size_t(kRaggedWarps) * kWarpRingBytes;  // 56 KiB: 4 blocks per SM
using stream = tile_stream<kStages, kStageBytes, false>;
static_assert(warp_merge_floats<kRaggedWarps, QH, 128>() * sizeof(float) <= kSmemBytes,
              "the warps' merge area must fit in the rings it reuses");

// B fragments of q (scaled by scale * log2 e) for k-steps 2G + s (see the banner: lane (g, t) holds
// column g = head g / 2, hi part for even g, lo for odd, at channels 8w + 2s + {0, 4} (b0) and
// 8w + 2s + {1, 5} (b1), w = 4G + t), and this lane's sum of head t's q (hi + lo, fp32).
template <int NG>
__device__ __forceinline__ void load_q_frags(const rdecode_args & a, const rtask & t, int lane,
                                             uint32_t (&bq)[2 * NG][2], float & qsum) {
    const int g = lane >> 2, tq = lane & 3, h = g >> 1;
    const bool lo_part = g & 1, live = h < t.nh;
    const int kw = t.hd.k_width;
    const float * qbase = a.q + int64_t(t.b) * a.group * a.k_total + int64_t(a.group) * t.hd.k_offset;
    const float * qrow = qbase + int64_t(t.h0 + (live ? h : 0)) * kw;
    auto part = [&](int c) {
        const float x = live && c < kw ? qrow[c] * a.qscale : 0.0f;
        const float hi = __half2float(__float2half_rn(x));
        return lo_part ? x - hi : hi;
    };
#pragma unroll
    for (int G = 0; G < NG; ++G)
#pragma unroll
        for (int s = 0; s < 2; ++s) {
            const int c = 32 * G + 8 * tq + 2 * s;
            bq[2 * G + s][0] = pack_half2(part(c), part(c + 4));
            bq[2 * G + s][1] = pack_half2(part(c + 1), part(c + 5));
        }
    // Head tq's sum (lane (g, t) keeps head t in the score layout).
    qsum = 0.0f;
    if (tq < t.nh) {
        const float * qt = qbase + int64_t(t.h0 + tq) * kw;
        for (int c = g; c < kw; c += 8) qsum += qt[c] * a.qscale;
    }
    qsum += __shfl_xor_sync(full_mask, qsum, 4);
    qsum += __shfl_xor_sync(full_mask, qsum, 8);
    qsum += __shfl_xor_sync(full_mask, qsum, 16);
}

// Per-warp state: lane (g, t) keeps head t's running max (shared by its 8 lanes), its part of the
// sum and of the bias, and the output accumulators of the m-tiles.
template <int MV>
struct qstate {
    float o[MV][4];
    float m = -INFINITY, l = 0.0f, bias = 0.0f;
};

// The geometry of one staged tile as a warp reads it.
struct q4_tile {
    const uint8_t * k;  // row 0 of K codes in the stage
    const uint8_t * v;  // row 0 of V codes
    int k_row, v_row;   // row strides (bytes)
    int ng, nv;         // 32-channel groups of K, 16-channel m-tiles of V
};

// (min, step) of row r.
__device__ __forceinline__ float2 row_params(const uint8_t * row0, int stride, int r) {
    return __half22float2(*reinterpret_cast<const __half2 *>(row0 + r * stride));
}

// Scores of rows r0 .. r0 + 15 (rows < hi are the task's): this lane's head t for rows r0 + g (.x)
// and r0 + g + 8 (.y), -inf past hi.
template <int NG>
__device__ __forceinline__ float2 tile_scores(const q4_tile & tv, int r0, int hi, const uint32_t (&bq)[2 * NG][2],
                                              float qsum, uint32_t ex, int lane) {
    const int g = lane >> 2, tq = lane & 3;
    const int ra = min(r0 + g, hi - 1), rb = min(r0 + g + 8, hi - 1);
    const uint8_t * wa = tv.k + ra * tv.k_row + 4 + 4 * tq;  // code word tq of row ra
    const uint8_t * wb = tv.k + rb * tv.k_row + 4 + 4 * tq;
    float s[4] = {0.0f, 0.0f, 0.0f, 0.0f}, s2[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int G = 0; G < NG; ++G) {
        if (G < tv.ng) {  // uniform
            const uint32_t xa = *reinterpret_cast<const uint32_t *>(wa + 16 * G);
            const uint32_t xb = *reinterpret_cast<const uint32_t *>(wb + 16 * G);
            // pair j (channels j, j + 4 of the word) at bits 4j: rotate left by 6 - 4j into bits 6..9
            const uint32_t a0[4] = {code_pair<4>(xa, 6, ex), code_pair<4>(xb, 6, ex), code_pair<4>(xa, 2, ex),
                                    code_pair<4>(xb, 2, ex)};
            const uint32_t a1[4] = {code_pair<4>(xa, 30, ex), code_pair<4>(xb, 30, ex), code_pair<4>(xa, 26, ex),
                                    code_pair<4>(xb, 26, ex)};
            mma_16816(s, a0, bq[2 * G][0], bq[2 * G][1]);
            mma_16816(s2, a1, bq[2 * G + 1][0], bq[2 * G + 1][1]);
        }
    }
    const float2 pa = row_params(tv.k, tv.k_row, ra), pb = row_params(tv.k, tv.k_row, rb);
    const float fa = (s[0] + s2[0]) + (s[1] + s2[1]), fb = (s[2] + s2[2]) + (s[3] + s2[3]);
    return make_float2(r0 + g < hi ? fmaf(pa.y, fa, (pa.x - 16.0f * pa.y) * qsum) : -INFINITY,
                       r0 + g + 8 < hi ? fmaf(pb.y, fb, (pb.x - 16.0f * pb.y) * qsum) : -INFINITY);
}

// Adds rows r0 .. r0 + 15 of V weighted by this lane's p0 (row r0 + g) and p1 (row r0 + g + 8).
template <int MV>
__device__ __forceinline__ void tile_values(qstate<MV> & st, const q4_tile & tv, int r0, int hi, float p0, float p1,
                                            uint32_t sel, uint32_t ex, int lane) {
    const int g = lane >> 2, tq = lane & 3;
    {
        const float2 pa = row_params(tv.v, tv.v_row, min(r0 + g, hi - 1));
        const float2 pb = row_params(tv.v, tv.v_row, min(r0 + g + 8, hi - 1));
        st.bias = fmaf(p0, pa.x - 16.0f * pa.y, fmaf(p1, pb.x - 16.0f * pb.y, st.bias));
        uint32_t b0, b1;
        p_frag(p0 * pa.y, p1 * pb.y, b0, b1);
        // Rows 2t, 2t + 1, 2t + 8, 2t + 9 of the step, at the code word of byte 8m + g (m = 0).
        const uint8_t * c0 = tv.v + 4 + 4 * (g >> 2);
        const uint8_t * r_0 = c0 + min(r0 + 2 * tq, hi - 1) * tv.v_row;
        const uint8_t * r_1 = c0 + min(r0 + 2 * tq + 1, hi - 1) * tv.v_row;
        const uint8_t * r_8 = c0 + min(r0 + 2 * tq + 8, hi - 1) * tv.v_row;
        const uint8_t * r_9 = c0 + min(r0 + 2 * tq + 9, hi - 1) * tv.v_row;
#pragma unroll
        for (int m = 0; m < MV; ++m) {
            if (m < tv.nv) {  // uniform
                // byte g % 4 of two rows into bytes 0 and 2: the low nibbles at bits 0 and 16 (channel
                // 16m + 2g), the high nibbles at bits 4 and 20 (channel 16m + 2g + 1)
                const uint32_t x01 = __byte_perm(*reinterpret_cast<const uint32_t *>(r_0 + 8 * m),
                                                 *reinterpret_cast<const uint32_t *>(r_1 + 8 * m), sel);
                const uint32_t x89 = __byte_perm(*reinterpret_cast<const uint32_t *>(r_8 + 8 * m),
                                                 *reinterpret_cast<const uint32_t *>(r_9 + 8 * m), sel);
                const uint32_t af[4] = {code_pair<4>(x01, 6, ex), code_pair<4>(x01, 2, ex), code_pair<4>(x89, 6, ex),
                                        code_pair<4>(x89, 2, ex)};
                mma_16816(st.o[m], af, b0, b1);
            }
        }
    }
}

// One block's task: NG 32-channel groups of K and MV 16-channel m-tiles of V unrolled (>= the head's,
// MV = 2 NG <= W / 16; step_bound in attn_decode_ragged_mma.cu says why); W = the merge area's row width.
template <int W, int NG, int MV>
__device__ __forceinline__ void run_task(const rdecode_args & a, const rtask & t, uint8_t * ring) {
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t4 = lane & 3;
    const int kw = t.hd.k_width, vw = t.hd.v_width;

    uint32_t bq[2 * NG][2];
    float qsum;
    load_q_frags<NG>(a, t, lane, bq, qsum);
    qstate<MV> st;
#pragma unroll
    for (int m = 0; m < MV; ++m)
#pragma unroll
        for (int k = 0; k < 4; ++k) st.o[m][k] = 0.0f;
    const uint32_t ex = code_exponents<4>();
    const uint32_t b = uint32_t(g & 3), sel = b | b << 4 | (4 + b) << 8 | (4 + b) << 12;

    stream ts(a, t, ring + warp * kWarpRingBytes, (kStageBytes - kSlack) / (t.k_row + t.v_row) & ~15);
    q4_tile tv;
    tv.k_row = t.k_row, tv.v_row = t.v_row;
    tv.ng = (kw + 31) / 32, tv.nv = (vw + 15) / 16;

    // Software-pipelined as attn_decode_ragged_mma.cu (run_tile_steps).
    run_tile_steps(
        ts,
        [&](int k) {
            tv.k = ts.k_stage(k);
            tv.v = ts.v_stage(k);
        },
        [&](int r0, int hi) { return tile_scores<NG>(tv, r0, hi, bq, qsum, ex, lane); },
        [&](float2 s, float & p0, float & p1) {
            const float alpha = softmax_pair(st.m, st.l, s.x, s.y, p0, p1);
            if (rescale_mma_out(st.o, alpha)) st.bias *= alpha;
        },
        [&](int r0, int hi, float p0, float p1) { tile_values<MV>(st, tv, r0, hi, p0, p1, sel, ex, lane); });

    // The warps' states merge through the rings; the bias belongs to every channel.
    st.l = head_sum(st.l);
    st.bias = head_sum(st.bias);
    __syncthreads();  // every warp is done with its ring
    float * sm = reinterpret_cast<float *>(ring);
#pragma unroll
    for (int m = 0; m < MV; ++m) {
        if (m < tv.nv) {
            float * dst = sm + (warp * QH + t4) * W + 16 * m + 2 * g;
            dst[0] = st.o[m][0] + st.o[m][1] + st.bias;
            dst[1] = st.o[m][2] + st.o[m][3] + st.bias;
        }
    }
    finish_mma_block<QH, W>(a, t, sm, st.m, st.l);
}

// W: widest head the kernel handles (64 or 128). 4 blocks per SM (kStageBytes). The loops' unroll
// bound follows the task's head: 32, 64 or 128 channels.
template <int W>
__global__ void __launch_bounds__(kRaggedThreads, 4) attn_decode_ragged_q4_mma_kernel(const rdecode_args a) {
    extern __shared__ uint4 smem[];
    uint8_t * ring = reinterpret_cast<uint8_t *>(smem);
    rtask t;
    if (!load_mma_task<W>(a, QH, t)) return;  // uniform
    const int n = max(2 * ((t.hd.k_width + 31) / 32), (t.hd.v_width + 15) / 16);  // 16-channel steps
    if (n <= 2) return run_task<W, 1, 2>(a, t, ring);
    if (n <= 4 || W == 64) return run_task<W, 2, 4>(a, t, ring);
    run_task<W, W / 32, W / 16>(a, t, ring);
}

}  // namespace

task_kernel<rdecode_args> attn_decode_ragged_q4_mma_kernel_for(int max_width, int group) {
    return {max_width <= 64 ? attn_decode_ragged_q4_mma_kernel<64> : attn_decode_ragged_q4_mma_kernel<128>,
            kRaggedThreads, kSmemBytes, unsigned((group + QH - 1) / QH)};
}

}  // namespace kvcomp::cuda
