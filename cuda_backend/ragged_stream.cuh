// What the tensor-core and SIMT kernels of attn_decode_ragged share: their arguments, a block's task
// (one row of the host's decode schedule) and the per-warp stream that copies the task's tiles of
// K' and V' rows into shared memory. attn_decode_ragged.cu (SIMT, f16 pages), attn_decode_ragged_mma.cu
// (tensor cores, f16 pages) and attn_decode_ragged_q4_mma.cu (tensor cores, 4-bit pages of
// core/ragged_q4.h) differ only in the math they run on a staged tile.
//
// Rows: a row is one token of one KV head, row_bytes(w) bytes in the pages: 2w for f16 pages,
// ragged_q4_row_bytes(w) = 4 + 4 ceil(w / 8) for 4-bit pages. Head c's rows of one page are one
// contiguous run of page_size rows (core/op.h "Low-rank KV", core/ragged_q4.h).
//
// Tiles: a task's tokens [first, end) are cut into tiles of T tokens starting at base (first rounded
// down to a multiple of R, below). Warp w streams tiles w, w + 4, ... through a ring of kStages
// stages of its own: its 32 lanes copy a tile's K' and V' rows with cp.async in 16-byte chunks,
// wait for their own copies and meet at a __syncwarp, and only then refill the stage the warp read
// last; kStages - 1 tiles are in flight while one is consumed, and no warp waits for another's
// copies or math.
//
// Runs: a tile is n_runs runs of R rows, each inside one page: R = page_size and n_runs = t_max /
// page_size when a page fits the stage's t_max rows, else n_runs = 1 and R = the largest multiple of
// 8 <= t_max dividing page_size. So base is R-aligned, every run starts at a row of its page that is
// a multiple of 8 (16-byte aligned for both row formats), and a run is a plain contiguous copy:
// lane l takes chunks l, l + 32, ... of it (coalesced) and puts them at the same place in the
// stage; with PAD, lane l takes one chunk column of every (32 / chunks per row)-th row instead, so
// its stage address advances by a constant (plan_rows). (The previous copy mapped every chunk of the tile's flat span to its page and row with two
// run-time divisions and a shuffle: ~80 instructions per 16 bytes, which made the kernels
// issue-bound on address arithmetic; Nsight Compute on an H200, 16 x 32K: IMAD 28 % of all
// instructions, HMMA 1.6 %. One copy-engine transfer per row instead, cp.async.bulk completing on
// an mbarrier, measured slower still: 0.47 vs 0.34 ms.) A run may copy rows before first or past
// end (inside the same page): the kernels never read those rows.
//
// Stage layout: T rows of K' then T rows of V'; token A + r of the tile at row r. The row stride is
//   PAD = false: the row's bytes (runs are copied as they are);
//   PAD = true (f16 rows): the width rounded up to 16 halves (whole mma k-steps) plus one 16-byte
//     chunk: an odd number of chunks, so eight consecutive rows at the same column fall into eight
//     different bank groups (ldmatrix reads eight rows of 16 bytes per phase). Element-wise copies
//     write zeros past the width; chunk copies leave the halves past it as they were (the kernel
//     must not let them reach a result).
// Page-table entries: lane j holds the entry of the tile's j-th page (n_runs <= 31), loaded one
// tile ahead, so the copies never wait on the page table. The chunk path needs page_size % 8 == 0,
// page views 16-byte aligned and, with PAD, widths that are multiples of 8; otherwise the warp's
// lanes copy 16-bit element by element into the same layout (correct, slower).
//
// Invalid inputs a kernel cannot refuse: request and KV head outside the tables make the block
// exit; token ranges are clamped to the request; page numbers are clamped to the pool.
#pragma once

#include "common.cuh"
#include "decode_common.cuh"
#include "dependent_launch.cuh"
#include "ragged_common.cuh"

