// kv_dequantize: quantized KV blocks back to K/V rows (format and formulas: core/qblock.h). The rows
// equal the CPU reference (core/qblock_codec.cpp, decode_head) bit for bit: every value is
//   k^ = code * kstep + kmin,   v^ = (code * vstep + vmin) * vscale   (channel_scale)
// with __fmul_rn / __fadd_rn, so nvcc cannot contract a product and a sum into an FMA (which rounds
// once instead of twice and would change the low bits). f16 rows saturate at +-65504 and round to
// nearest even, as qblock::f16_sat.
//
// Kernel: kv_dequantize_kernel<T> (float or __half rows), one block of 128 threads per (listed block
// i, KV head h); thread e loops over the head's (token j, channel c) elements e = j * head_dim + c,
// j < block_tokens; tokens the slot's header does not name are written as zeros, so every output
// element is written exactly once. Output token number: i * block_tokens + j, addressed by
// row_tokens as in core/op.h.
// What a kernel cannot do: throw. A slot outside the pool gives zero rows and header counts are
// clamped to the capacities (the CPU reference refuses both; the engine only lists its own slots).
#include "common.cuh"
#include "qblock_geometry.cuh"

namespace kvcomp::cuda {

namespace {

constexpr int kThreads = 128;

struct dequant_args : qblock_geometry {
    const uint8_t * pool;
    const int32_t * slots;
    int64_t row_tokens, n_slots;
    int block_tokens;
};

__device__ __forceinline__ float f16_at(const uint8_t * p, int64_t i) {
    return __half2float(reinterpret_cast<const __half *>(p)[i]);
}

__device__ __forceinline__ uint32_t code_at(const uint8_t * row, int c, int bits) {
    const int bit = c * bits;
    return (uint32_t(row[bit / 8]) >> (bit % 8)) & uint32_t((1 << bits) - 1);
}

template <typename T>
__device__ __forceinline__ void store(T * p, int64_t i, float x);
template <>
__device__ __forceinline__ void store<float>(float * p, int64_t i, float x) {
    p[i] = x;
}
template <>
__device__ __forceinline__ void store<__half>(__half * p, int64_t i, float x) {
    x = x > 65504.0f ? 65504.0f : x;  // NaN passes, as qblock::f16_sat
    x = x < -65504.0f ? -65504.0f : x;
    p[i] = __float2half_rn(x);
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    kv_dequantize_kernel(T * __restrict__ k, T * __restrict__ v, const dequant_args a) {
    const int h = int(blockIdx.x % unsigned(a.n_kv_heads));
    const int64_t blk = int64_t(blockIdx.x / unsigned(a.n_kv_heads));
    const int32_t slot = a.slots[blk];
    const bool ok = slot >= 0 && slot < a.n_slots;
    const uint8_t * sp = a.pool + (ok ? int64_t(slot) : 0) * a.slot_bytes;
    const int32_t * header = reinterpret_cast<const int32_t *>(sp);
    const int n_hi = ok ? min(max(header[0], 0), a.hi_tokens) : 0;
    const int n_lo = ok ? min(max(header[1], 0), a.lo_tokens) : 0;
    const uint8_t * head = sp + 16 + int64_t(h) * a.head_bytes;
    const int hd = a.head_dim, groups = hd / a.v_group;
    for (int e = int(threadIdx.x); e < a.block_tokens * hd; e += kThreads) {
        const int j = e / hd, c = e % hd;
        float kx = 0.0f, vx = 0.0f;
        if (j < n_hi + n_lo) {
            const bool hi = j < n_hi;
            const int jj = hi ? j : j - n_hi, bits = hi ? a.hi_bits : a.lo_bits;
            const uint8_t * seg = head + (hi ? a.head_hi : a.head_lo);
            const int64_t rb = int64_t(hd) * bits / 8;
            const float kc = float(code_at(seg + (hi ? a.hi_kcodes : a.lo_kcodes) + jj * rb, c, bits));
            const float vc = float(code_at(seg + (hi ? a.hi_vcodes : a.lo_vcodes) + jj * rb, c, bits));
            const int64_t g = int64_t(jj) * groups + c / a.v_group;
            kx = __fadd_rn(__fmul_rn(kc, f16_at(seg + a.seg_kstep, c)), f16_at(seg, c));
            vx = __fadd_rn(__fmul_rn(vc, f16_at(seg + (hi ? a.hi_vstep : a.lo_vstep), g)),
                           f16_at(seg + a.seg_vmin, g));
            if (a.channel_scale) vx = __fmul_rn(vx, f16_at(head, c));
        }
        const int64_t t = blk * a.block_tokens + j;
        const int64_t at =
            a.row_tokens == 0
                ? (t * a.n_kv_heads + h) * hd + c
                : (((t / a.row_tokens) * a.n_kv_heads + h) * a.row_tokens + t % a.row_tokens) * hd + c;
        store(k, at, kx);
        store(v, at, vx);
    }
}

template <typename T>
void launch(context & ctx, const op_desc & op, const dequant_args & a) {
    const auto & p = op.get<kv_dequantize_params>();
    const unsigned grid = unsigned(p.n_blocks * p.q.n_kv_heads);
    kv_dequantize_kernel<T>
        <<<grid, kThreads, 0, ctx.stream>>>(dev_ptr<T>(op.dst[0]), dev_ptr<T>(op.dst[1]), a);
    KVCOMP_CUDA_CHECK_LAUNCH();
}

}  // namespace

support supports_kv_dequantize(const op_desc & op) {
    const auto & p = op.get<kv_dequantize_params>();
    if (op.src[0].offset % 16 != 0)
        return support::no("the pool view must start at a 16-byte aligned offset");
    if (p.n_blocks * p.q.n_kv_heads > INT32_MAX)
        return support::no("too many thread blocks (n_blocks * n_kv_heads)");
    if (int64_t(p.q.block_tokens()) * p.q.head_dim > INT32_MAX)
        return support::no("block_tokens * head_dim must fit in a 32-bit int");
    return support::yes();
}

void run_kv_dequantize(context & ctx, const op_desc & op) {
    const auto & p = op.get<kv_dequantize_params>();
    const qblock_layout & q = p.q;
    if (p.n_blocks == 0) return;
    dequant_args a{};
    a.pool = dev_ptr<const uint8_t>(op.src[0]);
    a.slots = dev_ptr<const int32_t>(op.src[1]);
    a.row_tokens = p.row_tokens;
    a.n_slots = p.n_slots;
    static_cast<qblock_geometry &>(a) = make_qblock_geometry(q);
    a.block_tokens = q.block_tokens();
    if (op.dst[0].type == dtype::f16) return launch<__half>(ctx, op, a);
    launch<float>(ctx, op, a);
}

}  // namespace kvcomp::cuda
