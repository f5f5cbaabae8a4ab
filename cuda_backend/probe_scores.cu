// probe_scores: ZipCache saliency, the column sums of the probe queries' causal attention rows
// (contract in core/op.h), deterministic and without any P x K intermediate.
// Dispatch: the tensor-core kernels of probe_scores_mma.cu for head_dim 64 and 128 (prompt
// saliency is ~10 GFLOP per layer at a 4K prompt: on CUDA cores it doubled TTFT); the SIMT
// kernels below otherwise, or when KVCOMP_PROBE_SCORES=simt.
//
// Rows: for KV head g the rows are r = p * group + j (probe p, query head g * group + j), so a
// KV head's rows share its keys. Key i is visible to probe p when both belong to the same request
// (ragged form: probe_indptr / key_indptr; the single-request form is one request owning all)
// and key_pos[i] <= probe_pos[p].
// SIMT kernels (128 threads = 4 warps; lane = key within a 32-key tile, warp = a subset of rows):
//   probe_lse_kernel     (skipped when use_lse) one block per (KV head, tile of 16 rows): walks the
//       key tiles of its rows' requests only; a tile no (row, key) pair of the block sees is
//       skipped (__syncthreads_or); otherwise the block stages 32 keys in shared memory (f32, row
//       stride hd + 1 so lanes reading different keys hit different banks), each warp scores its 4
//       rows against them, each lane keeping an online (max, sum) per row over the keys it saw; a
//       warp then combines its lanes' pairs with a fixed butterfly -> lse[p, h] (natural log; -inf
//       when the probe sees no key).
//   probe_scores_kernel  one block per (KV head, 32-key tile): walks the row tiles of its keys'
//       requests only, skipping a tile no pair sees, staging 16 query rows at a time; each thread
//       accumulates exp(logit - lse) of its key over its warp's rows; the 4 warps' sums are added
//       in a fixed order at the end.
// Every sum has a fixed order, so results are identical run to run; no atomics. Skipped pairs
// contribute nothing either way, so skipping does not change any sum. Work is at most
// O(sum over requests of probes * keys * n_q_heads * head_dim) twice, memory O(n_probes * n_q_heads).
// fp32 throughout (logits, expf, sums); the CPU oracle uses double (tolerance: NMSE 1e-6).
#include <climits>
#include <cstdlib>
#include <string>

#include "probe_scores.cuh"

