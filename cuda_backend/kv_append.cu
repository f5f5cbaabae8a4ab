// kv_append: write n_tokens new K/V tokens into paged fp16 HND pages through the page table.
//
// Kernels: kv_append_kernel<TK, TV> (float or __half new K and V tokens).
// Grid: one block of 128 threads per new token (block-stride loop when n_tokens > 65535); the
// threads stride over the token's n_kv_heads * head_dim features, so each head row of a page is
// written by consecutive threads.
// Layout (core/op.h): k_new/v_new [n_tokens, n_kv_heads, head_dim]; token t goes to request
// batch_idx[t] at position positions[t], page indices[indptr[b] + pos / page_size], slot
// pos % page_size of k_pages/v_pages [n_pages, n_kv_heads, page_size, head_dim].
// A token whose request, position or page falls outside the table is skipped (a kernel cannot
// throw; the CPU oracle refuses such tokens and the host validates tables when it builds them).
// f32 -> f16 rounds to nearest even (__float2half_rn), bit-identical to the oracle.
#include "common.cuh"

namespace kvcomp::cuda {

namespace {

template <typename TK, typename TV>
__global__ void kv_append_kernel(const TK * __restrict__ k_new, const TV * __restrict__ v_new,
                                 const int32_t * __restrict__ batch_idx,
                                 const int32_t * __restrict__ positions, const int32_t * __restrict__ indptr,
                                 const int32_t * __restrict__ indices, __half * __restrict__ k_pages,
                                 __half * __restrict__ v_pages, int64_t n_tokens, int64_t batch, int64_t nnz,
                                 int64_t n_pages, int n_kv_heads, int page_size, int head_dim) {
    const int row = n_kv_heads * head_dim;
    for (int64_t t = blockIdx.x; t < n_tokens; t += gridDim.x) {
        const int64_t b = batch_idx[t], pos = positions[t];
        if (b < 0 || b >= batch || pos < 0) continue;  // uniform across the block
        const int64_t entry = indptr[b] + pos / page_size;
        if (entry < 0 || entry >= indptr[b + 1] || entry >= nnz) continue;
        const int64_t page = indices[entry];
        if (page < 0 || page >= n_pages) continue;
        const int64_t slot = pos % page_size;
        for (int j = threadIdx.x; j < row; j += blockDim.x) {
            const int h = j / head_dim, d = j % head_dim;
            const int64_t dst = ((page * n_kv_heads + h) * page_size + slot) * head_dim + d;
            const int64_t src = t * row + j;
            k_pages[dst] = __float2half_rn(to_float(k_new[src]));
            v_pages[dst] = __float2half_rn(to_float(v_new[src]));
        }
    }
}

template <typename TK, typename TV>
void launch_kv_append(context & ctx, const op_desc & op, const kv_append_params & p) {
    constexpr int threads = 128;
    const unsigned grid = unsigned(std::min<int64_t>(p.n_tokens, 65535));
    kv_append_kernel<TK, TV><<<grid, threads, 0, ctx.stream>>>(
        dev_ptr<const TK>(op.src[0]), dev_ptr<const TV>(op.src[1]), dev_ptr<const int32_t>(op.src[2]),
        dev_ptr<const int32_t>(op.src[3]), dev_ptr<const int32_t>(op.src[4]),
        dev_ptr<const int32_t>(op.src[5]), dev_ptr<__half>(op.dst[0]), dev_ptr<__half>(op.dst[1]), p.n_tokens,
        p.batch, p.nnz_pages, p.kv.n_pages, int(p.kv.n_kv_heads), int(p.kv.page_size), int(p.kv.head_dim));
    KVCOMP_CUDA_CHECK_LAUNCH();
}

}  // namespace

void run_kv_append(context & ctx, const op_desc & op) {
    const auto & p = op.get<kv_append_params>();
    if (p.n_tokens == 0) return;
    const bool k16 = op.src[0].type == dtype::f16, v16 = op.src[1].type == dtype::f16;
    if (k16 && v16) return launch_kv_append<__half, __half>(ctx, op, p);
    if (k16) return launch_kv_append<__half, float>(ctx, op, p);
    if (v16) return launch_kv_append<float, __half>(ctx, op, p);
    launch_kv_append<float, float>(ctx, op, p);
}

}  // namespace kvcomp::cuda
