// attn_decode_quant: one query token per request against its quantized KV blocks (slot format in
// core/qblock.h) and its fp16 ring window; split-KV, GQA, codes dequantized in registers.
//
// Two kernels compute it: the tensor-core kernel of attn_decode_quant_mma.cu (the default, for
// v_group a multiple of 16) and the SIMT kernel below (the fallback, and the one used everywhere
// with KVCOMP_QUANT_DECODE=simt). This file holds the host side for both (variant, stages and
// split choice, the split merge kernel); items and staging are shared (attn_decode_quant.cuh).
//
// Kernels:
//   attn_decode_quant_kernel<D, QP, CPL>  (SIMT)  one block of 128 threads (4 warps) per (request, KV head,
//       head chunk, split); QP query heads of the KV head's GQA group per block (group rounded up
//       to 1, 2, 4, 8; larger groups use several head chunks), so every code byte is read from
//       memory once per group. D = head_dim, a multiple of 16 from 32 to 128 (as the tensor-core
//       kernel; the widths other than 64 and 128 are the reduced caches of kivi / zipcache with
//       lowrank=, rank=R); CPL = channels per lane (16 when QP <= 4, 8 for QP = 8 and for D = 32,
//       to bound the q and o registers at 2 * QP * CPL and keep QP lanes per token row).
//   the splits' (o, lse) partials are merged by decode_merge.cu's kernel (shared with attn_decode).
//
// Work items and splits: see attn_decode_quant.cuh.
//
// Memory: one block's region of a KV head is contiguous in its slot (vscale, hi segment, lo
// segment: ~10.7 KB for ZipCache hd 128), so the 128 threads copy the 16-byte header plus that
// region with cp.async in 16-byte chunks (fully coalesced) into one stage of a shared-memory
// ring, and compute from shared memory. Window chunks are staged the same way (K rows, then V
// rows; tokens past the window are zero-filled without a global read). NST stages (3 when they
// fit in 48 KiB, else 2) keep NST-1 items in flight per block while one is consumed, one
// __syncthreads per item. Slot numbers are loaded one item ahead so copies never wait on the
// index array. Per-channel K params and per-channel vscale are read once per (block, warp).
//
// Compute mapping: L lanes share a token row, D / CPL of them owning CPL consecutive channels each,
// so a lane's codes of one token are CPL * bits / 8 contiguous bytes (hd 128, CPL 16: one u32 at 2
// bits, a uint2 at 4 bits). L is D / CPL rounded up to a power of two (the shuffles' groups): where
// D / CPL is not one (48, 80, 96, 112), the last lanes hold no channels; they read their row's first
// lane's bytes, carry q' = 0 (a zero partial score) and take part in the shuffles, and their value
// slice is never written. A warp covers G = 32 / L consecutive tokens per step and the warps
// take the steps of a block's hi then lo segment round robin. Codes become floats without an
// int->float conversion: F = asfloat(0x3F800000 | code << (23 - bits)) = 1 + code / 2^bits, so
//   k = code * kstep + kmin = F * (2^bits kstep) + (kmin - 2^bits kstep)
// and q.k = sum_c q'_c F_c + bias with q'_c = q_c 2^bits kstep_c and bias = sum_c q_c (kmin_c -
// 2^bits kstep_c) computed once per segment (kstep folded into q: no K dequantization per token).
// Values: v = (F * 2^bits vstep + (vmin - 2^bits vstep)) * vscale_c, one FMA (+ one multiply with
// channel scales) per element, shared by the QP heads. Partial dots are combined by the GQA
// butterfly of decode_common.cuh. Online softmax in fp32, log2 domain (q pre-scaled by
// scale * log2 e), the running max shared by a warp's token groups; warps merge through shared
// memory at the end (reusing the ring), writing out + lse (natural log) directly with one split,
// else normalized partials and log2-lse for the merge kernel.
//
// Invalid inputs a kernel cannot refuse (the CPU reference throws; the host validates): block
// ranges are clamped to the index array, slot numbers to the pool, header counts to the segment
// capacities; an invalid window (len outside [0, win_tokens], start outside the ring, row outside
// the rows) counts as empty.
#include <climits>

#include <cstdlib>
#include <cstring>

