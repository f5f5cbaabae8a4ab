// probe_scores, tensor-core kernels (the default for head_dim 64 and 128; probe_scores.cu picks
// them and keeps the SIMT kernels as fallback). Same contract, rows and visibility as there.
//
// Precision. mma.sync multiplies f16 operands; a logit from f16-rounded q and k is off by ~2^-12
// relative per product (fp32 accumulation). Both passes use the same rounded operands, so the
// weights a row gives its keys are normalized by a log-denominator of the same logits. (An earlier
// version split k into f16 hi + lo parts in the scores pass: 2x the mma of the pass for an error
// that was already far inside the tolerance, and saliency is a ranking.) Measured NMSE against the
// double-precision CPU reference is printed by test_backend_ops (tolerance 1e-6).
// q is pre-scaled by scale * log2(e), so logits are in log2 units and weights are exp2(s - lse2).
//
// Kernels (128 threads = 4 warps; g = lane / 4, t = lane % 4 as in the mma fragments):
//   probe_qfrag_kernel, probe_kfrag_kernel  once per call, the operands in fragment order in the
//       workspace, so the attention kernels load them with coalesced 128-bit loads and never
//       convert: q (B operand, f16) per KV head h and row tile rt (rows 8rt .. 8rt+7 of h, row r =
//       p * group + j as in probe_scores.cu), uint4 [D/32][32 lanes]: lane (g, t) holds column g
//       = row g of the tile, channels 2t, 2t+1 (b0) and 2t+8, 2t+9 (b1) of two k16 steps; k (A
//       operand, f16) per KV head and 16-key tile, per k16 step a uint4 per lane.
//       Rows and keys past the last are zeros. (The k copy is as large as k in f16.)
//   probe_lse_mma_kernel (skipped when use_lse) one block per (KV head, 8 row tiles): each warp
//       keeps the B fragments of its 2 row tiles in registers and walks the 16-key tiles of its
//       rows' requests; per lane an online (max, sum) of rows 2t and 2t + 1 over keys g and
//       g + 8; the 8 lanes of a row are combined with a fixed butterfly at the end.
//   probe_rowmeta_kernel  per KV head and row: the probe's position and log2-denominator, in row
//       order, so the scores kernel copies them with the rows' fragments.
//   probe_scores_mma_kernel one block per (KV head, 128 keys): each warp keeps the A fragments of
//       its 32 keys (two 16-key tiles) in registers; the block walks the row tiles of its keys'
//       requests in stages of 8 row tiles that it copies into shared memory (cp.async, double-
//       buffered, one barrier per stage), and each warp adds exp2(s - lse2) of keys g and g + 8
//       of each tile against rows 2t and 2t + 1 per lane; the 4 lanes of a key are summed with a
//       fixed butterfly at the end.
// The lse walk is software-pipelined per warp: the next tile's operands load during this tile's
// mma. (Staging its streamed operand through shared memory for the block, one tile per barrier,
// measured slower on the H100; the scores kernel's stages are 8 tiles, so its barrier is paid per
// 128 mma per warp, and its L2 traffic for the q fragments is a quarter of per-warp loads.)
// A 16-key tile / row tile no (key, row) pair of the warp sees is skipped (warp vote). Every sum
// has a fixed order: results are identical run to run.
#include <climits>
#include <cmath>

#include "probe_scores.cuh"

