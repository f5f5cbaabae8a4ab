// attn_decode_ragged: decode attention in the reduced (per-head width) dims of ZACK / FDC, over
// ragged pages, one block per row of the host's decode schedule.
//
// Kernels:
//   attn_decode_ragged_kernel<QP>  one block of 128 threads (4 warps) per (schedule row, head
//       chunk): request b, KV head c, tokens [first, end), QP query heads of c's group (QP = group
//       rounded up to 1, 2, 4, 8; larger groups use several head chunks, grid y). Every K'/V' byte
//       is read once per chunk of QP heads.
//   ragged_merge_kernel            combines the tasks' partials of one (request, KV head).
// Layout: core/op.h "Low-rank KV"; partials: ragged_common.cuh.
//
// Memory: each warp streams its own tiles of the task (warp w takes tiles w, w + 4, ...) through a
// ring of its own in shared memory (ragged_stream.cuh: a tile is a few whole runs of a page's K'
// and V' rows, copied with cp.async in 16-byte chunks; page-table entries one tile ahead), waits
// for its own copies at a __syncwarp, and never meets the other warps inside the tile loop. The
// tile size is chosen per head so that a stage holds ~8 KiB (at least 8 tokens of the widest
// head, 256 + 256; at most 248 tokens). (This replaced one block-wide ring whose 12 KiB tiles the
// 4 warps shared, with a __syncthreads per tile, which left the kernel latency-bound at 0.45 of the
// copy bandwidth on an H100, batch 16 x 32K.) Page sizes that are not multiples of 8, or page views
// not 16-byte aligned, take a synchronous element-wise copy with the same layout (correct, slower).
// Shared memory: 4 warps x kStages x 8 KiB (64 KiB with the default KVCOMP_RAGGED_STAGES = 2, past
// the 48 KiB default: the launch opts in), which on an H100 allows 3 blocks per SM, as many as the
// registers allow for QP = 4.
//
// Math (as attn_decode.cu, with the width a run-time value): L lanes share a token (L = the
// power of two >= max(k_width, v_width) / 8, at least QP), each lane owning 8 consecutive features
// of K' and of V'; features past a width are zero. The kernel dispatches on L per block (a switch
// over inlined bodies), so each head uses the lanes its width needs. Per token: QP partial dots,
// the GQA butterfly (decode_common.cuh) leaves each lane one head's score; online softmax in fp32,
// log2 domain (q pre-scaled by scale * log2 e), running max shared by a warp's token groups; o for
// all QP heads over the lane's 8 V' features. Warps merge through shared memory at the end
// (decode_common.cuh; one __syncthreads, then the rings hold the states), then the block writes out
// directly (its (b, c) has one task) or partials.
// Widths that are not multiples of 8 read shared memory element-wise instead of 16 bytes at once.
//
// q4 pages (kv.bits == 4) go to attn_decode_ragged_q4.cu.
//
// Invalid inputs a kernel cannot refuse: request and KV head outside the tables make the block
// exit; token ranges are clamped to the request; page numbers are clamped to the pool.
#include <climits>
#include <cstdlib>
#include <cstring>

#include "block_timeline.cuh"
#include "common.cuh"
#include "decode_common.cuh"
#include "dependent_launch.cuh"
#include "ragged_common.cuh"
#include "ragged_stream.cuh"