#include "attn_decode_quant.cuh"
#include "common.cuh"
#include "decode_common.cuh"
#include "dependent_launch.cuh"
#include "head_dims.cuh"

namespace kvcomp::cuda {

namespace {

using namespace dq;
using dq_args = dq::args;
constexpr int kMinItemsPerSplit = 3;  // SIMT: a split's pipeline fill and partial write cost ~1 item

// Lanes per token row: D / CPL rounded up to a power of two (see the banner).
__host__ __device__ constexpr int lanes_per_row(int d, int cpl) {
    int l = 1;
    while (l * cpl < d) l *= 2;
    return l;
}

// Code of channel k of a lane's CPL channels as F = 1 + code / 2^BITS (see the banner).
template <int BITS, int CPL>
struct lane_codes {
    static constexpr int kBytes = CPL * BITS / 8;  // 2, 4, 8 or 16
    static constexpr int kWords = kBytes < 4 ? 1 : kBytes / 4;
    uint32_t w[kWords];

    __device__ __forceinline__ void load(const uint8_t * p) {
        if constexpr (kBytes == 2) {
            w[0] = *reinterpret_cast<const uint16_t *>(p);
        } else if constexpr (kBytes == 4) {
            w[0] = *reinterpret_cast<const uint32_t *>(p);
        } else if constexpr (kBytes == 8) {
            const uint2 t = *reinterpret_cast<const uint2 *>(p);
            w[0] = t.x, w[1] = t.y;
        } else {
            const uint4 t = *reinterpret_cast<const uint4 *>(p);
            w[0] = t.x, w[1] = t.y, w[2] = t.z, w[3] = t.w;
        }
    }
    __device__ __forceinline__ float f(int k) const {  // k is a compile-time constant after unrolling
        const int bit = k * BITS, p = bit % 32;
        const int sh = 23 - BITS - p;
        const uint32_t x = sh >= 0 ? w[bit / 32] << sh : w[bit / 32] >> -sh;
        constexpr uint32_t mask = ((1u << BITS) - 1u) << (23 - BITS);
        return __uint_as_float((x & mask) | 0x3F800000u);
    }
};

// Per-warp running state of one lane: the online-softmax max and sum of head lane_head(lj)
// (shared by the warp's token groups) and the lane's slice of o for all QP heads.
template <int QP, int CPL>
struct dq_state {
    float m = -INFINITY, l = 0.0f;
    float o[QP][CPL];
};

// Online softmax update for one score per lane and accumulation of its value slice.
template <int L, int QP, int CPL>
__device__ __forceinline__ void accumulate(dq_state<QP, CPL> & st, float s, const float (&val)[CPL], int lj) {
    float mt = s;
#pragma unroll
    for (int off = L; off < 32; off <<= 1) mt = fmaxf(mt, __shfl_xor_sync(full_mask, mt, off));
    const float m_new = fmaxf(st.m, mt);
    const float m_use = m_new == -INFINITY ? 0.0f : m_new;  // nothing seen yet: avoid inf - inf
    const float alpha = exp2f(st.m - m_use);
    const float p = exp2f(s - m_use);
    st.l = st.l * alpha + p;
    st.m = m_new;
    // The max settles quickly; skip the rescale for the whole warp unless some head's max grew.
    if (__any_sync(full_mask, alpha != 1.0f)) {
#pragma unroll
        for (int i = 0; i < QP; ++i) {
            const float ai = __shfl_sync(full_mask, alpha, head_lane<L, QP>(i), L);
#pragma unroll
            for (int k = 0; k < CPL; ++k) st.o[i][k] *= ai;
        }
    }
#pragma unroll
    for (int i = 0; i < QP; ++i) {
        const float pi = __shfl_sync(full_mask, p, head_lane<L, QP>(i), L);
#pragma unroll
        for (int k = 0; k < CPL; ++k) st.o[i][k] = fmaf(pi, val[k], st.o[i][k]);
    }
}

// q' = q * 2^bits * kstep and this lane's head's bias (see the banner) for one segment.
template <int D, int QP, int CPL>
__device__ __forceinline__ float setup_segment(const float * q_s, const uint8_t * seg, const dq_args & a,
                                               int bits, int lj, float (&qk)[QP][CPL]) {
    constexpr int L = lanes_per_row(D, CPL);
    const __half * kmin = reinterpret_cast<const __half *>(seg);
    const __half * kstep = reinterpret_cast<const __half *>(seg + a.seg_kstep);
    const float levels = float(1 << bits);
    const bool holds = lj * CPL < D;  // a lane past the row's channels: q' = 0, no bias
    float bpart[QP];
#pragma unroll
    for (int i = 0; i < QP; ++i) bpart[i] = 0.0f;
#pragma unroll
    for (int k = 0; k < CPL; ++k) {
        const int c = holds ? lj * CPL + k : k;
        const float ks = __half2float(kstep[c]) * levels;
        const float d = __half2float(kmin[c]) - ks;
#pragma unroll
        for (int i = 0; i < QP; ++i) {
            const float qv = holds ? q_s[i * D + c] : 0.0f;
            qk[i][k] = qv * ks;
            bpart[i] = fmaf(qv, d, bpart[i]);
        }
    }
    return butterfly<L, QP>(bpart, lj);
}

// One warp step over G tokens of a quantized segment: token tok of this lane's group.
// Offsets of a segment's arrays (selected once per step, so kernel parameters are never indexed
// at run time).
struct seg_offsets {
    int vstep, kcodes, vcodes;
};

template <int D, int QP, int CPL, int BITS>
__device__ __forceinline__ void quant_step(dq_state<QP, CPL> & st, const float (&qk)[QP][CPL], float bias,
                                           const float (&vs)[CPL], const uint8_t * seg, seg_offsets so,
                                           int tok, int n, const dq_args & a, int lj) {
    constexpr int L = lanes_per_row(D, CPL);
    constexpr int RB = D * BITS / 8;    // bytes per code row
    constexpr int LB = CPL * BITS / 8;  // bytes of a lane's slice
    const bool valid = tok < n;
    const int t = valid ? tok : 0;  // masked lanes read row 0 (always inside the stage)
    const int lc = lj * CPL < D ? lj : 0;  // a lane past the row's channels reads lane 0's (q' = 0 there)

    lane_codes<BITS, CPL> kc;
    kc.load(seg + so.kcodes + t * RB + lc * LB);
    float part[QP];
#pragma unroll
    for (int i = 0; i < QP; ++i) part[i] = 0.0f;
#pragma unroll
    for (int k = 0; k < CPL; ++k) {
        const float f = kc.f(k);
#pragma unroll
        for (int i = 0; i < QP; ++i) part[i] = fmaf(qk[i][k], f, part[i]);
    }
    const float full = butterfly<L, QP>(part, lj);  // every lane takes part in the shuffles
    const float s = valid ? full + bias : -INFINITY;

    lane_codes<BITS, CPL> vc;
    vc.load(seg + so.vcodes + t * RB + lc * LB);
    const int gi = t * a.groups + (lc * CPL) / a.v_group;  // v_group % CPL == 0 (supports)
    const float levels = float(1 << BITS);
    float A = __half2float(reinterpret_cast<const __half *>(seg + so.vstep)[gi]) * levels;
    float B = __half2float(reinterpret_cast<const __half *>(seg + a.seg_vmin)[gi]) - A;
    A = valid ? A : 0.0f;  // a masked token contributes exactly 0 whatever its row holds
    B = valid ? B : 0.0f;
    float val[CPL];
#pragma unroll
    for (int k = 0; k < CPL; ++k) val[k] = fmaf(vc.f(k), A, B) * vs[k];
    accumulate<L, QP, CPL>(st, s, val, lj);
}

template <int D, int QP, int CPL>
__device__ __forceinline__ void quant_step_bits(int bits, dq_state<QP, CPL> & st, const float (&qk)[QP][CPL],
                                                float bias, const float (&vs)[CPL], const uint8_t * seg,
                                                seg_offsets so, int tok, int n, const dq_args & a, int lj) {
    switch (bits) {
        case 2:
            return quant_step<D, QP, CPL, 2>(st, qk, bias, vs, seg, so, tok, n, a, lj);
        case 4:
            return quant_step<D, QP, CPL, 4>(st, qk, bias, vs, seg, so, tok, n, a, lj);
        default:
            return quant_step<D, QP, CPL, 8>(st, qk, bias, vs, seg, so, tok, n, a, lj);
    }
}

// One warp step over G window tokens staged as K rows [win_chunk][D] then V rows (f16).
template <int D, int QP, int CPL>
__device__ __forceinline__ void window_step(dq_state<QP, CPL> & st, const float (&qk)[QP][CPL],
                                            const uint8_t * stage, int tok, int n, const dq_args & a,
                                            int lj) {
    constexpr int L = lanes_per_row(D, CPL);
    const bool valid = tok < n;
    const int t = valid ? tok : 0;
    const int lc = lj * CPL < D ? lj : 0;  // as in quant_step
    const uint4 * krow = reinterpret_cast<const uint4 *>(stage + (int64_t(t) * D + lc * CPL) * 2);
    const uint4 * vrow =
        reinterpret_cast<const uint4 *>(stage + (int64_t(a.win_chunk + t) * D + lc * CPL) * 2);
    float part[QP];
#pragma unroll
    for (int i = 0; i < QP; ++i) part[i] = 0.0f;
#pragma unroll
    for (int c8 = 0; c8 < CPL / 8; ++c8) {
        float kf[8];
        unpack8(krow[c8], kf);
#pragma unroll
        for (int k = 0; k < 8; ++k)
#pragma unroll
            for (int i = 0; i < QP; ++i) part[i] = fmaf(qk[i][c8 * 8 + k], kf[k], part[i]);
    }
    const float full = butterfly<L, QP>(part, lj);
    const float s = valid ? full : -INFINITY;
    float val[CPL];
#pragma unroll
    for (int c8 = 0; c8 < CPL / 8; ++c8) {
        float vf[8];
        unpack8(vrow[c8], vf);
#pragma unroll
        for (int k = 0; k < 8; ++k) val[c8 * 8 + k] = valid ? vf[k] : 0.0f;
    }
    accumulate<L, QP, CPL>(st, s, val, lj);
}

// Shared memory: q [QP][D] f32, then max(ring of n_stages * stage_bytes, the warps' merge area).
template <int D, int QP>
constexpr size_t merge_bytes() {
    return warp_merge_floats<kWarps, QP, D>() * sizeof(float);
}
template <int D, int QP>
size_t dq_smem_bytes(int stage_bytes, int n_stages) {
    return size_t(QP) * D * sizeof(float) + std::max(size_t(stage_bytes) * n_stages, merge_bytes<D, QP>());
}

template <int D, int QP, int CPL>
__global__ void __launch_bounds__(kThreads) attn_decode_quant_kernel(const dq_args a) {
    constexpr int L = lanes_per_row(D, CPL);  // lanes per token row (the last may hold no channels)
    constexpr int G = 32 / L;                 // tokens per warp step
    static_assert(D % CPL == 0 && L <= 32 && QP <= L, "lane mapping");
    extern __shared__ uint4 smem[];
    float * q_s = reinterpret_cast<float *>(smem);
    uint8_t * ring = reinterpret_cast<uint8_t *>(smem) + size_t(QP) * D * sizeof(float);

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int tg = lane / L, lj = lane % L;

    int64_t bid = blockIdx.x;
    const int split = int(bid % a.n_splits);
    bid /= a.n_splits;
    const int chunk = int(bid % a.head_chunks);
    bid /= a.head_chunks;
    const int g = int(bid % a.n_kv_heads);
    const int b = int(bid / a.n_kv_heads);
    const int h0 = g * a.group + chunk * QP;
    const int nh = min(QP, a.group - chunk * QP);

    const items its(a, b, split);
    const int n_blk = its.n_blk, n_it = its.n_it, it_begin = its.it_begin;

    for (int idx = tid; idx < QP * D; idx += kThreads) {
        const int i = idx / D;  // padding heads past the group are never read (may lie past q)
        q_s[idx] = i < nh ? a.q[(int64_t(b) * a.n_q_heads + h0 + i) * D + idx % D] * a.qscale : 0.0f;
    }

    auto load_slot = [&](int it) { return its.slot(a, it); };
    auto issue = [&](int it, int slot) { its.template issue<D>(a, g, ring, it, slot); };

    dq_state<QP, CPL> st;
#pragma unroll
    for (int i = 0; i < QP; ++i)
#pragma unroll
        for (int k = 0; k < CPL; ++k) st.o[i][k] = 0.0f;

    int next_slot = load_slot(0);
    for (int s = 0; s < a.n_stages - 1; ++s) {
        issue(s, next_slot);
        next_slot = load_slot(s + 1);
    }

    float qk[QP][CPL];
    for (int it = 0; it < n_it; ++it) {
        if (a.n_stages == 3)
            cp_async_wait<1>();
        else
            cp_async_wait<0>();
        __syncthreads();  // item it has landed for every thread; item it-1's stage is free
        issue(it + a.n_stages - 1, next_slot);
        next_slot = load_slot(it + a.n_stages);

        const uint8_t * stage = ring + (it % a.n_stages) * a.stage_bytes;
        const int item = it_begin + it;
        if (item < n_blk) {
            const int32_t * hdr = reinterpret_cast<const int32_t *>(stage);
            const int n_hi = min(max(hdr[0], 0), a.cap[0]), n_lo = min(max(hdr[1], 0), a.cap[1]);
            const uint8_t * head = stage + 16;
            float vs[CPL];
            const int lc = lj * CPL < D ? lj : 0;  // a lane past the row's channels: never written
#pragma unroll
            for (int k = 0; k < CPL; ++k)
                vs[k] = a.cscale ? __half2float(reinterpret_cast<const __half *>(head)[lc * CPL + k]) : 1.0f;
            const int hs = (n_hi + G - 1) / G, n_steps = hs + (n_lo + G - 1) / G;
            int cur = -1;
            float bias = 0.0f;
            for (int ws = warp; ws < n_steps; ws += kWarps) {  // uniform per warp
                const bool lo = ws >= hs;
                const uint8_t * seg = head + (lo ? a.seg_off[1] : a.seg_off[0]);
                const int bits = lo ? a.bits[1] : a.bits[0];
                if (int(lo) != cur) {
                    bias = setup_segment<D, QP, CPL>(q_s, seg, a, bits, lj, qk);
                    cur = int(lo);
                }
                const seg_offsets so = lo ? seg_offsets{a.seg_vstep[1], a.seg_kcodes[1], a.seg_vcodes[1]}
                                          : seg_offsets{a.seg_vstep[0], a.seg_kcodes[0], a.seg_vcodes[0]};
                const int tok = (lo ? ws - hs : ws) * G + tg;
                quant_step_bits<D, QP, CPL>(bits, st, qk, bias, vs, seg, so, tok, lo ? n_lo : n_hi, a, lj);
            }
        } else {
            const int n_w = its.window_tokens(a, item);
            const int n_steps = (n_w + G - 1) / G;
            if (warp < n_steps) {
#pragma unroll
                for (int i = 0; i < QP; ++i)
#pragma unroll
                    for (int k = 0; k < CPL; ++k) qk[i][k] = lj * CPL < D ? q_s[i * D + lj * CPL + k] : 0.0f;
            }
            for (int ws = warp; ws < n_steps; ws += kWarps)
                window_step<D, QP, CPL>(st, qk, stage, ws * G + tg, n_w, a, lj);
        }
    }
    // Groups still outstanding are empty (issue() copies nothing past this split's items); wait
    // anyway so that no copy can land in the ring once it is reused for the merge below.
    cp_async_wait<0>();
    allow_consumer_launch();  // the merge may now be launched (dependent_launch.cuh)

    float * sm = reinterpret_cast<float *>(ring);  // the warps merge through the ring
    publish_warp_states<L, QP, CPL, kWarps, D>(st.m, st.l, st.o, sm);

    store_block_result<D, QP, kWarps>(sm, nh, int64_t(b) * a.n_q_heads + h0,
                                      decode_dst{a.out, a.lse, a.part_o, a.part_lse, a.n_splits, split});
}

int64_t ceil_div(int64_t x, int64_t y) {
    return (x + y - 1) / y;
}

// Variant choice: channels per lane and the heads per block (see the banner).
int qp_for(int64_t group) {
    return group <= 1 ? 1 : group <= 2 ? 2 : group <= 4 ? 4 : 8;
}
constexpr int cpl_for(int qp, int head_dim) {
    return qp <= 4 && head_dim > 32 ? 16 : 8;
}
// The SIMT kernel's widths: multiples of 16 from 32 to 128; at 32 a row has 4 lanes of 8 channels,
// too few for 8 query heads per block (each lane ends with one head's score).
bool simt_handles(int64_t head_dim, int qp) {
    return head_dim >= 32 && head_dim <= 128 && head_dim % 16 == 0 && !(head_dim == 32 && qp > 4);
}

template <int D, int QP>
struct dq_variant {
    static constexpr int CPL = cpl_for(QP, D);
    static void launch(context & ctx, const dq_args & a, int64_t blocks, size_t smem) {
        attn_decode_quant_kernel<D, QP, CPL><<<unsigned(blocks), kThreads, smem, ctx.stream>>>(a);
        KVCOMP_CUDA_CHECK_LAUNCH();
    }
    static int blocks_per_sm(size_t smem) {
        int n = 0;
        KVCOMP_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
            &n, attn_decode_quant_kernel<D, QP, CPL>, kThreads, smem));
        return n > 0 ? n : 1;
    }
};