namespace kvcomp::cuda::probe {

namespace {

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;
constexpr int kRowTile = 8;          // query rows per B operand (its 8 columns)
constexpr int kLseTilesPerWarp = 2;  // row tiles per warp in the lse kernel
// Scores kernel: 16-key tiles per warp. Two share each row tile's operand loads, probe lookups and
// visibility tests (the walk is bound by instruction issue: ncu at 32K, 54% of issue slots busy
// with one tile per warp).
constexpr int kScoreKeyTiles = 2;
constexpr int kScoreKeys = kWarps * 16 * kScoreKeyTiles;  // keys per block in the scores kernel
// Scores kernel: row tiles per shared-memory stage (two stages: 33 KiB at head_dim 128). A stage
// is 64 rows, 128 mma per warp between barriers, long enough to hide the next stage's L2 fetch.
constexpr int kStageTiles = 8;
constexpr float kLog2e = 1.4426950408889634f;

// Channels c, c + 1 of key i of KV head h (zeros past n_keys).
template <typename TK>
__device__ __forceinline__ float2 key_pair(const TK * k, const probe_args & a, int h, int64_t i, int c) {
    if (i >= a.n_keys) return make_float2(0.0f, 0.0f);
    const int64_t rt = a.row_tokens;  // core/op.h: token-major (0) or head-major rows
    const int64_t e = rt == 0 ? (i * a.n_kv_heads + h) * a.hd + c : (((i / rt) * a.n_kv_heads + h) * rt + i % rt) * a.hd + c;
    if constexpr (sizeof(TK) == 4) {
        return *reinterpret_cast<const float2 *>(k + e);
    } else {
        return __half22float2(*reinterpret_cast<const __half2 *>(k + e));
    }
}

// A fragment (f16) of k16 step kk for keys i0 + g and i0 + g + 8.
template <typename TK>
__device__ __forceinline__ uint4 key_frag(const TK * k, const probe_args & a, int h, int64_t i0, int kk, int lane) {
    const int g = lane >> 2, t = lane & 3, c = 16 * kk + 2 * t;
    const float2 x0 = key_pair(k, a, h, i0 + g, c), x1 = key_pair(k, a, h, i0 + g + 8, c);
    const float2 x2 = key_pair(k, a, h, i0 + g, c + 8), x3 = key_pair(k, a, h, i0 + g + 8, c + 8);
    return make_uint4(pack_half2(x0.x, x0.y), pack_half2(x1.x, x1.y), pack_half2(x2.x, x2.y), pack_half2(x3.x, x3.y));
}

// Key fragments, once per call: for KV head h and 16-key tile kt (keys 16kt .. 16kt+15), k16 step
// kk: uint4 [32 lanes] at ((h * key_tiles + kt) * D/16 + kk) * 32.
template <int D, typename TK>
__global__ void __launch_bounds__(kThreads) probe_kfrag_kernel(const TK * __restrict__ k, const probe_args a,
                                                              uint4 * kf, int64_t key_tiles) {
    constexpr int KS = D / 16;
    const int64_t n = int64_t(a.n_kv_heads) * key_tiles * KS * 32;
    for (int64_t idx = blockIdx.x * int64_t(kThreads) + threadIdx.x; idx < n; idx += int64_t(gridDim.x) * kThreads) {
        const int lane = int(idx % 32), kk = int(idx / 32 % KS);
        const int64_t kt = idx / (32 * KS) % key_tiles;
        const int h = int(idx / (32 * KS * key_tiles));
        kf[idx] = key_frag(k, a, h, kt * 16, kk, lane);
    }
}

template <int D>
__global__ void __launch_bounds__(kThreads) probe_qfrag_kernel(const probe_args a, uint4 * qf, int64_t row_tiles) {
    const int64_t n = int64_t(a.n_kv_heads) * row_tiles * (D / 32) * 32;
    const float qs = a.scale * kLog2e;
    const int n_rows = a.n_probes * a.group;
    for (int64_t idx = blockIdx.x * int64_t(kThreads) + threadIdx.x; idx < n; idx += int64_t(gridDim.x) * kThreads) {
        const int lane = int(idx % 32), kp = int(idx / 32 % (D / 32));
        const int64_t rt = idx / (32 * (D / 32)) % row_tiles;
        const int h = int(idx / (32 * (D / 32) * row_tiles));
        const int t = lane & 3;
        const int64_t r = rt * kRowTile + (lane >> 2);  // column g = row g of the tile
        uint32_t w[4] = {0u, 0u, 0u, 0u};
        if (r < n_rows) {
            const int p = int(r / a.group), qh = h * a.group + int(r % a.group);
            const float * q = a.q + (int64_t(p) * a.n_q_heads + qh) * a.hd;
#pragma unroll
            for (int j = 0; j < 4; ++j) {  // b0, b1 of step 2kp, then of step 2kp + 1
                const int c = 16 * (2 * kp + j / 2) + 2 * t + 8 * (j % 2);
                w[j] = pack_half2(q[c] * qs, q[c + 1] * qs);
            }
        }
        qf[idx] = make_uint4(w[0], w[1], w[2], w[3]);
    }
}

// Row r's probe, its position and its request's keys [k0, k1) (r past the rows: sees nothing).
struct row_view {
    int p = -1, pos = -1;
    int64_t k0 = 0, k1 = 0;
    __device__ __forceinline__ row_view() {}
    __device__ __forceinline__ row_view(const probe_args & a, int64_t r) {
        if (r >= int64_t(a.n_probes) * a.group) return;
        p = int(r / a.group);
        pos = a.probe_pos[p];
        probe_keys(a, p, &k0, &k1);
    }
    __device__ __forceinline__ bool sees(int64_t i, int kpos) const { return i >= k0 && i < k1 && kpos <= pos; }
};

template <int D>
__global__ void __launch_bounds__(kThreads) probe_lse_mma_kernel(const probe_args a, const uint4 * __restrict__ qf,
                                                                 int64_t row_tiles, const uint4 * __restrict__ kf,
                                                                 int64_t key_tiles) {
    constexpr int KS = D / 16, R = kLseTilesPerWarp;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    const int64_t blocks_per_head = (row_tiles + kWarps * R - 1) / (kWarps * R);
    const int h = int(blockIdx.x / blocks_per_head);
    const int64_t rt0 = (blockIdx.x % blocks_per_head) * (kWarps * R) + warp * R;  // this warp's first row tile
    const int64_t n_rows = int64_t(a.n_probes) * a.group;

    uint32_t bq[R][KS][2];
    row_view rows[R][2];  // this lane's rows 2t, 2t + 1 of each row tile
#pragma unroll
    for (int j = 0; j < R; ++j) {
        rows[j][0] = row_view(a, (rt0 + j) * kRowTile + 2 * t);
        rows[j][1] = row_view(a, (rt0 + j) * kRowTile + 2 * t + 1);
        const uint4 * src = qf + ((int64_t(h) * row_tiles + min(rt0 + j, row_tiles - 1)) * (D / 32)) * 32 + lane;
#pragma unroll
        for (int kp = 0; kp < D / 32; ++kp) {
            const uint4 v = src[kp * 32];
            bq[j][2 * kp][0] = v.x, bq[j][2 * kp][1] = v.y, bq[j][2 * kp + 1][0] = v.z, bq[j][2 * kp + 1][1] = v.w;
        }
    }
    // The warp's keys: from its first row's request to its last row's (rows are in probe order).
    int64_t kbeg = 0, kend = 0;
    if (rt0 * kRowTile < n_rows) {
        int64_t unused;
        probe_keys(a, int((rt0 * kRowTile) / a.group), &kbeg, &unused);
        probe_keys(a, int((min((rt0 + R) * kRowTile, n_rows) - 1) / a.group), &unused, &kend);
    }
    float m[R][2], l[R][2];
#pragma unroll
    for (int j = 0; j < R; ++j) m[j][0] = m[j][1] = -INFINITY, l[j][0] = l[j][1] = 0.0f;

    // Software pipeline: the next tile's key positions and A fragments are loaded while this
    // tile's mma run (each warp otherwise waits an L2 round trip per tile).
    const uint4 * kbase = kf + int64_t(h) * key_tiles * KS * 32 + lane;
    auto load_tile = [&](int64_t i0, int & pa, int & pb, uint4 (&af)[KS]) {
        const int64_t ia = i0 + g, ib = i0 + g + 8;
        pa = ia < kend ? a.key_pos[ia] : INT_MAX;
        pb = ib < kend ? a.key_pos[ib] : INT_MAX;
        const uint4 * src = kbase + min(i0 / 16, key_tiles - 1) * KS * 32;
#pragma unroll
        for (int kk = 0; kk < KS; ++kk) af[kk] = src[kk * 32];
    };
    uint4 af[KS];
    int pa = INT_MAX, pb = INT_MAX;
    int64_t i0 = kbeg / 16 * 16;
    if (i0 < kend) load_tile(i0, pa, pb, af);
    for (; i0 < kend; i0 += 16) {
        const int64_t ia = i0 + g, ib = i0 + g + 8;
        bool va[R][2], vb[R][2], any = false;
#pragma unroll
        for (int j = 0; j < R; ++j)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                va[j][e] = ia < kend && rows[j][e].sees(ia, pa);
                vb[j][e] = ib < kend && rows[j][e].sees(ib, pb);
                any |= va[j][e] || vb[j][e];
            }
        uint4 cur[KS];
#pragma unroll
        for (int kk = 0; kk < KS; ++kk) cur[kk] = af[kk];
        if (i0 + 16 < kend) load_tile(i0 + 16, pa, pb, af);
        if (!__any_sync(full_mask, any)) continue;  // warp-uniform: no pair of the warp sees this tile
        float s[R][4], sl[R][4];  // even and odd k16 steps: two independent mma chains per row tile
#pragma unroll
        for (int j = 0; j < R; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) s[j][e] = sl[j][e] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < KS; ++kk) {
            const uint32_t ah[4] = {cur[kk].x, cur[kk].y, cur[kk].z, cur[kk].w};
#pragma unroll
            for (int j = 0; j < R; ++j) mma_16816(kk % 2 ? sl[j] : s[j], ah, bq[j][kk][0], bq[j][kk][1]);
        }
#pragma unroll
        for (int j = 0; j < R; ++j)
#pragma unroll
            for (int e = 0; e < 2; ++e) {  // c[e]: key g, row 2t + e; c[2 + e]: key g + 8
                const float x0 = va[j][e] ? s[j][e] + sl[j][e] : -INFINITY;
                const float x1 = vb[j][e] ? s[j][2 + e] + sl[j][2 + e] : -INFINITY;
                // The sum is rescaled only when the running max grows (rare after the first
                // tiles): two exponentials per pair of logits instead of three.
                const float mx = fmaxf(m[j][e], fmaxf(x0, x1));
                if (mx == -INFINITY) continue;
                if (mx > m[j][e]) l[j][e] *= exp2f(m[j][e] - mx), m[j][e] = mx;
                l[j][e] += exp2f(x0 - mx) + exp2f(x1 - mx);
            }
    }
#pragma unroll
    for (int j = 0; j < R; ++j)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
            // Lanes t, t + 4, ..., t + 28 hold rows 2t, 2t + 1's parts.
            float mx = m[j][e];
            mx = fmaxf(mx, __shfl_xor_sync(full_mask, mx, 4));
            mx = fmaxf(mx, __shfl_xor_sync(full_mask, mx, 8));
            mx = fmaxf(mx, __shfl_xor_sync(full_mask, mx, 16));
            float part = m[j][e] == -INFINITY ? 0.0f : l[j][e] * exp2f(m[j][e] - mx);
            part += __shfl_xor_sync(full_mask, part, 4);
            part += __shfl_xor_sync(full_mask, part, 8);
            part += __shfl_xor_sync(full_mask, part, 16);
            const int64_t r = (rt0 + j) * kRowTile + 2 * t + e;
            if (g == 0 && r < n_rows) {
                const int p = int(r / a.group), qh = h * a.group + int(r % a.group);
                a.lse_out[int64_t(p) * a.n_q_heads + qh] = mx == -INFINITY ? -INFINITY : (mx + log2f(part)) / kLog2e;
            }
        }
}

