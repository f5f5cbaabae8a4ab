// What the two fp16 kernels of attn_decode_ragged share: their arguments, a block's task (one row
// of the host's decode schedule) and the per-warp stream that copies the task's tiles of K' and V'
// rows into shared memory. attn_decode_ragged.cu (SIMT) and attn_decode_ragged_mma.cu (tensor
// cores) differ only in the math they run on a staged tile.
//
// Tiles: a task's tokens [first, end) are cut into tiles of T tokens starting at base (first rounded
// down to a multiple of R, below). Warp w streams tiles w, w + 4, ... through a ring of kStages
// stages of its own: its 32 lanes copy a tile's K' and V' rows with cp.async in 16-byte chunks,
// wait for their own copies and meet at a __syncwarp, and only then refill the stage the warp read
// last; kStages - 1 tiles are in flight while one is consumed, and no warp waits for another's
// copies or math.
//
// Runs: head c's K' (and V') rows of one page are one contiguous run of page_size * width halves. A
// tile is n_runs runs of R rows, each inside one page: R = page_size and n_runs = T_max / page_size
// when a page fits the stage's T_max rows, else n_runs = 1 and R = the largest multiple of 8 <=
// T_max dividing page_size. So base is R-aligned, every run starts at a row of its page that is a
// multiple of 8, and a run is a plain contiguous copy: lane l takes chunks l, l + 32, ... of it
// (coalesced), and the chunk's place in the stage is its index, plus the padding of the rows
// before it (one fast division by the chunks per row, PAD only). (The previous copy mapped every
// chunk of the tile's flat span to its page and row with two run-time divisions and a shuffle:
// ~80 instructions per 16 bytes, which made both kernels issue-bound on address arithmetic; Nsight
// Compute on an H200, 16 x 32K: IMAD 28 % of all instructions, HMMA 1.6 %.) A run may copy rows
// before first or past end (inside the same page): the kernels never read those rows.
//
// Stage layout: T rows of K' then T rows of V'; token A + r of the tile at row r. The row stride is
//   PAD = false: the width (runs are copied as they are);
//   PAD = true: the width rounded up to 16 halves (whole mma k-steps) plus one 16-byte chunk: an odd
//     number of chunks, so eight consecutive rows at the same column fall into eight different
//     bank groups (ldmatrix reads eight rows of 16 bytes per phase). Element-wise copies write
//     zeros past the width; chunk copies leave the halves past it as they were (the kernel must
//     not let them reach a result).
// Page-table entries: lane j holds the entry of the tile's j-th page (n_runs <= 31), loaded one
// tile ahead, so the copies never wait on the page table. The chunk path needs page_size % 8 == 0,
// page views 16-byte aligned and, with PAD, widths that are multiples of 8; otherwise the warp's
// lanes copy element by element into the same layout (correct, slower).
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
    static_assert(STAGES >= 2, "one stage in flight while one is consumed");

    const rdecode_args & a;
    const rtask & t;
    uint8_t * ring;  // this warp's STAGES stages
    int warp, lane;
    int T, R, n_runs;  // tokens per tile, rows per run, runs per tile (see the banner)
    int base, n_mine;  // first tile's first token; tiles this warp streams
    int kw, vw, rs_k, rs_v;  // widths and stage row strides (halves)
    bool vec;                // 16-byte cp.async chunks (else element-wise copies)
    int64_t k_head, v_head, k_page, v_page;
    fast_divider div_ps;        // token -> page of the request
    fast_divider row_k, row_v;  // PAD: chunk of a run -> row
    int pg_next = 0;

    // t_max: the most tokens whose K' and V' rows fit a stage (>= 8); the stream picks T <= t_max.
    __device__ __forceinline__ tile_stream(const rdecode_args & a_, const rtask & t_, uint8_t * warp_ring, int t_max)
        : a(a_), t(t_), ring(warp_ring) {
        lane = int(threadIdx.x) & 31;
        warp = int(threadIdx.x) >> 5;
        kw = t.hd.k_width, vw = t.hd.v_width;
        rs_k = stage_row_halves<PAD>(kw), rs_v = stage_row_halves<PAD>(vw);
        const int ps = a.page_size;
        vec = a.vec_stage && (!PAD || (kw % 8 == 0 && vw % 8 == 0));
        t_max = max(min(t_max, kMaxTileTokens) & ~7, 8);
        if (!vec) {
            R = T = t_max, n_runs = 1;
        } else if (ps <= t_max) {
            R = ps, n_runs = t_max / ps, T = R * n_runs;
        } else {
            R = t_max;
            while (ps % R != 0) R -= 8;  // ends at 8 at the latest (ps % 8 == 0)
            T = R, n_runs = 1;
        }
        base = t.first - t.first % R;
        const int n_tiles = t.end > t.first ? (t.end - base + T - 1) / T : 0;
        // Interleaved rather than a contiguous quarter each: the 4 warps stream neighbouring bytes
        // at the same time, and their tile counts differ by at most one whatever the task's length.
        n_mine = n_tiles > warp ? (n_tiles - warp + kRaggedWarps - 1) / kRaggedWarps : 0;
        k_head = int64_t(ps) * t.hd.k_offset, v_head = int64_t(ps) * t.hd.v_offset;
        k_page = int64_t(ps) * a.k_total, v_page = int64_t(ps) * a.v_total;
        div_ps.init(uint32_t(ps));
        if constexpr (PAD) {
            row_k.init(uint32_t(max(kw / 8, 1)));
            row_v.init(uint32_t(max(vw / 8, 1)));
        }
    }

    __device__ __forceinline__ int tile_of(int k) const { return warp + k * kRaggedWarps; }
    __device__ __forceinline__ int tile_start(int k) const { return base + tile_of(k) * T; }
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
    // Loads the page-table entries of the warp's k-th tile (vector path; lane j: its j-th page).
    __device__ __forceinline__ void locate(int k) {
        if (vec) pg_next = k < n_mine && lane < n_runs ? page_entry(int(div_ps.div(uint32_t(tile_start(k)))) + lane) : 0;
    }

    // Copies the warp's k-th tile into its stage and commits one cp.async group (empty ones too, so
    // the counts line up); then loads the page entries of tile k + 1.
    __device__ __forceinline__ void issue(int k) {
        if (k < n_mine) {
            uint8_t * stage = ring + (k % STAGES) * STAGE_BYTES;
            if (vec)
                copy_runs(k, stage);
            else
                copy_scalar(k, reinterpret_cast<__half *>(stage));
        }
        cp_async_commit();
        locate(k + 1);
    }

    // Waits until tile k has landed in its stage, for every lane of the warp.
    __device__ __forceinline__ void wait(int k) {
        cp_async_wait<STAGES - 2>();  // this lane's copies of tile k have landed
        __syncwarp();                 // every lane's have; every lane is done with tile k - 1
    }

    // n16 chunks of 16 bytes from src to the stage rows at dst; PAD: a row holds `per_row` chunks
    // and is followed by pad halves.
    __device__ __forceinline__ void copy_run(uint8_t * dst, const __half * src, int n16, const fast_divider & row,
                                             int pad) const {
        for (int c = lane; c < n16; c += 32) {
            int x = 8 * c;  // halves from the run's first row in the stage
            if constexpr (PAD) x += int(row.div(uint32_t(c))) * pad;
            cp_async16(dst + 2 * x, src + 8 * c, 16);
        }
    }

    // The runs of tile k (see the banner): each run's page from the lane holding it, then a
    // contiguous copy of its K' rows and of its V' rows.
    __device__ __forceinline__ void copy_runs(int k, uint8_t * stage) const {
        const int A = tile_start(k), ps = a.page_size;
        const int e0 = int(div_ps.div(uint32_t(A)));
        for (int j = 0; j < n_runs; ++j) {  // uniform
            const int r0 = A + j * R;
            if (r0 >= t.end) break;
            const int e = int(div_ps.div(uint32_t(r0)));
            const int64_t pgn = min(max(__shfl_sync(full_mask, pg_next, (e - e0) & 31), 0), a.n_pages - 1);
            const int o = r0 - e * ps;  // the run's first row in its page
            copy_run(stage + 2 * (j * R * rs_k), a.k_pages + pgn * k_page + k_head + int64_t(o) * kw, R * kw / 8,
                     row_k, rs_k - kw);
            copy_run(stage + 2 * (T * rs_k + j * R * rs_v), a.v_pages + pgn * v_page + v_head + int64_t(o) * vw,
                     R * vw / 8, row_v, rs_v - vw);
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