namespace kvcomp::cuda {

namespace {

using probe::key_probes;
using probe::probe_args;
using probe::probe_keys;

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;
constexpr int kKeyTile = 32;  // keys per tile: one per lane
constexpr int kRowTile = 16;  // query rows staged at a time: 4 per warp
constexpr int kRowsPerWarp = kRowTile / kWarps;

// Stages keys [k0, k0 + 32) of KV head g as f32 rows of stride hd + 1 (zeros past n_keys).
template <typename TK>
__device__ __forceinline__ void stage_keys(float * k_s, const TK * __restrict__ k, const probe_args & a,
                                           int g, int64_t k0) {
    for (int idx = threadIdx.x; idx < kKeyTile * a.hd; idx += kThreads) {
        const int kk = idx / a.hd, c = idx % a.hd;
        const int64_t i = k0 + kk;
        float x = 0.0f;
        if (i < a.n_keys) {
            const int64_t rt = a.row_tokens;  // core/op.h: token-major (0) or head-major rows
            const int64_t e = rt == 0 ? (i * a.n_kv_heads + g) * a.hd + c
                                      : (((i / rt) * a.n_kv_heads + g) * rt + i % rt) * a.hd + c;
            x = to_float(k[e]);
        }
        k_s[kk * (a.hd + 1) + c] = x;
    }
}

// Stages query rows [r0, r0 + 16) of KV head g's group (zeros past the last row).
__device__ __forceinline__ void stage_rows(float * q_s, const probe_args & a, int g, int r0, int n_rows) {
    for (int idx = threadIdx.x; idx < kRowTile * a.hd; idx += kThreads) {
        const int rr = idx / a.hd, c = idx % a.hd, r = r0 + rr;
        float x = 0.0f;
        if (r < n_rows) {
            const int p = r / a.group, h = g * a.group + r % a.group;
            x = a.q[(int64_t(p) * a.n_q_heads + h) * a.hd + c];
        }
        q_s[rr * a.hd + c] = x;
    }
}

// scale * q_s[row] . k_s[lane]
__device__ __forceinline__ float logit(const float * q_s, const float * k_s, int row, int lane, int hd,
                                       float scale) {
    const float * qr = q_s + row * hd;  // same address for the whole warp: broadcast
    const float * kr = k_s + lane * (hd + 1);
    float acc = 0.0f;
    for (int c = 0; c < hd; ++c) acc = fmaf(qr[c], kr[c], acc);
    return acc * scale;
}

template <typename TK>
__global__ void __launch_bounds__(kThreads) probe_lse_kernel(const TK * __restrict__ k, const probe_args a) {
    extern __shared__ float smem[];
    float * k_s = smem;                         // [32][hd + 1]
    float * q_s = k_s + kKeyTile * (a.hd + 1);  // [16][hd]
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int n_rows = a.n_probes * a.group;
    const int row_tiles = (n_rows + kRowTile - 1) / kRowTile;
    const int g = int(blockIdx.x / row_tiles), r0 = int(blockIdx.x % row_tiles) * kRowTile;

    stage_rows(q_s, a, g, r0, n_rows);
    int ppos[kRowsPerWarp];
    int64_t klo[kRowsPerWarp], khi[kRowsPerWarp];
    float m[kRowsPerWarp], l[kRowsPerWarp];
    const int warp_rows = min(kRowsPerWarp, max(n_rows - (r0 + warp * kRowsPerWarp), 0));
#pragma unroll
    for (int j = 0; j < kRowsPerWarp; ++j) {
        const int r = r0 + warp * kRowsPerWarp + j;
        ppos[j] = r < n_rows ? a.probe_pos[r / a.group] : 0;
        klo[j] = khi[j] = 0;
        if (r < n_rows) probe_keys(a, r / a.group, &klo[j], &khi[j]);
        m[j] = -INFINITY;
        l[j] = 0.0f;
    }
    // The block's keys: from its first row's request to its last row's (rows are in probe order,
    // so the requests in between are the ones in between).
    int64_t kbeg, kend, unused;
    probe_keys(a, r0 / a.group, &kbeg, &unused);
    probe_keys(a, (min(r0 + kRowTile, n_rows) - 1) / a.group, &unused, &kend);
    for (int64_t k0 = kbeg; k0 < kend; k0 += kKeyTile) {
        const int64_t i = k0 + lane;
        const bool key_ok = i < kend;
        const int kpos = key_ok ? a.key_pos[i] : 0;
        unsigned vis = 0;  // bit j: row j of this warp sees key i
#pragma unroll
        for (int j = 0; j < kRowsPerWarp; ++j)
            if (j < warp_rows && key_ok && i >= klo[j] && i < khi[j] && kpos <= ppos[j]) vis |= 1u << j;
        // Also the barrier after the previous tile (and after q_s staging, first time).
        if (!__syncthreads_or(vis != 0)) continue;  // no pair of the block sees this tile
        stage_keys(k_s, k, a, g, k0);
        __syncthreads();
#pragma unroll
        for (int j = 0; j < kRowsPerWarp; ++j) {
            if (!((vis >> j) & 1u)) continue;  // masked: not computed
            const float s = logit(q_s, k_s, warp * kRowsPerWarp + j, lane, a.hd, a.scale);
            if (s > m[j]) {
                l[j] = l[j] * expf(m[j] - s) + 1.0f;  // expf(-inf) = 0 on the first key
                m[j] = s;
            } else {
                l[j] += expf(s - m[j]);
            }
        }
    }
#pragma unroll
    for (int j = 0; j < kRowsPerWarp; ++j) {
        const float mx = warp_max(m[j]);
        const float part = m[j] == -INFINITY ? 0.0f : l[j] * expf(m[j] - mx);
        const float sum = warp_sum(part);
        const int r = r0 + warp * kRowsPerWarp + j;
        if (lane == 0 && r < n_rows) {
            const int p = r / a.group, h = g * a.group + r % a.group;
            a.lse_out[int64_t(p) * a.n_q_heads + h] = mx == -INFINITY ? -INFINITY : mx + logf(sum);
        }
    }
}

template <typename TK>
__global__ void __launch_bounds__(kThreads)
    probe_scores_kernel(const TK * __restrict__ k, const probe_args a) {
    extern __shared__ float smem[];
    float * k_s = smem;                         // [32][hd + 1]
    float * q_s = k_s + kKeyTile * (a.hd + 1);  // [16][hd]
    __shared__ float sm_acc[kWarps][kKeyTile];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int n_rows = a.n_probes * a.group;
    const int64_t key_tiles = (a.n_keys + kKeyTile - 1) / kKeyTile;
    const int g = int(blockIdx.x / key_tiles);
    const int64_t k0 = (blockIdx.x % key_tiles) * kKeyTile;
    const int64_t i = k0 + lane;
    const bool key_ok = i < a.n_keys;
    const int kpos = key_ok ? a.key_pos[i] : 0;
    int plo = 0, phi = 0;  // this key's probes
    if (key_ok) key_probes(a, i, &plo, &phi);
    // The block's rows: from its first key's request to its last key's (keys are in request order).
    int pbeg, pend, unused;
    key_probes(a, k0, &pbeg, &unused);
    key_probes(a, (k0 + kKeyTile < a.n_keys ? k0 + kKeyTile : a.n_keys) - 1, &unused, &pend);
    const int rbeg = pbeg * a.group, rend = pend * a.group;

    stage_keys(k_s, k, a, g, k0);
    float acc = 0.0f;
    for (int r0 = rbeg; r0 < rend; r0 += kRowTile) {
        unsigned vis = 0;  // bit j: row j of this warp sees key i
#pragma unroll
        for (int j = 0; j < kRowsPerWarp; ++j) {
            const int r = r0 + warp * kRowsPerWarp + j, p = r / a.group;
            if (r < rend && key_ok && p >= plo && p < phi && kpos <= a.probe_pos[p]) vis |= 1u << j;
        }
        // Also the barrier after the previous rows (and after k_s staging, first time).
        if (!__syncthreads_or(vis != 0)) continue;  // no pair of the block sees these rows
        stage_rows(q_s, a, g, r0, n_rows);
        __syncthreads();
#pragma unroll
        for (int j = 0; j < kRowsPerWarp; ++j) {
            if (!((vis >> j) & 1u)) continue;  // masked: not computed
            const int r = r0 + warp * kRowsPerWarp + j;
            const int p = r / a.group, h = g * a.group + r % a.group;
            const float s = logit(q_s, k_s, warp * kRowsPerWarp + j, lane, a.hd, a.scale);
            acc += expf(s - a.lse_in[int64_t(p) * a.n_q_heads + h]);
        }
    }
    sm_acc[warp][lane] = acc;
    __syncthreads();
    if (warp == 0 && i < a.n_keys) {
        float sum = 0.0f;
#pragma unroll
        for (int w = 0; w < kWarps; ++w) sum += sm_acc[w][lane];
        a.scores[int64_t(g) * a.n_keys + i] = sum;
    }
}

size_t probe_smem_bytes(int64_t hd) {
    return size_t(kKeyTile * (hd + 1) + kRowTile * hd) * sizeof(float);
}

template <typename TK>
void launch(context & ctx, const op_desc & op, probe_args a) {
    const auto & p = op.get<probe_scores_params>();
    const TK * k = dev_ptr<const TK>(op.src[2]);
    const size_t smem = probe_smem_bytes(p.head_dim);
    const int64_t n_rows = p.n_probes * a.group;
    if (!p.use_lse && n_rows > 0) {
        a.lse_out = static_cast<float *>(ctx.workspace(size_t(p.n_probes * p.n_q_heads) * sizeof(float)));
        const int64_t blocks = p.n_kv_heads * ((n_rows + kRowTile - 1) / kRowTile);
        probe_lse_kernel<TK><<<unsigned(blocks), kThreads, smem, ctx.stream>>>(k, a);
        KVCOMP_CUDA_CHECK_LAUNCH();
        a.lse_in = a.lse_out;
    }
    // With no probes the scores are zeros, written by the same kernel (its row loop is empty).
    const int64_t blocks = p.n_kv_heads * ((p.n_keys + kKeyTile - 1) / kKeyTile);
    probe_scores_kernel<TK><<<unsigned(blocks), kThreads, smem, ctx.stream>>>(k, a);
    KVCOMP_CUDA_CHECK_LAUNCH();
}

// The tensor-core kernels unless the head_dim is not theirs or KVCOMP_PROBE_SCORES=simt asks for
// the SIMT ones (kept as the fallback and for comparison in bench_ops).
bool use_mma(int64_t head_dim) {
    static const bool simt = [] {
        const char * e = std::getenv("KVCOMP_PROBE_SCORES");
        return e && std::string(e) == "simt";
    }();
    return !simt && probe::mma_handles(head_dim);
}

}  // namespace

support supports_probe_scores(const op_desc & op) {
    const auto & p = op.get<probe_scores_params>();
    if (probe_smem_bytes(p.head_dim) > 48 * 1024)
        return support::no("head_dim " + std::to_string(p.head_dim) + " (key and query tiles exceed 48 KiB)");
    const int64_t group = p.n_q_heads / p.n_kv_heads;
    if (p.n_probes * p.n_q_heads > INT_MAX || p.n_probes * group + kRowTile > INT_MAX)
        return support::no("n_probes * n_q_heads must fit in 32 bits");
    if (p.batch > INT_MAX) return support::no("batch must fit in 32 bits");
    if (p.n_kv_heads * ((p.n_keys + kKeyTile - 1) / kKeyTile) > INT_MAX ||
        p.n_kv_heads * ((p.n_probes * group + kRowTile - 1) / kRowTile) > INT_MAX)
        return support::no("too many thread blocks");
    return support::yes();
}

void run_probe_scores(context & ctx, const op_desc & op) {
    const auto & p = op.get<probe_scores_params>();
    probe_args a{};
    a.q = dev_ptr<const float>(op.src[0]);
    a.probe_pos = dev_ptr<const int32_t>(op.src[1]);
    a.key_pos = dev_ptr<const int32_t>(op.src[3]);
    a.lse_in = p.use_lse ? dev_ptr<const float>(op.src[4]) : nullptr;
    a.batch = int(p.batch);
    a.probe_indptr = p.batch > 0 ? dev_ptr<const int32_t>(op.src[5]) : nullptr;
    a.key_indptr = p.batch > 0 ? dev_ptr<const int32_t>(op.src[6]) : nullptr;
    a.scores = dev_ptr<float>(op.dst[0]);
    a.n_keys = p.n_keys;
    a.row_tokens = p.row_tokens;
    a.n_probes = int(p.n_probes);
    a.n_q_heads = int(p.n_q_heads);
    a.n_kv_heads = int(p.n_kv_heads);
    a.group = int(p.n_q_heads / p.n_kv_heads);
    a.hd = int(p.head_dim);
    a.scale = p.scale;
    if (use_mma(p.head_dim))
        probe::mma_launch(ctx, dev_ptr<const void>(op.src[2]), op.src[2].type == dtype::f16, a);
    else if (op.src[2].type == dtype::f16)
        launch<__half>(ctx, op, a);
    else
        launch<float>(ctx, op, a);
}

}  // namespace kvcomp::cuda
