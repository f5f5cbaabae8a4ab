// kv_quantize: quantize planned blocks of tokens into slots of a quantized block pool. The slot
// format and the quantizer are core/qblock.h; slots are byte-identical to the CPU reference
// (core/qblock_codec.cpp), which the tests check bit for bit.
//
// Kernel: kv_quantize_kernel<TK, TV> (float or __half K and V sources), one block of 128 threads per
// (planned block i, KV head h); it writes the head's whole region of the slot, and the (i, h = 0)
// block also the 16-byte header. Phases, separated by __syncthreads:
//   0. stage the element offsets of the head's hi + lo tokens in shared memory; zero the head
//      region (uint4 stores), so unused capacity and padding are zeros without bookkeeping;
//   1. (channel_scale) one thread per channel: vscale = f16(sqrt(max |v|)) over all tokens;
//   per segment (hi, then lo):
//   2. one thread per channel: key min/max over the segment's tokens -> kmin, kstep;
//      one thread per (token, value group): min/max of w = v / vscale -> vmin, vstep;
//   3. one thread per (token, 32-bit word of a code row): 32 / bits codes of K and of V packed in
//      registers and stored as whole words, so no two threads ever share a byte.
// Why sequential per-thread min/max instead of warp reductions: the reference folds tokens in
// order with std::min/std::max ((x < mn) ? x : mn), which is order dependent for -0.0 vs +0.0
// (different f16 bits) and ignores NaN in a specific way; a thread folding in the same order
// with the same comparison reproduces it exactly. The parallelism is still hd threads per phase.
// Arithmetic: __fsub_rn / __fdiv_rn / __fsqrt_rn / rintf so that no FMA contraction or
// approximate division can change a code; f16 conversion saturates at +-65504 then rounds to
// nearest even (__float2half_rn), as qblock::f16_sat.
// Codes are read back from the f16-rounded parameters: K's from shared memory, V's from the slot
// itself (written in phase 2 by this block; __syncthreads makes global writes visible to the
// block).
//
// What a kernel cannot do: throw. A plan entry naming a slot outside the pool or counts above the
// capacity leaves that slot untouched, and a token number outside the source reads as 0 (the CPU
// reference refuses both; the host validates plans). Two entries naming the same slot race.
// NaN inputs give NaN parameters whose bit pattern may differ from the reference's.
#include "common.cuh"
#include "qblock_geometry.cuh"

