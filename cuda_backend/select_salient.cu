// select_salient: ZipCache's per-head salient-token split written as kv_quantize's rows table
// (contract in core/op.h; the CPU reference is lib/cpu/select_salient.cpp, whose integers this must
// equal exactly). The same algorithm as cl_kernels/select_salient.cl, kept deliberately plain:
//
// Kernel: select_salient_kernel, one block of kThreads threads per (prompt b, KV head h).
//   1. Threshold: the n_hi-th largest 64-bit key by radix select (8 passes of 8 bits, a 256-bin
//      histogram in shared memory per pass); then thr is that key and take_eq the number of tokens
//      with key == thr that are salient (the earliest: ties go to the lower index).
//   2. Stable partition: chunks of kThreads tokens in index order; two block-wide prefix sums give
//      each token its rank among the tied tokens and among the salient ones, hence its position in
//      o (salient ascending, then regular ascending) and so its block and slot in the rows table.
//   3. The slots past a block's hi_b + lo_b tokens are written as zeros.
// Keys are recomputed from sums and count in every pass (a prompt may have 128K tokens, more than
// shared memory holds).
//
// Exactness: the score is __ddiv_rn((double)sum, (double)count), the correctly rounded fp64
// quotient the host computes; the fp32 sum is widened through its bits when it is subnormal, so
// no flush-to-zero setting can change it. A prompt whose table entry breaks the contract's rules
// is skipped (the CPU reference throws; a kernel cannot).
#include "common.cuh"

namespace kvcomp::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kBins = 256;

__device__ __forceinline__ double f32_to_f64(float f) {
    const uint32_t u = __float_as_uint(f);
    if ((u & 0x7f800000u) != 0) return double(f);
    const double m = double(int(u & 0x007fffffu)) * 0x1.0p-149;  // zero or subnormal: exact
    return (u >> 31) ? -m : m;
}

// The order-preserving key of core/op.h: larger key = larger score, -0 == +0, NaN -> 0.
__device__ __forceinline__ uint64_t score_key(float sum, int32_t count) {
    const double s = count > 0 ? __ddiv_rn(f32_to_f64(sum), double(count)) : 0.0;
    if (isnan(s)) return 0;
    const uint64_t bits = s == 0.0 ? 0 : uint64_t(__double_as_longlong(s));
    return (bits >> 63) ? ~bits : bits | (uint64_t(1) << 63);
}

__device__ __forceinline__ int cdiv(int a, int b) {
    return b > 0 ? (a + b - 1) / b : 0;
}

__device__ __forceinline__ int clamp_int(int v, int lo, int hi) {
    return min(max(v, lo), hi);
}

// Exclusive prefix sum of v over the block (Hillis-Steele in scan[kThreads]); *total = the sum
// over all threads. Every thread must call it.
__device__ int scan_exclusive(int * scan, int v, int * total) {
    const int tid = int(threadIdx.x);
    scan[tid] = v;
    __syncthreads();
    for (int off = 1; off < kThreads; off <<= 1) {
        const int add = tid >= off ? scan[tid - off] : 0;
        __syncthreads();
        scan[tid] += add;
        __syncthreads();
    }
    const int inclusive = scan[tid];
    *total = scan[kThreads - 1];
    __syncthreads();  // the next call overwrites scan
    return inclusive - v;
}

struct select_args {
    const float * sums;
    const int32_t * count;
    const int32_t * prompts;
    int32_t * rows;
    int n_tokens, n_kv_heads, n_blocks, hi_tokens, lo_tokens;
};

