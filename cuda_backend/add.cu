// add: dst0 = src0 + src1, f32 [n].
//
// Kernels: add_kernel. Grid: 1-D grid-stride loop, 256 threads, grid_stride_blocks(n).
// Layout: three contiguous f32 arrays of n elements. dst0 may alias src0 or src1: each element
// is read and written by the same thread, so aliasing is safe (no __restrict__ here on purpose).
#include "common.cuh"

namespace kvcomp::cuda {

namespace {

__global__ void add_kernel(const float * a, const float * b, float * d, int64_t n) {
    const int64_t stride = int64_t(gridDim.x) * blockDim.x;
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) d[i] = a[i] + b[i];
}

}  // namespace

void run_add(context & ctx, const op_desc & op) {
    const int64_t n = op.get<add_params>().n;
    if (n == 0) return;
    constexpr int threads = 256;
    add_kernel<<<grid_stride_blocks(n, threads, ctx), threads, 0, ctx.stream>>>(
        dev_ptr<const float>(op.src[0]), dev_ptr<const float>(op.src[1]), dev_ptr<float>(op.dst[0]), n);
    KVCOMP_CUDA_CHECK_LAUNCH();
}

}  // namespace kvcomp::cuda
