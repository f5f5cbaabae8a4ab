// attn_decode_palu: Palu's decode, the baseline FDC is measured against. K is cached as a pre-RoPE
// latent of k_width(c) dims per KV head; every step reconstructs every cached key,
//   key_j = RoPE_j(latent_j . B_c),  B_c [k_width(c), head_dim],
// and attends at the full head_dim with the post-RoPE q; V stays a latent (its up-projection lives
// in W_O), so the output has v_width(c) values per query head. Layout: core/op.h "Low-rank KV"
// (aux: B_c at head_dim * k_offset[c], inv_freq [rot_dim / 2] at head_dim * k_total); schedule,
// merge table and partials as attn_decode_ragged (ragged_common.cuh; the merge kernel is shared).
//
// Kernel: attn_decode_palu_kernel, fused as Palu's kernel is (no materialized key cache): one block
// of 256 threads (8 warps) per (schedule row, chunk of up to 8 query heads of the group).
//   Once per block: B_c (f32) and the chunk's q rows (pre-scaled by scale * log2 e) into shared
//   memory. Per tile of 32 tokens: latent K and V rows -> shared (f32); reconstruction of the 32
//   keys: a thread owns one rotary pair (or one unrotated feature) of 4 tokens, so per latent dim it
//   reads 2 basis values and 4 latents for 8 FMAs; RoPE with the angle pos * inv_freq formed and
//   reduced to [-pi, pi] in double (positions up to 2^31 keep ~1e-7 absolute angle error), then
//   sincosf; keys -> shared [32][head_dim + 1] (odd stride: lane = token reads are conflict-free).
//   Then warp w takes query head w: lane = token for the score (head_dim FMAs), warp-wide online
//   softmax (log2 domain), and lane = V feature (lane + 32 j) for the output.
// Cost per token: k_width * head_dim FMAs of reconstruction (plus rot_dim / 2 rotations) against
// (k_width + v_width) * 2 bytes read: compute-bound. This CUDA-core kernel is the fallback; the
// tensor-core kernel (attn_decode_palu_mma.cu, the reconstruction as Palu's Triton kernel does it
// with tl.dot) takes every layout it supports (palu_mma_handles).
//
// Invalid inputs a kernel cannot refuse: request or KV head outside the tables make the block exit;
// token ranges are clamped to the request, page numbers to the pool, widths to [1, max_width].
#include <climits>

#include "common.cuh"
#include "dependent_launch.cuh"
#include "ragged_common.cuh"

namespace kvcomp::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;  // = query heads per block
constexpr int kT = 32;                 // tokens per tile (one per lane in the score step)
constexpr int kTokPerThread = 4;       // tokens per thread in the reconstruction
constexpr int kTokGroups = kT / kTokPerThread;
constexpr float kLog2e = 1.4426950408889634f;
constexpr int kMaxVPerLane = 8;  // v_width <= 256 = 32 lanes x 8

struct palu_args {
    const float * q;
    const __half * k_pages;
    const __half * v_pages;
    const int32_t * indptr;
    const int32_t * indices;
    const int32_t * last_page_len;
    const int32_t * heads;
    const int32_t * schedule;
    const int32_t * merge;
    const float * aux;
    float * out;
    float * part_o;
    float * part_lse;
    int n_pages, n_kv_heads, page_size, k_total, v_total, max_width;
    int batch, group, n_q_heads, n_tasks, head_dim, rot_dim;
    bool neox;
    float qscale;  // scale * log2(e)
};

// Shared memory in floats: B [max_width][hd], q [kWarps][hd], latent K and V [kT][max_width] each,
// keys [kT][hd + 1].
size_t palu_smem_bytes(int64_t max_width, int64_t hd) {
    return size_t(max_width * hd + kWarps * hd + 2 * kT * max_width + kT * (hd + 1)) * sizeof(float);
}