namespace kvcomp::cuda {

constexpr int kRaggedThreads = 128;
constexpr int kRaggedWarps = kRaggedThreads / 32;
constexpr int kMaxTileTokens = 31 * 8;  // tokens of <= 32 pages for page_size >= 8

struct rdecode_args {
    const float * q;
    const uint8_t * k_pages;  // f16 elements (bits 16) or 4-bit rows (bits 4)
    const uint8_t * v_pages;
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
    int k_token_bytes, v_token_bytes;  // bytes of one token over all heads (f16: 2 k_total)
    int bits;                          // 16 or 4
    int batch, group, n_tasks;
    bool vec_stage;  // page_size % 8 == 0 and both page views 16-byte aligned
    float qscale;    // scale * log2(e)
    uint64_t * timeline;  // block records (block_timeline.cuh), or null
};

__host__ __device__ inline int ragged_row_bytes(int bits, int w) {
    return bits == 16 ? 2 * w : 4 + 4 * ((w + 7) / 8);  // core/ragged_q4.h
}

// Everything a block knows about its task once the tables are read.
struct rtask {
    int task, b, c, h0, nh;  // h0: first query head of the chunk within the group
    ragged_head hd;
    int k_row, v_row;    // bytes of one row of head c (K', V')
    int k_off, v_off;    // bytes before head c's row in a token's bytes
    int first, end;      // tokens [first, end)
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
    t.k_row = ragged_row_bytes(a.bits, t.hd.k_width);
    t.v_row = ragged_row_bytes(a.bits, t.hd.v_width);
    if (a.bits == 16) {
        t.k_off = 2 * t.hd.k_offset, t.v_off = 2 * t.hd.v_offset;
    } else {  // the 4-bit rows of the heads before c (the table's offsets count elements)
        t.k_off = t.v_off = 0;
        for (int i = 0; i < t.c; ++i) {
            const ragged_head o = load_head(a.heads, i);
            t.k_off += ragged_row_bytes(4, o.k_width);
            t.v_off += ragged_row_bytes(4, o.v_width);
        }
    }
    const int seq_len = request_len(a.indptr, a.last_page_len, t.b, a.page_size);
    t.first = min(max(a.schedule[4 * t.task + 2], 0), seq_len);
    t.end = min(max(a.schedule[4 * t.task + 3], t.first), seq_len);
    t.p_begin = a.indptr[t.b];
    t.n_pg = a.indptr[t.b + 1] - t.p_begin;
    const int bc = t.b * a.n_kv_heads + t.c;
    t.direct = a.merge[bc + 1] - a.merge[bc] == 1;
    return true;
}

// load_task for a tensor-core kernel compiled for heads up to W wide: the widths are clamped to W
// (the launch checked max_width <= W, so this only keeps a bad table inside the kernel's arrays).
template <int W>
__device__ __forceinline__ bool load_mma_task(const rdecode_args & a, int QP, rtask & t) {
    if (!load_task(a, QP, t)) return false;
    t.hd.k_width = min(t.hd.k_width, W);
    t.hd.v_width = min(t.hd.v_width, W);
    return true;
}

// Row stride (halves) of a width-w f16 head in a stage (see the banner).
template <bool PAD>
__host__ __device__ constexpr int stage_row_halves(int w) {
    if constexpr (!PAD) return w;
    return 8 * (2 * ((w + 15) / 16) + 1);
}

// Channel d of query head h of the block's task: the output itself when the task is its (request,
// KV head)'s only one, else the task's partial (and, once per row, its log2 denominator).
__device__ __forceinline__ void store_ragged_value(const rdecode_args & a, const rtask & t, int h, int d, float val,
                                                   float lse2) {
    const int vw = t.hd.v_width;
    if (t.direct) {
        a.out[int64_t(t.b) * a.group * a.v_total + int64_t(a.group) * t.hd.v_offset + int64_t(h) * vw + d] = val;
    } else {
        const int64_t row = int64_t(t.task) * a.group + h;
        a.part_o[row * a.max_width + d] = val;
        if (d == 0) a.part_lse[row] = lse2;
    }
}

// The end of a tensor-core decode block: lane (g, t) of each warp holds head t's running max m and
// its sum l (already summed over the head's 8 lanes); the caller has written the warps' outputs to
// sm (o [warps][QH][W], decode_common.cuh's layout) after a __syncthreads that ended the tile loop.
// Publishes m and l, then merges the warps per (head, channel) and stores the block's results.
template <int QH, int W>
__device__ __forceinline__ void finish_mma_block(const rdecode_args & a, const rtask & t, float * sm, float m, float l) {
    const int lane = int(threadIdx.x) & 31, warp = int(threadIdx.x) >> 5;
    float * sm_m = sm + kRaggedWarps * QH * W;
    float * sm_l = sm_m + kRaggedWarps * QH;
    if ((lane >> 2) == 0) {
        sm_m[warp * QH + (lane & 3)] = m;
        sm_l[warp * QH + (lane & 3)] = l;
    }
    __syncthreads();
    const int vw = t.hd.v_width;
    for (int idx = int(threadIdx.x); idx < t.nh * vw; idx += kRaggedThreads) {
        const int i = idx / vw, d = idx % vw;
        float lse2;
        const float val = merge_warp_states<QH, W, kRaggedWarps>(sm, i, d, lse2);
        store_ragged_value(a, t, t.h0 + i, d, val, lse2);
    }
}

// One warp's stream of its tiles of task t (see the banner). STAGE_BYTES: bytes of one stage.
template <int STAGES, int STAGE_BYTES, bool PAD>
struct tile_stream {
    static_assert(STAGES >= 2, "one stage in flight while one is consumed");

