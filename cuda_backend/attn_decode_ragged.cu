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
// Memory: head c's K' (and V') rows of one page are one contiguous run of page_size * width halves,
// so a tile of T consecutive tokens is a few contiguous runs (one per page it touches). Each warp
// streams its own tiles (warp w takes tiles w, w + 4, ... of the task) through a ring of its own in
// shared memory: its 32 lanes copy a tile's K' and V' runs into one stage with cp.async in 16-byte
// chunks (consecutive lanes, consecutive chunks: coalesced whatever the width), wait for their own
// copies and meet at a __syncwarp, and only then refill the stage the warp read last; kStages - 1
// tiles (1 by default) are in flight while one is consumed, and the tile loop has no block barrier
// (a warp never waits for another's copies or math). The tile size is chosen per head so that a
// stage holds ~8 KiB (at least 8 tokens of the widest head, 256 + 256; at most 248 tokens).
// (This replaced one block-wide ring whose 12 KiB tiles the 4 warps shared, with a __syncthreads
// per tile: each warp had a few token steps per tile, then waited for the slowest warp and for the
// tile's copies, which left the kernel latency-bound at 0.45 of the copy bandwidth on an H100
// (batch 16 x 32K; twice as many tasks did not help); attn_decode_quant_mma.cu had the same
// disease and the same cure.)
// Page-table entries are loaded one tile ahead, one per lane (a tile's tokens lie in at most 32
// pages), so the copies never wait on the page table. Tiles start at multiples of 8 tokens, so a
// 16-byte chunk never straddles a page when page_size % 8 == 0 (then any width works); other page
// sizes, or page views not 16-byte aligned, take a synchronous element-wise copy by the warp's
// lanes with the same layout (correct, slower). Shared memory: 4 warps x kStages x 8 KiB (64 KiB
// with the default KVCOMP_RAGGED_STAGES = 2, past the 48 KiB default: the launch opts in), which
// on an H100 allows 3 blocks per SM, as many as the registers allow for QP = 4.
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

#include "common.cuh"
#include "decode_common.cuh"
#include "ragged_common.cuh"

namespace kvcomp::cuda {

namespace {

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;
// Per-warp ring: kStages stages of kStageBytes each (a preamble define, to try 3 on a new GPU).
#ifndef KVCOMP_RAGGED_STAGES
#define KVCOMP_RAGGED_STAGES 2
#endif
constexpr int kStages = KVCOMP_RAGGED_STAGES;
constexpr int kStageBytes = 8 * 1024;
constexpr int kStageHalves = kStageBytes / 2;
constexpr int kChunksPerLane = kStageBytes / 16 / 32;  // a full stage is 512 chunks, 16 per lane
constexpr int kWarpRingBytes = kStages * kStageBytes;
constexpr int kMaxTileTokens = 31 * 8;  // tokens of <= 32 pages for page_size >= 8 (see decode_body)
constexpr int kU = 2;                   // token steps per warp iteration
constexpr float kLog2e = 1.4426950408889634f;
constexpr size_t kSmemBytes = size_t(kWarps) * kWarpRingBytes;
static_assert(kStages >= 2, "one stage in flight while one is consumed");
static_assert(kStageBytes % (16 * 32) == 0, "every lane copies the same number of chunk slots");
static_assert(warp_merge_floats<kWarps, 8, 256>() * sizeof(float) <= kSmemBytes,
              "the warps' merge area (widest case) must fit in the rings it reuses");
static_assert(kStageHalves / (2 * 256) >= 8, "a stage holds at least 8 tokens of the widest head");
static_assert(kSmemBytes <= 96 * 1024,
              "within the opt-in shared-memory limit of every target (sm_86/89: 99 KiB)");

struct rdecode_args {
    const float * q;
    const __half * k_pages;
    const __half * v_pages;
    const int32_t * indptr;
    const int32_t * indices;
    const int32_t * last_page_len;
    const int32_t * heads;
    const int32_t * schedule;
    const int32_t * merge;
    float * out;
    float * part_o;
    float * part_lse;
    int n_pages, n_kv_heads, page_size, k_total, v_total, max_width;
    int batch, group, n_tasks;
    bool vec_stage;  // page_size % 8 == 0 and both page views 16-byte aligned
    float qscale;    // scale * log2(e)
};

// Everything a block knows about its task once the tables are read.
struct rtask {
    int task, b, c, h0, nh;  // h0: first query head of the chunk within the group
    ragged_head hd;
    int first, end, base, T;  // tokens [first, end); tiles of T tokens start at base (8-aligned)
    int p_begin, n_pg;
    bool direct;  // the only task of its (b, c): write out, not partials
};

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
    const int kw = t.hd.k_width, vw = t.hd.v_width, T = t.T, ps = a.page_size;
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