namespace kvcomp::cuda {

namespace {

constexpr int kThreads = 128;

struct quant_args : qblock_geometry {
    const int32_t * plan;  // [n_blocks, 3]: slot, n_hi, n_lo
    const int32_t * rows;  // [n_blocks, n_kv_heads, block_tokens]
    uint8_t * pool;
    int64_t n_src_tokens, row_tokens, n_slots;
};

// f16 with saturation at +-65504, as qblock::f16_sat (NaN passes through).
__device__ __forceinline__ __half f16_sat(float x) {
    x = x > 65504.0f ? 65504.0f : x;
    x = x < -65504.0f ? -65504.0f : x;
    return __float2half_rn(x);
}

// code = step == 0 ? 0 : clamp(rint((x - mn) / step), 0, 2^bits - 1), as qblock::quantize.
__device__ __forceinline__ uint32_t quantize(float x, float mn, float step, int bits) {
    if (step == 0.0f) return 0u;
    const float r = rintf(__fdiv_rn(__fsub_rn(x, mn), step));
    const float top = float((1 << bits) - 1);
    return r <= 0.0f ? 0u : r >= top ? uint32_t(top) : uint32_t(r);
}

// std::min / std::max as the reference uses them (first argument kept on ties and NaN).
__device__ __forceinline__ float ref_min(float mn, float x) {
    return x < mn ? x : mn;
}
__device__ __forceinline__ float ref_max(float mx, float x) {
    return mx < x ? x : mx;
}

template <typename T>
__device__ __forceinline__ float element(const T * src, int64_t base, int c) {
    return base < 0 ? 0.0f : to_float(src[base + c]);
}

__device__ __forceinline__ float load_h(const uint8_t * p, int64_t i) {
    return __half2float(reinterpret_cast<const __half *>(p)[i]);
}
__device__ __forceinline__ void store_h(uint8_t * p, int64_t i, __half v) {
    reinterpret_cast<__half *>(p)[i] = v;
}

// One precision segment of the block's head: phases 2 and 3 of the banner. `base` holds the
// element offsets of the segment's n tokens (-1: outside the source); `vscale` is null without
// channel scaling. Ends with a barrier, so the caller may reuse kq.
template <typename TK, typename TV>
__device__ __forceinline__ void quantize_segment(const quant_args & a, const TK * k, const TV * v,
                                                 uint8_t * seg, int n, int bits, int64_t off_vstep,
                                                 int64_t off_kcodes, int64_t off_vcodes, const int64_t * base,
                                                 const float * vscale, float * kq /* [2][head_dim] */) {
    const int hd = a.head_dim, tid = threadIdx.x;
    const float levels = float((1 << bits) - 1);
    const int groups = hd / a.v_group;
    uint8_t * kmin = seg;
    uint8_t * kstep = seg + a.seg_kstep;
    uint8_t * vmin = seg + a.seg_vmin;
    uint8_t * vstep = seg + off_vstep;

    for (int c = tid; c < hd; c += blockDim.x) {
        float mn = INFINITY, mx = -INFINITY;
        for (int j = 0; j < n; ++j) {
            const float x = element(k, base[j], c);
            mn = ref_min(mn, x);
            mx = ref_max(mx, x);
        }
        const __half m16 = f16_sat(mn), s16 = f16_sat(__fdiv_rn(__fsub_rn(mx, mn), levels));
        store_h(kmin, c, m16);
        store_h(kstep, c, s16);
        kq[c] = __half2float(m16);
        kq[hd + c] = __half2float(s16);
    }
    for (int item = tid; item < n * groups; item += blockDim.x) {
        const int j = item / groups, g = item % groups;
        float mn = INFINITY, mx = -INFINITY;
        for (int c = g * a.v_group; c < (g + 1) * a.v_group; ++c) {
            const float x = element(v, base[j], c);
            const float w = vscale ? __fdiv_rn(x, vscale[c]) : x;
            mn = ref_min(mn, w);
            mx = ref_max(mx, w);
        }
        store_h(vmin, item, f16_sat(mn));
        store_h(vstep, item, f16_sat(__fdiv_rn(__fsub_rn(mx, mn), levels)));
    }
    __syncthreads();  // kq and the slot's vmin/vstep are complete

    const int words = hd * bits / 32;  // 32-bit words per code row (head_dim % 16 == 0)
    const int per_word = 32 / bits;
    uint32_t * kcodes = reinterpret_cast<uint32_t *>(seg + off_kcodes);
    uint32_t * vcodes = reinterpret_cast<uint32_t *>(seg + off_vcodes);
    for (int item = tid; item < n * words; item += blockDim.x) {
        const int j = item / words, c0 = (item % words) * per_word;
        uint32_t kw = 0, vw = 0;
        for (int e = 0; e < per_word; ++e) {
            const int c = c0 + e;
            kw |= quantize(element(k, base[j], c), kq[c], kq[hd + c], bits) << (e * bits);
            const float x = element(v, base[j], c);
            const float w = vscale ? __fdiv_rn(x, vscale[c]) : x;
            const int64_t gi = int64_t(j) * groups + c / a.v_group;
            vw |= quantize(w, load_h(vmin, gi), load_h(vstep, gi), bits) << (e * bits);
        }
        kcodes[item] = kw;  // row j, word item % words: rows are contiguous
        vcodes[item] = vw;
    }
    __syncthreads();  // kq is free again
}

// Dynamic shared memory: token offsets [block_tokens] int64, then kq [2][hd] and vscale [hd] f32.
template <typename TK, typename TV>
__global__ void __launch_bounds__(kThreads)
    kv_quantize_kernel(const TK * __restrict__ k, const TV * __restrict__ v, const quant_args a) {
    extern __shared__ int64_t sm_base[];
    const int bt = a.hi_tokens + a.lo_tokens;
    float * kq = reinterpret_cast<float *>(sm_base + bt);
    float * sm_vscale = kq + 2 * a.head_dim;

    const int64_t blk = blockIdx.x / a.n_kv_heads;
    const int h = int(blockIdx.x % a.n_kv_heads);
    const int slot = a.plan[blk * 3], n_hi = a.plan[blk * 3 + 1], n_lo = a.plan[blk * 3 + 2];
    // Uniform across the block: an invalid entry leaves its slot alone (see the banner).
    if (slot < 0 || slot >= a.n_slots || n_hi < 0 || n_hi > a.hi_tokens || n_lo < 0 || n_lo > a.lo_tokens)
        return;

    const int tid = threadIdx.x, hd = a.head_dim, n = n_hi + n_lo;
    uint8_t * slot_ptr = a.pool + int64_t(slot) * a.slot_bytes;
    uint8_t * head = slot_ptr + 16 + int64_t(h) * a.head_bytes;

    // Phase 0: element offsets of (token, h, 0) and a zeroed head region.
    const int32_t * rows = a.rows + (blk * a.n_kv_heads + h) * bt;
    for (int j = tid; j < n; j += blockDim.x) {
        const int64_t t = rows[j];
        int64_t off = -1;
        if (t >= 0 && t < a.n_src_tokens) {
            const int64_t rt = a.row_tokens;  // core/op.h: token-major (0) or head-major rows of rt tokens
            off = rt == 0 ? (t * a.n_kv_heads + h) * hd : (((t / rt) * a.n_kv_heads + h) * rt + t % rt) * hd;
        }
        sm_base[j] = off;
    }
    uint4 * head4 = reinterpret_cast<uint4 *>(head);  // 16-byte aligned: pool offset, slot and head sizes
    for (int64_t i = tid; i < a.head_bytes / 16; i += blockDim.x) head4[i] = make_uint4(0, 0, 0, 0);
    if (h == 0 && tid == 0) *reinterpret_cast<int4 *>(slot_ptr) = make_int4(n_hi, n_lo, 0, 0);
    __syncthreads();

    // Phase 1: channel scales over both segments' tokens.
    const float * vscale = nullptr;
    if (a.channel_scale) {
        for (int c = tid; c < hd; c += blockDim.x) {
            float amax = 0.0f;
            for (int j = 0; j < n; ++j) amax = ref_max(amax, fabsf(element(v, sm_base[j], c)));
            __half s = f16_sat(__fsqrt_rn(amax));
            if (__half2float(s) == 0.0f) s = __float2half_rn(1.0f);
            store_h(head, c, s);
            sm_vscale[c] = __half2float(s);
        }
        __syncthreads();
        vscale = sm_vscale;
    }

    // Empty segments keep their zeroed parameters, as the reference.
    if (n_hi > 0)
        quantize_segment(a, k, v, head + a.head_hi, n_hi, a.hi_bits, a.hi_vstep, a.hi_kcodes, a.hi_vcodes,
                         sm_base, vscale, kq);
    if (n_lo > 0)
        quantize_segment(a, k, v, head + a.head_lo, n_lo, a.lo_bits, a.lo_vstep, a.lo_kcodes, a.lo_vcodes,
                         sm_base + n_hi, vscale, kq);
}

size_t quant_smem_bytes(const qblock_layout & q) {
    return size_t(q.block_tokens()) * sizeof(int64_t) + size_t(3 * q.head_dim) * sizeof(float);
}

template <typename TK, typename TV>
void launch(context & ctx, const op_desc & op, const quant_args & a) {
    const auto & p = op.get<kv_quantize_params>();
    const unsigned grid = unsigned(p.n_blocks * p.q.n_kv_heads);
    kv_quantize_kernel<TK, TV><<<grid, kThreads, quant_smem_bytes(p.q), ctx.stream>>>(
        dev_ptr<const TK>(op.src[0]), dev_ptr<const TV>(op.src[1]), a);
    KVCOMP_CUDA_CHECK_LAUNCH();
}

}  // namespace

support supports_kv_quantize(const op_desc & op) {
    const auto & p = op.get<kv_quantize_params>();
    if (op.dst[0].offset % 16 != 0)
        return support::no("the pool view must start at a 16-byte aligned offset (uint4 stores)");
    if (quant_smem_bytes(p.q) > 48 * 1024)
        return support::no("block_tokens * 8 + head_dim * 12 bytes of shared memory exceed 48 KiB");
    if (p.n_blocks * p.q.n_kv_heads > INT32_MAX)
        return support::no("too many thread blocks (n_blocks * n_kv_heads)");
    return support::yes();
}

void run_kv_quantize(context & ctx, const op_desc & op) {
    const auto & p = op.get<kv_quantize_params>();
    const qblock_layout & q = p.q;
    if (p.n_blocks == 0) return;
    quant_args a{};
    a.plan = dev_ptr<const int32_t>(op.src[2]);
    a.rows = dev_ptr<const int32_t>(op.src[3]);
    a.pool = dev_ptr<uint8_t>(op.dst[0]);
    a.n_src_tokens = p.n_src_tokens;
    a.row_tokens = p.row_tokens;
    a.n_slots = p.n_slots;
    static_cast<qblock_geometry &>(a) = make_qblock_geometry(q);

    const bool k16 = op.src[0].type == dtype::f16, v16 = op.src[1].type == dtype::f16;
    if (k16 && v16) return launch<__half, __half>(ctx, op, a);
    if (k16) return launch<__half, float>(ctx, op, a);
    if (v16) return launch<float, __half>(ctx, op, a);
    launch<float, float>(ctx, op, a);
}

}  // namespace kvcomp::cuda