    const rdecode_args & a;
    const rtask & t;
    uint8_t * ring;  // this warp's STAGES stages
    unsigned ring_s;  // its shared-memory address (cp.async and ldmatrix take 32-bit addresses)
    int warp, lane;
    int T, R, n_runs;  // tokens per tile, rows per run, runs per tile (see the banner)
    int base, n_mine;  // first tile's first token; tiles this warp streams
    int sk, sv;        // stage row strides (bytes)
    bool vec;          // 16-byte cp.async chunks (else 16-bit element-wise copies)
    int64_t k_head, v_head, k_page, v_page;  // bytes: head c's run in a page, one page
    const uint8_t * k_base;  // head c's run in page 0 (vector path: + page * k_page)
    const uint8_t * v_base;
    fast_divider div_ps;  // token -> page of the request
    // PAD: this lane's part of copying one run of K' rows and of V' rows (plan_rows).
    struct row_lanes {
        int src, dst;            // bytes of this lane's first chunk from the run's start: pages, stage
        int row;                 // its row in the first pass (R: the lane idles)
        int step;                // rows per pass
        int src_pass, dst_pass;  // bytes per pass
    };
    row_lanes lk, lv;
    int pg_next = 0;

    // t_max: the most tokens whose K' and V' rows fit a stage (>= 8); the stream picks T <= t_max.
    __device__ __forceinline__ tile_stream(const rdecode_args & a_, const rtask & t_, uint8_t * warp_ring, int t_max)
        : a(a_), t(t_), ring(warp_ring) {
        ring_s = smem_addr(ring);
        lane = int(threadIdx.x) & 31;
        warp = int(threadIdx.x) >> 5;
        if constexpr (PAD) {
            sk = 2 * stage_row_halves<true>(t.hd.k_width), sv = 2 * stage_row_halves<true>(t.hd.v_width);
        } else {
            sk = t.k_row, sv = t.v_row;
        }
        const int ps = a.page_size;
        vec = a.vec_stage && (!PAD || (t.hd.k_width % 8 == 0 && t.hd.v_width % 8 == 0));
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
        k_head = int64_t(ps) * t.k_off, v_head = int64_t(ps) * t.v_off;
        k_page = int64_t(ps) * a.k_token_bytes, v_page = int64_t(ps) * a.v_token_bytes;
        k_base = a.k_pages + k_head, v_base = a.v_pages + v_head;
        div_ps.init(uint32_t(ps));
        if constexpr (PAD) {
            lk = plan_rows(t.k_row, sk);
            lv = plan_rows(t.v_row, sv);
        }
    }

    // PAD, vector path: a run is R rows of row_bytes (a multiple of 16) in the pages, stage rows
    // `stride` bytes apart. Lane l copies chunk l % cpr of row l / cpr, then the same chunk
    // `step` = 32 / cpr rows further on, and so on: constant address steps, no per-chunk division
    // (the chunk-by-chunk mapping with a division per chunk cost ~14 instructions per 16 bytes, 10 %
    // of the tensor-core kernel's instructions in Nsight Compute on an H200). Lanes past step * cpr
    // idle: 8 of 32 for cpr = 12, 4 for 14, 2 for 6 and 10, none for powers of two.
    __device__ __forceinline__ row_lanes plan_rows(int row_bytes, int stride) const {
        const int cpr = max(row_bytes / 16, 1);
        row_lanes p;
        p.step = max(32 / cpr, 1);
        const int col = lane % cpr;
        p.row = lane < p.step * cpr ? lane / cpr : R;
        p.src = p.row * row_bytes + 16 * col;
        p.dst = p.row * stride + 16 * col;
        p.src_pass = p.step * row_bytes, p.dst_pass = p.step * stride;
        return p;
    }

