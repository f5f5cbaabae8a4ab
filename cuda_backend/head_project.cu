// head_project: per-head product with a per-head basis,
//   dst[t, out_offset(h) + j] = sum_i x[t, in_offset(h) + i] * basis_h[i, j],  j < out_width(h),
// used for the low-rank Q/K projections at every step (prefill: 4K-64K tokens x 32 heads) and to
// fold bases into weights at load time (4096 rows, width 128 per head).
//
// Kernel: head_project_kernel, a tiled fp32 SGEMM per head. Grid x = 128-token tiles, y = head;
// a block loops over the head's output columns in tiles of 32 (so no block of a narrow head is
// launched only to exit). Block: 128 threads, each computing 8 tokens x 4 columns in registers;
// per k-step of 16 input dims the block stages x [128 x 16] (transposed, so a thread's 8 tokens are
// two float4 loads) and basis [16 x 32] in shared memory, double buffered with a register
// prefetch of the next k-step: 32 FMAs per 3 shared loads, one barrier per k-step. Global loads:
// 16 consecutive threads read 16 consecutive floats of one x row (64 bytes), 32 threads one basis
// row (128 bytes). fp32 throughout (the contract is fp32 accumulation; TF32 tensor cores would not
// meet the oracle's tolerance).
// Registers: ptxas (CUDA 13, sm_90) fits the kernel in 127 registers without spills under
// __launch_bounds__(128, 4), so 4 blocks (16 warps) share an SM.
// Few tokens (decode steps: n_tokens <= kSmallMaxTokens) take head_project_small_kernel instead: the
// tiled kernel's block would walk every column tile and k-step of a mostly empty 128-token tile
// (4 x 8 dependent global loads and barriers for a 128-wide head: tens of microseconds per call,
// twice per layer per decode step). The small kernel gives each block one head, a 64-column chunk
// and up to 8 tokens; 4 slices of 64 threads split the input dims (k) and add their partials in shared
// memory, so a thread issues in_width / 4 independent coalesced basis loads.
// Columns no head names are never written. Widths come from the table (device memory) and are
// clamped to [0, max_ragged_width]; ranges are trusted (the host checks them).
#include <climits>

#include "common.cuh"

