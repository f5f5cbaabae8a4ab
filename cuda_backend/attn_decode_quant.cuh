// Internal to the CUDA attn_decode_quant kernels (attn_decode_quant.cu: host side and the SIMT
// kernel; attn_decode_quant_mma.cu: the tensor-core kernel): kernel arguments, the work items of a
// (request, KV head, split) and their staging into shared memory, shared by both kernels.
//
// Work items: the request's blocks, then its window cut into chunks of win_chunk tokens (a chunk's
// K+V bytes are about one block's bytes). Split s of a (request, KV head) takes items
// [s * items_per_split, ...) and the last split everything left, so an underestimated item count
// (partial blocks) loses nothing.
// Staging: one item per stage of a shared-memory ring. A block item is the slot's 16-byte header
// followed by the KV head's region of the slot (vscale, hi segment, lo segment: contiguous), copied
// in 16-byte cp.async chunks by the group that consumes it (the whole thread block in the SIMT
// kernel's block ring, one warp in the tensor-core kernel's per-warp rings). A window item is K
// rows [win_chunk][D] then V rows [win_chunk][D] (f16), each token's row found through its
// window's page table (op.h); tokens past the window are zero-filled without a global read.
// Invalid inputs a kernel cannot refuse (the CPU reference throws; the host validates): block
// ranges are clamped to the index array, slot and window page numbers to their pools; an invalid
// window (len outside [0, win_tokens], start outside the ring, row outside the rows) counts as empty.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>

#include "common.cuh"
#include "core/qblock.h"

namespace kvcomp::cuda::dq {

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;
constexpr float kLog2e = 1.4426950408889634f;

struct args {
    const float * q;
    const uint8_t * pool;
    const int32_t * indptr;
    const int32_t * indices;
    const __half * win_k;
    const __half * win_v;
    const int32_t * win;
    const int32_t * win_pages;  // [n_win_rows, win_ppr]
    float * out;
    float * lse;
    float * part_o;    // [batch * n_q_heads, n_splits, D] when n_splits > 1
    float * part_lse;  // [batch * n_q_heads, n_splits], log2 units
    int64_t slot_bytes, head_bytes;
    int seg_off[2];  // hi / lo segment offsets within a head region
    int cap[2], bits[2];
    int seg_kstep, seg_vmin;  // segment-relative offsets independent of the capacity
    int seg_vstep[2], seg_kcodes[2], seg_vcodes[2];
    int groups, v_group;
    bool cscale;
    int n_slots, nnz, n_kv_heads, n_q_heads, group, head_chunks, n_splits, items_per_split;
    int n_win_rows, win_tokens, win_chunk;
    int n_win_pages, win_page_tokens, win_ppr;
    int win_page_shift;  // log2(win_page_tokens) when a power of two (the engine's pages), else -1
    int stage_bytes, n_stages;
    float qscale;  // scale * log2(e)
};

// The items of one (request, split) and their staging (see the banner).
struct items {
    int blk_begin, n_blk;          // the request's block range in indices
    int w_row, w_start, w_len;     // its window (w_len = 0 when invalid)
    int it_begin, n_it;            // this split's items [it_begin, it_begin + n_it)

    __device__ __forceinline__ items(const args & a, int b, int split) {
        blk_begin = min(max(a.indptr[b], 0), a.nnz);
        n_blk = max(min(a.indptr[b + 1], a.nnz) - blk_begin, 0);
        w_row = a.win[3 * b];
        w_start = a.win[3 * b + 1];
        w_len = a.win[3 * b + 2];
        if (w_len < 0 || w_len > a.win_tokens || w_start < 0 || w_start >= a.win_tokens ||
            (w_len > 0 && (w_row < 0 || w_row >= a.n_win_rows)))
            w_len = 0;
        const int n_items = n_blk + (w_len + a.win_chunk - 1) / a.win_chunk;
        it_begin = min(split * a.items_per_split, n_items);
        const int it_end = split == a.n_splits - 1 ? n_items : min(it_begin + a.items_per_split, n_items);
        n_it = it_end - it_begin;
    }

    // Slot of item `it` (relative to it_begin) when it is a block, else 0; loaded one issue ahead
    // of its copy so copies never wait on the index array.
    __device__ __forceinline__ int slot(const args & a, int it) const {
        const int item = it_begin + it;
        return it < n_it && item < n_blk ? min(max(a.indices[blk_begin + item], 0), a.n_slots - 1) : 0;
    }

    // Tokens of window item `item` (absolute item number, >= n_blk).
    __device__ __forceinline__ int window_tokens(const args & a, int item) const {
        return min(a.win_chunk, w_len - (item - n_blk) * a.win_chunk);
    }

