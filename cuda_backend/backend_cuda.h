// Host-side interface shared by the CUDA backend (backend_cuda.cpp, compiled by the C++ compiler)
// and the op files (*.cu, compiled by nvcc): the per-backend context handed to every op, the
// device buffer type, the native-call checkers, and one run_<op> entry point per op family.
//
// Ownership: the backend owns the context (stream, cuBLAS handle, workspace) and every
// cuda_buffer it allocates. Ops only enqueue work on ctx.stream; nothing here synchronizes except
// context::workspace() when it has to grow (see there).
//
// Errors: KVCOMP_CUDA_CHECK / KVCOMP_CUBLAS_CHECK throw kvcomp::error (device_error / blas_error)
// naming the statement, the file and line and the native error name and string. Every kernel
// launch is followed by KVCOMP_CUDA_CHECK_LAUNCH(), which catches bad launch configurations at
// once; asynchronous faults surface at the next synchronizing call, or right after the op when
// KVCOMP_DEBUG_SYNC=1 (read in backend_cuda.cpp).
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

#include "core/backend.h"
#include "core/error.h"

namespace kvcomp::cuda {

// "cudaErrorInvalidValue: invalid argument". Also clears the runtime's last-error slot, so a
// failure reported here (and turned into an exception) is not reported again by the next
// cudaGetLastError() after an unrelated launch. Sticky errors (a kernel fault) stay sticky.
std::string cuda_error_string(cudaError_t e);
// "CUBLAS_STATUS_NOT_SUPPORTED: the functionality requested is not supported".
std::string cublas_error_string(cublasStatus_t s);

}  // namespace kvcomp::cuda

#define KVCOMP_CUDA_CHECK(expr) \
    KVCOMP_CHECK_GEN(expr, cudaSuccess, ::kvcomp::cuda::cuda_error_string, ::kvcomp::status::device_error)
#define KVCOMP_CUBLAS_CHECK(expr)                                                      \
    KVCOMP_CHECK_GEN(expr, CUBLAS_STATUS_SUCCESS, ::kvcomp::cuda::cublas_error_string, \
                     ::kvcomp::status::blas_error)
// After every <<<...>>>: a bad grid, block or shared-memory size is reported here, at the launch.
#define KVCOMP_CUDA_CHECK_LAUNCH() KVCOMP_CUDA_CHECK(cudaGetLastError())

namespace kvcomp::cuda {

// Device memory from cudaMalloc (never managed memory). Freed on destruction.
class cuda_buffer : public buffer {
  public:
    cuda_buffer(backend & owner, size_t size, void * ptr, int device)
        : buffer(owner, size), ptr_(ptr), device_(device) {}
    ~cuda_buffer() override;
    char * data() const { return static_cast<char *>(ptr_); }

  private:
    void * ptr_;
    int device_;
};

// Everything an op needs to enqueue work. One per backend; used by one thread at a time.
class context {
  public:
    int device = 0;
    cudaStream_t stream = nullptr;
    cublasHandle_t cublas = nullptr;
    int sm_count = 1;
    int cc_major = 0, cc_minor = 0;
    // Merge kernels launch as dependents of their decode (dependent_launch.cuh): sm_90 and later,
    // unless KVCOMP_DEPENDENT_LAUNCH=0.
    bool dependent_launch = false;

    // Device scratch of at least `bytes`, valid until the next workspace() call. Work already
    // enqueued on the stream may still read the old scratch, so growing synchronizes the stream
    // before freeing it; steady state (same shapes every step) never grows.
    void * workspace(size_t bytes);
    void release_workspace();

  private:
    void * ws_ = nullptr;
    size_t ws_size_ = 0;
};

// Device address of a view (buffer base + byte offset). The backend checked ownership.
template <typename T>
T * dev_ptr(const tensor & t) {
    return reinterpret_cast<T *>(static_cast<cuda_buffer *>(t.buf)->data() + t.offset);
}

// One entry point per op family (same basenames as lib/cpu and cl_kernels). Each assumes the op
// passed check_op and supports_<op>, and only enqueues work.
void run_copy(context & ctx, const op_desc & op);
void run_add(context & ctx, const op_desc & op);
void run_gemm(context & ctx, const op_desc & op);
void run_rms_norm(context & ctx, const op_desc & op);
void run_rope(context & ctx, const op_desc & op);
void run_silu_mul(context & ctx, const op_desc & op);
void run_softmax(context & ctx, const op_desc & op);
void run_get_rows(context & ctx, const op_desc & op);
void run_argmax(context & ctx, const op_desc & op);
void run_kv_append(context & ctx, const op_desc & op);
void run_attn_decode(context & ctx, const op_desc & op);
void run_attn_prefill(context & ctx, const op_desc & op);
void run_kv_quantize(context & ctx, const op_desc & op);
void run_kv_dequantize(context & ctx, const op_desc & op);
void run_attn_decode_quant(context & ctx, const op_desc & op);
void run_probe_scores(context & ctx, const op_desc & op);
void run_select_salient(context & ctx, const op_desc & op);
void run_head_project(context & ctx, const op_desc & op);
void run_kv_append_ragged(context & ctx, const op_desc & op);
void run_attn_decode_ragged(context & ctx, const op_desc & op);
void run_attn_prefill_ragged(context & ctx, const op_desc & op);
void run_attn_decode_palu(context & ctx, const op_desc & op);

// Schedule rows of the ragged decode ops that run at once on the current device
// (backend::concurrent_workgroups).
int64_t concurrent_rows_attn_decode_ragged(const attn_decode_ragged_params & p);
int64_t concurrent_rows_attn_decode_palu(const attn_decode_palu_params & p);

// Shape limits of the kernels that have any (the rest take every shape check_op accepts).
support supports_gemm(const op_desc & op);
support supports_attn_decode(const op_desc & op);
support supports_attn_prefill(const op_desc & op);
support supports_kv_quantize(const op_desc & op);
support supports_kv_dequantize(const op_desc & op);
support supports_attn_decode_quant(const op_desc & op);
support supports_probe_scores(const op_desc & op);
support supports_select_salient(const op_desc & op);
support supports_head_project(const op_desc & op);
support supports_kv_append_ragged(const op_desc & op);
support supports_attn_decode_ragged(const op_desc & op);
support supports_attn_prefill_ragged(const op_desc & op);
support supports_attn_decode_palu(const op_desc & op);

}  // namespace kvcomp::cuda