    __device__ __forceinline__ int tile_of(int k) const { return warp + k * kRaggedWarps; }
    __device__ __forceinline__ int tile_start(int k) const { return base + tile_of(k) * T; }
    // Rows [lo, hi) of the warp's k-th tile that hold the task's tokens.
    __device__ __forceinline__ void rows(int k, int & lo, int & hi) const {
        const int A = tile_start(k);
        lo = max(A, t.first) - A;
        hi = min(A + T, t.end) - A;
    }
    __device__ __forceinline__ const uint8_t * k_stage(int k) const { return ring + (k % STAGES) * STAGE_BYTES; }
    __device__ __forceinline__ const uint8_t * v_stage(int k) const { return k_stage(k) + T * sk; }
    __device__ __forceinline__ unsigned k_stage_s(int k) const { return ring_s + unsigned((k % STAGES) * STAGE_BYTES); }
    __device__ __forceinline__ unsigned v_stage_s(int k) const { return k_stage_s(k) + unsigned(T * sk); }

    __device__ __forceinline__ int page_entry(int e) const { return a.indices[t.p_begin + min(e, t.n_pg - 1)]; }
    // Loads the page-table entries of the warp's k-th tile (vector path; lane j: its j-th page).
    __device__ __forceinline__ void locate(int k) {
        if (vec) pg_next = k < n_mine && lane < n_runs ? page_entry(int(div_ps.div(uint32_t(tile_start(k)))) + lane) : 0;
    }

    // Copies the warp's k-th tile into its stage and commits one cp.async group (empty ones too, so
    // the counts line up); then loads the page entries of tile k + 1.
    __device__ __forceinline__ void issue(int k) {
        if (k < n_mine) {
            if (vec)
                copy_runs(k, k_stage_s(k));
            else
                copy_scalar(k, ring + (k % STAGES) * STAGE_BYTES);
        }
        cp_async_commit();
        locate(k + 1);
    }

    // Waits until tile k has landed in its stage, for every lane of the warp.
    __device__ __forceinline__ void wait(int k) {
        cp_async_wait<STAGES - 2>();  // this lane's copies of tile k have landed
        __syncwarp();                 // every lane's have; every lane is done with tile k - 1
    }

    // The stream's loop: begin() before the first tile (page entries of tile 0, copies of the first
    // STAGES - 1 tiles); acquire(k) at the top of tile k (waits for it, refills the stage of tile k - 1).
    __device__ __forceinline__ void begin() {
        locate(0);
#pragma unroll
        for (int s = 0; s < STAGES - 1; ++s) issue(s);
    }
    __device__ __forceinline__ void acquire(int k) {
        wait(k);                // tile k is in its stage for every lane
        issue(k + STAGES - 1);  // refills tile k - 1's stage
    }

    // One run from src (its first row in the pages) to the stage at dst: PAD, by rows (plan_rows);
    // else the run's n16 chunks of 16 bytes as one contiguous span.
    __device__ __forceinline__ void copy_run(unsigned dst, const uint8_t * src, int n16, const row_lanes & p) const {
        if constexpr (PAD) {
            src += p.src, dst += unsigned(p.dst);
            for (int r = p.row; r < R; r += p.step, src += p.src_pass, dst += unsigned(p.dst_pass))
                cp_async16(dst, src, 16);
        } else {
            for (int c = lane; c < n16; c += 32) cp_async16(dst + unsigned(16 * c), src + 16 * c, 16);
        }
    }

    // The runs of tile k (see the banner): run j is page e0 + j of the request (R = page_size),
    // or the tile's only run, inside page e0 (R < page_size); its page number from lane j.
    __device__ __forceinline__ void copy_runs(int k, unsigned stage) const {
        const int A = tile_start(k);
        const int e0 = int(div_ps.div(uint32_t(A)));
        const int o = A - e0 * a.page_size;  // the first run's first row in its page (0 when R = page_size)
        for (int j = 0; j < n_runs; ++j) {  // uniform
            if (A + j * R >= t.end) break;
            const uint32_t pgn = uint32_t(min(max(__shfl_sync(full_mask, pg_next, j), 0), a.n_pages - 1));
            copy_run(stage + unsigned(j * R * sk), k_base + uint64_t(pgn) * uint32_t(k_page) + o * t.k_row,
                     R * t.k_row / 16, lk);
            copy_run(stage + unsigned(T * sk + j * R * sv), v_base + uint64_t(pgn) * uint32_t(v_page) + o * t.v_row,
                     R * t.v_row / 16, lv);
        }
    }