// blocks == 0: only returns the variant's resident blocks per SM; else launches. (head_dim, qp)
// is one of simt_handles' pairs.
int dispatch(int head_dim, int qp, context & ctx, const dq_args & a, int64_t blocks, size_t smem) {
    return with_head_dim(head_dim, [&](auto dc) {
        constexpr int D = decltype(dc)::value;
        auto go = [&](auto variant) {
            using V = decltype(variant);
            if (blocks == 0) return V::blocks_per_sm(smem);
            V::launch(ctx, a, blocks, smem);
            return 0;
        };
        switch (qp) {
            case 1:
                return go(dq_variant<D, 1>{});
            case 2:
                return go(dq_variant<D, 2>{});
            case 4:
                return go(dq_variant<D, 4>{});
            default:
                if constexpr (D > 32) {
                    return go(dq_variant<D, 8>{});
                } else {  // simt_handles refuses it
                    KVCOMP_THROW(status::internal, "attn_decode_quant: head_dim 32 with 8 query heads per block");
                }
        }
        return 0;
    });
}
size_t smem_for(int head_dim, int qp, int stage_bytes, int n_stages) {
    return with_head_dim(head_dim, [&](auto dc) {
        constexpr int D = decltype(dc)::value;
        switch (qp) {
            case 1:
                return dq_smem_bytes<D, 1>(stage_bytes, n_stages);
            case 2:
                return dq_smem_bytes<D, 2>(stage_bytes, n_stages);
            case 4:
                return dq_smem_bytes<D, 4>(stage_bytes, n_stages);
            default:
                return dq_smem_bytes<D, 8>(stage_bytes, n_stages);
        }
    });
}

