// attn_decode: one query token per request against its paged fp16 KV cache (split-KV, GQA).
//
// Kernels:
//   attn_decode_kernel<D, QP, U, NST>  one block per (request, KV head, head chunk, split). The
//       block handles up to QP query heads of the KV head's GQA group at once, so every K/V byte
//       is read from memory once per group. D = head_dim (64 or 128); QP = query heads per block,
//       the group size rounded up to 1, 2, 4 or 8 (groups larger than 8 use several head chunks);
//       U = tokens per lane per pipeline stage; NST = stages of the cp.async ring.
//   the splits' (o, lse) partials are merged by decode_merge.cu's kernel (shared with
//       attn_decode_quant).
// Grid: attn_decode_kernel 1-D, batch * n_kv_heads * head_chunks * n_splits blocks of 128
//   threads (4 warps), dynamic shared memory decode_smem_bytes() (<= 48 KiB).
// Layout (core/op.h): q/out f32 [batch, n_q_heads, D]; k/v pages f16
//   [n_pages, n_kv_heads, page_size, D]; indptr/indices/last_page_len i32. Workspace (n_splits >
//   1): o partials f32 [batch, n_q_heads, n_splits, D], then lse f32 [batch, n_q_heads, n_splits].
// Preamble defines (tuning, compile time): KVCOMP_DECODE_U (default 4), KVCOMP_DECODE_STAGES
//   (default 2) for groups up to 4; groups of 5..8 use U = 2, NST = 4 (fewer registers).
//
// Memory: L = D/8 lanes share one token row (each lane one 16-byte chunk = 8 halves), so a warp
// covers G = 32/L consecutive tokens per copy (coalesced) and U*G per stage. Every lane copies its
// own chunks with cp.async into a private slot of a shared-memory ring and later reads back only
// those bytes, so the ring needs no barriers; NST-1 stages are in flight while one is consumed
// (measured on H200: 2 stages of U = 4 already saturate HBM, 3 were no faster). Page numbers are
// loaded one stage ahead of their copies so the copies never wait on the page table.
//
// Math: per token each lane forms QP partial dot products over its 8 features; a butterfly
// reduce-scatter over the L lanes (log2 L shuffle steps, halving the number of values each step)
// leaves every lane with the full score of one head, with QP/2 + QP/4 + ... shuffles instead of
// QP * log2 L. Online softmax in fp32 in the log2 domain (q is pre-scaled by scale*log2(e),
// exp2f); the running max is shared by the warp's token groups so their partial sums add
// directly. Each lane accumulates o for all QP heads over its 8 features. At the end the warps of
// the block merge through shared memory (reusing the ring), and either write out directly (one
// split) or a normalized partial o with lse = m + log2(l) for the merge kernel.
//
// Tokens and splits: split s of a request covers tokens [s*chunk, (s+1)*chunk); the last split
// also takes any tokens past n_splits*chunk, so a max_seq_len that is too small loses nothing.
// Masked slots (past a request's length) are zero-filled without a global read and get score
// -inf. Page numbers are clamped to the pool so a bad table cannot fault (results would be
// wrong; the host validates tables).
#include <climits>

#include "common.cuh"
#include "decode_common.cuh"
#include "dependent_launch.cuh"