// Per KV head h and row r < row_tiles * kRowTile: the row's probe position and log2-denominator
// (lse * log2 e) as an int2 (pos, bits of l2), so the scores kernel stages them with the rows'
// fragments. Rows past the last get pos -1: no key position is below 0, so they see nothing.
__global__ void __launch_bounds__(kThreads) probe_rowmeta_kernel(const probe_args a, int2 * meta, int64_t meta_rows) {
    const int64_t n = int64_t(a.n_kv_heads) * meta_rows, n_rows = int64_t(a.n_probes) * a.group;
    for (int64_t idx = blockIdx.x * int64_t(kThreads) + threadIdx.x; idx < n; idx += int64_t(gridDim.x) * kThreads) {
        const int h = int(idx / meta_rows);
        const int64_t r = idx % meta_rows;
        int pos = -1;
        float l2 = 0.0f;
        if (r < n_rows) {
            const int p = int(r / a.group), qh = h * a.group + int(r % a.group);
            pos = a.probe_pos[p];
            l2 = a.lse_in[int64_t(p) * a.n_q_heads + qh] * kLog2e;
        }
        meta[idx] = make_int2(pos, __float_as_int(l2));
    }
}

template <int D>
__global__ void __launch_bounds__(kThreads) probe_scores_mma_kernel(const probe_args a, const uint4 * __restrict__ qf,
                                                                    const int2 * __restrict__ meta,
                                                                    int64_t row_tiles, const uint4 * __restrict__ kf,
                                                                    int64_t key_tiles) {
    constexpr int KS = D / 16, KT = kScoreKeyTiles;
    constexpr int kTileChunks = (D / 32) * 32;                  // uint4 of one row tile's fragments
    constexpr int kMetaChunks = kRowTile * sizeof(int2) / 16;  // uint4 of one row tile's meta
    __shared__ uint4 stage_q[2][kStageTiles * kTileChunks];
    __shared__ int4 stage_meta[2][kStageTiles * kMetaChunks];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    const int64_t key_blocks = (a.n_keys + kScoreKeys - 1) / kScoreKeys;
    const int h = int(blockIdx.x / key_blocks);
    const int64_t ib0 = (blockIdx.x % key_blocks) * kScoreKeys;  // the block's first key
    const int64_t i0 = ib0 + warp * (16 * KT);                     // this warp's first key
    // Per 16-key tile m: this lane's keys ia = i0 + 16m + g and ib = ia + 8, their positions and
    // the rows of their requests, [ra0, ra1) and [rb0, rb1) (empty past n_keys).
    int pa[KT], pb[KT], ra0[KT], ra1[KT], rb0[KT], rb1[KT];
    uint32_t ah[KT][KS][4];
#pragma unroll
    for (int m = 0; m < KT; ++m) {
        const int64_t ia = i0 + 16 * m + g, ib = ia + 8;
        pa[m] = ia < a.n_keys ? a.key_pos[ia] : 0, pb[m] = ib < a.n_keys ? a.key_pos[ib] : 0;
        ra0[m] = ra1[m] = rb0[m] = rb1[m] = 0;
        if (ia < a.n_keys) key_probes(a, ia, &ra0[m], &ra1[m]);
        if (ib < a.n_keys) key_probes(a, ib, &rb0[m], &rb1[m]);
        ra0[m] *= a.group, ra1[m] *= a.group, rb0[m] *= a.group, rb1[m] *= a.group;
#pragma unroll
        for (int kk = 0; kk < KS; ++kk) {
            const uint4 f = kf[(int64_t(h) * key_tiles + min((i0 + 16 * m) / 16, key_tiles - 1)) * KS * 32 + kk * 32 + lane];
            ah[m][kk][0] = f.x, ah[m][kk][1] = f.y, ah[m][kk][2] = f.z, ah[m][kk][3] = f.w;
        }
    }

    // The block's rows: from its first key's request to its last key's (keys are in request
    // order), in stages of kStageTiles row tiles that the whole block copies into shared memory
    // (cp.async, double-buffered: the next stage loads while this one is used). Each row tile's
    // fragments and meta thus come from L2 once per block, not once per warp.
    int rt_beg = 0, rt_end = 0;
    if (ib0 < a.n_keys) {
        int pbeg, pend, unused;
        key_probes(a, ib0, &pbeg, &unused);
        key_probes(a, min(ib0 + kScoreKeys, a.n_keys) - 1, &unused, &pend);
        rt_beg = pbeg * a.group / kRowTile, rt_end = (pend * a.group + kRowTile - 1) / kRowTile;
    }
    const int n_stages = (rt_end - rt_beg + kStageTiles - 1) / kStageTiles;
    const uint4 * qsrc = qf + int64_t(h) * row_tiles * kTileChunks;
    const uint4 * msrc = reinterpret_cast<const uint4 *>(meta + int64_t(h) * row_tiles * kRowTile);
    auto load_stage = [&](int s) {
        const int rt = rt_beg + s * kStageTiles, nt = min(kStageTiles, rt_end - rt);
        const unsigned dq = smem_addr(stage_q[s & 1]), dm = smem_addr(stage_meta[s & 1]);
        for (int c = threadIdx.x; c < nt * kTileChunks; c += kThreads)
            cp_async16(dq + 16u * unsigned(c), qsrc + int64_t(rt) * kTileChunks + c, 16);
        for (int c = threadIdx.x; c < nt * kMetaChunks; c += kThreads)
            cp_async16(dm + 16u * unsigned(c), msrc + int64_t(rt) * kMetaChunks + c, 16);
        cp_async_commit();
    };
    float acc_a[KT], acc_b[KT];
#pragma unroll
    for (int m = 0; m < KT; ++m) acc_a[m] = acc_b[m] = 0.0f;
    if (n_stages > 0) load_stage(0);
    for (int s = 0; s < n_stages; ++s) {
        cp_async_wait<0>();
        __syncthreads();  // stage s is in; every warp is done with stage s - 1, whose buffer s + 1 reuses
        if (s + 1 < n_stages) load_stage(s + 1);
        const uint4 * sq = stage_q[s & 1];
        const int4 * sm = stage_meta[s & 1];
        const int rt0 = rt_beg + s * kStageTiles, nt = min(kStageTiles, rt_end - rt0);
#pragma unroll 2
        for (int j = 0; j < nt; ++j) {
            // This lane's rows of the tile: 2t and 2t + 1 (columns of the mma's C fragment).
            const int4 rm = sm[j * kMetaChunks + t];  // pos, l2 of row 2t; pos, l2 of row 2t + 1
            const int r = (rt0 + j) * kRowTile + 2 * t;
            const int pos[2] = {rm.x, rm.z};
            const float l2[2] = {__int_as_float(rm.y), __int_as_float(rm.w)};
            bool va[KT][2], vb[KT][2], any = false;
#pragma unroll
            for (int e = 0; e < 2; ++e)
#pragma unroll
                for (int m = 0; m < KT; ++m) {
                    va[m][e] = r + e >= ra0[m] && r + e < ra1[m] && pa[m] <= pos[e];
                    vb[m][e] = r + e >= rb0[m] && r + e < rb1[m] && pb[m] <= pos[e];
                    any |= va[m][e] || vb[m][e];
                }
            if (!__any_sync(full_mask, any)) continue;  // warp-uniform
            // Per key tile, even and odd k16 steps: 2 KT independent mma chains sharing each B fragment.
            float sc[KT][4], sl[KT][4];
#pragma unroll
            for (int m = 0; m < KT; ++m)
#pragma unroll
                for (int e = 0; e < 4; ++e) sc[m][e] = sl[m][e] = 0.0f;
#pragma unroll
            for (int kp = 0; kp < D / 32; ++kp) {
                const uint4 v = sq[j * kTileChunks + kp * 32 + lane];
#pragma unroll
                for (int m = 0; m < KT; ++m) {
                    mma_16816(sc[m], ah[m][2 * kp], v.x, v.y);
                    mma_16816(sl[m], ah[m][2 * kp + 1], v.z, v.w);
                }
            }
#pragma unroll
            for (int m = 0; m < KT; ++m)
#pragma unroll
                for (int e = 0; e < 2; ++e) {  // sc[m][e]: key 16m + g, row 2t + e; sc[m][2 + e]: key 16m + g + 8
                    if (va[m][e]) acc_a[m] += exp2_ftz(sc[m][e] + sl[m][e] - l2[e]);
                    if (vb[m][e]) acc_b[m] += exp2_ftz(sc[m][2 + e] + sl[m][2 + e] - l2[e]);
                }
        }
    }
#pragma unroll
    for (int m = 0; m < KT; ++m) {
        // Lanes 4g .. 4g + 3 hold keys g and g + 8 of the tile.
        float x = acc_a[m], y = acc_b[m];
        x += __shfl_xor_sync(full_mask, x, 1);
        x += __shfl_xor_sync(full_mask, x, 2);
        y += __shfl_xor_sync(full_mask, y, 1);
        y += __shfl_xor_sync(full_mask, y, 2);
        const int64_t ia = i0 + 16 * m + g, ib = ia + 8;
        if (t == 0) {
            if (ia < a.n_keys) a.scores[int64_t(h) * a.n_keys + ia] = x;
            if (ib < a.n_keys) a.scores[int64_t(h) * a.n_keys + ib] = y;
        }
    }
}

