// attn_prefill_ragged: causal prefill attention with per-head Q/K and V widths (ZACK / FDC), GQA,
// ragged batch, fp32 online softmax in the log2 domain (q pre-scaled by scale * log2 e).
//
// Layout (core/op.h "Low-rank KV"): q f32 [n_tokens, g * k_total] (head h = c * g + i at
//   g * k_offset[c] + i * k_width[c]); k f16 [n_tokens, k_total]; v f16 [n_tokens, v_total];
//   out f32 [n_tokens, g * v_total] (head h at g * v_offset[c] + i * v_width[c]).
//
// attn_prefill_ragged_kernel<C>: CUDA cores, fp32 throughout (the SIMT design of
//   attn_prefill.cu's fallback with run-time widths). C = features per lane = ceil(max_width / 32),
//   rounded to 1, 2, 4, 8, so D = 32 C >= every width; a head narrower than D only loops over its
//   own width (scores) and its own features (output): widths are zero-padded in shared memory.
//   Block: 128 threads = 4 warps x 8 query rows = one 32-row query tile at a time; key tiles of
//   32 (one key per lane for the scores, one feature per lane and C per row for the output).
//   Shared memory (dynamic): q tile f32 [32][D], K tile half2 [32][D/2 + 1] (odd stride: the
//   lanes reading key `lane` hit different banks), V tile f32 [32][D].
// Grid: x = row-block number (heaviest last rows first), y = query head, z = request.
//   balanced: a row block of head h is m_h = floor(d_sum^max / d_sum^h) query tiles, d_sum =
//   k_width + v_width + 1 (ZACK/FDC section 5.3: a block's work is about rows x keys x d_sum, so
//   narrow heads take more rows and every block does about the same work); not balanced: m_h = 1.
//   d_sum^max is found by each block from the heads table (n_kv_heads entries, cheap), so the
//   host never reads the device table; the grid is sized for m_h = 1 (from max_seq_len) and blocks
//   past a request's tiles exit at once.
// Not done yet: the tensor-core (mma.sync m16n8k16) version with widths zero-padded to multiples
//   of 16, as attn_prefill.cu's main kernel. This kernel is the correct baseline.
#include <climits>

#include "common.cuh"
#include "ragged_common.cuh"

