// What the two fp16 kernels of attn_decode_ragged share: their arguments, a block's task (one row
// of the host's decode schedule) and the per-warp stream that copies the task's tiles of K' and V'
// rows into shared memory. attn_decode_ragged.cu (SIMT) and attn_decode_ragged_mma.cu (tensor
// cores) differ only in the math they run on a staged tile.
//
// Tiles: a task's tokens [first, end) are cut into tiles of T tokens starting at base = first & ~7
// (T a multiple of 8, chosen per head by the kernel). Warp w streams tiles w, w + 4, ... through a
// ring of kStages stages of its own: its 32 lanes copy a tile's K' and V' runs with cp.async in
// 16-byte chunks, wait for their own copies and meet at a __syncwarp, and only then refill the
// stage the warp read last; kStages - 1 tiles are in flight while one is consumed, and no warp
// waits for another's copies or math.
//
// Stage layout: T rows of K' then T rows of V'; token A + r of the tile at row r. The row stride is
//   PAD = false: the width (the rows are the page's flat run, copied as it is);
//   PAD = true: the width rounded up to 16 halves (whole mma k-steps) plus one 16-byte chunk: an odd
//     number of chunks, so eight consecutive rows at the same column fall into eight different
//     bank groups (ldmatrix reads eight rows of 16 bytes per phase). Element-wise copies write
//     zeros past the width; chunk copies leave the halves past it as they were (the kernel must
//     not let them reach a result).
// Memory: head c's K' (and V') rows of one page are one contiguous run of page_size * width halves,
// so a tile is a few contiguous runs (one per page it touches). A tile's tokens lie in at most 32
// pages (T <= 248 and page_size >= 8 on the vector path), so lane p holds the page-table entry of the
// tile's p-th page, loaded one tile ahead (the copies never wait on the page table), and each chunk
// takes its page from the lane holding it with one shuffle. Chunks never straddle a page when
// page_size % 8 == 0 and, with PAD, the widths are multiples of 8; otherwise (or for page views not
// 16-byte aligned) the warp's lanes copy element by element into the same layout (correct, slower).
//
// Invalid inputs a kernel cannot refuse: request and KV head outside the tables make the block
// exit; token ranges are clamped to the request; page numbers are clamped to the pool.
#pragma once

#include "common.cuh"
#include "ragged_common.cuh"

namespace kvcomp::cuda {

constexpr int kRaggedThreads = 128;
constexpr int kRaggedWarps = kRaggedThreads / 32;
constexpr int kMaxTileTokens = 31 * 8;  // tokens of <= 32 pages for page_size >= 8

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
    int first, end, base;  // tokens [first, end); tiles start at base (8-aligned)
    int p_begin, n_pg;
    bool direct;  // the only task of its (b, c): write out, not partials
};

// The task of block (blockIdx.x, head chunk blockIdx.y of QP heads); false when the schedule row
// names a request or KV head outside the tables (the block exits).
__device__ __forceinline__ bool load_task(const rdecode_args & a, int QP, rtask & t) {
    t.task = int(blockIdx.x);
    t.b = a.schedule[4 * t.task];
    t.c = a.schedule[4 * t.task + 1];
    if (t.b < 0 || t.b >= a.batch || t.c < 0 || t.c >= a.n_kv_heads) return false;
    t.h0 = int(blockIdx.y) * QP;
    t.nh = min(QP, a.group - t.h0);
    t.hd = load_head(a.heads, t.c);
    t.hd.k_width = min(max(t.hd.k_width, 1), 256);
    t.hd.v_width = min(max(t.hd.v_width, 1), 256);
    const int seq_len = request_len(a.indptr, a.last_page_len, t.b, a.page_size);
    t.first = min(max(a.schedule[4 * t.task + 2], 0), seq_len);
    t.end = min(max(a.schedule[4 * t.task + 3], t.first), seq_len);
    t.base = t.first & ~7;
    t.p_begin = a.indptr[t.b];
    t.n_pg = a.indptr[t.b + 1] - t.p_begin;
    const int bc = t.b * a.n_kv_heads + t.c;
    t.direct = a.merge[bc + 1] - a.merge[bc] == 1;
    return true;
}

