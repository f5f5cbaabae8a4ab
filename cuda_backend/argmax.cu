// argmax: dst0[r] = index of the largest src0[r,:]; lowest index on ties, NaN never wins, 0 when
// the whole row is NaN (same rule as lib/cpu/argmax.cpp).
//
// Kernels: argmax_kernel. Grid: one block per row (block-stride loop when rows > 65535) of 256
// threads, 1024 when n >= 4096 (row_block_threads).
// Layout: src0 f32 [rows, n] contiguous, dst0 i32 [rows].
// Each thread scans a strided subset (indices increase, so a strict > keeps the first of equal
// values), then (value, index) pairs are reduced with "larger value, else smaller index". NaN
// elements are skipped, so they never enter the comparison; an empty candidate has index n.
#include "common.cuh"

namespace kvcomp::cuda {

namespace {

struct arg_best {
    float v;
    int64_t i;
};

__device__ __forceinline__ arg_best better(arg_best a, arg_best b) {
    return (b.v > a.v || (b.v == a.v && b.i < a.i)) ? b : a;
}

__device__ __forceinline__ arg_best warp_best(arg_best a) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        arg_best b;
        b.v = __shfl_xor_sync(full_mask, a.v, o);
        b.i = __shfl_xor_sync(full_mask, a.i, o);
        a = better(a, b);
    }
    return a;
}

__global__ void argmax_kernel(const float * __restrict__ x, int32_t * __restrict__ out, int64_t rows,
                              int64_t n) {
    __shared__ float sv[32];
    __shared__ int64_t si[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const float * xr = x + r * n;
        arg_best best{-INFINITY, n};
        for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
            const float v = xr[i];
            // -inf elements tie with the initial value and win on index; NaN fails both tests.
            if (v > best.v || (v == best.v && i < best.i)) best = {v, i};
        }
        best = warp_best(best);
        __syncthreads();  // the previous row's readers of sv/si are done
        if (lane == 0) {
            sv[warp] = best.v;
            si[warp] = best.i;
        }
        __syncthreads();
        if (warp == 0) {
            arg_best b = lane < n_warps ? arg_best{sv[lane], si[lane]} : arg_best{-INFINITY, n};
            b = warp_best(b);
            if (lane == 0) out[r] = int32_t(b.i < n ? b.i : 0);
        }
    }
}

}  // namespace

void run_argmax(context & ctx, const op_desc & op) {
    const auto & p = op.get<argmax_params>();
    if (p.rows == 0) return;
    const int threads = row_block_threads(p.n);
    const unsigned grid = unsigned(std::min<int64_t>(p.rows, 65535));
    argmax_kernel<<<grid, threads, 0, ctx.stream>>>(dev_ptr<const float>(op.src[0]),
                                                    dev_ptr<int32_t>(op.dst[0]), p.rows, p.n);
    KVCOMP_CUDA_CHECK_LAUNCH();
}

}  // namespace kvcomp::cuda
