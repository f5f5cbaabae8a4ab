// get_rows: dst0[i,:] = src0[src1[i], :] as f32; an id outside [0, n_table_rows) gives zeros.
//
// Kernels: get_rows_kernel<T> (T = float, __half, __nv_bfloat16 table).
// Grid: one block of 128 threads per id (block-stride loop when n_ids > 65535); threads stride
// over the row. Layout: src0 [n_table_rows, row_len], src1 i32 [n_ids], dst0 f32 [n_ids, row_len].
// f16/bf16 -> f32 is exact, so the result is bit-identical to the CPU reference.
#include "common.cuh"

namespace kvcomp::cuda {

namespace {

template <typename T>
__global__ void get_rows_kernel(const T * __restrict__ table, const int32_t * __restrict__ ids,
                                float * __restrict__ out, int64_t n_ids, int64_t row_len, int64_t n_rows) {
    for (int64_t i = blockIdx.x; i < n_ids; i += gridDim.x) {
        const int64_t id = ids[i];
        const bool ok = id >= 0 && id < n_rows;
        float * o = out + i * row_len;
        const T * src = table + (ok ? id : 0) * row_len;
        for (int64_t j = threadIdx.x; j < row_len; j += blockDim.x) o[j] = ok ? to_float(src[j]) : 0.0f;
    }
}

template <typename T>
void launch_get_rows(context & ctx, const op_desc & op, const get_rows_params & p) {
    constexpr int threads = 128;
    const unsigned grid = unsigned(std::min<int64_t>(p.n_ids, 65535));
    get_rows_kernel<T>
        <<<grid, threads, 0, ctx.stream>>>(dev_ptr<const T>(op.src[0]), dev_ptr<const int32_t>(op.src[1]),
                                           dev_ptr<float>(op.dst[0]), p.n_ids, p.row_len, p.n_table_rows);
    KVCOMP_CUDA_CHECK_LAUNCH();
}

}  // namespace

void run_get_rows(context & ctx, const op_desc & op) {
    const auto & p = op.get<get_rows_params>();
    if (p.n_ids == 0) return;
    switch (op.src[0].type) {
        case dtype::f32: return launch_get_rows<float>(ctx, op, p);
        case dtype::f16: return launch_get_rows<__half>(ctx, op, p);
        case dtype::bf16: return launch_get_rows<__nv_bfloat16>(ctx, op, p);
        default: KVCOMP_THROW(status::internal, "get_rows: bad table dtype");
    }
}

}  // namespace kvcomp::cuda
