// Helpers shared by the low-rank (ragged-head) CUDA op files: head_project.cu, kv_append_ragged.cu,
// attn_decode_ragged.cu, attn_prefill_ragged.cu, attn_decode_palu.cu.
//
// Layouts are the contracts of core/op.h ("Low-rank KV"): heads i32 [n_kv_heads, 4] =
// (k_width, k_offset, v_width, v_offset); ragged pages with head c's part of page p at
// p * page_size * total + page_size * offset[c], token slot s at + s * width[c].
// Decode partials (attn_decode_ragged and attn_decode_palu): for schedule row (task) t and query
// head i of its KV head's group, part_o f32 [n_tasks, group, max_width] holds the normalized output
// over the task's tokens (first v_width values used) and part_lse f32 [n_tasks, group] the log2 of
// its softmax denominator in the q * scale * log2(e) units (-inf for a task without tokens). A
// (request, KV head) with exactly one task is written to `out` by that task directly and the merge
// kernel skips it; zero tasks give zeros.
#pragma once

#include <algorithm>

#include "common.cuh"

namespace kvcomp::cuda {

// One KV head's row of the heads table.
struct ragged_head {
    int k_width, k_offset, v_width, v_offset;
};
__device__ __forceinline__ ragged_head load_head(const int32_t * heads, int c) {
    return {heads[4 * c], heads[4 * c + 1], heads[4 * c + 2], heads[4 * c + 3]};
}

// Unsigned division by a run-time divisor d in [1, 2^31) for dividends n < 2^31 with one
// multiply-high, an add and a shift (round-up reciprocal: m = floor(2^32 (2^s - d) / d) + 1,
// s = ceil(log2 d); then n / d = (umulhi(n, m) + n) >> s, and t + n < 2^32 because n < 2^31).
// Used where a kernel maps flat element indices to (page, offset) for every 16-byte chunk.
struct fast_divider {
    uint32_t d = 1, m = 1, s = 0;
    __device__ __forceinline__ void init(uint32_t divisor) {
        d = divisor;
        s = 0;
        while ((uint64_t(1) << s) < d) ++s;
        m = uint32_t(((uint64_t(1) << 32) * ((uint64_t(1) << s) - d)) / d + 1);
    }
    __device__ __forceinline__ uint32_t div(uint32_t n) const { return (__umulhi(n, m) + n) >> s; }
};

// Tokens of request b from its page table (as attn_decode): 0 when it has no page.
__device__ __forceinline__ int request_len(const int32_t * indptr, const int32_t * last_page_len, int b,
                                           int page_size) {
    const int n_pg = indptr[b + 1] - indptr[b];
    const int last = min(max(last_page_len[b], 0), page_size);
    return n_pg <= 0 ? 0 : (n_pg - 1) * page_size + last;
}

// One decode-task kernel as it is launched: blocks of `threads` with `smem` bytes of dynamic shared
// memory (opted into past the 48 KiB default), `head_chunks` blocks per schedule row (grid y, the
// query heads of the row's group in chunks). Launch and occupancy query take the same description,
// so the concurrency a host scheduler plans for (backend::concurrent_workgroups) is the one of the
// kernel that runs.
template <typename Args>
struct task_kernel {
    void (*fn)(Args);
    int threads;
    size_t smem;
    unsigned head_chunks;
};

template <typename Args>
void opt_into_smem(const task_kernel<Args> & k) {
    allow_dynamic_smem(reinterpret_cast<const void *>(k.fn), k.smem);
}

// One block per (schedule row, head chunk).
template <typename Args>
void launch_task_kernel(context & ctx, const task_kernel<Args> & k, int64_t n_tasks, const Args & a) {
    opt_into_smem(k);
    k.fn<<<dim3(unsigned(n_tasks), k.head_chunks), unsigned(k.threads), k.smem, ctx.stream>>>(a);
    KVCOMP_CUDA_CHECK_LAUNCH();
}

// Schedule rows whose blocks are resident at once on the current device: SMs x blocks per SM (the
// occupancy calculator: registers, shared memory, threads) / head chunks, at least 1.
template <typename Args>
int64_t concurrent_task_rows(const task_kernel<Args> & k) {
    opt_into_smem(k);
    int device = 0, sms = 0, per_sm = 0;
    KVCOMP_CUDA_CHECK(cudaGetDevice(&device));
    KVCOMP_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    KVCOMP_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, k.fn, k.threads, k.smem));
    return std::max<int64_t>(1, int64_t(sms) * per_sm / std::max(1u, k.head_chunks));
}