__global__ void __launch_bounds__(kThreads) attn_decode_palu_kernel(const palu_args a) {
    extern __shared__ float sm[];
    const int hd = a.head_dim, mw = a.max_width;
    float * sB = sm;                  // [mw][hd]
    float * sq = sB + mw * hd;        // [kWarps][hd]
    float * slat = sq + kWarps * hd;  // [kT][mw]
    float * sv = slat + kT * mw;      // [kT][mw]
    float * sk = sv + kT * mw;        // [kT][hd + 1]

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int task = int(blockIdx.x);
    const int b = a.schedule[4 * task], c = a.schedule[4 * task + 1];
    if (b < 0 || b >= a.batch || c < 0 || c >= a.n_kv_heads) return;  // uniform
    const int h0 = int(blockIdx.y) * kWarps, nh = min(kWarps, a.group - h0);
    ragged_head hdr = load_head(a.heads, c);
    const int kw = min(max(hdr.k_width, 1), mw), vw = min(max(hdr.v_width, 1), mw);
    const int ps = a.page_size;
    const int seq_len = request_len(a.indptr, a.last_page_len, b, ps);
    const int first = min(max(a.schedule[4 * task + 2], 0), seq_len);
    const int end = min(max(a.schedule[4 * task + 3], first), seq_len);
    const int p_begin = a.indptr[b], n_pg = a.indptr[b + 1] - p_begin;
    const bool direct = a.merge[b * a.n_kv_heads + c + 1] - a.merge[b * a.n_kv_heads + c] == 1;

    const float * basis = a.aux + int64_t(hd) * hdr.k_offset;
    for (int idx = tid; idx < kw * hd; idx += kThreads) sB[idx] = basis[idx];
    for (int idx = tid; idx < nh * hd; idx += kThreads)
        sq[idx] = a.q[(int64_t(b) * a.n_q_heads + int64_t(c) * a.group + h0) * hd + idx] * a.qscale;
    const float * inv_freq = a.aux + int64_t(hd) * a.k_total;
    const int half = a.rot_dim / 2;
    const int items = half + (hd - a.rot_dim);  // rotary pairs, then unrotated features

    auto page_of = [&](int tok) {
        const int e = min(tok / ps, n_pg - 1);
        return int64_t(min(max(a.indices[p_begin + e], 0), a.n_pages - 1));
    };

    float m_run = -INFINITY, l_run = 0.0f, o[kMaxVPerLane];
#pragma unroll
    for (int j = 0; j < kMaxVPerLane; ++j) o[j] = 0.0f;

    for (int t0 = first; t0 < end; t0 += kT) {
        const int nt = min(kT, end - t0);
        __syncthreads();  // B and q are written; the previous tile's readers are done
        for (int idx = tid; idx < nt * kw; idx += kThreads) {
            const int tt = idx / kw, r = idx % kw, tok = t0 + tt;
            const int64_t src =
                page_of(tok) * ps * a.k_total + int64_t(ps) * hdr.k_offset + int64_t(tok % ps) * kw + r;
            slat[tt * mw + r] = __half2float(a.k_pages[src]);
        }
        for (int idx = tid; idx < nt * vw; idx += kThreads) {
            const int tt = idx / vw, d = idx % vw, tok = t0 + tt;
            const int64_t src =
                page_of(tok) * ps * a.v_total + int64_t(ps) * hdr.v_offset + int64_t(tok % ps) * vw + d;
            sv[tt * mw + d] = __half2float(a.v_pages[src]);
        }
        __syncthreads();

        // Reconstruction + RoPE. Rows past nt hold stale latents; their keys are never read.
        for (int idx = tid; idx < items * kTokGroups; idx += kThreads) {
            const int it = idx % items, tg = idx / items;
            const bool rot = it < half;
            const int i0 = rot ? (a.neox ? it : 2 * it) : a.rot_dim + (it - half);
            const int i1 = rot ? (a.neox ? it + half : 2 * it + 1) : i0;
            float x0[kTokPerThread], x1[kTokPerThread];
#pragma unroll
            for (int u = 0; u < kTokPerThread; ++u) x0[u] = x1[u] = 0.0f;
            for (int r = 0; r < kw; ++r) {
                const float b0 = sB[r * hd + i0], b1 = sB[r * hd + i1];
#pragma unroll
                for (int u = 0; u < kTokPerThread; ++u) {
                    const float z = slat[(tg + u * kTokGroups) * mw + r];
                    x0[u] = fmaf(z, b0, x0[u]);
                    x1[u] = fmaf(z, b1, x1[u]);
                }
            }
#pragma unroll
            for (int u = 0; u < kTokPerThread; ++u) {
                const int tt = tg + u * kTokGroups;
                float * key = sk + tt * (hd + 1);
                if (rot) {
                    const double ang = double(t0 + tt) * double(inv_freq[it]);
                    constexpr double two_pi = 6.283185307179586476925286766559;
                    const float red = float(ang - two_pi * rint(ang / two_pi));
                    float sn, cs;
                    sincosf(red, &sn, &cs);
                    key[i0] = x0[u] * cs - x1[u] * sn;
                    key[i1] = x1[u] * cs + x0[u] * sn;
                } else {
                    key[i0] = x0[u];
                }
            }
        }
        __syncthreads();

        if (warp < nh) {  // warp-uniform: warp w is query head h0 + w
            const float * qh = sq + warp * hd;
            float s = -INFINITY;
            if (lane < nt) {
                const float * key = sk + lane * (hd + 1);
                float acc = 0.0f;
                for (int d = 0; d < hd; ++d) acc = fmaf(qh[d], key[d], acc);
                s = acc;
            }
            const float m_new = fmaxf(m_run, warp_max(s));  // finite: lane 0 always has a token
            const float alpha = exp2f(m_run - m_new);
            const float p = exp2f(s - m_new);
            l_run = l_run * alpha + warp_sum(p);
            m_run = m_new;
#pragma unroll
            for (int j = 0; j < kMaxVPerLane; ++j) o[j] *= alpha;
            for (int tt = 0; tt < nt; ++tt) {
                const float pt = __shfl_sync(full_mask, p, tt);
#pragma unroll
                for (int j = 0; j < kMaxVPerLane; ++j) {
                    const int d = lane + 32 * j;
                    if (d < vw) o[j] = fmaf(pt, sv[tt * mw + d], o[j]);
                }
            }
        }
    }
    allow_consumer_launch();  // the merge may now be launched (dependent_launch.cuh)

    if (warp >= nh) return;
    const int h = h0 + warp;
    const bool any = m_run != -INFINITY;
    const float inv = any ? 1.0f / l_run : 0.0f;
    if (direct) {
        float * dst =
            a.out + int64_t(b) * a.group * a.v_total + int64_t(a.group) * hdr.v_offset + int64_t(h) * vw;
#pragma unroll
        for (int j = 0; j < kMaxVPerLane; ++j)
            if (lane + 32 * j < vw) dst[lane + 32 * j] = o[j] * inv;
    } else {
        const int64_t row = int64_t(task) * a.group + h;
#pragma unroll
        for (int j = 0; j < kMaxVPerLane; ++j)
            if (lane + 32 * j < vw) a.part_o[row * a.max_width + lane + 32 * j] = o[j] * inv;
        if (lane == 0) a.part_lse[row] = any ? m_run + log2f(l_run) : -INFINITY;
    }
}

}  // namespace

