// rope: rotary position embedding of the first rot_dim features of every head, neox (pairs
// i, i + rot_dim/2) or interleaved (pairs 2i, 2i+1), optional freq_factors divisors.
//
// Kernels: rope_kernel<NEOX>. Grid: one block of 128 threads per token (block-stride loop when
// n_tokens > 65535). Each thread owns frequency indices i (stride blockDim.x), computes the angle
// once and applies it to that pair in every head, so the fp64 sincos is paid once per
// (token, frequency), not per head.
// Layout: src0/dst0 f32 [n_tokens, n_heads, head_dim], src1 i32 positions [n_tokens], src2
// optional f32 [rot_dim/2]. dst0 may alias src0: a pair is read and written by one thread, and
// the features past rot_dim are copied only when dst0 is a different array.
// Numerics: as lib/cpu/rope.cpp, in double: inv_freq = theta^(-2i/rot_dim) / ff[i],
// angle = pos * inv_freq, rotation in double, rounded once to f32. An fp32 angle would be off by
// ~1e-2 rad at position 1e5.
#include "common.cuh"

namespace kvcomp::cuda {

namespace {

template <bool NEOX>
__global__ void rope_kernel(const float * x, const int32_t * __restrict__ pos, const float * __restrict__ ff,
                            float * y, int64_t n_tokens, int n_heads, int head_dim, int rot_dim,
                            double theta) {
    const int half = rot_dim / 2;
    for (int64_t t = blockIdx.x; t < n_tokens; t += gridDim.x) {
        const double p = double(pos[t]);
        for (int i = threadIdx.x; i < half; i += blockDim.x) {
            double inv_freq = pow(theta, -2.0 * double(i) / double(rot_dim));
            if (ff) inv_freq /= double(ff[i]);
            double s, c;
            sincos(p * inv_freq, &s, &c);
            const int i0 = NEOX ? i : 2 * i;
            const int i1 = NEOX ? i + half : 2 * i + 1;
            for (int h = 0; h < n_heads; ++h) {
                const int64_t base = (t * n_heads + h) * head_dim;
                const double x0 = x[base + i0], x1 = x[base + i1];
                y[base + i0] = float(x0 * c - x1 * s);
                y[base + i1] = float(x1 * c + x0 * s);
            }
        }
        if (x != y) {
            const int pass = head_dim - rot_dim;
            for (int j = threadIdx.x; j < n_heads * pass; j += blockDim.x) {
                const int64_t e = (t * n_heads + j / pass) * head_dim + rot_dim + j % pass;
                y[e] = x[e];
            }
        }
    }
}

}  // namespace

void run_rope(context & ctx, const op_desc & op) {
    const auto & p = op.get<rope_params>();
    if (p.n_tokens == 0) return;
    constexpr int threads = 128;
    const unsigned grid = unsigned(std::min<int64_t>(p.n_tokens, 65535));
    const float * x = dev_ptr<const float>(op.src[0]);
    const int32_t * pos = dev_ptr<const int32_t>(op.src[1]);
    const float * ff = op.src[2].valid() ? dev_ptr<const float>(op.src[2]) : nullptr;
    float * y = dev_ptr<float>(op.dst[0]);
    if (p.style == rope_style::neox)
        rope_kernel<true><<<grid, threads, 0, ctx.stream>>>(x, pos, ff, y, p.n_tokens, int(p.n_heads),
                                                            int(p.head_dim), int(p.rot_dim), double(p.theta));
    else
        rope_kernel<false><<<grid, threads, 0, ctx.stream>>>(
            x, pos, ff, y, p.n_tokens, int(p.n_heads), int(p.head_dim), int(p.rot_dim), double(p.theta));
    KVCOMP_CUDA_CHECK_LAUNCH();
}

}  // namespace kvcomp::cuda