namespace kvcomp::cuda {

namespace {

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;
constexpr float kLog2e = 1.4426950408889634f;
constexpr int kMinChunkTokens = 256;  // below this a split's partial write/merge costs > ~3%

struct decode_args {
    const float * q;
    const __half * k_pages;
    const __half * v_pages;
    const int32_t * indptr;
    const int32_t * indices;
    const int32_t * last_page_len;
    float * out;  // final output, written directly when n_splits == 1
    float * part_o;  // partials when n_splits > 1
    float * part_lse;
    int64_t page_stride;  // elements between pages: n_kv_heads * page_size * D
    int n_pages, n_kv_heads, page_size, page_shift;  // page_shift = log2(page_size) or -1
    int n_q_heads, group, head_chunks, n_splits, chunk;
    float qscale;  // scale * log2(e)
};

// Dynamic shared memory of a variant: the K/V staging ring, reused for the final merge.
template <int D, int QP, int U, int NST>
constexpr size_t decode_smem_bytes() {
    constexpr size_t stage = size_t(NST) * U * 2 * kThreads * sizeof(uint4);
    constexpr size_t merge = warp_merge_floats<kWarps, QP, D>() * sizeof(float);
    return stage > merge ? stage : merge;
}

template <int D, int QP, int U, int NST>
__global__ void __launch_bounds__(kThreads) attn_decode_kernel(const decode_args a) {
    constexpr int L = D / 8;  // lanes per token row
    constexpr int G = 32 / L;  // tokens per warp per load
    constexpr int S = kWarps * U * G;  // tokens per block iteration
    // Staging ring: slot (stage, u, k|v) of thread t at smem[((stage * U + u) * 2 + kv) * kThreads + t].
    // Each lane reads back only the 16 bytes it copied itself, so the ring needs no barriers.
    extern __shared__ uint4 smem[];

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int tg = lane / L, lj = lane % L;

    int64_t bid = blockIdx.x;
    const int split = int(bid % a.n_splits);
    bid /= a.n_splits;
    const int chunk = int(bid % a.head_chunks);
    bid /= a.head_chunks;
    const int g = int(bid % a.n_kv_heads);
    const int b = int(bid / a.n_kv_heads);
    const int h0 = g * a.group + chunk * QP;  // first query head of this block
    const int nh = min(QP, a.group - chunk * QP);  // real heads (the rest is padding)

    const int p_begin = a.indptr[b];
    const int n_pg = a.indptr[b + 1] - p_begin;
    const int last = min(max(a.last_page_len[b], 0), a.page_size);
    const int seq_len = n_pg <= 0 ? 0 : (n_pg - 1) * a.page_size + last;
    const int64_t t_begin64 = int64_t(split) * a.chunk, t_stop64 = t_begin64 + a.chunk;
    const int t_begin = int(t_begin64 < seq_len ? t_begin64 : int64_t(seq_len));
    const int t_end =
        split == a.n_splits - 1 ? seq_len : int(t_stop64 < seq_len ? t_stop64 : int64_t(seq_len));
    const int n_iter = (t_end - t_begin + S - 1) / S;

    // This lane's 8 features of every head, pre-scaled so scores are in log2 units.
    float q[QP][8];
#pragma unroll
    for (int i = 0; i < QP; ++i) {
        const float * src = a.q + (int64_t(b) * a.n_q_heads + h0 + i) * D + lj * 8;
#pragma unroll
        for (int j = 0; j < 8; ++j) q[i][j] = 0.0f;
        if (i < nh) {  // padding heads past the group are never read (they may lie past the tensor)
#pragma unroll
            for (int j = 0; j < 8; ++j) q[i][j] = src[j] * a.qscale;
        }
    }

    float o[QP][8];
#pragma unroll
    for (int i = 0; i < QP; ++i)
#pragma unroll
        for (int j = 0; j < 8; ++j) o[i][j] = 0.0f;
    float m_run = -INFINITY, l_run = 0.0f;  // for head lane_head(lj), shared by the warp's groups

    const __half * kbase = a.k_pages + int64_t(g) * a.page_size * D + lj * 8;
    const __half * vbase = a.v_pages + int64_t(g) * a.page_size * D + lj * 8;
    const int first = t_begin + warp * U * G + tg;  // this lane's token of u = 0 in iteration 0

    // Page number and slot of this lane's tokens in the next iteration to be issued; the page
    // numbers are loaded one issue ahead so cp.async never waits on the page table.
    int pg[U], slot[U];
    auto locate = [&](int it) {
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const int tok = first + it * S + u * G;
            slot[u] = 0;
            pg[u] = 0;
            if (tok < t_end) {
                const int e = a.page_shift >= 0 ? tok >> a.page_shift : tok / a.page_size;
                slot[u] = tok - e * a.page_size;
                pg[u] = a.indices[p_begin + e];
            }
        }
    };
    auto issue = [&](int it) {
        const int stage = it % NST;
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const bool valid = first + it * S + u * G < t_end;
            const int page = min(max(pg[u], 0), a.n_pages - 1);
            const int64_t off = valid ? int64_t(page) * a.page_stride + int64_t(slot[u]) * D : 0;
            uint4 * dst = smem + ((stage * U + u) * 2) * kThreads + tid;
            cp_async16(dst, kbase + off, valid ? 16 : 0);
            cp_async16(dst + kThreads, vbase + off, valid ? 16 : 0);
        }
        cp_async_commit();  // one group per iteration, empty ones included, so counts line up
    };