constexpr size_t kSmemLimit = 48 * 1024;  // the default limit on every target: no opt-in needed

// KVCOMP_QUANT_DECODE (read here only): "simt" forces the SIMT kernel (to compare, or to fall back
// on a GPU where the tensor-core kernel misbehaves); "mma" or unset: the tensor-core kernel
// wherever it handles the layout (dq::mma_handles), else the SIMT kernel.
bool mma_requested() {
    static const bool mma = [] {
        const char * v = std::getenv("KVCOMP_QUANT_DECODE");
        if (!v || !*v || std::strcmp(v, "mma") == 0) return true;
        if (std::strcmp(v, "simt") == 0) return false;
        KVCOMP_THROW(status::invalid_argument, "KVCOMP_QUANT_DECODE=", v, ": expected 'mma' or 'simt'");
    }();
    return mma;
}
bool use_mma(const qblock_layout & q) {
    return mma_requested() && mma_handles(q, nullptr);
}

// Stages: the tensor-core kernel's per-warp rings (mma_handles checked that they fit); the SIMT
// kernel's block ring: three when they fit the default shared memory, else two; 0 when two do not fit.
int stages_for(const qblock_layout & q, bool mma, int qp) {
    const int64_t stage = std::min<int64_t>(stage_bytes_for(q), INT_MAX / 4);
    if (mma) return mma_stages(int(stage));
    const int D = int(q.head_dim);
    for (int n = 3; n >= 2; --n)
        if (smem_for(D, qp, int(stage), n) <= kSmemLimit) return n;
    return 0;
}

}  // namespace