// Row stride (halves) of a width-w head in a stage (see the banner).
template <bool PAD>
__host__ __device__ constexpr int stage_row_halves(int w) {
    if constexpr (!PAD) return w;
    return 8 * (2 * ((w + 15) / 16) + 1);
}

// One warp's stream of its tiles of task t (see the banner). STAGE_BYTES: bytes of one stage.
template <int STAGES, int STAGE_BYTES, bool PAD>
struct tile_stream {
    static constexpr int kChunksPerLane = STAGE_BYTES / 16 / 32;
    static_assert(STAGE_BYTES % (16 * 32) == 0, "every lane copies the same number of chunk slots");
    static_assert(STAGES >= 2, "one stage in flight while one is consumed");

    const rdecode_args & a;
    const rtask & t;
    uint8_t * ring;  // this warp's STAGES stages
    int warp, lane, T, n_mine;
    int kw, vw, rs_k, rs_v;  // widths and stage row strides (halves)
    bool vec;                // 16-byte cp.async chunks (else element-wise copies)
    int64_t k_head, v_head, k_page, v_page;
    fast_divider div_k, div_v;  // flat offset in the request's K' (V') run -> page entry
    fast_divider row_k, row_v;  // PAD: chunk within the tile -> row
    int pg_next = 0;

    // T: tokens per tile (a multiple of 8, at most kMaxTileTokens, T rows of each fit a stage).
    __device__ __forceinline__ tile_stream(const rdecode_args & a_, const rtask & t_, uint8_t * warp_ring, int T_)
        : a(a_), t(t_), ring(warp_ring), T(T_) {
        lane = int(threadIdx.x) & 31;
        warp = int(threadIdx.x) >> 5;
        kw = t.hd.k_width, vw = t.hd.v_width;
        rs_k = stage_row_halves<PAD>(kw), rs_v = stage_row_halves<PAD>(vw);
        vec = a.vec_stage && (!PAD || (kw % 8 == 0 && vw % 8 == 0));
        const int n_tiles = t.end > t.first ? (t.end - t.base + T - 1) / T : 0;
        // Interleaved rather than a contiguous quarter each: the tile grid (8-aligned starts from
        // t.base) stays the one of the whole task, the 4 warps stream neighbouring bytes at the
        // same time, and their tile counts differ by at most one whatever the task's length.
        n_mine = n_tiles > warp ? (n_tiles - warp + kRaggedWarps - 1) / kRaggedWarps : 0;
        const int ps = a.page_size;
        k_head = int64_t(ps) * t.hd.k_offset, v_head = int64_t(ps) * t.hd.v_offset;
        k_page = int64_t(ps) * a.k_total, v_page = int64_t(ps) * a.v_total;
        div_k.init(uint32_t(ps * kw));
        div_v.init(uint32_t(ps * vw));
        row_k.init(uint32_t(max(kw / 8, 1)));
        row_v.init(uint32_t(max(vw / 8, 1)));
    }

    __device__ __forceinline__ int tile_of(int k) const { return warp + k * kRaggedWarps; }
    __device__ __forceinline__ int tile_start(int k) const { return t.base + tile_of(k) * T; }
    // Rows [lo, hi) of the warp's k-th tile that hold the task's tokens.
    __device__ __forceinline__ void rows(int k, int & lo, int & hi) const {
        const int A = tile_start(k);
        lo = max(A, t.first) - A;
        hi = min(A + T, t.end) - A;
    }
    __device__ __forceinline__ const __half * k_rows(int k) const {
        return reinterpret_cast<const __half *>(ring + (k % STAGES) * STAGE_BYTES);
    }
    __device__ __forceinline__ const __half * v_rows(int k) const { return k_rows(k) + T * rs_k; }

    __device__ __forceinline__ int page_entry(int e) const { return a.indices[t.p_begin + min(e, t.n_pg - 1)]; }
    __device__ __forceinline__ int first_page(int k) const { return max(tile_start(k), t.first) / a.page_size; }
    // Loads the page-table entries of the warp's k-th tile (vector path; one per lane).
    __device__ __forceinline__ void locate(int k) {
        if (vec) pg_next = k < n_mine ? page_entry(first_page(k) + lane) : 0;
    }

