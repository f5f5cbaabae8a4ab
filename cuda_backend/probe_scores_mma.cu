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
//   probe_scores_mma_kernel one block per (KV head, 128 keys): each warp keeps the A fragments of
//       its 32 keys (two 16-key tiles) and walks the row tiles of its keys' requests, adding
//       exp2(s - lse2) of keys g and g + 8 of each tile against rows 2t and 2t + 1 per lane; the 4
//       lanes of a key are summed with a fixed butterfly at the end.
// Both walks are software-pipelined per warp: the next tile's operands load during this tile's
// mma. (Staging the streamed operand through shared memory for the whole block measured slower
// on the H100 for both kernels, though it cut the lse walk's L2 traffic 5x: the barriers cost
// more than the traffic at this occupancy.)
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

template <int D>
__global__ void __launch_bounds__(kThreads) probe_scores_mma_kernel(const probe_args a, const uint4 * __restrict__ qf,
                                                                    int64_t row_tiles, const uint4 * __restrict__ kf,
                                                                    int64_t key_tiles) {
    constexpr int KS = D / 16, KT = kScoreKeyTiles;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    const int64_t key_blocks = (a.n_keys + kScoreKeys - 1) / kScoreKeys;
    const int h = int(blockIdx.x / key_blocks);
    const int64_t i0 = (blockIdx.x % key_blocks) * kScoreKeys + warp * (16 * KT);  // this warp's keys
    // Per 16-key tile m: this lane's keys ia = i0 + 16m + g and ib = ia + 8, their positions and
    // their requests' probes (none past n_keys).
    int pa[KT], pb[KT], pa0[KT], pa1[KT], pb0[KT], pb1[KT];
    uint32_t ah[KT][KS][4];
#pragma unroll
    for (int m = 0; m < KT; ++m) {
        const int64_t ia = i0 + 16 * m + g, ib = ia + 8;
        pa[m] = ia < a.n_keys ? a.key_pos[ia] : 0, pb[m] = ib < a.n_keys ? a.key_pos[ib] : 0;
        pa0[m] = pa1[m] = pb0[m] = pb1[m] = 0;
        if (ia < a.n_keys) key_probes(a, ia, &pa0[m], &pa1[m]);
        if (ib < a.n_keys) key_probes(a, ib, &pb0[m], &pb1[m]);
#pragma unroll
        for (int kk = 0; kk < KS; ++kk) {
            const uint4 f = kf[(int64_t(h) * key_tiles + min((i0 + 16 * m) / 16, key_tiles - 1)) * KS * 32 + kk * 32 + lane];
            ah[m][kk][0] = f.x, ah[m][kk][1] = f.y, ah[m][kk][2] = f.z, ah[m][kk][3] = f.w;
        }
    }

    // The warp's rows: from its first key's request to its last key's (keys are in request order).
    int rbeg = 0, rend = 0;
    if (i0 < a.n_keys) {
        int pbeg, pend, unused;
        key_probes(a, i0, &pbeg, &unused);
        key_probes(a, min(i0 + 16 * KT, a.n_keys) - 1, &unused, &pend);
        rbeg = pbeg * a.group, rend = pend * a.group;
    }
    const float * lse = a.lse_in;
    float acc_a[KT], acc_b[KT];
#pragma unroll
    for (int m = 0; m < KT; ++m) acc_a[m] = acc_b[m] = 0.0f;
    // Software pipeline: the next row tile's probes, log-denominators and B fragments are loaded
    // while this tile's mma run. This lane's rows of a tile: 2t and 2t + 1 (p = -1 outside
    // [rbeg, rend)). Row arithmetic in 32 bits (rows = probes x group < 2^31): a 64-bit division
    // per row costs dozens of instructions in a walk that is bound by instruction issue.
    const uint4 * qbase = qf + int64_t(h) * row_tiles * (D / 32) * 32 + lane;
    auto load_rows = [&](int rt, int (&p)[2], int (&pos)[2], float (&l2)[2], uint4 (&bf)[D / 32]) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
            const int r = rt * kRowTile + 2 * t + e;
            p[e] = -1, pos[e] = -1, l2[e] = 0.0f;
            if (r >= rbeg && r < rend) {
                const int pr = r / a.group;
                p[e] = pr, pos[e] = a.probe_pos[pr];
                l2[e] = lse[int64_t(pr) * a.n_q_heads + h * a.group + (r - pr * a.group)] * kLog2e;
            }
        }
        const uint4 * src = qbase + int64_t(rt) * (D / 32) * 32;