namespace kvcomp::cuda {

namespace {

constexpr int kThreads = kRaggedThreads;
constexpr int kWarps = kRaggedWarps;
// Per-warp ring: kStages stages of kStageBytes each (a preamble define, to try 3 on a new GPU).
#ifndef KVCOMP_RAGGED_STAGES
#define KVCOMP_RAGGED_STAGES 2
#endif
constexpr int kStages = KVCOMP_RAGGED_STAGES;
constexpr int kStageBytes = 8 * 1024;
constexpr int kStageHalves = kStageBytes / 2;
constexpr int kWarpRingBytes = kStages * kStageBytes;
constexpr int kU = 2;  // token steps per warp iteration
constexpr float kLog2e = 1.4426950408889634f;
constexpr size_t kSmemBytes = size_t(kWarps) * kWarpRingBytes;
using stream = tile_stream<kStages, kStageBytes, false>;
static_assert(warp_merge_floats<kWarps, 8, 256>() * sizeof(float) <= kSmemBytes,
              "the warps' merge area (widest case) must fit in the rings it reuses");
static_assert(kStageHalves / (2 * 256) >= 8, "a stage holds at least 8 tokens of the widest head");
static_assert(kSmemBytes <= 96 * 1024,
              "within the opt-in shared-memory limit of every target (sm_86/89: 99 KiB)");

// 8 halves of a row (features f0 .. f0 + 7 of a width-`width` row) to float; zeros past the width.
__device__ __forceinline__ void load8(const __half * row, int f0, int width, bool vec, float (&x)[8]) {
    if (vec) {
        if (f0 < width) {
            unpack8(*reinterpret_cast<const uint4 *>(row + f0), x);
        } else {
#pragma unroll
            for (int j = 0; j < 8; ++j) x[j] = 0.0f;
        }
    } else {
#pragma unroll
        for (int j = 0; j < 8; ++j) x[j] = f0 + j < width ? __half2float(row[f0 + j]) : 0.0f;
    }
}

template <int QP, int L>
__device__ __forceinline__ void decode_body(const rdecode_args & a, const rtask & t, uint8_t * ring) {
    constexpr int G = 32 / L;  // tokens per warp step
    static_assert(QP <= L && L <= 32, "lane mapping");
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int tg = lane / L, lj = lane % L;
    const int kw = t.hd.k_width, vw = t.hd.v_width;
    const bool vec = kw % 8 == 0 && vw % 8 == 0;

    float q[QP][8];
    {
        const float * qrow = a.q + int64_t(t.b) * a.group * a.k_total + int64_t(a.group) * t.hd.k_offset;
#pragma unroll
        for (int i = 0; i < QP; ++i)
#pragma unroll
            for (int j = 0; j < 8; ++j) {
                const int f = 8 * lj + j;
                q[i][j] = i < t.nh && f < kw ? qrow[(t.h0 + i) * kw + f] * a.qscale : 0.0f;
            }
    }
    float o[QP][8];
#pragma unroll
    for (int i = 0; i < QP; ++i)
#pragma unroll
        for (int j = 0; j < 8; ++j) o[i][j] = 0.0f;
    float m_run = -INFINITY, l_run = 0.0f;

    stream st(a, t, ring + warp * kWarpRingBytes, kStageHalves / (kw + vw));
    st.begin();
    for (int k = 0; k < st.n_mine; ++k) {  // uniform per warp
        st.acquire(k);

        const __half * kt = reinterpret_cast<const __half *>(st.k_stage(k));
        const __half * vt = reinterpret_cast<const __half *>(st.v_stage(k));
        int u_lo, u_hi;
        st.rows(k, u_lo, u_hi);
        const int n_steps = (u_hi - u_lo + G - 1) / G;
        for (int s0 = 0; s0 < n_steps; s0 += kU) {
            float s[kU];
#pragma unroll
            for (int u = 0; u < kU; ++u) {
                const int tok = u_lo + (s0 + u) * G + tg;
                const bool valid = tok < u_hi;
                float kf[8];
                load8(kt + (valid ? tok : u_lo) * kw, 8 * lj, valid ? kw : 0, vec, kf);
                float part[QP];
#pragma unroll
                for (int i = 0; i < QP; ++i) {
                    float acc = 0.0f;
#pragma unroll
                    for (int jj = 0; jj < 8; ++jj) acc = fmaf(q[i][jj], kf[jj], acc);
                    part[i] = acc;
                }
                const float full = butterfly<L, QP>(part, lj);  // every lane takes part
                s[u] = valid ? full : -INFINITY;
            }
            float mt = s[0];
#pragma unroll
            for (int u = 1; u < kU; ++u) mt = fmaxf(mt, s[u]);
#pragma unroll
            for (int off = L; off < 32; off <<= 1) mt = fmaxf(mt, __shfl_xor_sync(full_mask, mt, off));
            const float m_new = fmaxf(m_run, mt);
            const float m_use = m_new == -INFINITY ? 0.0f : m_new;  // nothing seen yet: avoid inf - inf
            const float alpha = exp2f(m_run - m_use);
            float p[kU], psum = 0.0f;
#pragma unroll
            for (int u = 0; u < kU; ++u) {
                p[u] = exp2f(s[u] - m_use);
                psum += p[u];
            }
            l_run = l_run * alpha + psum;
            m_run = m_new;
            if (__any_sync(full_mask, alpha != 1.0f)) {
#pragma unroll
                for (int i = 0; i < QP; ++i) {
                    const float ai = __shfl_sync(full_mask, alpha, head_lane<L, QP>(i), L);
#pragma unroll
                    for (int jj = 0; jj < 8; ++jj) o[i][jj] *= ai;
                }
            }
#pragma unroll
            for (int u = 0; u < kU; ++u) {
                const int tok = u_lo + (s0 + u) * G + tg;
                const bool valid = tok < u_hi;
                float vf[8];  // a masked token must add exactly 0: never read its (stale) row
                load8(vt + (valid ? tok : u_lo) * vw, 8 * lj, valid ? vw : 0, vec, vf);
#pragma unroll
                for (int i = 0; i < QP; ++i) {
                    const float pi = __shfl_sync(full_mask, p[u], head_lane<L, QP>(i), L);
#pragma unroll
                    for (int jj = 0; jj < 8; ++jj) o[i][jj] = fmaf(pi, vf[jj], o[i][jj]);
                }
            }
        }
    }
    cp_async_wait<0>();  // outstanding groups are empty; nothing may land in the merge area
    allow_consumer_launch();  // the merge may now be launched (dependent_launch.cuh)

    // The warps' states merge through the rings (publish_warp_states' first __syncthreads waits for
    // every warp's last reads of its stages).
    float * sm = reinterpret_cast<float *>(ring);
    publish_warp_states<L, QP, 8, kWarps>(m_run, l_run, o, sm);
    for (int idx = tid; idx < t.nh * vw; idx += kThreads) {
        const int i = idx / vw, d = idx % vw;
        float lse2;
        const float val = merge_warp_states<QP, 8 * L, kWarps>(sm, i, d, lse2);
        store_ragged_value(a, t, t.h0 + i, d, val, lse2);
    }
}

template <int QP>
__global__ void __launch_bounds__(kThreads) attn_decode_ragged_kernel(const rdecode_args a) {
    extern __shared__ uint4 smem[];
    uint8_t * ring = reinterpret_cast<uint8_t *>(smem);

    rtask t;
    if (!load_task(a, QP, t)) return;  // uniform

    const int chunks = (max(t.hd.k_width, t.hd.v_width) + 7) / 8;
    int L = QP;
    while (L < chunks) L *= 2;
    switch (L) {
        case 1:
            if constexpr (QP <= 1) decode_body<QP, 1>(a, t, ring);
            break;
        case 2:
            if constexpr (QP <= 2) decode_body<QP, 2>(a, t, ring);
            break;
        case 4:
            if constexpr (QP <= 4) decode_body<QP, 4>(a, t, ring);
            break;
        case 8:
            decode_body<QP, 8>(a, t, ring);
            break;
        case 16:
            decode_body<QP, 16>(a, t, ring);
            break;
        default:
            decode_body<QP, 32>(a, t, ring);
            break;
    }
}

// out of (b, c) with >= 2 tasks: sum_t 2^(lse_t - M) o_t / sum_t 2^(lse_t - M); zeros with none.
// One block per (request, KV head) and query head i of its group (grid y). The block's 8 warps take
// contiguous slices of the tasks; in each round a warp's lanes read 32 tasks' numbers and lse at
// once, and then the warp adds their output rows (lane l: channels l, l + 32, ...), whose loads do
// not depend on each other. Warps end with an online (max, sum, acc) state that the block combines
// in a fixed order (deterministic). (The previous kernel gave each output channel one thread that
// walked every task twice through dependent loads: 176 us for 66 tasks per head at batch 1 x 32K
// on an H200, 2.6x the decode kernel it followed.)

// J: channels per lane, 4 for layouts whose widest head is <= 128, else 8 (max_width <= 256,
// core/op.h). The loads in flight take R x J = 32 registers (R = 8 rows at J = 4): J = 8 and R = 8
// for every layout took 128 registers and half the resident blocks (9.7 instead of 5.8 us at batch
// 16 x 32K on an H200). R = 1 for rows of few tasks; W = 16 warps for rows of many (batch 1, where
// 32 blocks merge 66-198 tasks each and a warp's share of them is the critical path).
template <int J, int R, int W>
__global__ void __launch_bounds__(W * 32, W <= 8 ? 3 : 1) ragged_merge_kernel(const ragged_merge_args a) {
    constexpr int kMergeWarps = W, kMergeThreads = W * 32;
    const int bc = int(blockIdx.x), i = int(blockIdx.y);
    const int b = bc / a.n_kv_heads, c = bc % a.n_kv_heads;
    const int ptr = a.batch * a.n_kv_heads + 1;
    const int t0 = a.merge[bc], n = a.merge[bc + 1] - t0;
    // Every block waits, the ones with nothing to merge too: this grid must not end before the
    // decode (dependent_launch.cuh), which later kernels of the stream only wait for through it.
    wait_for_producer();
    if (n == 1) return;  // its task wrote out directly
    stamp_start(a.timeline);
    stamp_info(a.timeline, uint64_t(n));
    const ragged_head hd = load_head(a.heads, c);
    const int vw = min(max(hd.v_width, 1), a.max_width);
    const int lane = int(threadIdx.x) & 31, warp = int(threadIdx.x) >> 5;

    float m = -INFINITY, l = 0.0f, acc[J];
#pragma unroll
    for (int j = 0; j < J; ++j) acc[j] = 0.0f;
    const int per_warp = (n + kMergeWarps - 1) / kMergeWarps;
    const int k_end = min(n, (warp + 1) * per_warp);
    for (int k0 = warp * per_warp; k0 < k_end; k0 += 32) {  // uniform per warp
        const int k = k0 + lane;
        int64_t row = -1;
        float lse = -INFINITY;
        if (k < k_end) {
            const int task = a.merge[ptr + t0 + k];
            if (task >= 0 && task < a.n_tasks) {
                row = int64_t(task) * a.group + i;
                lse = a.part_lse[row];
            }
        }
        float mr = lse;
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) mr = fmaxf(mr, __shfl_xor_sync(full_mask, mr, off));
        if (mr == -INFINITY) continue;  // uniform: no task of the round has tokens
        const float m_new = fmaxf(m, mr);
        const float alpha = exp2f(m - m_new);  // 0 while m is -inf
        const float wt = lse == -INFINITY ? 0.0f : exp2f(lse - m_new);
        float ws = wt;
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) ws += __shfl_xor_sync(full_mask, ws, off);
        l = l * alpha + ws;
        m = m_new;
#pragma unroll
        for (int j = 0; j < J; ++j) acc[j] *= alpha;
        const int n_round = min(32, k_end - k0);
        // R rows at a time, all their loads issued before the first is used, so a warp
        // waits on memory about once per group, not once per row (a skipped row was a branch the
        // loads could not be hoisted over: 17.5 us for 66 tasks per head at batch 1 x 32K on an
        // H200). A row of weight 0 (no tokens, or past the round) loads nothing and adds 0.
        for (int r0 = 0; r0 < n_round; r0 += R) {
            float w[R], v[R][J];
#pragma unroll
            for (int u = 0; u < R; ++u) {
                const int r = r0 + u;
                w[u] = __shfl_sync(full_mask, wt, r & 31);
                const int64_t rr = __shfl_sync(full_mask, row, r & 31);
                if (r >= n_round) w[u] = 0.0f;
                const float * o = a.part_o + rr * a.max_width;
#pragma unroll
                for (int j = 0; j < J; ++j)
                    v[u][j] = w[u] != 0.0f && lane + 32 * j < vw ? o[lane + 32 * j] : 0.0f;
            }
#pragma unroll
            for (int u = 0; u < R; ++u)
#pragma unroll
                for (int j = 0; j < J; ++j) acc[j] = fmaf(w[u], v[u][j], acc[j]);
        }
    }

