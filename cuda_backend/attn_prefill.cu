// attn_prefill: causal attention over a ragged batch of prompts, GQA, fp32 online softmax.
//
// Kernels: attn_prefill_kernel<D> (D = head_dim, 64 or 128).
// Grid: x = query tiles of 32 rows over all requests (a tile never spans two requests; each
//   block finds its request by scanning seq_indptr, so no host copy of the lengths is needed and
//   max_seq_len is not trusted), y = query head. 128 threads = 4 warps x 8 query rows.
// Layout (core/op.h): q/out f32 [n_tokens, n_q_heads, D]; k/v f16 [n_tokens, n_kv_heads, D];
//   seq_indptr i32 [batch+1]: request b owns rows [seq_indptr[b], seq_indptr[b+1]) and its row j
//   attends to its rows 0..j. Query head h reads KV head h / (n_q_heads / n_kv_heads).
// Shared memory per block (D = 128: 40 KB): the Q tile (f32, pre-scaled by scale*log2(e)), a
//   K tile of 32 keys as half2 rows padded by one word (lane j reads key j's row: conflict-free),
//   and a V tile of 32 keys in f32 (lane reads feature lane + 32c: conflict-free).
// Per key tile each warp computes, for its 8 rows, the 32 scores (lane j = key j, fp32 FMA over
//   D), updates the running max / sum in the log2 domain (exp2f), and accumulates o with lanes
//   over features (D/32 per lane), broadcasting p by shuffles. Correctness first: CUDA cores,
//   no tensor cores; K/V are re-read for every query head of a group.
#include <climits>

#include "common.cuh"

namespace kvcomp::cuda {

namespace {

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;
constexpr int kRows = 8;  // query rows per warp
constexpr int kTileQ = kWarps * kRows;  // query rows per block
constexpr int kTileK = 32;  // keys per tile (one per lane)
constexpr float kLog2e = 1.4426950408889634f;

struct prefill_args {
    const float * q;
    const __half * k;
    const __half * v;
    const int32_t * seq_indptr;
    float * out;
    int batch, n_tokens, n_q_heads, n_kv_heads, group;
    float qscale;
};

// Rows [s0, s1) of request b, clamped into [0, n_tokens] so a bad seq_indptr cannot fault.
__device__ __forceinline__ void request_rows(const prefill_args & a, int b, int & s0, int & s1) {
    s0 = min(max(a.seq_indptr[b], 0), a.n_tokens);
    s1 = min(max(a.seq_indptr[b + 1], s0), a.n_tokens);
}

template <int D>
__global__ void __launch_bounds__(kThreads) attn_prefill_kernel(const prefill_args a) {
    constexpr int C = D / 32;  // output features per lane
    __shared__ __align__(16) float sq[kTileQ][D];
    __shared__ __half2 sk[kTileK][D / 2 + 1];
    __shared__ float sv[kTileK][D];

    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int h = blockIdx.y, g = h / a.group;

    // Which request and which of its query tiles this block owns (uniform across the block).
    int b = -1, tile = 0, acc = 0;
    for (int r = 0; r < a.batch; ++r) {
        int s0, s1;
        request_rows(a, r, s0, s1);
        const int tiles = (s1 - s0 + kTileQ - 1) / kTileQ;
        if (int(blockIdx.x) < acc + tiles) {
            b = r;
            tile = int(blockIdx.x) - acc;
            break;
        }
        acc += tiles;
    }
    if (b < 0) return;
    int s0, s1;
    request_rows(a, b, s0, s1);
    const int n = s1 - s0;
    const int r0 = tile * kTileQ;

    for (int idx = threadIdx.x; idx < kTileQ * D; idx += kThreads) {
        const int i = idx / D, d = idx % D;
        const int row = r0 + i;
        sq[i][d] = row < n ? a.q[(int64_t(s0 + row) * a.n_q_heads + h) * D + d] * a.qscale : 0.0f;
    }

    float o[kRows][C], m[kRows], l[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
        m[r] = -INFINITY;
        l[r] = 0.0f;
#pragma unroll
        for (int c = 0; c < C; ++c) o[r][c] = 0.0f;
    }

    const int k_end = min(n, r0 + kTileQ);  // causal: no row of this tile sees past its last row
    for (int k0 = 0; k0 < k_end; k0 += kTileK) {
        __syncthreads();  // the previous tile's readers are done
        for (int idx = threadIdx.x; idx < kTileK * (D / 2); idx += kThreads) {
            const int j = idx / (D / 2), d2 = idx % (D / 2);
            __half2 kk = __float2half2_rn(0.0f);
            float v0 = 0.0f, v1 = 0.0f;
            if (k0 + j < n) {
                const int64_t src = (int64_t(s0 + k0 + j) * a.n_kv_heads + g) * D + 2 * d2;
                kk = __halves2half2(a.k[src], a.k[src + 1]);
                v0 = __half2float(a.v[src]);
                v1 = __half2float(a.v[src + 1]);
            }
            sk[j][d2] = kk;
            sv[j][2 * d2] = v0;
            sv[j][2 * d2 + 1] = v1;
        }
        __syncthreads();

        float s[kRows];
#pragma unroll
        for (int r = 0; r < kRows; ++r) s[r] = 0.0f;
#pragma unroll 8
        for (int d2 = 0; d2 < D / 2; ++d2) {
            const float2 kf = __half22float2(sk[lane][d2]);
#pragma unroll
            for (int r = 0; r < kRows; ++r) {
                const float2 qq = *reinterpret_cast<const float2 *>(&sq[warp * kRows + r][2 * d2]);
                s[r] = fmaf(qq.x, kf.x, fmaf(qq.y, kf.y, s[r]));
            }
        }

        float pr[kRows];
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
            const int row = r0 + warp * kRows + r, key = k0 + lane;
            const float sc = (row < n && key <= row) ? s[r] : -INFINITY;
            const float m_new = fmaxf(m[r], warp_max(sc));
            const float m_use = m_new == -INFINITY ? 0.0f : m_new;  // fully masked so far
            const float alpha = exp2f(m[r] - m_use);
            pr[r] = exp2f(sc - m_use);
            l[r] = l[r] * alpha + warp_sum(pr[r]);
            m[r] = m_new;
#pragma unroll
            for (int c = 0; c < C; ++c) o[r][c] *= alpha;
        }
#pragma unroll 4
        for (int j = 0; j < kTileK; ++j) {
            float vj[C];
#pragma unroll
            for (int c = 0; c < C; ++c) vj[c] = sv[j][lane + 32 * c];
#pragma unroll
            for (int r = 0; r < kRows; ++r) {
                const float pj = __shfl_sync(full_mask, pr[r], j);
#pragma unroll
                for (int c = 0; c < C; ++c) o[r][c] = fmaf(pj, vj[c], o[r][c]);
            }
        }
    }

#pragma unroll
    for (int r = 0; r < kRows; ++r) {
        const int row = r0 + warp * kRows + r;
        if (row >= n) continue;
        const float inv = 1.0f / l[r];  // l >= 1: a row always sees itself
        float * dst = a.out + (int64_t(s0 + row) * a.n_q_heads + h) * D;
#pragma unroll
        for (int c = 0; c < C; ++c) dst[lane + 32 * c] = o[r][c] * inv;
    }
}

}  // namespace