support supports_attn_decode_quant(const op_desc & op) {
    const auto & p = op.get<attn_decode_quant_params>();
    const qblock_layout & q = p.q;
    const bool mma = use_mma(q);
    const int qp = mma ? kMmaHeads : qp_for(p.n_q_heads / q.n_kv_heads);
    if (!mma && !simt_handles(q.head_dim, qp))
        return support::no("head_dim " + std::to_string(q.head_dim) +
                           " (CUDA kernels take multiples of 16 from 32 to 128, and 48 to 128 for GQA groups above 4)");
    if (!mma && q.v_group % cpl_for(qp, int(q.head_dim)) != 0)
        return support::no("v_group " + std::to_string(q.v_group) + " must be a multiple of 16 (tensor-core kernel" +
                           (mma_requested() ? "" : ", disabled by KVCOMP_QUANT_DECODE=simt") + ") or of " +
                           std::to_string(cpl_for(qp, int(q.head_dim))) + " (SIMT kernel: channels per lane)");
    if (op.src[1].offset % 16 != 0 || op.src[4].offset % 16 != 0 || op.src[5].offset % 16 != 0)
        return support::no("pool, win_k and win_v views must start at 16-byte aligned offsets (cp.async)");
    if (stages_for(q, mma, qp) == 0)
        return support::no("a block's region of one KV head (" + std::to_string(q.head_bytes()) +
                           " bytes) is too large for two shared-memory stages");
    if (p.n_slots > INT_MAX || p.nnz_blocks > INT_MAX || p.max_tokens > INT_MAX ||
        p.batch * p.n_q_heads > INT_MAX || p.win_tokens > INT_MAX / 2 || p.n_win_pages > INT_MAX ||
        p.n_win_rows * p.win_pages_per_row() > INT_MAX)
        return support::no("pool, index arrays and token counts must fit in 32 bits");
    const int64_t chunks = ceil_div(p.n_q_heads / q.n_kv_heads, qp);
    if (p.batch * q.n_kv_heads * chunks * std::max<int64_t>(1, p.n_splits) > INT_MAX)
        return support::no("too many thread blocks (batch * kv_heads * splits)");
    return support::yes();
}