    __shared__ float s_m[kMergeWarps], s_l[kMergeWarps], s_o[kMergeWarps][256];
    if (lane == 0) s_m[warp] = m, s_l[warp] = l;
#pragma unroll
    for (int j = 0; j < J; ++j) s_o[warp][lane + 32 * j] = acc[j];
    __syncthreads();
    float M = -INFINITY;
#pragma unroll
    for (int w = 0; w < kMergeWarps; ++w) M = fmaxf(M, s_m[w]);
    float * out = a.out + int64_t(b) * a.group * a.v_total + int64_t(a.group) * hd.v_offset + int64_t(i) * vw;
    for (int d = int(threadIdx.x); d < vw; d += kMergeThreads) {
        float num = 0.0f, den = 0.0f;
        if (M != -INFINITY) {
#pragma unroll
            for (int w = 0; w < kMergeWarps; ++w) {
                const float f = s_m[w] == -INFINITY ? 0.0f : exp2f(s_m[w] - M);
                num = fmaf(f, s_o[w][d], num);
                den = fmaf(f, s_l[w], den);
            }
        }
        out[d] = den > 0.0f ? num / den : 0.0f;
    }
    stamp_end(a.timeline);
}

int qp_for(int64_t group) {
    return group <= 1 ? 1 : group <= 2 ? 2 : group <= 4 ? 4 : 8;
}

}  // namespace