namespace kvcomp::cuda {

namespace {

constexpr float kLog2e = 1.4426950408889634f;
constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;
constexpr int kRows = 8;                // query rows per warp
constexpr int kTileQ = kWarps * kRows;  // query rows per tile
constexpr int kTileK = 32;              // keys per tile (one per lane)

struct rprefill_args {
    const float * q;
    const __half * k;
    const __half * v;
    const int32_t * seq_indptr;
    const int32_t * heads;
    float * out;
    int batch, n_tokens, n_q_heads, n_kv_heads, group, k_total, v_total;
    bool balanced;
    float qscale;
};

template <int C>
constexpr size_t prefill_smem_bytes() {
    constexpr int D = 32 * C;
    return size_t(kTileQ) * D * sizeof(float) + size_t(kTileK) * (D / 2 + 1) * sizeof(__half2) +
           size_t(kTileK) * D * sizeof(float);
}

template <int C>
__global__ void __launch_bounds__(kThreads) attn_prefill_ragged_kernel(const rprefill_args a) {
    constexpr int D = 32 * C;
    extern __shared__ uint4 smem_raw[];
    float * sq = reinterpret_cast<float *>(smem_raw);                   // [kTileQ][D]
    __half2 * sk = reinterpret_cast<__half2 *>(sq + kTileQ * D);        // [kTileK][D/2 + 1]
    float * sv = reinterpret_cast<float *>(sk + kTileK * (D / 2 + 1));  // [kTileK][D]

    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int h = blockIdx.y, c = h / a.group, hi = h % a.group, b = blockIdx.z;
    const ragged_head hd = load_head(a.heads, c);
    const int kw = min(max(hd.k_width, 1), D), vw = min(max(hd.v_width, 1), D);
    const int s0 = min(max(a.seq_indptr[b], 0), a.n_tokens);
    const int n = min(max(a.seq_indptr[b + 1], s0), a.n_tokens) - s0;
    const int n_tiles = (n + kTileQ - 1) / kTileQ;

    int m_h = 1;  // query tiles per row block
    if (a.balanced) {
        int dmax = 0;
        for (int j = 0; j < a.n_kv_heads; ++j) {
            const ragged_head o = load_head(a.heads, j);
            dmax = max(dmax, min(max(o.k_width, 1), D) + min(max(o.v_width, 1), D) + 1);
        }
        m_h = max(1, dmax / (kw + vw + 1));
    }
    const float * qbase = a.q + int64_t(a.group) * hd.k_offset + int64_t(hi) * kw;
    const int64_t q_stride = int64_t(a.group) * a.k_total;
    float * obase = a.out + int64_t(a.group) * hd.v_offset + int64_t(hi) * vw;
    const int64_t o_stride = int64_t(a.group) * a.v_total;
    const int kw2 = (kw + 1) / 2;

    // Row block j covers tiles [n_tiles - (j+1) m_h, n_tiles - j m_h): block 0 the heaviest (last)
    // rows. Grid-stride over j, so a max_seq_len that undercounts still covers every row.
    for (int j = int(blockIdx.x); n_tiles - j * m_h > 0; j += int(gridDim.x)) {  // uniform
        for (int tile = n_tiles - j * m_h - 1; tile >= max(0, n_tiles - (j + 1) * m_h); --tile) {
            const int r0 = tile * kTileQ;
            __syncthreads();  // the previous tile's readers of sq are done
            for (int idx = threadIdx.x; idx < kTileQ * D; idx += kThreads) {
                const int i = idx / D, d = idx % D;
                const int row = r0 + i;
                sq[idx] = row < n && d < kw ? qbase[int64_t(s0 + row) * q_stride + d] * a.qscale : 0.0f;
            }

            float o[kRows][C], m[kRows], l[kRows];
#pragma unroll
            for (int r = 0; r < kRows; ++r) {
                m[r] = -INFINITY;
                l[r] = 0.0f;
#pragma unroll
                for (int cc = 0; cc < C; ++cc) o[r][cc] = 0.0f;
            }

            const int k_end = min(n, r0 + kTileQ);  // causal: no row of this tile sees past its last row
            for (int k0 = 0; k0 < k_end; k0 += kTileK) {
                __syncthreads();  // the previous key tile's readers are done
                for (int idx = threadIdx.x; idx < kTileK * (D / 2); idx += kThreads) {
                    const int j = idx / (D / 2), d2 = idx % (D / 2), d = 2 * d2;
                    float k0f = 0.0f, k1f = 0.0f;
                    if (k0 + j < n && d < kw) {
                        const __half * kr = a.k + int64_t(s0 + k0 + j) * a.k_total + hd.k_offset;
                        k0f = __half2float(kr[d]);
                        if (d + 1 < kw) k1f = __half2float(kr[d + 1]);
                    }
                    sk[j * (D / 2 + 1) + d2] = __floats2half2_rn(k0f, k1f);  // exact: values came from f16
                }
                for (int idx = threadIdx.x; idx < kTileK * D; idx += kThreads) {
                    const int j = idx / D, d = idx % D;
                    sv[idx] = k0 + j < n && d < vw
                                  ? __half2float(a.v[int64_t(s0 + k0 + j) * a.v_total + hd.v_offset + d])
                                  : 0.0f;
                }
                __syncthreads();

                float s[kRows];
#pragma unroll
                for (int r = 0; r < kRows; ++r) s[r] = 0.0f;
#pragma unroll 4
                for (int d2 = 0; d2 < kw2; ++d2) {
                    const float2 kf = __half22float2(sk[lane * (D / 2 + 1) + d2]);
#pragma unroll
                    for (int r = 0; r < kRows; ++r) {
                        const float2 qq =
                            *reinterpret_cast<const float2 *>(&sq[(warp * kRows + r) * D + 2 * d2]);
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
                    for (int cc = 0; cc < C; ++cc) o[r][cc] *= alpha;
                }
#pragma unroll 4
                for (int j = 0; j < kTileK; ++j) {
                    float vj[C];
#pragma unroll
                    for (int cc = 0; cc < C; ++cc) vj[cc] = sv[j * D + lane + 32 * cc];
#pragma unroll
                    for (int r = 0; r < kRows; ++r) {
                        const float pj = __shfl_sync(full_mask, pr[r], j);
#pragma unroll
                        for (int cc = 0; cc < C; ++cc) o[r][cc] = fmaf(pj, vj[cc], o[r][cc]);
                    }
                }
            }

#pragma unroll
            for (int r = 0; r < kRows; ++r) {
                const int row = r0 + warp * kRows + r;
                if (row >= n) continue;
                const float inv = 1.0f / l[r];  // l >= 1: a row always sees itself
                float * dst = obase + int64_t(s0 + row) * o_stride;
#pragma unroll
                for (int cc = 0; cc < C; ++cc)
                    if (lane + 32 * cc < vw) dst[lane + 32 * cc] = o[r][cc] * inv;
            }
        }
    }
}

template <int C>
void launch(context & ctx, const rprefill_args & a, int64_t max_seq_len) {
    constexpr size_t smem = prefill_smem_bytes<C>();
    allow_dynamic_smem(reinterpret_cast<const void *>(attn_prefill_ragged_kernel<C>), smem);
    // Row blocks per (request, head) when m_h = 1; max_seq_len only sizes the grid, 0 = unknown.
    const int64_t len = max_seq_len > 0 ? std::min<int64_t>(max_seq_len, a.n_tokens) : a.n_tokens;
    const int64_t blocks = std::min<int64_t>(std::max<int64_t>(1, (len + kTileQ - 1) / kTileQ), INT_MAX);
    const dim3 grid(unsigned(blocks), unsigned(a.n_q_heads), unsigned(a.batch));
    attn_prefill_ragged_kernel<C><<<grid, kThreads, smem, ctx.stream>>>(a);
    KVCOMP_CUDA_CHECK_LAUNCH();
}

}  // namespace

support supports_attn_prefill_ragged(const op_desc & op) {
    const auto & p = op.get<attn_prefill_ragged_params>();
    if (p.n_q_heads > 65535) return support::no("n_q_heads > 65535 (grid y limit)");
    if (p.batch > 65535) return support::no("batch > 65535 (grid z limit)");
    if (p.n_tokens > INT_MAX / 2) return support::no("n_tokens must fit in 31 bits");
    return support::yes();
}

void run_attn_prefill_ragged(context & ctx, const op_desc & op) {
    const auto & p = op.get<attn_prefill_ragged_params>();
    if (p.n_tokens == 0) return;
    rprefill_args a{};
    a.q = dev_ptr<const float>(op.src[0]);
    a.k = dev_ptr<const __half>(op.src[1]);
    a.v = dev_ptr<const __half>(op.src[2]);
    a.seq_indptr = dev_ptr<const int32_t>(op.src[3]);
    a.heads = dev_ptr<const int32_t>(op.src[4]);
    a.out = dev_ptr<float>(op.dst[0]);
    a.batch = int(p.batch);
    a.n_tokens = int(p.n_tokens);
    a.n_q_heads = int(p.n_q_heads);
    a.n_kv_heads = int(p.n_kv_heads);
    a.group = int(p.n_q_heads / p.n_kv_heads);
    a.k_total = int(p.k_total);
    a.v_total = int(p.v_total);
    a.balanced = p.balanced;
    a.qscale = p.scale * kLog2e;
    const int64_t lanes = (p.max_width + 31) / 32;
    if (lanes <= 1)
        launch<1>(ctx, a, p.max_seq_len);
    else if (lanes <= 2)
        launch<2>(ctx, a, p.max_seq_len);
    else if (lanes <= 4)
        launch<4>(ctx, a, p.max_seq_len);
    else
        launch<8>(ctx, a, p.max_seq_len);
}

}  // namespace kvcomp::cuda