__global__ void __launch_bounds__(kThreads) select_salient_kernel(const select_args a) {
    __shared__ int hist[kBins];
    __shared__ int scan[kThreads];
    const int tid = int(threadIdx.x), h = int(blockIdx.x);
    const int32_t * pr = a.prompts + 4 * int64_t(blockIdx.y);
    const int first_row = pr[0], n = pr[1], n_hi = pr[2], first_block = pr[3];
    const int n_lo = n - n_hi, hi_cap = a.hi_tokens, lo_cap = a.lo_tokens;
    const int nb = max(cdiv(n_hi, hi_cap), cdiv(n_lo, lo_cap));
    // Uniform over the block, so the early return cannot split a __syncthreads.
    if (n <= 0 || first_row < 0 || first_row > a.n_tokens - n || n_hi < 0 || n_hi > n ||
        (n_hi > 0 && hi_cap <= 0) || (n_lo > 0 && lo_cap <= 0) || first_block < 0 ||
        first_block > a.n_blocks - nb)
        return;
    const float * s = a.sums + int64_t(h) * a.n_tokens + first_row;
    const int32_t * cnt = a.count + first_row;
    const int G = hi_cap + lo_cap;
    auto row_at = [&](int bi, int x) -> int32_t & {
        return a.rows[(int64_t(first_block + bi) * a.n_kv_heads + h) * G + x];
    };

    // 1. Threshold. n_hi == 0: no key exceeds or (with take_eq 0) joins thr, nothing is salient.
    uint64_t thr = ~uint64_t(0);
    int take_eq = 0;
    if (n_hi > 0) {
        uint64_t prefix = 0, mask = 0;
        int k = n_hi;  // rank of the wanted key among the keys that match prefix on mask
        for (int shift = 56; shift >= 0; shift -= 8) {
            for (int d = tid; d < kBins; d += kThreads) hist[d] = 0;
            __syncthreads();
            for (int i = tid; i < n; i += kThreads) {
                const uint64_t key = score_key(s[i], cnt[i]);
                if ((key & mask) == prefix) atomicAdd(&hist[int(key >> shift) & (kBins - 1)], 1);
            }
            __syncthreads();
            // Every thread walks the bins from the top itself: the same answer everywhere, no
            // broadcast. The matching keys number at least k, so the walk stops at a bin.
            int d = kBins - 1;
            while (d > 0 && k > hist[d]) k -= hist[d--];
            prefix |= uint64_t(d) << shift;
            mask |= uint64_t(kBins - 1) << shift;
            __syncthreads();  // everyone has read hist before the next pass clears it
        }
        thr = prefix;
        take_eq = k;
    }

    // 2. Stable partition into o, scattered straight into the rows table.
    int eq_seen = 0, hi_seen = 0;
    for (int base = 0; base < n; base += kThreads) {
        const int i = base + tid;
        const uint64_t key = i < n ? score_key(s[i], cnt[i]) : 0;
        const int gt = i < n && key > thr, eq = i < n && key == thr;
        int eq_total = 0, hi_total = 0;
        const int eq_before = eq_seen + scan_exclusive(scan, eq, &eq_total);
        const int sal = gt || (eq && eq_before < take_eq);
        const int hi_before = hi_seen + scan_exclusive(scan, sal, &hi_total);
        if (i < n) {
            if (sal) {
                row_at(hi_before / hi_cap, hi_before % hi_cap) = first_row + i;
            } else {
                const int r = i - hi_before;  // rank among the regular tokens
                const int bi = r / lo_cap;
                row_at(bi, clamp_int(n_hi - bi * hi_cap, 0, hi_cap) + r % lo_cap) = first_row + i;
            }
        }
        eq_seen += eq_total;
        hi_seen += hi_total;
    }

    // 3. Unused slots of the prompt's blocks.
    for (int e = tid; e < nb * G; e += kThreads) {
        const int bi = e / G, x = e % G;
        const int used = clamp_int(n_hi - bi * hi_cap, 0, hi_cap) + clamp_int(n_lo - bi * lo_cap, 0, lo_cap);
        if (x >= used) row_at(bi, x) = 0;
    }
}

}  // namespace

support supports_select_salient(const op_desc & op) {
    const auto & p = op.get<select_salient_params>();
    if (p.n_tokens > INT32_MAX || p.n_blocks > INT32_MAX || int64_t(p.hi_tokens) + p.lo_tokens > INT32_MAX)
        return support::no("tokens, blocks and block size must fit in 32-bit ints");
    if (p.n_kv_heads > INT32_MAX || p.n_prompts > 65535)
        return support::no("grid too large (n_kv_heads x n_prompts, at most 65535 prompts)");
    return support::yes();
}

void run_select_salient(context & ctx, const op_desc & op) {
    const auto & p = op.get<select_salient_params>();
    if (p.n_prompts == 0 || p.n_blocks == 0) return;
    select_args a{};
    a.sums = dev_ptr<const float>(op.src[0]);
    a.count = dev_ptr<const int32_t>(op.src[1]);
    a.prompts = dev_ptr<const int32_t>(op.src[2]);
    a.rows = dev_ptr<int32_t>(op.dst[0]);
    a.n_tokens = int(p.n_tokens), a.n_kv_heads = int(p.n_kv_heads), a.n_blocks = int(p.n_blocks);
    a.hi_tokens = p.hi_tokens, a.lo_tokens = p.lo_tokens;
    const dim3 grid(unsigned(p.n_kv_heads), unsigned(p.n_prompts));
    select_salient_kernel<<<grid, kThreads, 0, ctx.stream>>>(a);
    KVCOMP_CUDA_CHECK_LAUNCH();
}

}  // namespace kvcomp::cuda