    // Copies item `item` (absolute item number) of KV head g into `stage`: threads tid, tid +
    // nthreads, ... of the copying group (the block, or one warp) take its 16-byte chunks.
    template <int D>
    __device__ __forceinline__ void copy_item(const args & a, int g, uint8_t * stage, int item, int slot_nr, int tid,
                                              int nthreads) const {
        const unsigned stage_s = smem_addr(stage);  // once: see cp_async16 in common.cuh
        if (item < n_blk) {
            // Chunk 0 is the slot's header; chunk k >= 1 lies at head + 16 k (the head's region
            // starts after the header). Pointer steps keep the loop free of 64-bit multiplies.
            const uint8_t * src = a.pool + int64_t(slot_nr) * a.slot_bytes;
            const uint8_t * head = src + int64_t(g) * a.head_bytes;
            if (tid == 0) cp_async16(stage_s, src, 16);
            const uint8_t * end = head + 16 * (1 + a.head_bytes / 16);
            unsigned dst = stage_s + unsigned(16 * (tid + 1));
            for (const uint8_t * p = head + 16 * (tid + 1); p < end; p += 16 * nthreads, dst += 16 * nthreads)
                cp_async16(dst, p, 16);
        } else {
            constexpr int RC = D / 8;  // 16-byte chunks per row
            const int j0 = (item - n_blk) * a.win_chunk;
            const int per_kv = a.win_chunk * RC;
            for (int k = tid; k < 2 * per_kv; k += nthreads) {
                const int kv = k >= per_kv ? 1 : 0, jj = (k - kv * per_kv) / RC, part = k % RC;
                const int j = j0 + jj;
                const bool valid = j < w_len;
                const __half * base = kv ? a.win_v : a.win_k;
                int64_t off = 0;
                if (valid) {
                    // Run-time divisions per 16-byte chunk made ZipCache's 96-token window 10 % of a
                    // 1 x 4K decode: the ring wraps by a subtraction, and pages of a power of two
                    // tokens take a shift and a mask.
                    const int s = w_start + j - (w_start + j >= a.win_tokens ? a.win_tokens : 0);  // both < win_tokens
                    const int pi = a.win_page_shift >= 0 ? s >> a.win_page_shift : s / a.win_page_tokens;
                    const int in_page = a.win_page_shift >= 0 ? s & (a.win_page_tokens - 1) : s % a.win_page_tokens;
                    const int page = min(max(a.win_pages[w_row * a.win_ppr + pi], 0), a.n_win_pages - 1);
                    off = ((int64_t(page) * a.n_kv_heads + g) * a.win_page_tokens + in_page) * D + part * 8;
                }
                cp_async16(stage_s + unsigned(((kv * a.win_chunk + jj) * D + part * 8) * 2), base + off, valid ? 16 : 0);
            }
        }
    }

    // Starts the copies of item `it` (relative) of KV head g into its stage of the block's ring
    // and commits one cp.async group (empty past the split's items, so group counts line up).
    template <int D>
    __device__ __forceinline__ void issue(const args & a, int g, uint8_t * ring, int it, int slot_nr) const {
        if (it < n_it)
            copy_item<D>(a, g, ring + (it % a.n_stages) * a.stage_bytes, it_begin + it, slot_nr, threadIdx.x, kThreads);
        cp_async_commit();
    }
};

// Stage size: one block's header + head region, or at least one window token (K and V rows).
inline int64_t stage_bytes_for(const qblock_layout & q) {
    return std::max<int64_t>(16 + q.head_bytes(), 4 * q.head_dim);
}

// ---- the tensor-core kernel (attn_decode_quant_mma.cu) ---------------------------------------
// Whether it handles a layout on the current device (head_dim a multiple of 16 from 32 to 128,
// v_group 16, 32 or 64 dividing it or head_dim itself, every warp's ring of two stages fits the
// device's shared memory); the reason when not.
bool mma_handles(const qblock_layout & q, std::string * why);
// Query heads per block (GQA groups larger than this use several head chunks).
constexpr int kMmaHeads = 4;
// Items a split should hold at least: each warp streams its own items, two each at the least.
constexpr int kMmaMinItemsPerSplit = 2 * kWarps;
// Stages of each warp's ring (two, three for small items) and the block's shared memory.
int mma_stages(int stage_bytes);
size_t mma_smem_bytes(int head_dim, int stage_bytes, int n_stages);
int mma_blocks_per_sm(const args & a, int head_dim, size_t smem);
void mma_launch(context & ctx, const args & a, int head_dim, int64_t blocks, size_t smem);

}  // namespace kvcomp::cuda::dq