namespace kvcomp::cuda {

namespace {

constexpr int kBM = 128, kBN = 32, kBK = 16;
constexpr int kThreads = 128;
constexpr int kTM = 8, kTN = 4;  // outputs per thread: tokens x columns
constexpr int kPadM = kBM + 4;   // keeps the float4 rows 16-byte aligned; 2-way conflicts at most on stores
static_assert((kBM / kTM) * (kBN / kTN) == kThreads, "one thread per 8 x 4 output block");
static_assert(kBM * kBK % kThreads == 0 && kBK * kBN % kThreads == 0, "equal load shares");

struct project_args {
    const float * x;
    const float * bases;
    const int32_t * table;
    float * dst;
    int64_t n_tokens, in_total, out_total, n_basis;
};

__global__ void __launch_bounds__(kThreads, 4) head_project_kernel(const project_args a) {
    __shared__ __align__(16) float sa[2][kBK][kPadM];  // x tile, transposed: [k][token]
    __shared__ __align__(16) float sb[2][kBK][kBN];    // basis tile: [k][column]

    const int h = blockIdx.y;
    const int in_off = a.table[5 * h], in_w = min(max(a.table[5 * h + 1], 0), int(max_ragged_width));
    const int64_t b_off = a.table[5 * h + 2];
    const int out_off = a.table[5 * h + 3], out_w = min(max(a.table[5 * h + 4], 0), int(max_ragged_width));
    const int64_t m0 = int64_t(blockIdx.x) * kBM;
    const int tid = threadIdx.x;
    const int tx = tid % (kBN / kTN), ty = tid / (kBN / kTN);  // column group, token group
    const int n_k = (in_w + kBK - 1) / kBK;
    const float * basis = a.bases + b_off;

    constexpr int LA = kBM * kBK / kThreads;  // x values per thread per k-step
    constexpr int LB = kBK * kBN / kThreads;  // basis values per thread per k-step
    float ra[LA], rb[LB];
    // Thread tid loads x (row tid / kBK + i * (kThreads / kBK), column tid % kBK) and basis
    // (row tid / kBN + i * (kThreads / kBN), column tid % kBN).
    // This thread's first x row and column, and how many of its rows (every kThreads / kBK-th)
    // exist: one 64-bit pointer and a count instead of LA addresses and bounds in registers.
    const float * xa = a.x + (m0 + tid / kBK) * a.in_total + in_off + tid % kBK;
    const int64_t rows_left = a.n_tokens - m0 - tid / kBK;
    const int64_t x_step = int64_t(kThreads / kBK) * a.in_total;
    auto load_a = [&](int k0) {
        const bool k_ok = k0 + tid % kBK < in_w;
#pragma unroll
        for (int i = 0; i < LA; ++i)
            ra[i] = k_ok && i * (kThreads / kBK) < rows_left ? xa[i * x_step + k0] : 0.0f;
    };
    auto load_b = [&](int k0, int n0) {
#pragma unroll
        for (int i = 0; i < LB; ++i) {
            const int k = k0 + tid / kBN + i * (kThreads / kBN), n = n0 + tid % kBN;
            rb[i] = k < in_w && n < out_w ? basis[int64_t(k) * out_w + n] : 0.0f;
        }
    };
    auto store = [&](int buf) {
#pragma unroll
        for (int i = 0; i < LA; ++i) sa[buf][tid % kBK][tid / kBK + i * (kThreads / kBK)] = ra[i];
#pragma unroll
        for (int i = 0; i < LB; ++i) sb[buf][tid / kBN + i * (kThreads / kBN)][tid % kBN] = rb[i];
    };

    for (int n0 = 0; n0 < out_w; n0 += kBN) {  // uniform across the block
        float acc[kTM][kTN];
#pragma unroll
        for (int i = 0; i < kTM; ++i)
#pragma unroll
            for (int j = 0; j < kTN; ++j) acc[i][j] = 0.0f;

        __syncthreads();  // the previous column tile's readers are done with both buffers
        load_a(0);
        load_b(0, n0);
        store(0);
        __syncthreads();
        for (int kt = 0; kt < n_k; ++kt) {
            const int cur = kt & 1;
            if (kt + 1 < n_k) {  // in flight while this k-step computes
                load_a((kt + 1) * kBK);
                load_b((kt + 1) * kBK, n0);
            }
#pragma unroll
            for (int k = 0; k < kBK; ++k) {
                const float4 a0 = *reinterpret_cast<const float4 *>(&sa[cur][k][ty * kTM]);
                const float4 a1 = *reinterpret_cast<const float4 *>(&sa[cur][k][ty * kTM + 4]);
                const float4 bv = *reinterpret_cast<const float4 *>(&sb[cur][k][tx * kTN]);
                const float av[kTM] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
                const float bw[kTN] = {bv.x, bv.y, bv.z, bv.w};
#pragma unroll
                for (int i = 0; i < kTM; ++i)
#pragma unroll
                    for (int j = 0; j < kTN; ++j) acc[i][j] = fmaf(av[i], bw[j], acc[i][j]);
            }
            if (kt + 1 < n_k) store(cur ^ 1);  // the other buffer was last read in step kt - 1
            __syncthreads();
        }

#pragma unroll
        for (int i = 0; i < kTM; ++i) {
            const int64_t m = m0 + ty * kTM + i;
            if (m >= a.n_tokens) break;
            float * row = a.dst + m * a.out_total + out_off;
#pragma unroll
            for (int j = 0; j < kTN; ++j) {
                const int n = n0 + tx * kTN + j;
                if (n < out_w) row[n] = acc[i][j];
            }
        }
    }
}

constexpr int kSmallTok = 8, kSmallCols = 64, kSmallSlices = 4;
constexpr int kSmallThreads = kSmallCols * kSmallSlices;
constexpr int64_t kSmallMaxTokens = 64;

__global__ void __launch_bounds__(kSmallThreads) head_project_small_kernel(const project_args a) {
    __shared__ float xs[kSmallTok][max_ragged_width];
    __shared__ float part[kSmallSlices - 1][kSmallTok][kSmallCols];

    const int h = blockIdx.y;
    const int in_off = a.table[5 * h], in_w = min(max(a.table[5 * h + 1], 0), int(max_ragged_width));
    const int64_t b_off = a.table[5 * h + 2];
    const int out_off = a.table[5 * h + 3], out_w = min(max(a.table[5 * h + 4], 0), int(max_ragged_width));
    const int n0 = int(blockIdx.z) * kSmallCols;
    if (n0 >= out_w) return;  // uniform across the block: a narrower head than the grid's widest
    const int64_t t0 = int64_t(blockIdx.x) * kSmallTok;
    const int nt = int(a.n_tokens - t0 < kSmallTok ? a.n_tokens - t0 : int64_t(kSmallTok));

    for (int e = threadIdx.x; e < kSmallTok * in_w; e += kSmallThreads) {
        const int t = e / in_w, i = e % in_w;
        xs[t][i] = t < nt ? a.x[(t0 + t) * a.in_total + in_off + i] : 0.0f;
    }
    __syncthreads();

    const int j = threadIdx.x % kSmallCols, slice = threadIdx.x / kSmallCols, n = n0 + j;
    const int k_per = (in_w + kSmallSlices - 1) / kSmallSlices;
    const int k_begin = slice * k_per, k_end = min(in_w, k_begin + k_per);
    float acc[kSmallTok];
#pragma unroll
    for (int t = 0; t < kSmallTok; ++t) acc[t] = 0.0f;
    if (n < out_w) {
        const float * b = a.bases + b_off + n;
#pragma unroll 8
        for (int k = k_begin; k < k_end; ++k) {
            const float bv = __ldg(b + int64_t(k) * out_w);
#pragma unroll
            for (int t = 0; t < kSmallTok; ++t) acc[t] = fmaf(xs[t][k], bv, acc[t]);
        }
    }
    if (slice > 0)
#pragma unroll
        for (int t = 0; t < kSmallTok; ++t) part[slice - 1][t][j] = acc[t];
    __syncthreads();
    if (slice == 0 && n < out_w)
        for (int t = 0; t < nt; ++t) {
            float sum = acc[t];
#pragma unroll
            for (int s2 = 0; s2 < kSmallSlices - 1; ++s2) sum += part[s2][t][j];
            a.dst[(t0 + t) * a.out_total + out_off + n] = sum;
        }
}

}  // namespace

support supports_head_project(const op_desc & op) {
    const auto & p = op.get<head_project_params>();
    if (p.n_heads > 65535) return support::no("n_heads > 65535 (grid y limit)");
    if ((p.n_tokens + kBM - 1) / kBM > INT_MAX) return support::no("too many token tiles (grid x limit)");
    if (p.in_total > INT_MAX || p.out_total > INT_MAX)
        return support::no("in_total and out_total must fit in 32 bits");
    return support::yes();
}

void run_head_project(context & ctx, const op_desc & op) {
    const auto & p = op.get<head_project_params>();
    if (p.n_tokens == 0) return;
    project_args a{};
    a.x = dev_ptr<const float>(op.src[0]);
    a.bases = dev_ptr<const float>(op.src[1]);
    a.table = dev_ptr<const int32_t>(op.src[2]);
    a.dst = dev_ptr<float>(op.dst[0]);
    a.n_tokens = p.n_tokens;
    a.in_total = p.in_total;
    a.out_total = p.out_total;
    a.n_basis = p.n_basis;
    if (p.n_tokens <= kSmallMaxTokens) {
        const dim3 grid(unsigned((p.n_tokens + kSmallTok - 1) / kSmallTok), unsigned(p.n_heads),
                        unsigned((max_ragged_width + kSmallCols - 1) / kSmallCols));
        head_project_small_kernel<<<grid, kSmallThreads, 0, ctx.stream>>>(a);
    } else {
        const dim3 grid(unsigned((p.n_tokens + kBM - 1) / kBM), unsigned(p.n_heads));
        head_project_kernel<<<grid, kThreads, 0, ctx.stream>>>(a);
    }
    KVCOMP_CUDA_CHECK_LAUNCH();
}

}  // namespace kvcomp::cuda