template <int D, typename TK>
void launch(context & ctx, const TK * k, probe_args a) {
    constexpr int KS = D / 16;
    const int64_t n_rows = int64_t(a.n_probes) * a.group;
    const int64_t row_tiles = std::max<int64_t>((n_rows + kRowTile - 1) / kRowTile, 1);
    const int64_t key_tiles = std::max<int64_t>((a.n_keys + 15) / 16, 1);
    // Workspace: lse | q fragments | k fragments | row meta (each 16-byte aligned).
    const size_t lse_bytes = (size_t(a.n_probes) * a.n_q_heads * sizeof(float) + 15) / 16 * 16;
    const size_t qf_bytes = size_t(a.n_kv_heads) * size_t(row_tiles) * (D / 32) * 32 * sizeof(uint4);
    const size_t kf_bytes = size_t(a.n_kv_heads) * size_t(key_tiles) * KS * 32 * sizeof(uint4);
    const int64_t meta_rows = row_tiles * kRowTile;
    const size_t meta_bytes = size_t(a.n_kv_heads) * size_t(meta_rows) * sizeof(int2);
    uint8_t * ws = static_cast<uint8_t *>(ctx.workspace(lse_bytes + qf_bytes + kf_bytes + meta_bytes));
    uint4 * qf = reinterpret_cast<uint4 *>(ws + lse_bytes);
    uint4 * kf = reinterpret_cast<uint4 *>(ws + lse_bytes + qf_bytes);
    int2 * meta = reinterpret_cast<int2 *>(ws + lse_bytes + qf_bytes + kf_bytes);
    const int64_t n_q = int64_t(a.n_kv_heads) * row_tiles * (D / 32) * 32;
    probe_qfrag_kernel<D><<<grid_stride_blocks(n_q, kThreads, ctx), kThreads, 0, ctx.stream>>>(a, qf, row_tiles);
    KVCOMP_CUDA_CHECK_LAUNCH();
    const int64_t n_k = int64_t(a.n_kv_heads) * key_tiles * KS * 32;
    probe_kfrag_kernel<D, TK><<<grid_stride_blocks(n_k, kThreads, ctx), kThreads, 0, ctx.stream>>>(k, a, kf, key_tiles);
    KVCOMP_CUDA_CHECK_LAUNCH();
    if (!a.lse_in && n_rows > 0) {
        a.lse_out = reinterpret_cast<float *>(ws);
        const int64_t blocks = a.n_kv_heads * ((row_tiles + kWarps * kLseTilesPerWarp - 1) / (kWarps * kLseTilesPerWarp));
        probe_lse_mma_kernel<D><<<unsigned(blocks), kThreads, 0, ctx.stream>>>(a, qf, row_tiles, kf, key_tiles);
        KVCOMP_CUDA_CHECK_LAUNCH();
        a.lse_in = a.lse_out;
    }
    // With no probes the scores are zeros, written by the same kernel (its row loop is empty).
    const int64_t blocks = a.n_kv_heads * ((a.n_keys + kScoreKeys - 1) / kScoreKeys);
    if (blocks == 0) return;
    if (n_rows > 0) {
        const int64_t n_meta = int64_t(a.n_kv_heads) * meta_rows;
        probe_rowmeta_kernel<<<grid_stride_blocks(n_meta, kThreads, ctx), kThreads, 0, ctx.stream>>>(a, meta, meta_rows);
        KVCOMP_CUDA_CHECK_LAUNCH();
    }
    probe_scores_mma_kernel<D><<<unsigned(blocks), kThreads, 0, ctx.stream>>>(a, qf, meta, row_tiles, kf, key_tiles);
    KVCOMP_CUDA_CHECK_LAUNCH();
}

template <typename TK>
void launch_dim(context & ctx, const TK * k, const probe_args & a) {
    if (a.hd == 64)
        launch<64>(ctx, k, a);
    else
        launch<128>(ctx, k, a);
}

}  // namespace

bool mma_handles(int64_t head_dim) { return head_dim == 64 || head_dim == 128; }

void mma_launch(context & ctx, const void * k, bool k_f16, probe_args a) {
    if (k_f16)
        launch_dim(ctx, static_cast<const __half *>(k), a);
    else
        launch_dim(ctx, static_cast<const float *>(k), a);
}

}  // namespace kvcomp::cuda::probe