    // Synchronous copy of tile k by the warp's lanes, 16 bits at a time; visible to the other lanes
    // after the next __syncwarp. Stage bytes past a row's bytes (PAD) are written as zeros.
    __device__ __forceinline__ void copy_scalar(int k, uint8_t * stage) const {
        const int A = tile_start(k), ps = a.page_size;
        const int lo = max(A, t.first), hi = min(A + T, t.end);
        for (int kv = 0; kv < 2; ++kv) {
            const int rb = (kv ? t.v_row : t.k_row) / 2, rs = (kv ? sv : sk) / 2;  // in 16-bit units
            const uint16_t * pages = reinterpret_cast<const uint16_t *>(kv ? a.v_pages : a.k_pages);
            const int64_t head = (kv ? v_head : k_head) / 2, page = (kv ? v_page : k_page) / 2;
            uint16_t * sdst = reinterpret_cast<uint16_t *>(stage + (kv ? T * sk : 0));
            for (int idx = lane; idx < (hi - lo) * rs; idx += 32) {
                const int tok = lo + idx / rs, f = idx % rs;
                uint16_t val = 0;
                if (f < rb) {
                    const int e = tok / ps;
                    const int64_t pgn = min(max(page_entry(e), 0), a.n_pages - 1);
                    val = pages[pgn * page + head + int64_t(tok - e * ps) * rb + f];
                }
                sdst[(tok - A) * rs + f] = val;
            }
        }
    }
};

// The tile loop of every tensor-core ragged decode (f16 and q4 pages, Palu): streams the warp's
// tiles through ts (ragged_stream.cuh's tile_stream) and runs each tile's 16-row steps. view(k)
// points the caller's tile view at tile k's stage; scores(r0, hi) gives this lane's head t scores of
// rows r0 + g (.x) and r0 + g + 8 (.y), -inf from row hi on; weights(s, p0, p1) is the online softmax
// step (and any rescaling); values(r0, hi, p0, p1) adds the step's weighted V rows. Software-pipelined:
// the next step's scores are independent of this step's softmax and values, so the scheduler can
// interleave them (a warp streams alone: its own ILP hides the mma and shared-memory latencies).
template <int STAGES, int SB, bool PAD, typename View, typename Scores, typename Weights, typename Values>
__device__ __forceinline__ void run_tile_steps(tile_stream<STAGES, SB, PAD> & ts, View && view, Scores && scores,
                                               Weights && weights, Values && values) {
    ts.begin();
    for (int k = 0; k < ts.n_mine; ++k) {  // uniform per warp
        ts.acquire(k);
        view(k);
        int lo, hi;
        ts.rows(k, lo, hi);
        float2 s = scores(lo, hi);
        for (int r0 = lo; r0 < hi; r0 += 16) {
            float p0, p1;
            weights(s, p0, p1);
            float2 next = make_float2(-INFINITY, -INFINITY);
            if (r0 + 16 < hi) next = scores(r0 + 16, hi);
            values(r0, hi, p0, p1);
            s = next;
        }
    }
    cp_async_wait<0>();       // outstanding groups are empty; nothing may land in the merge area
    allow_consumer_launch();  // the merge may now be launched (dependent_launch.cuh)
}

// The kernel arguments of an op whose src0..8 and dst0 are attn_decode_ragged's (q, pages, page
// table, heads, schedule, merge; out), for its layout, batch, query heads, tasks and softmax scale
// (attn_decode_ragged.cu); and those of an attn_decode_ragged op (f16 or 4-bit pages).
rdecode_args ragged_task_args(const op_desc & op, const ragged_layout & l, int64_t batch, int64_t n_q_heads,
                              int64_t n_tasks, float scale);
rdecode_args ragged_decode_args(const op_desc & op);
// KVCOMP_RAGGED_DECODE: false when the SIMT kernels are forced.
bool ragged_mma_requested();
// The tensor-core kernels: layouts whose widest head is <= 128, f16 pages
// (attn_decode_ragged_mma.cu) and 4-bit pages (attn_decode_ragged_q4_mma.cu).
bool ragged_mma_handles(int64_t max_width);
// Their kernels for a layout (its widest heads) and a GQA group (launch_task_kernel over the schedule
// rows, partials taken; the caller merges).
task_kernel<rdecode_args> attn_decode_ragged_mma_kernel_for(const ragged_layout & l, int group);
task_kernel<rdecode_args> attn_decode_ragged_q4_mma_kernel_for(int max_width, int group);

}  // namespace kvcomp::cuda