    locate(0);
#pragma unroll
    for (int st = 0; st < NST - 1; ++st) {
        issue(st);
        locate(st + 1);
    }

    for (int it = 0; it < n_iter; ++it) {
        issue(it + NST - 1);  // refills the stage consumed in the previous iteration
        locate(it + NST);
        cp_async_wait<NST - 1>();  // this iteration's group has landed
        const int stage = it % NST;
        const int tok0 = first + it * S;

        // Scores: this lane ends with head lane_head<L, QP>(lj)'s score of its token for each u.
        float s[U];
#pragma unroll
        for (int u = 0; u < U; ++u) {
            float kf[8];
            unpack8(smem[((stage * U + u) * 2) * kThreads + tid], kf);
            float part[QP];
#pragma unroll
            for (int i = 0; i < QP; ++i) {
                float acc = 0.0f;
#pragma unroll
                for (int j = 0; j < 8; ++j) acc = fmaf(q[i][j], kf[j], acc);
                part[i] = acc;
            }
            const float full = butterfly<L, QP>(part, lj);
            s[u] = tok0 + u * G < t_end ? full : -INFINITY;
        }

        // Online softmax; the max is made uniform across the warp's token groups.
        float mt = s[0];
#pragma unroll
        for (int u = 1; u < U; ++u) mt = fmaxf(mt, s[u]);
#pragma unroll
        for (int off = L; off < 32; off <<= 1) mt = fmaxf(mt, __shfl_xor_sync(full_mask, mt, off));
        const float m_new = fmaxf(m_run, mt);
        const float m_use = m_new == -INFINITY ? 0.0f : m_new;  // all masked so far: avoid inf - inf
        const float alpha = exp2f(m_run - m_use);
        float p[U], psum = 0.0f;
#pragma unroll
        for (int u = 0; u < U; ++u) {
            p[u] = exp2f(s[u] - m_use);
            psum += p[u];
        }
        l_run = l_run * alpha + psum;
        m_run = m_new;

        // Once the running max has settled it rarely moves: skip the rescale (QP shuffles and
        // 8*QP multiplies) for the whole warp unless some head's max grew.
        if (__any_sync(full_mask, alpha != 1.0f)) {
#pragma unroll
            for (int i = 0; i < QP; ++i) {
                const float ai = __shfl_sync(full_mask, alpha, head_lane<L, QP>(i), L);
#pragma unroll
                for (int j = 0; j < 8; ++j) o[i][j] *= ai;
            }
        }
#pragma unroll
        for (int u = 0; u < U; ++u) {
            float vf[8];
            unpack8(smem[((stage * U + u) * 2 + 1) * kThreads + tid], vf);
#pragma unroll
            for (int i = 0; i < QP; ++i) {
                const float pi = __shfl_sync(full_mask, p[u], head_lane<L, QP>(i), L);
#pragma unroll
                for (int j = 0; j < 8; ++j) o[i][j] = fmaf(pi, vf[j], o[i][j]);
            }
        }
    }
    // Outstanding groups only hold zero-fills of masked slots; they must land before the ring
    // is reused for the merge below.
    cp_async_wait<0>();
    allow_consumer_launch();  // the merge may now be launched (dependent_launch.cuh)

    // Warps merge through shared memory (the ring is free: publish_warp_states' first barrier
    // waits for every lane's last read of its staging slots).
    float * sm = reinterpret_cast<float *>(smem);
    publish_warp_states<L, QP, 8, kWarps>(m_run, l_run, o, sm);

    store_block_result<D, QP, kWarps>(sm, nh, int64_t(b) * a.n_q_heads + h0,
                                      decode_dst{a.out, nullptr, a.part_o, a.part_lse, a.n_splits, split});
}