support supports_attn_decode_palu(const op_desc & op) {
    const auto & p = op.get<attn_decode_palu_params>();
    const ragged_layout & l = p.kv;
    if (!palu_mma_handles(p) && palu_smem_bytes(l.max_width, p.head_dim) > size_t(smem_optin_limit()))
        return support::no("max_width " + std::to_string(l.max_width) + " x head_dim " +
                           std::to_string(p.head_dim) + " needs " +
                           std::to_string(palu_smem_bytes(l.max_width, p.head_dim)) +
                           " bytes of shared memory (basis + tiles), more than the device allows a block (" +
                           std::to_string(smem_optin_limit()) + ")");
    if (l.n_pages > INT_MAX || p.nnz_pages > INT_MAX || p.n_tasks > INT_MAX ||
        p.batch * l.n_kv_heads >= INT_MAX || p.batch * p.n_q_heads * p.head_dim > INT_MAX)
        return support::no("page pool, page table, schedule and q must fit in 32-bit counts");
    const int64_t group = p.n_q_heads / l.n_kv_heads;
    if (group > 65535) return support::no("GQA group too large (grid y of the merge)");
    return support::yes();
}

namespace {

task_kernel<palu_args> palu_kernel_for(const attn_decode_palu_params & p) {
    const int64_t group = p.n_q_heads / std::max<int64_t>(1, p.kv.n_kv_heads);
    return {attn_decode_palu_kernel, kThreads, palu_smem_bytes(p.kv.max_width, p.head_dim),
            unsigned((group + kWarps - 1) / kWarps)};
}

}  // namespace