#pragma unroll
        for (int kp = 0; kp < D / 32; ++kp) bf[kp] = src[kp * 32];
    };
    uint4 bf[D / 32];
    int p[2] = {-1, -1}, pos[2] = {-1, -1};
    float l2n[2] = {0.0f, 0.0f};
    int rt = rbeg / kRowTile;
    if (rt * kRowTile < rend) load_rows(rt, p, pos, l2n, bf);
    for (; rt * kRowTile < rend; ++rt) {
        bool va[KT][2], vb[KT][2], any = false;
        float l2[2];
#pragma unroll
        for (int e = 0; e < 2; ++e) {
            l2[e] = l2n[e];
#pragma unroll
            for (int m = 0; m < KT; ++m) {
                va[m][e] = p[e] >= pa0[m] && p[e] < pa1[m] && pa[m] <= pos[e];
                vb[m][e] = p[e] >= pb0[m] && p[e] < pb1[m] && pb[m] <= pos[e];
                any |= va[m][e] || vb[m][e];
            }
        }
        uint4 cur[D / 32];
#pragma unroll
        for (int kp = 0; kp < D / 32; ++kp) cur[kp] = bf[kp];
        if ((rt + 1) * kRowTile < rend) load_rows(rt + 1, p, pos, l2n, bf);
        if (!__any_sync(full_mask, any)) continue;  // warp-uniform
        // Per key tile, even and odd k16 steps: 2 KT independent mma chains sharing each B fragment.
        float s[KT][4], sl[KT][4];
#pragma unroll
        for (int m = 0; m < KT; ++m)
#pragma unroll
            for (int e = 0; e < 4; ++e) s[m][e] = sl[m][e] = 0.0f;
#pragma unroll
        for (int kp = 0; kp < D / 32; ++kp) {
            const uint4 v = cur[kp];
#pragma unroll
            for (int m = 0; m < KT; ++m) {
                mma_16816(s[m], ah[m][2 * kp], v.x, v.y);
                mma_16816(sl[m], ah[m][2 * kp + 1], v.z, v.w);
            }
        }
#pragma unroll
        for (int m = 0; m < KT; ++m)
#pragma unroll
            for (int e = 0; e < 2; ++e) {  // s[m][e]: key 16m + g, row 2t + e; s[m][2 + e]: key 16m + g + 8
                if (va[m][e]) acc_a[m] += exp2f(s[m][e] + sl[m][e] - l2[e]);
                if (vb[m][e]) acc_b[m] += exp2f(s[m][2 + e] + sl[m][2 + e] - l2[e]);
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
    // Workspace: lse | q fragments | k fragments (each 16-byte aligned).
    const size_t lse_bytes = (size_t(a.n_probes) * a.n_q_heads * sizeof(float) + 15) / 16 * 16;
    const size_t qf_bytes = size_t(a.n_kv_heads) * size_t(row_tiles) * (D / 32) * 32 * sizeof(uint4);
    const size_t kf_bytes = size_t(a.n_kv_heads) * size_t(key_tiles) * KS * 32 * sizeof(uint4);
    uint8_t * ws = static_cast<uint8_t *>(ctx.workspace(lse_bytes + qf_bytes + kf_bytes));
    uint4 * qf = reinterpret_cast<uint4 *>(ws + lse_bytes);
    uint4 * kf = reinterpret_cast<uint4 *>(ws + lse_bytes + qf_bytes);
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
    probe_scores_mma_kernel<D><<<unsigned(blocks), kThreads, 0, ctx.stream>>>(a, qf, row_tiles, kf, key_tiles);
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