// Pipeline shape per variant: U tokens per lane per stage, NST stages in the ring (NST - 1 in
// flight while one is consumed). Registers bound U (q and o already take 16*QP); the ring is
// NST*U*4 KiB per block, kept <= 48 KiB so no opt-in is needed on any target. Defaults chosen on
// an H200 (batch 16 x 32K and 1 x 128K, GQA 4): U=4/NST=2 ~ U=4/NST=3 > U=2/NST=4 ~ U=2/NST=6,
// all within ~5% once the ring exists.
#ifndef KVCOMP_DECODE_U
#define KVCOMP_DECODE_U 4
#endif
#ifndef KVCOMP_DECODE_STAGES
#define KVCOMP_DECODE_STAGES 2
#endif
template <int QP>
constexpr int unroll_for() {
    return QP >= 8 ? 2 : KVCOMP_DECODE_U;
}
template <int QP>
constexpr int stages_for() {
    return QP >= 8 ? 4 : KVCOMP_DECODE_STAGES;
}

template <int D, int QP>
struct decode_variant {
    static constexpr int U = unroll_for<QP>();
    static constexpr int NST = stages_for<QP>();
    static constexpr size_t smem = decode_smem_bytes<D, QP, U, NST>();
    static_assert(smem <= 48 * 1024, "decode staging ring must fit the default shared-memory limit");
    static constexpr int tokens_per_iter = kWarps * U * (32 / (D / 8));
    static int blocks_per_sm() {
        // Queried once per variant and device (ordinals >= 16 share a slot: only the split
        // heuristic would be off, never correctness).
        static int cache[16] = {0};
        int dev = 0;
        KVCOMP_CUDA_CHECK(cudaGetDevice(&dev));
        int & c = cache[dev & 15];
        if (c == 0) {
            int n = 0;
            KVCOMP_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
                &n, attn_decode_kernel<D, QP, U, NST>, kThreads, smem));
            c = n > 0 ? n : 1;
        }
        return c;
    }
    static void launch(context & ctx, const decode_args & args, int64_t blocks) {
        attn_decode_kernel<D, QP, U, NST><<<unsigned(blocks), kThreads, smem, ctx.stream>>>(args);
        KVCOMP_CUDA_CHECK_LAUNCH();
    }
};

template <int D>
void dispatch_qp(int qp, context & ctx, const decode_args & args, int64_t blocks, int * blocks_per_sm,
                 int * tokens_per_iter) {
    auto go = [&](auto variant) {
        using V = decltype(variant);
        if (blocks_per_sm) *blocks_per_sm = V::blocks_per_sm();
        if (tokens_per_iter) *tokens_per_iter = V::tokens_per_iter;
        if (blocks > 0) V::launch(ctx, args, blocks);
    };
    switch (qp) {
        case 1: return go(decode_variant<D, 1>{});
        case 2: return go(decode_variant<D, 2>{});
        case 4: return go(decode_variant<D, 4>{});
        default: return go(decode_variant<D, 8>{});
    }
}

// With blocks == 0 only reports the variant's occupancy and tokens per iteration.
void dispatch(int head_dim, int qp, context & ctx, const decode_args & args, int64_t blocks,
              int * blocks_per_sm, int * tokens_per_iter) {
    if (head_dim == 64)
        dispatch_qp<64>(qp, ctx, args, blocks, blocks_per_sm, tokens_per_iter);
    else
        dispatch_qp<128>(qp, ctx, args, blocks, blocks_per_sm, tokens_per_iter);
}

int64_t ceil_div(int64_t a, int64_t b) {
    return (a + b - 1) / b;
}

}  // namespace

support supports_attn_decode(const op_desc & op) {
    const auto & p = op.get<attn_decode_params>();
    const kv_layout & l = p.kv;
    if (l.head_dim != 64 && l.head_dim != 128)
        return support::no("head_dim " + std::to_string(l.head_dim) +
                           " (CUDA decode kernels exist for 64 and 128)");
    if (op.src[1].offset % 16 != 0 || op.src[2].offset % 16 != 0)
        return support::no("k_pages/v_pages views must start at a 16-byte aligned offset (uint4 loads)");
    if (l.n_pages > INT_MAX || p.max_seq_len > INT_MAX || p.nnz_pages > INT_MAX ||
        p.batch * p.n_q_heads > INT_MAX)
        return support::no("page pool, page table and sequence lengths must fit in 32 bits");
    const int64_t group = p.n_q_heads / l.n_kv_heads;
    const int64_t chunks = ceil_div(group, 8);
    if (p.batch * l.n_kv_heads * chunks * std::max<int64_t>(1, p.n_splits) > INT_MAX)
        return support::no("too many thread blocks (batch * kv_heads * splits)");
    return support::yes();
}