    const int n_tiles = t.end > t.first ? (t.end - t.base + T - 1) / T : 0;
    // This warp's tiles: warp + k * kWarps for k < n_mine, the k-th in stage k % kStages of its own
    // ring. Interleaved rather than a contiguous quarter each: the tile grid (8-aligned starts from
    // t.base) stays the one of the whole task, the 4 warps stream neighbouring bytes at the same time,
    // and their tile counts differ by at most one whatever the task's length.
    const int n_mine = n_tiles > warp ? (n_tiles - warp + kWarps - 1) / kWarps : 0;
    uint8_t * wring = ring + warp * kWarpRingBytes;
    auto tile_of = [&](int k) { return warp + k * kWarps; };

    const int64_t k_head = int64_t(ps) * t.hd.k_offset, v_head = int64_t(ps) * t.hd.v_offset;
    const int64_t k_page = int64_t(ps) * a.k_total, v_page = int64_t(ps) * a.v_total;
    fast_divider div_k, div_v;  // flat offset in the request's K' (V') run -> page entry
    div_k.init(uint32_t(ps * kw));
    div_v.init(uint32_t(ps * vw));

    auto page_entry = [&](int e) { return a.indices[t.p_begin + min(e, t.n_pg - 1)]; };
    // Halves [lo8, lo8 + 8 n8) of the request's flat K' (or V') run needed by tile j, 8-aligned.
    auto tile_span = [&](int j, int width, int & lo8, int & n8) {
        const int A = t.base + j * T;
        const int lo = max(A, t.first), hi = min(A + T, t.end);
        lo8 = (lo * width) & ~7;
        n8 = lo < hi ? ((((hi * width) + 7) & ~7) - lo8) >> 3 : 0;
    };

    // vec_stage: lane l copies chunks l + 32 i (i < kChunksPerLane) of a tile, the K' run's chunks
    // first, then the V' run's. A tile's tokens lie in at most 32 pages (T <= kMaxTileTokens and
    // page_size >= 8), so lane p holds the page-table entry of the tile's p-th page, loaded one tile
    // ahead (in flight during a tile of math: the copies never wait on the page table), and each chunk
    // takes its page from the lane holding it with one shuffle. (Keeping every chunk's entry or
    // address instead costs 16 live registers or more per lane through the math: 50 more for QP = 4.)
    auto first_page = [&](int j) { return max(t.base + j * T, t.first) / ps; };
    int pg_next = 0;
    auto locate = [&](int k) { pg_next = k < n_mine ? page_entry(first_page(tile_of(k)) + lane) : 0; };
    // Synchronous element-wise copy of tile j by the warp's lanes (page sizes that are not multiples
    // of 8, or page views not 16-byte aligned); visible to the other lanes after the next __syncwarp.
    auto copy_scalar = [&](int j, __half * stage) {
        const int A = t.base + j * T;
        const int lo = max(A, t.first), hi = min(A + T, t.end);
        for (int kv = 0; kv < 2; ++kv) {
            const int w = kv ? vw : kw;
            const __half * pages = kv ? a.v_pages : a.k_pages;
            const int64_t head = kv ? v_head : k_head, page = kv ? v_page : k_page;
            __half * sdst = stage + (kv ? T * kw : 0);
            for (int idx = lane; idx < (hi - lo) * w; idx += 32) {
                const int tok = lo + idx / w, f = idx % w;
                const int e = tok / ps;
                const int64_t pgn = min(max(page_entry(e), 0), a.n_pages - 1);
                sdst[(tok - A) * w + f] = pages[pgn * page + head + int64_t(tok - e * ps) * w + f];
            }
        }
    };
    // Copies the warp's k-th tile into its stage (k % kStages) and commits one cp.async group.
    auto issue = [&](int k) {
        if (k < n_mine) {
            const int j = tile_of(k);
            uint8_t * stage = wring + (k % kStages) * kStageBytes;
            if (a.vec_stage) {
                int lo8k, nk, lo8v, nv;
                tile_span(j, kw, lo8k, nk);
                tile_span(j, vw, lo8v, nv);
                const int A = t.base + j * T, e0 = first_page(j), pg = pg_next;
#pragma unroll
                for (int i = 0; i < kChunksPerLane; ++i) {
                    if (32 * i >= nk + nv) break;  // uniform: the tile has no more chunks
                    const int c = lane + 32 * i;
                    const bool is_k = c < nk;
                    const int F = is_k ? lo8k + 8 * c : lo8v + 8 * min(c - nk, nv);
                    const int e = int(is_k ? div_k.div(uint32_t(F)) : div_v.div(uint32_t(F)));
                    // every lane shuffles (full mask); e - e0 < 32 for the chunks that copy
                    const int64_t pgn = min(max(__shfl_sync(full_mask, pg, (e - e0) & 31), 0), a.n_pages - 1);
                    if (is_k)
                        cp_async16(stage + (F - A * kw) * 2,
                                   a.k_pages + pgn * k_page + k_head + (F - e * ps * kw), 16);
                    else if (c - nk < nv)
                        cp_async16(stage + (T * kw + F - A * vw) * 2,
                                   a.v_pages + pgn * v_page + v_head + (F - e * ps * vw), 16);
                }
            } else {
                copy_scalar(j, reinterpret_cast<__half *>(stage));
            }
        }
        cp_async_commit();  // one group per call, empty ones included, so the counts line up
    };

