// attn_decode_ragged over q4 ragged pages (ragged_layout::bits == 4, zack/fdc kv_bits=4; row format
// in core/ragged_q4.h): codes and f16 (min, step) read from the pages and dequantized in registers.
//
// Kernel attn_decode_ragged_q4_kernel<QP>: one block of kThreads per (schedule row, QP query heads
// of the row's KV head): request b, KV head c, tokens [first, end). Tiles of kThreads tokens:
//   1. thread j scores token first + j for the QP heads: q.k^ = step * sum_i q_i code_i + min *
//      sum_i q_i, codes read once as 32-bit words of 8 channels (padding codes are 0 and q is zero
//      past k_width); it also stages its token's V row address and (min, step) in shared memory;
//   2. per head, the tile's maximum and the online-softmax update in the log2 domain (q pre-scaled
//      by scale * log2 e), p of every token in shared memory;
//   3. the block's threads take the (head, channel) pairs of the QP heads' outputs and accumulate
//      p * v^ over the tile's V rows (the QP heads read the same V codes).
// The only task of its (b, c) writes out directly; otherwise the task writes the normalized
// partial output and its log2-denominator (ragged_common.cuh) and launch_ragged_merge combines.
// No cp.async staging yet; QP (4 for Llama-3's GQA) heads per block share the K and V reads (the
// first version ran one query head per block: 2.7x the fp16 ragged decode time at 16 x 32K).
#include <climits>

#include "common.cuh"
#include "dependent_launch.cuh"
#include "ragged_common.cuh"