support supports_attn_prefill(const op_desc & op) {
    const auto & p = op.get<attn_prefill_params>();
    if (p.head_dim != 64 && p.head_dim != 128)
        return support::no("head_dim " + std::to_string(p.head_dim) +
                           " (CUDA prefill kernels exist for 64 and 128)");
    if (p.n_q_heads > 65535) return support::no("n_q_heads > 65535 (grid y limit)");
    if (p.n_tokens > INT_MAX / 2 || p.batch > INT_MAX / 2)
        return support::no("n_tokens and batch must fit in 31 bits");
    return support::yes();
}

void run_attn_prefill(context & ctx, const op_desc & op) {
    const auto & p = op.get<attn_prefill_params>();
    if (p.n_tokens == 0) return;
    prefill_args a{};
    a.q = dev_ptr<const float>(op.src[0]);
    a.k = dev_ptr<const __half>(op.src[1]);
    a.v = dev_ptr<const __half>(op.src[2]);
    a.seq_indptr = dev_ptr<const int32_t>(op.src[3]);
    a.out = dev_ptr<float>(op.dst[0]);
    a.batch = int(p.batch);
    a.n_tokens = int(p.n_tokens);
    a.n_q_heads = int(p.n_q_heads);
    a.n_kv_heads = int(p.n_kv_heads);
    a.group = int(p.n_q_heads / p.n_kv_heads);
    a.qscale = p.scale * kLog2e;
    // Sum over requests of ceil(n_b / kTileQ) <= (n_tokens + batch * (kTileQ - 1)) / kTileQ.
    const int64_t tiles = (p.n_tokens + p.batch * (kTileQ - 1) + kTileQ - 1) / kTileQ;
    const dim3 grid(unsigned(tiles), unsigned(p.n_q_heads));
    if (p.head_dim == 64)
        attn_prefill_kernel<64><<<grid, kThreads, 0, ctx.stream>>>(a);
    else
        attn_prefill_kernel<128><<<grid, kThreads, 0, ctx.stream>>>(a);
    KVCOMP_CUDA_CHECK_LAUNCH();
}

}  // namespace kvcomp::cuda