    // Copies the warp's k-th tile into its stage and commits one cp.async group (empty ones too, so
    // the counts line up); then loads the page entries of tile k + 1.
    __device__ __forceinline__ void issue(int k) {
        if (k < n_mine) {
            uint8_t * stage = ring + (k % STAGES) * STAGE_BYTES;
            if (vec)
                copy_chunks(k, stage);
            else
                copy_scalar(k, reinterpret_cast<__half *>(stage));
        }
        cp_async_commit();
        locate(k + 1);
    }

    // Halves [lo8, lo8 + 8 n8) of the request's flat K' (or V') run needed by tile k, 8-aligned.
    __device__ __forceinline__ void span(int k, int width, int & lo8, int & n8) const {
        const int A = tile_start(k);
        const int lo = max(A, t.first), hi = min(A + T, t.end);
        lo8 = (lo * width) & ~7;
        n8 = lo < hi ? ((((hi * width) + 7) & ~7) - lo8) >> 3 : 0;
    }

    // Lane l copies chunks l + 32 i of a tile, the K' run's chunks first, then the V' run's.
    __device__ __forceinline__ void copy_chunks(int k, uint8_t * stage) {
        int lo8k, nk, lo8v, nv;
        span(k, kw, lo8k, nk);
        span(k, vw, lo8v, nv);
        const int A = tile_start(k), e0 = first_page(k), pg = pg_next;
#pragma unroll
        for (int i = 0; i < kChunksPerLane; ++i) {
            if (32 * i >= nk + nv) break;  // uniform: the tile has no more chunks
            const int c = lane + 32 * i;
            const bool is_k = c < nk;
            const int F = is_k ? lo8k + 8 * c : lo8v + 8 * min(c - nk, nv);
            const int e = int(is_k ? div_k.div(uint32_t(F)) : div_v.div(uint32_t(F)));
            // every lane shuffles (full mask); e - e0 < 32 for the chunks that copy
            const int64_t pgn = min(max(__shfl_sync(full_mask, pg, (e - e0) & 31), 0), a.n_pages - 1);
            const int w = is_k ? kw : vw;
            int x = F - A * w;  // halves from the tile's first row
            if constexpr (PAD) {
                const int row = int((is_k ? row_k : row_v).div(uint32_t(x >> 3)));
                x += row * ((is_k ? rs_k : rs_v) - w);
            }
            if (is_k)
                cp_async16(stage + x * 2, a.k_pages + pgn * k_page + k_head + (F - e * a.page_size * kw), 16);
            else if (c - nk < nv)
                cp_async16(stage + (T * rs_k + x) * 2, a.v_pages + pgn * v_page + v_head + (F - e * a.page_size * vw),
                           16);
        }
    }

    // Synchronous element-wise copy of tile k by the warp's lanes; visible to the other lanes after
    // the next __syncwarp. Halves past a row's width (PAD) are written as zeros.
    __device__ __forceinline__ void copy_scalar(int k, __half * stage) const {
        const int A = tile_start(k), ps = a.page_size;
        const int lo = max(A, t.first), hi = min(A + T, t.end);
        for (int kv = 0; kv < 2; ++kv) {
            const int w = kv ? vw : kw, rs = kv ? rs_v : rs_k;
            const __half * pages = kv ? a.v_pages : a.k_pages;
            const int64_t head = kv ? v_head : k_head, page = kv ? v_page : k_page;
            __half * sdst = stage + (kv ? T * rs_k : 0);
            for (int idx = lane; idx < (hi - lo) * rs; idx += 32) {
                const int tok = lo + idx / rs, f = idx % rs;
                __half val = __float2half_rn(0.0f);
                if (f < w) {
                    const int e = tok / ps;
                    const int64_t pgn = min(max(page_entry(e), 0), a.n_pages - 1);
                    val = pages[pgn * page + head + int64_t(tok - e * ps) * w + f];
                }
                sdst[(tok - A) * rs + f] = val;
            }
        }
    }
};

// The tensor-core kernel (attn_decode_ragged_mma.cu): layouts whose widest head is <= 128.
bool ragged_mma_handles(int64_t max_width);
// Enqueues it over a's n_tasks schedule rows (partials taken; the caller merges).
void launch_attn_decode_ragged_mma(context & ctx, const rdecode_args & a);

}  // namespace kvcomp::cuda