namespace kvcomp::cuda {

namespace {

constexpr int kThreads = 128;
constexpr int kMaxWidth = 256;  // max_ragged_width
constexpr float kLog2e = 1.4426950408889634f;

struct q4_args {
    const float * q;
    const uint8_t * k_pages;
    const uint8_t * v_pages;
    const int32_t * indptr;
    const int32_t * indices;
    const int32_t * heads;
    const int32_t * schedule;
    const int32_t * merge;
    float * out;
    float * part_o;
    float * part_lse;
    int n_kv_heads, page_size, k_total, v_total, k_row_bytes, v_row_bytes, max_width, group;
    float qscale;
};

__device__ __forceinline__ int q4_row_bytes(int w) {
    return 4 + 4 * ((w + 7) / 8);
}
__device__ __forceinline__ float q4_param(const uint8_t * row, int i) {
    return __half2float(reinterpret_cast<const __half *>(row)[i]);
}

template <int QP>
__global__ void __launch_bounds__(kThreads) attn_decode_ragged_q4_kernel(const q4_args a) {
    __shared__ float q_s[QP][kMaxWidth];
    __shared__ float p_s[QP][kThreads];
    __shared__ float red_s[kThreads / 32][QP];
    __shared__ float alpha_s[QP];  // this tile's rescale of each head (read by run-time head index)
    __shared__ float2 vpar_s[kThreads];
    __shared__ const uint8_t * vrow_s[kThreads];

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, task = blockIdx.x;
    const int h0 = blockIdx.y * QP;  // this block's first query head of the group
    const int nh = min(QP, a.group - h0);
    const int32_t * row = a.schedule + 4 * int64_t(task);
    const int b = row[0], c = row[1], first = row[2], end = row[3];
    const ragged_head hd = load_head(a.heads, c);
    const int n_in_list = a.merge[b * a.n_kv_heads + c + 1] - a.merge[b * a.n_kv_heads + c];
    const int p0 = a.indptr[b];
    int k_head = 0, v_head = 0;  // byte offsets of head c's rows within a token's bytes
    for (int i = 0; i < c; ++i) {
        const ragged_head o = load_head(a.heads, i);
        k_head += q4_row_bytes(o.k_width);
        v_head += q4_row_bytes(o.v_width);
    }
    const int krb = q4_row_bytes(hd.k_width), vrb = q4_row_bytes(hd.v_width);

    for (int e = tid; e < QP * kMaxWidth; e += kThreads) {
        const int j = e / kMaxWidth, d = e % kMaxWidth;
        const float * qg = a.q + int64_t(b) * a.group * a.k_total + int64_t(a.group) * hd.k_offset +
                           int64_t(h0 + j) * hd.k_width;
        q_s[j][d] = j < nh && d < hd.k_width ? qg[d] * a.qscale : 0.0f;
    }
    __syncthreads();
    float qsum[QP];
#pragma unroll
    for (int j = 0; j < QP; ++j) {
        qsum[j] = 0.0f;
        for (int d = 0; d < hd.k_width; ++d) qsum[j] += q_s[j][d];
    }

    // Output elements (head j, channel d) of this thread: e = tid + k * kThreads over QP * v_width.
    constexpr int kPairs = QP * kMaxWidth / kThreads;
    const int n_pairs = QP * hd.v_width;
    float m_run[QP], lsum[QP], acc[kPairs];
#pragma unroll
    for (int j = 0; j < QP; ++j) m_run[j] = -INFINITY, lsum[j] = 0.0f;
#pragma unroll
    for (int k = 0; k < kPairs; ++k) acc[k] = 0.0f;

    for (int t0 = first; t0 < end; t0 += kThreads) {
        const int tn = min(kThreads, end - t0);
        // 1. Thread tid scores token t0 + tid for every head: each K row is read and unpacked once.
        float s[QP];
#pragma unroll
        for (int j = 0; j < QP; ++j) s[j] = -INFINITY;
        if (tid < tn) {
            const int t = t0 + tid;
            const int64_t pg = a.indices[p0 + t / a.page_size], sl = t % a.page_size;
            const uint8_t * kr =
                a.k_pages + pg * a.page_size * a.k_row_bytes + int64_t(a.page_size) * k_head + sl * krb;
            const uint32_t * words = reinterpret_cast<const uint32_t *>(kr + 4);
            float dot[QP];
#pragma unroll
            for (int j = 0; j < QP; ++j) dot[j] = 0.0f;
            for (int wi = 0; wi < (hd.k_width + 7) / 8; ++wi) {
                const uint32_t u = words[wi];
#pragma unroll
                for (int n = 0; n < 8; ++n) {
                    const float code = float((u >> (4 * n)) & 15u);
#pragma unroll
                    for (int j = 0; j < QP; ++j) dot[j] += q_s[j][wi * 8 + n] * code;
                }
            }
            const float kmin = q4_param(kr, 0), kstep = q4_param(kr, 1);
#pragma unroll
            for (int j = 0; j < QP; ++j) s[j] = kstep * dot[j] + kmin * qsum[j];
            const uint8_t * vr =
                a.v_pages + pg * a.page_size * a.v_row_bytes + int64_t(a.page_size) * v_head + sl * vrb;
            vrow_s[tid] = vr;
            vpar_s[tid] = make_float2(q4_param(vr, 0), q4_param(vr, 1));
        }
        // 2. Per head: the tile's maximum, the online-softmax update, p and the tile's sum.
        float mx[QP];
#pragma unroll
        for (int j = 0; j < QP; ++j) mx[j] = warp_max(s[j]);
        if (lane == 0)
#pragma unroll
            for (int j = 0; j < QP; ++j) red_s[warp][j] = mx[j];
        __syncthreads();
        float alpha[QP];
#pragma unroll
        for (int j = 0; j < QP; ++j) {
            float mt = red_s[0][j];
            for (int w = 1; w < kThreads / 32; ++w) mt = fmaxf(mt, red_s[w][j]);
            const float mn = fmaxf(m_run[j], mt);
            alpha[j] = exp2f(m_run[j] - mn);
            m_run[j] = mn;
            p_s[j][tid] = tid < tn ? exp2f(s[j] - mn) : 0.0f;
        }
        if (tid == 0)
#pragma unroll
            for (int j = 0; j < QP; ++j) alpha_s[j] = alpha[j];
        __syncthreads();  // p_s, vrow_s and vpar_s complete; red_s free again
#pragma unroll
        for (int j = 0; j < QP; ++j) {
            float ps = 0.0f;
            for (int x = 0; x < tn; ++x) ps += p_s[j][x];
            lsum[j] = lsum[j] * alpha[j] + ps;
        }
        // 3. Accumulate p * v^ for this thread's (head, channel) pairs over the tile's V rows.
#pragma unroll
        for (int k = 0; k < kPairs; ++k) {
            const int e = tid + k * kThreads;
            if (e >= n_pairs) continue;
            const int j = e / hd.v_width, d = e % hd.v_width;
            float sum = acc[k] * alpha_s[j];
            for (int x = 0; x < tn; ++x) {
                const uint8_t * codes = vrow_s[x] + 4;
                const float2 par = vpar_s[x];
                sum += p_s[j][x] * (float((codes[d / 2] >> (4 * (d & 1))) & 15) * par.y + par.x);
            }
            acc[k] = sum;
        }
        __syncthreads();  // the next tile rewrites p_s and the V rows
    }
    allow_consumer_launch();  // the merge may now be launched (dependent_launch.cuh)

    if (tid == 0)
#pragma unroll
        for (int j = 0; j < QP; ++j) alpha_s[j] = lsum[j] > 0.0f ? 1.0f / lsum[j] : 0.0f;  // now 1 / sum
    __syncthreads();
#pragma unroll
    for (int k = 0; k < kPairs; ++k) {
        const int e = tid + k * kThreads;
        if (e >= n_pairs) continue;
        const int j = e / hd.v_width, d = e % hd.v_width;
        if (j >= nh) continue;
        const int h = h0 + j;
        const float inv = alpha_s[j];
        if (n_in_list == 1)
            a.out[int64_t(b) * a.group * a.v_total + int64_t(a.group) * hd.v_offset + int64_t(h) * hd.v_width + d] =
                acc[k] * inv;
        else
            a.part_o[(int64_t(task) * a.group + h) * a.max_width + d] = acc[k] * inv;
    }
    if (n_in_list != 1 && tid == 0)
#pragma unroll
        for (int j = 0; j < QP; ++j)
            if (j < nh) a.part_lse[int64_t(task) * a.group + h0 + j] = lsum[j] > 0.0f ? m_run[j] + log2f(lsum[j]) : -INFINITY;
}

}  // namespace

support supports_attn_decode_ragged_q4(const op_desc & op) {
    const auto & p = op.get<attn_decode_ragged_params>();
    const ragged_layout & l = p.kv;
    if (l.n_pages > INT_MAX || p.nnz_pages > INT_MAX || p.n_tasks > INT_MAX ||
        p.batch * l.n_kv_heads >= INT_MAX)
        return support::no("page pool, page table, schedule and batch * kv_heads must fit in 32 bits");
    if (p.n_q_heads / l.n_kv_heads > 65535) return support::no("GQA group too large (grid y)");
    if (op.src[1].offset % 4 != 0 || op.src[2].offset % 4 != 0)
        return support::no("q4 ragged pages must start on a 4-byte boundary");
    return support::yes();
}

namespace {

// QP query heads of the group per block share each K row's unpacking and each V row's reads.
task_kernel<q4_args> q4_kernel_for(int group) {
    const int qp = group >= 4 ? 4 : group >= 2 ? 2 : 1;
    const unsigned chunks = unsigned((group + qp - 1) / qp);
    if (qp == 4) return {attn_decode_ragged_q4_kernel<4>, kThreads, 0, chunks};
    if (qp == 2) return {attn_decode_ragged_q4_kernel<2>, kThreads, 0, chunks};
    return {attn_decode_ragged_q4_kernel<1>, kThreads, 0, chunks};
}

}  // namespace

int64_t concurrent_rows_attn_decode_ragged_q4(int group) {
    return concurrent_task_rows(q4_kernel_for(group));
}

void run_attn_decode_ragged_q4(context & ctx, const op_desc & op) {
    const auto & p = op.get<attn_decode_ragged_params>();
    const ragged_layout & l = p.kv;
    const int group = int(p.n_q_heads / l.n_kv_heads);
    q4_args a{};
    a.q = dev_ptr<const float>(op.src[0]);
    a.k_pages = dev_ptr<const uint8_t>(op.src[1]);
    a.v_pages = dev_ptr<const uint8_t>(op.src[2]);
    a.indptr = dev_ptr<const int32_t>(op.src[3]);
    a.indices = dev_ptr<const int32_t>(op.src[4]);
    a.heads = dev_ptr<const int32_t>(op.src[6]);
    a.schedule = dev_ptr<const int32_t>(op.src[7]);
    a.merge = dev_ptr<const int32_t>(op.src[8]);
    a.out = dev_ptr<float>(op.dst[0]);
    a.n_kv_heads = int(l.n_kv_heads);
    a.page_size = int(l.page_size);
    a.k_total = int(l.k_total);
    a.v_total = int(l.v_total);
    a.k_row_bytes = int(l.k_row_bytes);
    a.v_row_bytes = int(l.v_row_bytes);
    a.max_width = int(l.max_width);
    a.group = group;
    a.qscale = p.scale * kLog2e;
    if (p.n_tasks > 0) {
        take_ragged_partials(ctx, a, p.n_tasks, group);
        launch_task_kernel(ctx, q4_kernel_for(group), p.n_tasks, a);
    }
    merge_ragged_rows(ctx, a, int(p.batch), group, int(p.n_tasks));
}

}  // namespace kvcomp::cuda