// Arguments of the merge of decode partials (see the banner).
struct ragged_merge_args {
    const float * part_o;
    const float * part_lse;
    const int32_t * merge;
    const int32_t * heads;
    float * out;
    int batch, n_kv_heads, group, v_total, max_width, n_tasks;
    uint64_t * timeline;  // block records (block_timeline.cuh), or null
};

// Enqueues the merge kernel (defined in attn_decode_ragged.cu): one block per (request, KV head,
// query head).
void launch_ragged_merge(context & ctx, const ragged_merge_args & a);

// attn_decode_ragged on q4 pages (kv.bits == 4; attn_decode_ragged_q4.cu), dispatched from
// attn_decode_ragged.cu.
support supports_attn_decode_ragged_q4(const op_desc & op);
void run_attn_decode_ragged_q4(context & ctx, const op_desc & op);
int64_t concurrent_rows_attn_decode_ragged_q4(int group);

// attn_decode_palu on tensor cores (attn_decode_palu_mma.cu), dispatched from attn_decode_palu.cu:
// whether it takes the op (head_dim 64 or 128, latents <= 128 wide, a rotary pairing it supports,
// KVCOMP_RAGGED_DECODE not "simt"), its resident schedule rows, and the op.
bool palu_mma_handles(const attn_decode_palu_params & p);
int64_t concurrent_rows_attn_decode_palu_mma(const attn_decode_palu_params & p);
void run_attn_decode_palu_mma(context & ctx, const op_desc & op);

// Bytes of the partials of n_tasks tasks (part_o then part_lse, each 256-byte aligned).
inline size_t ragged_partials_bytes(int64_t n_tasks, int64_t group, int64_t max_width, size_t * lse_offset) {
    const size_t o = (size_t(n_tasks * group * max_width) * sizeof(float) + 255) & ~size_t(255);
    *lse_offset = o;
    return o + size_t(n_tasks * group) * sizeof(float);
}


// The two steps every ragged decode op (attn_decode_ragged on fp16 and q4 pages, attn_decode_palu)
// shares around its task kernel. A: its kernel arguments, with part_o, part_lse, merge, heads, out,
// n_kv_heads, v_total and max_width fields.
// Points a.part_o / a.part_lse at the workspace's partials of n_tasks tasks.
template <typename A>
void take_ragged_partials(context & ctx, A & a, int64_t n_tasks, int64_t group) {
    size_t lse_off = 0;
    const size_t bytes = ragged_partials_bytes(n_tasks, group, a.max_width, &lse_off);
    char * ws = static_cast<char *>(ctx.workspace(bytes));
    a.part_o = reinterpret_cast<float *>(ws);
    a.part_lse = reinterpret_cast<float *>(ws + lse_off);
}
// Merges the rows with several tasks (and zeroes rows without any): after the task kernel.
// merge_timeline: the merge blocks' records (block_timeline.cuh), or null.
template <typename A>
void merge_ragged_rows(context & ctx, const A & a, int batch, int group, int n_tasks,
                       uint64_t * merge_timeline = nullptr) {
    ragged_merge_args m{};
    m.part_o = a.part_o;
    m.part_lse = a.part_lse;
    m.merge = a.merge;
    m.heads = a.heads;
    m.out = a.out;
    m.batch = batch;
    m.n_kv_heads = a.n_kv_heads;
    m.group = group;
    m.v_total = a.v_total;
    m.max_width = a.max_width;
    m.n_tasks = n_tasks;
    m.timeline = merge_timeline;
    launch_ragged_merge(ctx, m);
}

}  // namespace kvcomp::cuda