void run_attn_decode_quant(context & ctx, const op_desc & op) {
    const auto & p = op.get<attn_decode_quant_params>();
    const qblock_layout & q = p.q;
    const int D = int(q.head_dim);
    const int group = int(p.n_q_heads / q.n_kv_heads);
    const bool mma = use_mma(q);
    const int qp = mma ? kMmaHeads : qp_for(group);
    const int head_chunks = int(ceil_div(group, qp));

    dq_args a{};
    a.q = dev_ptr<const float>(op.src[0]);
    a.pool = dev_ptr<const uint8_t>(op.src[1]);
    a.indptr = dev_ptr<const int32_t>(op.src[2]);
    a.indices = dev_ptr<const int32_t>(op.src[3]);
    a.win_k = dev_ptr<const __half>(op.src[4]);
    a.win_v = dev_ptr<const __half>(op.src[5]);
    a.win = dev_ptr<const int32_t>(op.src[6]);
    a.win_pages = dev_ptr<const int32_t>(op.src[7]);
    a.out = dev_ptr<float>(op.dst[0]);
    a.lse = dev_ptr<float>(op.dst[1]);
    a.slot_bytes = q.slot_bytes();
    a.head_bytes = q.head_bytes();
    a.seg_off[0] = int(q.head_hi());
    a.seg_off[1] = int(q.head_lo());
    a.cap[0] = q.hi_tokens;
    a.cap[1] = q.lo_tokens;
    a.bits[0] = q.hi_bits;
    a.bits[1] = q.lo_bits;
    a.seg_kstep = int(q.seg_kstep());
    a.seg_vmin = int(q.seg_vmin());
    for (int s = 0; s < 2; ++s) {
        a.seg_vstep[s] = int(q.seg_vstep(a.cap[s]));
        a.seg_kcodes[s] = int(q.seg_kcodes(a.cap[s]));
        a.seg_vcodes[s] = int(q.seg_vcodes(a.cap[s], a.bits[s]));
    }
    a.groups = int(q.v_groups());
    a.v_group = q.v_group;
    a.cscale = q.channel_scale;
    a.n_slots = int(p.n_slots);
    a.nnz = int(p.nnz_blocks);
    a.n_kv_heads = int(q.n_kv_heads);
    a.n_q_heads = int(p.n_q_heads);
    a.group = group;
    a.head_chunks = head_chunks;
    a.n_win_rows = int(p.n_win_rows);
    a.win_tokens = int(p.win_tokens);
    a.n_win_pages = int(p.n_win_pages);
    a.win_page_tokens = int(p.win_page_tokens);
    a.win_ppr = int(p.win_pages_per_row());
    a.win_page_shift = -1;
    if ((p.win_page_tokens & (p.win_page_tokens - 1)) == 0)
        for (int sh = 0; (int64_t(1) << sh) <= p.win_page_tokens; ++sh)
            if ((int64_t(1) << sh) == p.win_page_tokens) a.win_page_shift = sh;
    a.qscale = p.scale * kLog2e;

    a.stage_bytes = int(stage_bytes_for(q));
    a.n_stages = stages_for(q, mma, qp);  // >= 2: supports checked
    const size_t smem = mma ? mma_smem_bytes(D, a.stage_bytes, a.n_stages) : smem_for(D, qp, a.stage_bytes, a.n_stages);
    // A window chunk carries about a block's bytes: K and V rows of 2 * D bytes each.
    a.win_chunk = int(std::max<int64_t>(1, a.stage_bytes / (4 * q.head_dim)));

    // Items per (request, KV head), estimated from max_tokens assuming full blocks (the last
    // split takes whatever is beyond the estimate).
    const int64_t est_blocks = std::min<int64_t>(p.nnz_blocks, ceil_div(p.max_tokens, q.block_tokens()));
    const int64_t est_items =
        est_blocks + ceil_div(std::min<int64_t>(p.win_tokens, p.max_tokens), a.win_chunk);

    // Splits: honour n_splits; else pick the count whose blocks fill the resident slots (SMs x
    // blocks per SM) best in whole waves, as attn_decode does; fewer splits win near-ties.
    const int64_t work = p.batch * q.n_kv_heads * head_chunks;
    int64_t splits = p.n_splits;
    if (splits <= 0) {
        const int64_t slots =
            int64_t(ctx.sm_count) * (mma ? mma_blocks_per_sm(a, D, smem) : dispatch(D, qp, ctx, a, 0, smem));
        const int64_t min_items = mma ? kMmaMinItemsPerSplit : kMinItemsPerSplit;
        const int64_t max_splits =
            std::min(std::max<int64_t>(1, est_items / min_items), 2 * ceil_div(slots, work) + 1);
        double best = 0.0;
        splits = 1;
        for (int64_t s = 1; s <= max_splits; ++s) {
            const int64_t blocks = work * s;
            const double eff = double(blocks) / double(ceil_div(blocks, slots) * slots);
            if (eff > best + 0.02) {
                best = eff;
                splits = s;
            }
        }
    }
    const int64_t ips = std::max<int64_t>(1, ceil_div(est_items, splits));
    splits =
        std::max<int64_t>(1, std::min(splits, ceil_div(est_items, ips)));  // no split left empty by rounding
    a.n_splits = int(splits);
    a.items_per_split = int(std::min<int64_t>(ips, INT_MAX));

    if (splits > 1) {
        const int64_t rows = p.batch * p.n_q_heads;
        const size_t o_bytes = (size_t(rows * splits * D) * sizeof(float) + 255) & ~size_t(255);
        char * ws = static_cast<char *>(ctx.workspace(o_bytes + size_t(rows * splits) * sizeof(float)));
        a.part_o = reinterpret_cast<float *>(ws);
        a.part_lse = reinterpret_cast<float *>(ws + o_bytes);
    }
    if (mma)
        mma_launch(ctx, a, D, work * splits, smem);
    else
        dispatch(D, qp, ctx, a, work * splits, smem);
    if (splits > 1) launch_split_merge(ctx, a.part_o, a.part_lse, a.out, a.lse, p.batch * p.n_q_heads, a.n_splits, D);
}

}  // namespace kvcomp::cuda