// KVCOMP_RAGGED_DECODE (read here only): "simt" forces the SIMT kernels (to compare, or to fall back
// on a GPU where the tensor-core kernels misbehave); "mma" or unset: the tensor-core kernels
// (attn_decode_ragged_mma.cu, attn_decode_ragged_q4_mma.cu) wherever the widest head is <= 128,
// else the SIMT kernels.
bool ragged_mma_requested() {
    static const bool mma = [] {
        const char * v = std::getenv("KVCOMP_RAGGED_DECODE");
        if (!v || !*v || std::strcmp(v, "mma") == 0) return true;
        if (std::strcmp(v, "simt") == 0) return false;
        KVCOMP_THROW(status::invalid_argument, "KVCOMP_RAGGED_DECODE=", v, ": expected 'mma' or 'simt'");
    }();
    return mma;
}

namespace {

bool aligned16(const void * p) {
    return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

// The warps' rings take kSmemBytes (64 KiB with 2 stages), past the 48 KiB default (the launcher
// opts in). Occupancy on an H100 (228 KiB per SM): 3 blocks by shared memory; by registers (ptxas,
// CUDA 13.0: 239 / 167 / 128 / 128 for QP = 8 / 4 / 2 / 1) 2 for QP = 8, 3 for QP = 4, 4 for QP <= 2.
task_kernel<rdecode_args> simt_kernel_for(int group) {
    const int qp = qp_for(group);
    const unsigned chunks = unsigned((group + qp - 1) / qp);
    switch (qp) {
        case 1: return {attn_decode_ragged_kernel<1>, kThreads, kSmemBytes, chunks};
        case 2: return {attn_decode_ragged_kernel<2>, kThreads, kSmemBytes, chunks};
        case 4: return {attn_decode_ragged_kernel<4>, kThreads, kSmemBytes, chunks};
        default: return {attn_decode_ragged_kernel<8>, kThreads, kSmemBytes, chunks};
    }
}

// The task kernel run_attn_decode_ragged launches for this layout, except the SIMT kernel of 4-bit
// pages (attn_decode_ragged_q4.cu, its own arguments): *q4_simt is set instead.
task_kernel<rdecode_args> task_kernel_for(const ragged_layout & l, int group, bool * q4_simt) {
    const bool mma = ragged_mma_requested() && ragged_mma_handles(l.max_width);
    *q4_simt = l.bits == 4 && !mma;
    if (mma)
        return l.bits == 4 ? attn_decode_ragged_q4_mma_kernel_for(int(l.max_width), group)
                           : attn_decode_ragged_mma_kernel_for(l, group);
    return simt_kernel_for(group);
}

template <int J>
void launch_merge(context & ctx, dim3 grid, int depth, const ragged_merge_args & a) {
    if (depth == 0)
        launch_consumer(ctx, ragged_merge_kernel<J, 1, 8>, grid, 8 * 32, 0, a);
    else if (depth == 1)
        launch_consumer(ctx, ragged_merge_kernel<J, 32 / J, 8>, grid, 8 * 32, 0, a);
    else
        launch_consumer(ctx, ragged_merge_kernel<J, 32 / J, 16>, grid, 16 * 32, 0, a);
}

}  // namespace

void launch_ragged_merge(context & ctx, const ragged_merge_args & a) {
    const dim3 grid(unsigned(a.batch * a.n_kv_heads), unsigned(a.group));
    // Tasks per (request, KV head): at most 8 (batch 16: ~5) give each warp at most one row, nothing to
    // keep in flight, and R = 1 keeps the registers low (more resident blocks); more than 64 (batch 1)
    // take 16 warps.
    const int64_t rows = std::max<int64_t>(1, int64_t(a.batch) * a.n_kv_heads);
    const int depth = a.n_tasks <= 8 * rows ? 0 : a.n_tasks <= 64 * rows ? 1 : 2;
    if (a.max_width <= 128)
        launch_merge<4>(ctx, grid, depth, a);
    else
        launch_merge<8>(ctx, grid, depth, a);
    KVCOMP_CUDA_CHECK_LAUNCH();
}

support supports_attn_decode_ragged(const op_desc & op) {
    const auto & p = op.get<attn_decode_ragged_params>();
    const ragged_layout & l = p.kv;
    if (l.bits == 4) return supports_attn_decode_ragged_q4(op);
    const int64_t group = p.n_q_heads / l.n_kv_heads;
    if (l.n_pages > INT_MAX || p.nnz_pages > INT_MAX || p.n_tasks > INT_MAX ||
        p.batch * l.n_kv_heads >= INT_MAX)
        return support::no("page pool, page table, schedule and batch * kv_heads must fit in 32 bits");
    // Flat offsets inside a request's K'/V' run are 32-bit (fast_divider takes n < 2^31).
    if (p.nnz_pages * l.page_size * l.max_width >= (int64_t(1) << 31) ||
        l.page_size * std::max(l.k_total, l.v_total) >= (int64_t(1) << 31))
        return support::no("pages * page_size * max_width must stay below 2^31");
    if (group > 65535)  // the merge kernel's grid y (the decode kernels' head chunks are larger)
        return support::no("GQA group too large (grid y)");
    return support::yes();
}

rdecode_args ragged_task_args(const op_desc & op, const ragged_layout & l, int64_t batch, int64_t n_q_heads,
                              int64_t n_tasks, float scale) {
    rdecode_args a{};
    a.q = dev_ptr<const float>(op.src[0]);
    a.k_pages = dev_ptr<const uint8_t>(op.src[1]);
    a.v_pages = dev_ptr<const uint8_t>(op.src[2]);
    a.indptr = dev_ptr<const int32_t>(op.src[3]);
    a.indices = dev_ptr<const int32_t>(op.src[4]);
    a.last_page_len = dev_ptr<const int32_t>(op.src[5]);
    a.heads = dev_ptr<const int32_t>(op.src[6]);
    a.schedule = dev_ptr<const int32_t>(op.src[7]);
    a.merge = dev_ptr<const int32_t>(op.src[8]);
    a.out = dev_ptr<float>(op.dst[0]);
    a.n_pages = int(l.n_pages);
    a.n_kv_heads = int(l.n_kv_heads);
    a.page_size = int(l.page_size);
    a.k_total = int(l.k_total);
    a.v_total = int(l.v_total);
    a.max_width = int(l.max_width);
    a.bits = int(l.bits);
    a.k_token_bytes = int(l.bits == 4 ? l.k_row_bytes : 2 * l.k_total);
    a.v_token_bytes = int(l.bits == 4 ? l.v_row_bytes : 2 * l.v_total);
    a.batch = int(batch);
    a.group = int(n_q_heads / l.n_kv_heads);
    a.n_tasks = int(n_tasks);
    a.vec_stage = l.page_size % 8 == 0 && aligned16(a.k_pages) && aligned16(a.v_pages);
    a.qscale = scale * kLog2e;
    return a;
}

rdecode_args ragged_decode_args(const op_desc & op) {
    const auto & p = op.get<attn_decode_ragged_params>();
    return ragged_task_args(op, p.kv, p.batch, p.n_q_heads, p.n_tasks, p.scale);
}

void run_attn_decode_ragged(context & ctx, const op_desc & op) {
    const auto & p = op.get<attn_decode_ragged_params>();
    const int group = int(p.n_q_heads / p.kv.n_kv_heads);
    bool q4_simt = false;
    const task_kernel<rdecode_args> k = task_kernel_for(p.kv, group, &q4_simt);
    if (q4_simt) return run_attn_decode_ragged_q4(ctx, op);
    rdecode_args a = ragged_decode_args(op);
    // KVCOMP_CUDA_TIMELINE: the tensor-core kernel's and the merge's blocks stamped (block_timeline.cuh).
    const bool stamped = block_timeline::enabled() && ragged_mma_handles(p.kv.max_width);
    const int64_t decode_blocks = p.n_tasks * k.head_chunks, merge_blocks = int64_t(a.batch) * a.n_kv_heads * group;
    uint64_t * records = stamped ? block_timeline::records(ctx, decode_blocks, merge_blocks) : nullptr;
    if (p.n_tasks > 0) {
        take_ragged_partials(ctx, a, p.n_tasks, group);
        a.timeline = records;
        launch_task_kernel(ctx, k, p.n_tasks, a);
    }
    merge_ragged_rows(ctx, a, a.batch, group, a.n_tasks, records ? records + 4 * decode_blocks : nullptr);
    if (stamped) block_timeline::dump(ctx, "decode", decode_blocks, merge_blocks);
}

int64_t concurrent_rows_attn_decode_ragged(const attn_decode_ragged_params & p) {
    const int group = int(p.n_q_heads / std::max<int64_t>(1, p.kv.n_kv_heads));
    bool q4_simt = false;
    const task_kernel<rdecode_args> k = task_kernel_for(p.kv, group, &q4_simt);
    return q4_simt ? concurrent_rows_attn_decode_ragged_q4(group) : concurrent_task_rows(k);
}

}  // namespace kvcomp::cuda
