// The split merge shared by the split-KV decodes attn_decode (fp16 pages) and attn_decode_quant: both
// write per (row, split) a normalized partial output part_o [rows, n_splits, head_dim] and the log2 of
// its softmax denominator part_lse [rows, n_splits] (decode_common.cuh, store_block_result). Launched
// as the decode's programmatic dependent (dependent_launch.cuh).
//
// Kernel split_merge_kernel: one block of kMergeThreads per (row, chunk of cpb channels).
#include "common.cuh"
#include "decode_common.cuh"
#include "dependent_launch.cuh"

namespace kvcomp::cuda {

namespace {

constexpr float kLn2 = 0.6931471805599453f;

// out[row] = sum_s 2^(lse_s - M) o_s / sum_s 2^(lse_s - M), lse = (M + log2 sum) * ln 2 (when lse_out
// is given); zeros and -inf when no split saw a token. One block of kMergeThreads per (row, cpb
// channels): the max and the sum of weights are block reductions over the splits (every block of a
// row computes them), and
// thread (j, d) of the kMergeThreads / cpb groups sums channel d over splits j, j + groups, ... with
// four independent accumulators, so a thread keeps four partials' loads in flight. cpb is 32 when
// the rows are fewer than the SMs (batch 1: 32 rows would use 32 SMs), else head_dim (a block per
// row; at 16 x 4K the 4 blocks per row cost 3 %). One thread per channel walking every split three
// times, one block per row, took 12-16 us under Nsight Compute at batch 1 with 31-49 splits on an
// H100, against 42-103 us for the quantized decode itself; 5.5-7.2 us at 32 channels per block. (The
// fp16 decode kept that first kernel until it took this one: 18.7 us at 1 x 32K under Nsight Compute
// on an H200, docs/RESULTS.md "Where batch 1 goes".)
constexpr int kMergeThreads = 256;
__global__ void __launch_bounds__(kMergeThreads)
    split_merge_kernel(const float * __restrict__ part_o, const float * __restrict__ part_lse,
                       float * __restrict__ out, float * __restrict__ lse_out, int n_splits, int head_dim, int cpb) {
    __shared__ float scratch[32];
    __shared__ float sums[kMergeThreads];
    const int blocks_per_row = head_dim / cpb, groups = kMergeThreads / cpb;
    const int64_t row = blockIdx.x / blocks_per_row;
    const int tid = threadIdx.x, c0 = int(blockIdx.x % blocks_per_row) * cpb;
    const float * lse = part_lse + row * n_splits;
    wait_for_producer();  // the partials are the decode's
    float mx = -INFINITY;
    for (int s = tid; s < n_splits; s += kMergeThreads) mx = fmaxf(mx, lse[s]);
    mx = block_max(mx, scratch);
    float den = 0.0f;
    if (mx != -INFINITY)
        for (int s = tid; s < n_splits; s += kMergeThreads) den += exp2f(lse[s] - mx);
    den = block_sum(den, scratch);
    const int j = tid / cpb, d = c0 + tid % cpb;
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    if (mx != -INFINITY) {
        const float * po = part_o + row * n_splits * head_dim + d;
        int s = j;
        for (; s + 3 * groups < n_splits; s += 4 * groups) {
#pragma unroll
            for (int u = 0; u < 4; ++u) {
                const int su = s + u * groups;
                acc[u] = fmaf(exp2f(lse[su] - mx), po[int64_t(su) * head_dim], acc[u]);
            }
        }
        for (; s < n_splits; s += groups) acc[0] = fmaf(exp2f(lse[s] - mx), po[int64_t(s) * head_dim], acc[0]);
    }
    sums[tid] = (acc[0] + acc[1]) + (acc[2] + acc[3]);
    __syncthreads();
    if (tid < cpb) {
        float num = 0.0f;
        for (int g = 0; g < groups; ++g) num += sums[g * cpb + tid];
        out[row * head_dim + c0 + tid] = mx == -INFINITY ? 0.0f : num / den;
    }
    if (lse_out && tid == 0 && c0 == 0) lse_out[row] = mx == -INFINITY ? -INFINITY : (mx + log2f(den)) * kLn2;
}

}  // namespace

void launch_split_merge(context & ctx, const float * part_o, const float * part_lse, float * out, float * lse_out,
                        int64_t rows, int n_splits, int head_dim) {
    const int cpb = rows < ctx.sm_count && head_dim % 32 == 0 ? 32 : head_dim;  // channels per block (above)
    launch_consumer(ctx, split_merge_kernel, unsigned(rows * (head_dim / cpb)), kMergeThreads, 0, part_o, part_lse,
                    out, lse_out, n_splits, head_dim, cpb);
}

}  // namespace kvcomp::cuda