// The tensor-core kernel's resident rows; one per SM for the CUDA-core kernel, which is
// compute-bound: cut for its resident blocks (2 per SM at p70) it was never faster on an H200 and
// 28 % slower at 1 x 32K (docs/RESULTS.md, "workers=auto" and "Palu's decode at auto and at 1 x SMs").
int64_t concurrent_rows_attn_decode_palu(const attn_decode_palu_params & p) {
    if (palu_mma_handles(p)) return concurrent_rows_attn_decode_palu_mma(p);
    int device = 0, sms = 0;
    KVCOMP_CUDA_CHECK(cudaGetDevice(&device));
    KVCOMP_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    return std::max(1, sms);
}

void run_attn_decode_palu(context & ctx, const op_desc & op) {
    const auto & p = op.get<attn_decode_palu_params>();
    if (palu_mma_handles(p)) return run_attn_decode_palu_mma(ctx, op);
    const ragged_layout & l = p.kv;
    const int group = int(p.n_q_heads / l.n_kv_heads);
    palu_args a{};
    a.q = dev_ptr<const float>(op.src[0]);
    a.k_pages = dev_ptr<const __half>(op.src[1]);
    a.v_pages = dev_ptr<const __half>(op.src[2]);
    a.indptr = dev_ptr<const int32_t>(op.src[3]);
    a.indices = dev_ptr<const int32_t>(op.src[4]);
    a.last_page_len = dev_ptr<const int32_t>(op.src[5]);
    a.heads = dev_ptr<const int32_t>(op.src[6]);
    a.schedule = dev_ptr<const int32_t>(op.src[7]);
    a.merge = dev_ptr<const int32_t>(op.src[8]);
    a.aux = dev_ptr<const float>(op.src[9]);
    a.out = dev_ptr<float>(op.dst[0]);
    a.n_pages = int(l.n_pages);
    a.n_kv_heads = int(l.n_kv_heads);
    a.page_size = int(l.page_size);
    a.k_total = int(l.k_total);
    a.v_total = int(l.v_total);
    a.max_width = int(l.max_width);
    a.batch = int(p.batch);
    a.group = group;
    a.n_q_heads = int(p.n_q_heads);
    a.n_tasks = int(p.n_tasks);
    a.head_dim = int(p.head_dim);
    a.rot_dim = int(p.rot_dim);
    a.neox = p.style == rope_style::neox;
    a.qscale = p.scale * kLog2e;

    if (p.n_tasks > 0) {
        take_ragged_partials(ctx, a, p.n_tasks, group);
        launch_task_kernel(ctx, palu_kernel_for(p), p.n_tasks, a);
    }
    merge_ragged_rows(ctx, a, a.batch, group, a.n_tasks);
}

}  // namespace kvcomp::cuda
