// attn_prefill: causal attention over a ragged batch of prompts, GQA, fp32 online softmax.
//
// Layout (core/op.h): q/out f32 [n_tokens, n_q_heads, D]; k/v f16 [n_tokens, n_kv_heads, D];
//   seq_indptr i32 [batch+1]: request b owns rows [seq_indptr[b], seq_indptr[b+1]) and its row j
//   attends to its rows 0..j. Query head h reads KV head h / (n_q_heads / n_kv_heads).
//   D = head_dim, a multiple of 16 from 32 to 128 (64 and 128 for the models; the others are the
//   reduced caches of kivi / zipcache with lowrank=, rank=R); the CUDA-core fallback takes multiples of
//   32 only, so at 48, 80 and 112 a view the tensor-core kernel cannot take is reported unsupported.
// Both kernels keep the softmax in the log2 domain: q is pre-scaled by scale*log2(e), exp2f.
// The optional lse output is each row's m / log2(e) + ln(l) (max m in log2 units, l the sum).
//
// attn_prefill_mma_kernel<D> (the default): tensor cores through mma.sync.m16n8k16 (fp16 inputs,
//   fp32 accumulation; sm_80+, so no Hopper-only wgmma/TMA). The fp16 inputs are the stored K/V
//   bits, q rounded to fp16 after scaling, and the softmax weights p rounded to fp16 for P*V;
//   max, sum, rescaling and the output stay fp32. Error budget: see the attn_prefill row of the
//   table in tests/backend_ops_cases.cpp. A scaled q beyond the fp16 range (|q*scale*log2 e| >
//   65504) would become inf; real activations are orders of magnitude below that.
//   Grid: x = query head, y = query tile of kBM = 128 rows (grid-stride up to the request's tile
//   count, heaviest tile first), z = request. A block finds its rows from seq_indptr[z] directly;
//   tiles past a request's length exit at once. x = head is fastest so the heads of one GQA
//   group run side by side and share K/V through L2.
//   Block: 8 warps, warp w owns query rows [16w, 16w+16) of the tile and all D output features.
//   Per staged key tile of kBN = 64 keys, in softmax steps of kHN = 32: S = Q K^T (16 x 32 per warp,
//   fp32 in registers), causal mask on the diagonal steps only, online softmax per row (a row lives in one quad of lanes; its max
//   is lazy, as in decode_mma.cuh: the quad shuffles and the rescale of o run only when a score
//   exceeds the row's max by more than kLazyMax), P converted in registers to the A operand of
//   O += P V.
//   Shared memory (dynamic, 2 stages x (K, V) x 64 rows x (D + 8) halves, then the fp16 Q tile of
//   128 rows: 102 KiB for D = 128, 53 KiB for D = 64): K/V tiles are copied with cp.async, double
//   buffered: tile j+1 is in flight while tile j is used. Q fragments are read from shared memory
//   for each k16 step of each key tile. Rows are padded by 8 halves (16 bytes): the 8 row
//   addresses of one ldmatrix phase then fall in 8 different 16-byte bank groups.
//   Causal skipping: a tile of rows [r0, r0+128) only loads keys [0, min(n, r0+128)); a warp
//   whose 16 rows all precede a softmax step skips its math (it still joins the barriers).
//   Occupancy: two blocks (16 warps) per SM, __launch_bounds__(256, 2), so 128 registers (ptxas,
//   CUDA 13, sm_90: 72 bytes of spills at D = 128, none at 64; 144 with steps of 64 keys). Until 2026-11-27 the Q fragments
//   stayed in registers (230-239 of them, one block of 8 warps per SM): Nsight Compute on an H200
//   (docs/data/gpu_visits_2026-11-27.log, visit 46, 1 x 32K) had 2 warps per scheduler, the issue
//   slots 37 % busy and the tensor pipe 42 %, the warps stalled on fixed-latency and shared-memory
//   dependencies. Twice the warps with the Q reads and the spills, then the lazy max, then steps of
//   32 keys: 274 -> 285 -> 292 -> 295 TFLOP/s at 1 x 32K (bench_ops, docs/kernel_notes.md). A
//   version with 4 warps of 32 rows (fewer shared-memory reads per mma, 0f954d4) was 18 % slower
//   and reverted.
// attn_prefill_simt_kernel<D> (fallback, the original correctness kernel): CUDA cores, fp32
//   throughout; runs when a pointer is not 16-byte aligned (cp.async / vector loads need it) or
//   batch exceeds the grid's z limit. Grid x = query tiles of 32 rows over all requests (found
//   by scanning seq_indptr), y = query head; 128 threads = 4 warps x 8 query rows; shared Q tile
//   (f32), K tile (half2, padded), V tile (f32); lanes over keys for scores, over features for o.
#include <climits>