    if (a.vec_stage) locate(0);
#pragma unroll
    for (int s = 0; s < kStages - 1; ++s) {
        issue(s);
        if (a.vec_stage) locate(s + 1);
    }

    for (int k = 0; k < n_mine; ++k) {  // uniform per warp
        cp_async_wait<kStages - 2>();   // this lane's copies of tile k have landed
        __syncwarp();                   // every lane's have; every lane is done with tile k - 1
        issue(k + kStages - 1);         // refills tile k - 1's stage
        if (a.vec_stage) locate(k + kStages);

        const __half * kt = reinterpret_cast<const __half *>(wring + (k % kStages) * kStageBytes);
        const __half * vt = kt + T * kw;
        const int A = t.base + tile_of(k) * T;
        const int u_lo = max(A, t.first) - A, u_hi = min(A + T, t.end) - A;
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

    // The warps' states merge through the rings (publish_warp_states' first __syncthreads waits for
    // every warp's last reads of its stages).
    float * sm = reinterpret_cast<float *>(ring);
    publish_warp_states<L, QP, 8, kWarps>(m_run, l_run, o, sm);
    for (int idx = tid; idx < t.nh * vw; idx += kThreads) {
        const int i = idx / vw, d = idx % vw;
        float lse2;
        const float val = merge_warp_states<QP, 8 * L, kWarps>(sm, i, d, lse2);
        const int h = t.h0 + i;
        if (t.direct) {
            a.out[int64_t(t.b) * a.group * a.v_total + int64_t(a.group) * t.hd.v_offset + int64_t(h) * vw +
                  d] = val;
        } else {
            const int64_t row = int64_t(t.task) * a.group + h;
            a.part_o[row * a.max_width + d] = val;
            if (d == 0) a.part_lse[row] = lse2;
        }
    }
}

template <int QP>
__global__ void __launch_bounds__(kThreads) attn_decode_ragged_kernel(const rdecode_args a) {
    extern __shared__ uint4 smem[];
    uint8_t * ring = reinterpret_cast<uint8_t *>(smem);

    rtask t;
    t.task = int(blockIdx.x);
    t.b = a.schedule[4 * t.task];
    t.c = a.schedule[4 * t.task + 1];
    if (t.b < 0 || t.b >= a.batch || t.c < 0 || t.c >= a.n_kv_heads) return;  // uniform
    t.h0 = int(blockIdx.y) * QP;
    t.nh = min(QP, a.group - t.h0);
    t.hd = load_head(a.heads, t.c);
    t.hd.k_width = min(max(t.hd.k_width, 1), 256);
    t.hd.v_width = min(max(t.hd.v_width, 1), 256);
    const int seq_len = request_len(a.indptr, a.last_page_len, t.b, a.page_size);
    t.first = min(max(a.schedule[4 * t.task + 2], 0), seq_len);
    t.end = min(max(a.schedule[4 * t.task + 3], t.first), seq_len);
    t.base = t.first & ~7;
    t.T = min((kStageHalves / (t.hd.k_width + t.hd.v_width)) & ~7, kMaxTileTokens);
    t.p_begin = a.indptr[t.b];
    t.n_pg = a.indptr[t.b + 1] - t.p_begin;
    const int bc = t.b * a.n_kv_heads + t.c;
    t.direct = a.merge[bc + 1] - a.merge[bc] == 1;

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
__global__ void ragged_merge_kernel(const ragged_merge_args a) {
    const int bc = int(blockIdx.x);
    const int b = bc / a.n_kv_heads, c = bc % a.n_kv_heads;
    const int ptr = a.batch * a.n_kv_heads + 1;
    const int t0 = a.merge[bc], n = a.merge[bc + 1] - t0;
    if (n == 1) return;  // its task wrote out directly
    const ragged_head hd = load_head(a.heads, c);
    const int vw = min(max(hd.v_width, 1), a.max_width);
    float * out = a.out + int64_t(b) * a.group * a.v_total + int64_t(a.group) * hd.v_offset;
    for (int idx = threadIdx.x; idx < a.group * vw; idx += blockDim.x) {
        const int i = idx / vw, d = idx % vw;
        float mx = -INFINITY;
        for (int k = 0; k < n; ++k) {
            const int task = a.merge[ptr + t0 + k];
            if (task >= 0 && task < a.n_tasks) mx = fmaxf(mx, a.part_lse[int64_t(task) * a.group + i]);
        }
        float val = 0.0f;
        if (mx != -INFINITY) {
            float num = 0.0f, den = 0.0f;
            for (int k = 0; k < n; ++k) {
                const int task = a.merge[ptr + t0 + k];
                if (task < 0 || task >= a.n_tasks) continue;
                const int64_t row = int64_t(task) * a.group + i;
                const float wt = exp2f(a.part_lse[row] - mx);
                num = fmaf(wt, a.part_o[row * a.max_width + d], num);
                den += wt;
            }
            val = num / den;
        }
        out[int64_t(i) * vw + d] = val;
    }
}

int qp_for(int64_t group) {
    return group <= 1 ? 1 : group <= 2 ? 2 : group <= 4 ? 4 : 8;
}

bool aligned16(const void * p) {
    return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

// The warps' rings take kSmemBytes (64 KiB with 2 stages), past the 48 KiB default: opt in first.
// Occupancy on an H100 (228 KiB per SM): 3 blocks by shared memory; by registers (ptxas, CUDA 13.0:
// 239 / 167 / 128 / 128 for QP = 8 / 4 / 2 / 1) 2 for QP = 8, 3 for QP = 4, 4 for QP <= 2.
template <int QP>
void launch_decode(context & ctx, const rdecode_args & a, dim3 grid) {
    if (kSmemBytes > 48 * 1024)
        KVCOMP_CUDA_CHECK(cudaFuncSetAttribute(attn_decode_ragged_kernel<QP>,
                                               cudaFuncAttributeMaxDynamicSharedMemorySize, int(kSmemBytes)));
    attn_decode_ragged_kernel<QP><<<grid, kThreads, kSmemBytes, ctx.stream>>>(a);
    KVCOMP_CUDA_CHECK_LAUNCH();
}

}  // namespace

void launch_ragged_merge(context & ctx, const ragged_merge_args & a) {
    ragged_merge_kernel<<<unsigned(a.batch * a.n_kv_heads), 128, 0, ctx.stream>>>(a);
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
    if ((group + qp_for(group) - 1) / qp_for(group) > 65535)
        return support::no("GQA group too large (grid y)");
    return support::yes();
}

void run_attn_decode_ragged(context & ctx, const op_desc & op) {
    const auto & p = op.get<attn_decode_ragged_params>();
    const ragged_layout & l = p.kv;
    if (l.bits == 4) return run_attn_decode_ragged_q4(ctx, op);
    const int group = int(p.n_q_heads / l.n_kv_heads);
    const int qp = qp_for(group);

    rdecode_args a{};
    a.q = dev_ptr<const float>(op.src[0]);
    a.k_pages = dev_ptr<const __half>(op.src[1]);
    a.v_pages = dev_ptr<const __half>(op.src[2]);
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
    a.batch = int(p.batch);
    a.group = group;
    a.n_tasks = int(p.n_tasks);
    a.vec_stage = l.page_size % 8 == 0 && aligned16(a.k_pages) && aligned16(a.v_pages);
    a.qscale = p.scale * kLog2e;

    if (p.n_tasks > 0) {
        take_ragged_partials(ctx, a, p.n_tasks, group);
        const dim3 grid(unsigned(p.n_tasks), unsigned((group + qp - 1) / qp));
        switch (qp) {
            case 1:
                launch_decode<1>(ctx, a, grid);
                break;
            case 2:
                launch_decode<2>(ctx, a, grid);
                break;
            case 4:
                launch_decode<4>(ctx, a, grid);
                break;
            default:
                launch_decode<8>(ctx, a, grid);
                break;
        }
    }
    merge_ragged_rows(ctx, a, a.batch, group, a.n_tasks);
}

}  // namespace kvcomp::cuda