void run_attn_decode(context & ctx, const op_desc & op) {
    const auto & p = op.get<attn_decode_params>();
    const kv_layout & l = p.kv;
    const int D = int(l.head_dim);
    const int group = int(p.n_q_heads / l.n_kv_heads);
    const int qp = group <= 1 ? 1 : group <= 2 ? 2 : group <= 4 ? 4 : 8;
    const int head_chunks = int(ceil_div(group, qp));

    decode_args args{};
    args.q = dev_ptr<const float>(op.src[0]);
    args.k_pages = dev_ptr<const __half>(op.src[1]);
    args.v_pages = dev_ptr<const __half>(op.src[2]);
    args.indptr = dev_ptr<const int32_t>(op.src[3]);
    args.indices = dev_ptr<const int32_t>(op.src[4]);
    args.last_page_len = dev_ptr<const int32_t>(op.src[5]);
    args.out = dev_ptr<float>(op.dst[0]);
    args.page_stride = l.n_kv_heads * l.page_size * l.head_dim;
    args.n_pages = int(l.n_pages);
    args.n_kv_heads = int(l.n_kv_heads);
    args.page_size = int(l.page_size);
    args.page_shift = -1;
    for (int s = 0; s < 31; ++s)
        if ((int64_t(1) << s) == l.page_size) args.page_shift = s;
    args.n_q_heads = int(p.n_q_heads);
    args.group = group;
    args.head_chunks = head_chunks;
    args.qscale = p.scale * kLog2e;

    // Splits: honour n_splits. Otherwise pick the count whose blocks fill the resident slots
    // (SMs x blocks per SM) best in whole waves, since every block of a wave is equally long and a
    // partial last wave idles the rest of the GPU; fewer splits win near-ties (less merge work).
    // Chunks stay >= kMinChunkTokens and a whole number of block iterations.
    const int64_t work = p.batch * l.n_kv_heads * head_chunks;
    int blocks_per_sm = 1, tokens_per_iter = 1;
    dispatch(D, qp, ctx, args, 0, &blocks_per_sm, &tokens_per_iter);
    int64_t splits = p.n_splits;
    int64_t chunk = 0;
    if (splits > 0) {
        chunk = ceil_div(p.max_seq_len, splits);
    } else if (p.max_seq_len > 0) {
        const int64_t slots = int64_t(ctx.sm_count) * blocks_per_sm;
        const int64_t max_splits =
            std::min(std::max<int64_t>(1, p.max_seq_len / kMinChunkTokens), 2 * ceil_div(slots, work) + 1);
        double best_eff = 0.0;
        splits = 1;
        for (int64_t s = 1; s <= max_splits; ++s) {
            const int64_t blocks = work * s;
            const double eff = double(blocks) / double(ceil_div(blocks, slots) * slots);
            if (eff > best_eff + 0.02) {
                best_eff = eff;
                splits = s;
            }
        }
        chunk = ceil_div(ceil_div(p.max_seq_len, splits), tokens_per_iter) * tokens_per_iter;
        splits = ceil_div(p.max_seq_len, chunk);  // rounding the chunk up may leave a split empty
    } else {
        splits = 1;
    }
    args.n_splits = int(splits);
    args.chunk = int(std::min<int64_t>(chunk, INT_MAX));

    if (splits > 1) {
        const int64_t rows = p.batch * p.n_q_heads;
        const size_t o_bytes = (size_t(rows * splits * D) * sizeof(float) + 255) & ~size_t(255);
        char * ws = static_cast<char *>(ctx.workspace(o_bytes + size_t(rows * splits) * sizeof(float)));
        args.part_o = reinterpret_cast<float *>(ws);
        args.part_lse = reinterpret_cast<float *>(ws + o_bytes);
    }
    dispatch(D, qp, ctx, args, work * splits, nullptr, nullptr);
    if (splits > 1)
        launch_split_merge(ctx, args.part_o, args.part_lse, args.out, nullptr, p.batch * p.n_q_heads, args.n_splits, D);
}

}  // namespace kvcomp::cuda