#include "common.cuh"
#include "decode_mma.cuh"  // ldmatrix, kLazyMax
#include "head_dims.cuh"

namespace kvcomp::cuda {

namespace {

constexpr float kLog2e = 1.4426950408889634f;

struct prefill_args {
    const float * q;
    const __half * k;
    const __half * v;
    const int32_t * seq_indptr;
    float * out;
    float * lse;  // optional: natural-log softmax denominator of every (row, head)
    int batch, n_tokens, n_q_heads, n_kv_heads, group;
    float qscale;
};

// Rows [s0, s1) of request b, clamped into [0, n_tokens] so a bad seq_indptr cannot fault.
__device__ __forceinline__ void request_rows(const prefill_args & a, int b, int & s0, int & s1) {
    s0 = min(max(a.seq_indptr[b], 0), a.n_tokens);
    s1 = min(max(a.seq_indptr[b + 1], s0), a.n_tokens);
}

// ============================================================================================
// Tensor-core kernel.

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kBM = 16 * kWarps;  // query rows per block: one m16 MMA row block per warp
constexpr int kBN = 64;           // keys per staged tile
constexpr int kHN = 32;           // keys per softmax step (bounds the score registers at kHN / 2)
static_assert(kHN % 16 == 0 && kBN % kHN == 0, "P*V walks a step in k16 steps, S in pairs of n8 tiles");
static_assert(kBM % kBN == 0, "tile starts r0 are then multiples of kBN: the diagonal test is exact");

// Halves per shared row: +16 bytes so the 8 row addresses of an ldmatrix phase spread over banks.
template <int D>
constexpr int kStride = D + 8;
template <int D>
constexpr size_t mma_smem_bytes() {
    return (size_t(2) * 2 * kBN + kBM) * kStride<D> * sizeof(__half);  // 2 stages x (K, V), then the Q tile
}

// ldmatrix_x4 / ldmatrix_x4_trans (decode_mma.cuh) take 32-bit shared addresses: a lane's base
// plus a compile-time offset folds into the instruction (generic pointers cost two registers
// each and a conversion per load).

// Starts the copies of keys [k0, k0 + kBN) of request rows [s0, s0 + n) into one stage.
// kBN * D/8 16-byte chunks per matrix, spread over the block; keys >= n are zero-filled (their
// scores are masked, and zero V keeps 0 * garbage out of the sum). The source of a zero-fill
// points at row s0 (n >= 1 here) so every address stays inside the tensor.
template <int D>
__device__ __forceinline__ void load_kv_tile(const prefill_args & a, __half * sk, __half * sv, int s0, int n,
                                             int kv_head, int k0) {
    constexpr int ST = kStride<D>;
    constexpr int CH = D / 8;  // chunks per row
    constexpr int N = kBN * CH, IT = (N + kThreads - 1) / kThreads;
#pragma unroll
    for (int it = 0; it < IT; ++it) {
        const int c = int(threadIdx.x) + it * kThreads;  // consecutive threads: consecutive chunks
        if (N % kThreads != 0 && c >= N) break;  // D = 48, 80, 112: the last round is partial
        const int r = c / CH, ch = c % CH;
        const bool ok = k0 + r < n;
        const int64_t src = (int64_t(s0 + (ok ? k0 + r : 0)) * a.n_kv_heads + kv_head) * D + ch * 8;
        cp_async16(sk + r * ST + ch * 8, a.k + src, ok ? 16 : 0);
        cp_async16(sv + r * ST + ch * 8, a.v + src, ok ? 16 : 0);
    }
}

template <int D>
__global__ void __launch_bounds__(kThreads, 2) attn_prefill_mma_kernel(const prefill_args a) {
    constexpr int ST = kStride<D>;
    constexpr int KD = D / 16;   // k16 steps of S = Q K^T
    constexpr int NS = kHN / 8;  // n8 tiles of S (keys) per softmax step
    constexpr int NO = D / 8;    // n8 tiles of O (features)
    static_assert(D % 16 == 0 && NO % 2 == 0, "ldmatrix x4 loads feature tiles in pairs");
    extern __shared__ uint4 smem_raw[];  // uint4: 16-byte alignment for cp.async and ldmatrix
    __half * const smem = reinterpret_cast<__half *>(smem_raw);
    // Stage s holds K rows at smem + s*2*kBN*ST and V rows kBN*ST further.
    auto stage_k = [&](int s) { return smem + s * 2 * kBN * ST; };
    auto stage_v = [&](int s) { return smem + s * 2 * kBN * ST + kBN * ST; };
    __half * const sq = smem + 2 * 2 * kBN * ST;  // the query tile, kBM rows

    const int h = blockIdx.x, kv_head = h / a.group;
    int s0, s1;
    request_rows(a, int(blockIdx.z), s0, s1);
    const int n = s1 - s0;
    const int n_tiles = (n + kBM - 1) / kBM;  // uniform across the block: barriers below are safe
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int qg = lane >> 2, qt = lane & 3;  // mma fragment coordinates g and t (see mma_16816)

    for (int t = int(blockIdx.y); t < n_tiles; t += int(gridDim.y)) {
        const int r0 = (n_tiles - 1 - t) * kBM;  // heaviest (last) tile first
        const int k_end = min(n, r0 + kBM);      // causal: no row of this tile sees key >= k_end
        const int n_kt = (k_end + kBN - 1) / kBN;
        const int w_first = r0 + 16 * warp;         // this warp's first row (request position)
        const bool w_active = w_first < n;          // else all its rows are padding
        const int row_a = w_first + qg, row_b = row_a + 8;  // this lane's two rows

        __syncthreads();  // the previous tile's readers of shared memory are done
        load_kv_tile<D>(a, stage_k(0), stage_v(0), s0, n, kv_head, 0);
        cp_async_commit();

        // Q tile -> fp16, pre-scaled, into its area (read after the loop's first barrier; the
        // barrier above keeps the previous tile's readers out of it).
        {
            constexpr int C4 = D / 4;  // float4 per row
            for (int c = threadIdx.x; c < kBM * C4; c += kThreads) {
                const int r = c / C4, c4 = c % C4;
                float4 x = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                if (r0 + r < n)
                    x = *reinterpret_cast<const float4 *>(a.q + (int64_t(s0 + r0 + r) * a.n_q_heads + h) * D + 4 * c4);
                const __half2 lo = __floats2half2_rn(x.x * a.qscale, x.y * a.qscale);
                const __half2 hi = __floats2half2_rn(x.z * a.qscale, x.w * a.qscale);
                uint2 u;
                u.x = *reinterpret_cast<const uint32_t *>(&lo);
                u.y = *reinterpret_cast<const uint32_t *>(&hi);
                *reinterpret_cast<uint2 *>(sq + r * ST + 4 * c4) = u;
            }
        }
        // This lane's ldmatrix addresses: the warp's Q rows (matrix i = lane/8 of an x4 is rows +8
        // if i&1, columns +8 if i&2, i.e. a[0..3] in mma_16816's order), and K and V of stage 0 at
        // key 0, feature 0 (the loops add compile-time offsets; see there for the matrices).
        const unsigned q_lane =
            smem_addr(sq) + ((16 * warp + (lane & 7) + ((lane >> 3) & 1) * 8) * ST + (lane >> 4) * 8) * 2;
        const unsigned k_lane = smem_addr(smem) + (((lane & 7) + (lane >> 4) * 8) * ST + ((lane >> 3) & 1) * 8) * 2;
        const unsigned v_lane =
            smem_addr(smem) + (kBN * ST + ((lane & 7) + ((lane >> 3) & 1) * 8) * ST + (lane >> 4) * 8) * 2;

        float o[NO][4];
#pragma unroll
        for (int i = 0; i < NO; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
        float m_a = -INFINITY, m_b = -INFINITY;  // running max (log2 domain) of rows a, b
        float l_a = 0.0f, l_b = 0.0f;            // this lane's share of the running sums

        for (int j = 0; j < n_kt; ++j) {
            const int k0 = j * kBN;
            if (j + 1 < n_kt) load_kv_tile<D>(a, stage_k((j + 1) & 1), stage_v((j + 1) & 1), s0, n, kv_head, k0 + kBN);
            cp_async_commit();  // possibly empty: keeps "all but the newest group" = tile j
            cp_async_wait<1>();
            __syncthreads();  // tile j is visible to every warp

            // The tile in softmax steps of kHN keys. Rows before a step's first key see nothing of
            // it: a warp whose 16 rows all precede it stops (it would add p = 0 everywhere).
#pragma unroll 1
            for (int hs = 0; hs < kBN / kHN; ++hs) {
                const int kh = k0 + hs * kHN;  // the step's first key
                if (!w_active || kh > w_first + 15) break;  // uniform per warp
                const unsigned sk = k_lane + (j & 1) * (2 * kBN * ST * 2) + hs * kHN * ST * 2;
                const unsigned sv = v_lane + (j & 1) * (2 * kBN * ST * 2) + hs * kHN * ST * 2;

                // S = Q K^T. Per x4: matrix i covers keys 16np + 8*(i>>1) + 0..7, features
                // 16kd + 8*(i&1) + 0..7, i.e. b[0], b[1] of key tile 2np, then of 2np+1.
                float s[NS][4];
#pragma unroll
                for (int i = 0; i < NS; ++i) s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.0f;
#pragma unroll
                for (int kd = 0; kd < KD; ++kd) {
                    // Read for each key tile: held for the whole query tile, the Q fragments took
                    // D / 2 registers and kept the kernel at one block per SM.
                    uint32_t qf[4];
                    ldmatrix_x4(qf, q_lane + kd * 16 * 2);
#pragma unroll
                    for (int np = 0; np < NS / 2; ++np) {
                        uint32_t kb[4];
                        ldmatrix_x4(kb, sk + (16 * np * ST + kd * 16) * 2);
                        mma_16816(s[2 * np], qf, kb[0], kb[1]);
                        mma_16816(s[2 * np + 1], qf, kb[2], kb[3]);
                    }
                }

                // Causal mask, only where some key of the tile is later than the warp's first
                // row. Element s[i][e] is key k0 + 8i + 2t + (e&1), row a for e < 2, b for e >= 2.
                // Keys >= n only occur past every valid row, so this also hides them.
                if (kh + kHN - 1 > w_first) {
#pragma unroll
                    for (int i = 0; i < NS; ++i)
#pragma unroll
                        for (int e = 0; e < 4; ++e) {
                            const int key = kh + 8 * i + 2 * qt + (e & 1);
                            if (key > (e < 2 ? row_a : row_b)) s[i][e] = -INFINITY;
                        }
                }

                // Online softmax. A row's kHN scores sit in the 4 lanes of one quad (same g). The max
                // is lazy (as decode_mma.cuh's softmax_pair): it moves only when some score of the
                // warp exceeds its row's max by more than kLazyMax, so most tiles skip the quad
                // shuffles and the rescale of o; weights then reach 2^kLazyMax, which p's fp16 keeps
                // at the same relative precision.
                float tm_a = -INFINITY, tm_b = -INFINITY;  // this lane's share of the tile's row maxima
#pragma unroll
                for (int i = 0; i < NS; ++i) {
                    tm_a = fmaxf(tm_a, fmaxf(s[i][0], s[i][1]));
                    tm_b = fmaxf(tm_b, fmaxf(s[i][2], s[i][3]));
                }
                // (m = -inf: -inf + kLazyMax is -inf, so any finite score moves it.)
                if (__any_sync(full_mask, tm_a > m_a + kLazyMax || tm_b > m_b + kLazyMax)) {
#pragma unroll
                    for (int x = 1; x <= 2; x <<= 1) {
                        tm_a = fmaxf(tm_a, __shfl_xor_sync(full_mask, tm_a, x));
                        tm_b = fmaxf(tm_b, __shfl_xor_sync(full_mask, tm_b, x));
                    }
                    const float mx_a = fmaxf(m_a, tm_a), mx_b = fmaxf(m_b, tm_b);
                    // A row with no visible key yet keeps max -inf; alpha is then exp2(-inf) = 0,
                    // not NaN. (Valid rows always see key 0 in tile 0.)
                    const float alpha_a = exp2_ftz(m_a - (mx_a == -INFINITY ? 0.0f : mx_a));
                    const float alpha_b = exp2_ftz(m_b - (mx_b == -INFINITY ? 0.0f : mx_b));
                    m_a = mx_a;
                    m_b = mx_b;
                    l_a *= alpha_a;
                    l_b *= alpha_b;
#pragma unroll
                    for (int i = 0; i < NO; ++i) {
                        o[i][0] *= alpha_a;
                        o[i][1] *= alpha_a;
                        o[i][2] *= alpha_b;
                        o[i][3] *= alpha_b;
                    }
                }
                // Subtracting 0 for a row with max -inf gives p = 0.
                const float mu_a = m_a == -INFINITY ? 0.0f : m_a;
                const float mu_b = m_b == -INFINITY ? 0.0f : m_b;
                float sum_a = 0.0f, sum_b = 0.0f;
#pragma unroll
                for (int i = 0; i < NS; ++i) {
                    s[i][0] = exp2_ftz(s[i][0] - mu_a);
                    s[i][1] = exp2_ftz(s[i][1] - mu_a);
                    s[i][2] = exp2_ftz(s[i][2] - mu_b);
                    s[i][3] = exp2_ftz(s[i][3] - mu_b);
                    sum_a += s[i][0] + s[i][1];
                    sum_b += s[i][2] + s[i][3];
                }
                l_a += sum_a;  // quad-reduced once, after the loop
                l_b += sum_b;

                // O += P V over the tile in k16 steps. The C fragments of key tiles 2kk and
                // 2kk+1 are exactly the A fragment of keys [16kk, 16kk+16) (compare the layouts
                // in mma_16816), so P never leaves registers. V per x4.trans: matrix i covers
                // keys 16kk + 8*(i&1) + 0..7, features 16dp + 8*(i>>1) + 0..7, i.e. b[0], b[1]
                // of feature tile 2dp, then of 2dp+1.
#pragma unroll
                for (int kk = 0; kk < kHN / 16; ++kk) {
                    const uint32_t pa[4] = {pack_half2(s[2 * kk][0], s[2 * kk][1]),
                                            pack_half2(s[2 * kk][2], s[2 * kk][3]),
                                            pack_half2(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                                            pack_half2(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
                    for (int dp = 0; dp < NO / 2; ++dp) {
                        uint32_t vb[4];
                        ldmatrix_x4_trans(vb, sv + (16 * kk * ST + 16 * dp) * 2);
                        mma_16816(o[2 * dp], pa, vb[0], vb[1]);
                        mma_16816(o[2 * dp + 1], pa, vb[2], vb[3]);
                    }
                }
            }
            __syncthreads();  // stage j&1 is refilled by the prefetch at the top of j+1
        }

        // Row sums: add the quad's shares. Every valid row saw its own key, so l >= 1.
#pragma unroll
        for (int x = 1; x <= 2; x <<= 1) {
            l_a += __shfl_xor_sync(full_mask, l_a, x);
            l_b += __shfl_xor_sync(full_mask, l_b, x);
        }
        // Lane (g, t) holds features 8i + 2t, 8i + 2t + 1 of rows a and b: 8-byte stores, a quad
        // writes 32 contiguous bytes of a row.
        if (a.lse && qt == 0) {  // m is the quad's common max; l now the full row sum
            if (row_a < n) a.lse[int64_t(s0 + row_a) * a.n_q_heads + h] = m_a / kLog2e + logf(l_a);
            if (row_b < n) a.lse[int64_t(s0 + row_b) * a.n_q_heads + h] = m_b / kLog2e + logf(l_b);
        }
        if (row_a < n) {
            const float inv = 1.0f / l_a;
            float * dst = a.out + (int64_t(s0 + row_a) * a.n_q_heads + h) * D + 2 * qt;
#pragma unroll
            for (int i = 0; i < NO; ++i)
                *reinterpret_cast<float2 *>(dst + 8 * i) = make_float2(o[i][0] * inv, o[i][1] * inv);
        }
        if (row_b < n) {
            const float inv = 1.0f / l_b;
            float * dst = a.out + (int64_t(s0 + row_b) * a.n_q_heads + h) * D + 2 * qt;
#pragma unroll
            for (int i = 0; i < NO; ++i)
                *reinterpret_cast<float2 *>(dst + 8 * i) = make_float2(o[i][2] * inv, o[i][3] * inv);
        }
    }
}

// ============================================================================================
// CUDA-core fallback kernel.

constexpr int kSimtThreads = 128;
constexpr int kSimtWarps = kSimtThreads / 32;
constexpr int kRows = 8;                     // query rows per warp
constexpr int kTileQ = kSimtWarps * kRows;  // query rows per block
constexpr int kTileK = 32;                   // keys per tile (one per lane)

template <int D>
__global__ void __launch_bounds__(kSimtThreads) attn_prefill_simt_kernel(const prefill_args a) {
    constexpr int C = D / 32;  // output features per lane
    __shared__ __align__(16) float sq[kTileQ][D];
    __shared__ __half2 sk[kTileK][D / 2 + 1];
    __shared__ float sv[kTileK][D];

    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int h = blockIdx.y, g = h / a.group;

    // Which request and which of its query tiles this block owns (uniform across the block).
    int b = -1, tile = 0, acc = 0;
    for (int r = 0; r < a.batch; ++r) {
        int s0, s1;
        request_rows(a, r, s0, s1);
        const int tiles = (s1 - s0 + kTileQ - 1) / kTileQ;
        if (int(blockIdx.x) < acc + tiles) {
            b = r;
            tile = int(blockIdx.x) - acc;
            break;
        }
        acc += tiles;
    }
    if (b < 0) return;
    int s0, s1;
    request_rows(a, b, s0, s1);
    const int n = s1 - s0;
    const int r0 = tile * kTileQ;

    for (int idx = threadIdx.x; idx < kTileQ * D; idx += kSimtThreads) {
        const int i = idx / D, d = idx % D;
        const int row = r0 + i;
        sq[i][d] = row < n ? a.q[(int64_t(s0 + row) * a.n_q_heads + h) * D + d] * a.qscale : 0.0f;
    }

    float o[kRows][C], m[kRows], l[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
        m[r] = -INFINITY;
        l[r] = 0.0f;
#pragma unroll
        for (int c = 0; c < C; ++c) o[r][c] = 0.0f;
    }

    const int k_end = min(n, r0 + kTileQ);  // causal: no row of this tile sees past its last row
    for (int k0 = 0; k0 < k_end; k0 += kTileK) {
        __syncthreads();  // the previous tile's readers are done
        for (int idx = threadIdx.x; idx < kTileK * (D / 2); idx += kSimtThreads) {
            const int j = idx / (D / 2), d2 = idx % (D / 2);
            __half2 kk = __float2half2_rn(0.0f);
            float v0 = 0.0f, v1 = 0.0f;
            if (k0 + j < n) {
                const int64_t src = (int64_t(s0 + k0 + j) * a.n_kv_heads + g) * D + 2 * d2;
                kk = __halves2half2(a.k[src], a.k[src + 1]);
                v0 = __half2float(a.v[src]);
                v1 = __half2float(a.v[src + 1]);
            }
            sk[j][d2] = kk;
            sv[j][2 * d2] = v0;
            sv[j][2 * d2 + 1] = v1;
        }
        __syncthreads();

        float s[kRows];
#pragma unroll
        for (int r = 0; r < kRows; ++r) s[r] = 0.0f;
#pragma unroll 8
        for (int d2 = 0; d2 < D / 2; ++d2) {
            const float2 kf = __half22float2(sk[lane][d2]);
#pragma unroll
            for (int r = 0; r < kRows; ++r) {
                const float2 qq = *reinterpret_cast<const float2 *>(&sq[warp * kRows + r][2 * d2]);
                s[r] = fmaf(qq.x, kf.x, fmaf(qq.y, kf.y, s[r]));
            }
        }

        float pr[kRows];
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
            const int row = r0 + warp * kRows + r, key = k0 + lane;
            const float sc = (row < n && key <= row) ? s[r] : -INFINITY;
            const float m_new = fmaxf(m[r], warp_max(sc));
            const float m_use = m_new == -INFINITY ? 0.0f : m_new;  // fully masked so far
            const float alpha = exp2_ftz(m[r] - m_use);
            pr[r] = exp2_ftz(sc - m_use);
            l[r] = l[r] * alpha + warp_sum(pr[r]);
            m[r] = m_new;
#pragma unroll
            for (int c = 0; c < C; ++c) o[r][c] *= alpha;
        }
#pragma unroll 4
        for (int j = 0; j < kTileK; ++j) {
            float vj[C];
#pragma unroll
            for (int c = 0; c < C; ++c) vj[c] = sv[j][lane + 32 * c];
#pragma unroll
            for (int r = 0; r < kRows; ++r) {
                const float pj = __shfl_sync(full_mask, pr[r], j);
#pragma unroll
                for (int c = 0; c < C; ++c) o[r][c] = fmaf(pj, vj[c], o[r][c]);
            }
        }
    }

#pragma unroll
    for (int r = 0; r < kRows; ++r) {
        const int row = r0 + warp * kRows + r;
        if (row >= n) continue;
        const float inv = 1.0f / l[r];  // l >= 1: a row always sees itself
        if (a.lse && lane == 0) a.lse[int64_t(s0 + row) * a.n_q_heads + h] = m[r] / kLog2e + logf(l[r]);
        float * dst = a.out + (int64_t(s0 + row) * a.n_q_heads + h) * D;
#pragma unroll
        for (int c = 0; c < C; ++c) dst[lane + 32 * c] = o[r][c] * inv;
    }
}

}  // namespace

namespace {

// Whether the tensor-core kernel can take the op: 16-byte aligned views (device buffers start
// 256-byte aligned, so the views' offsets decide) and a batch within the grid's z limit.
bool mma_takes(const op_desc & op) {
    const auto & p = op.get<attn_prefill_params>();
    return op.src[0].offset % 16 == 0 && op.src[1].offset % 16 == 0 && op.src[2].offset % 16 == 0 &&
           op.dst[0].offset % 16 == 0 && p.batch <= 65535;
}

}  // namespace

support supports_attn_prefill(const op_desc & op) {
    const auto & p = op.get<attn_prefill_params>();
    if (p.head_dim < 32 || p.head_dim > 128 || p.head_dim % 16 != 0)
        return support::no("head_dim " + std::to_string(p.head_dim) +
                           " (CUDA prefill kernels take multiples of 16 from 32 to 128)");
    if (p.head_dim % 32 != 0 && !mma_takes(op))
        return support::no("head_dim " + std::to_string(p.head_dim) +
                           " needs the tensor-core kernel, which needs 16-byte aligned views and batch <= 65535");
    if (p.n_q_heads > 65535) return support::no("n_q_heads > 65535 (grid y limit)");
    if (p.n_tokens > INT_MAX / 2 || p.batch > INT_MAX / 2)
        return support::no("n_tokens and batch must fit in 31 bits");
    return support::yes();
}

namespace {

template <int D>
void launch_mma(context & ctx, const prefill_args & a, int64_t max_seq_len) {
    constexpr size_t smem = mma_smem_bytes<D>();
    allow_dynamic_smem(reinterpret_cast<const void *>(attn_prefill_mma_kernel<D>), smem);
    // Query tiles per request. max_seq_len is only a grid size: the kernel loops over tiles
    // (grid-stride), so a value that is too small still covers every row, and 0 (unknown) falls
    // back to n_tokens, which bounds every request.
    const int64_t len = max_seq_len > 0 ? std::min<int64_t>(max_seq_len, a.n_tokens) : a.n_tokens;
    const int64_t tiles = std::min<int64_t>(std::max<int64_t>(1, (len + kBM - 1) / kBM), 65535);
    const dim3 grid(unsigned(a.n_q_heads), unsigned(tiles), unsigned(a.batch));
    attn_prefill_mma_kernel<D><<<grid, kThreads, smem, ctx.stream>>>(a);
}

bool aligned16(const void * p) {
    return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

}  // namespace

void run_attn_prefill(context & ctx, const op_desc & op) {
    const auto & p = op.get<attn_prefill_params>();
    if (p.n_tokens == 0) return;
    prefill_args a{};
    a.q = dev_ptr<const float>(op.src[0]);
    a.k = dev_ptr<const __half>(op.src[1]);
    a.v = dev_ptr<const __half>(op.src[2]);
    a.seq_indptr = dev_ptr<const int32_t>(op.src[3]);
    a.out = dev_ptr<float>(op.dst[0]);
    a.lse = op.dst.size() > 1 && op.dst[1].buf ? dev_ptr<float>(op.dst[1]) : nullptr;
    a.batch = int(p.batch);
    a.n_tokens = int(p.n_tokens);
    a.n_q_heads = int(p.n_q_heads);
    a.n_kv_heads = int(p.n_kv_heads);
    a.group = int(p.n_q_heads / p.n_kv_heads);
    a.qscale = p.scale * kLog2e;

    // The tensor-core kernel copies 16-byte chunks (cp.async, float4) and needs batch within the
    // grid's z limit; views at other offsets, or huge batches, take the CUDA-core kernel.
    const bool mma_ok = aligned16(a.q) && aligned16(a.k) && aligned16(a.v) && aligned16(a.out) && p.batch <= 65535;
    if (mma_ok) {
        with_head_dim(p.head_dim, [&](auto dc) { launch_mma<decltype(dc)::value>(ctx, a, p.max_seq_len); });
        KVCOMP_CUDA_CHECK_LAUNCH();
        return;
    }
    // Sum over requests of ceil(n_b / kTileQ) <= (n_tokens + batch * (kTileQ - 1)) / kTileQ.
    const int64_t tiles = (p.n_tokens + p.batch * (kTileQ - 1) + kTileQ - 1) / kTileQ;
    const dim3 grid(unsigned(tiles), unsigned(p.n_q_heads));
    with_head_dim<32>(p.head_dim, [&](auto dc) {
        attn_prefill_simt_kernel<decltype(dc)::value><<<grid, kSimtThreads, 0, ctx.stream>>>(a);
    });
    KVCOMP_CUDA_CHECK_LAUNCH();
}

}  // namespace kvcomp::cuda
