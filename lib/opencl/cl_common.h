// OpenCL backend internals: error checking, the per-device context, the backend class, kernel
// argument helpers and the per-op launchers (one lib/opencl/<op>.cpp per op family, same basename
// as cl_kernels/<op>.cl and lib/cpu/<op>.cpp).
//
// Objects and ownership:
//   device_context  one per OpenCL device and process: the cl_context and the program cache. Created
//                   on the first backend for the device and kept until exit (shared by every backend
//                   created on that device; never released, see backend_opencl.cpp for why).
//   cl_backend      one in-order command queue with profiling enabled; owns its cl_kernel objects
//                   (kernel arguments are per-object state, so kernels are never shared between
//                   backends), its buffers and a scratch buffer for split-KV partial results.
//   cl_buffer       one cl_mem, released on destruction.
// A backend is used by one thread at a time; device_context is thread-safe.
//
// Tensor views are passed to kernels as (cl_mem, element offset): no sub-buffers, whose offsets
// must meet CL_DEVICE_MEM_BASE_ADDR_ALIGN.
#pragma once

#include <CL/cl.h>  // CL_TARGET_OPENCL_VERSION=120 is set by lib/opencl/CMakeLists.txt

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>
#include <vector>

#include "core/backend.h"
#include "opencl/backend_opencl.h"

namespace kvcomp::cl {

// "CL_OUT_OF_RESOURCES (-5)" for messages.
std::string error_name(cl_int code);

}  // namespace kvcomp::cl

// Checks a call returning cl_int; throws device_error with the statement, location and CL error name.
#define KVCOMP_CL_CHECK(expr) \
    KVCOMP_CHECK_GEN(expr, CL_SUCCESS, ::kvcomp::cl::error_name, ::kvcomp::status::device_error)

namespace kvcomp::cl {

class program_cache;

struct device_context {
    cl_platform_id platform = nullptr;
    cl_device_id device = nullptr;
    cl_context context = nullptr;
    device_info info;
    std::string platform_version;  // part of the disk-cache key
    size_t max_work_group_size = 0;
    uint64_t local_mem_bytes = 0;
    uint64_t max_alloc_bytes = 0;
    bool fp64 = false;  // cl_khr_fp64 (select_salient compares fp64 quotients)
    int nv_compute_major = 0;  // NVIDIA's compute capability (cl_nv_device_attribute_query), else 0
    std::unique_ptr<program_cache> programs;
};

// The shared context of device `index` of the registry (opencl:<index>), created on first use.
std::shared_ptr<device_context> get_device_context(cl_platform_id platform, cl_device_id device,
                                                   const device_info & info);

class cl_buffer : public buffer {
  public:
    cl_buffer(backend & owner, size_t size, cl_mem mem) : buffer(owner, size), mem_(mem) {}
    ~cl_buffer() override;
    cl_mem mem() const { return mem_; }

  private:
    cl_mem mem_;
};

// `#define NAME VALUE` lines placed before the kernel source; part of the program's cache key.
class defines {
  public:
    template <typename T>
    defines & add(const char * name, const T & value) {
        text_ += "#define ";
        text_ += name;
        text_ += ' ';
        if constexpr (std::is_convertible_v<T, std::string>)
            text_ += value;
        else
            text_ += std::to_string(value);
        text_ += '\n';
        return *this;
    }
    const std::string & text() const { return text_; }

  private:
    std::string text_;
};

// Local-memory kernel argument of n bytes.
struct local_bytes {
    size_t n;
};

class op_profile;  // opencl/op_profile.h

class cl_backend final : public backend {
  public:
    explicit cl_backend(std::shared_ptr<device_context> dev);
    ~cl_backend() override;

    const device_info & info() const override { return dev_->info; }
    support supports(const op_desc & op) const override;

    buffer_ptr alloc(size_t nbytes) override;
    void upload(buffer & dst, size_t offset, const void * src, size_t nbytes) override;
    void download(const buffer & src, size_t offset, void * dst, size_t nbytes) override;
    void synchronize() override;
    void timer_start() override;
    double timer_stop_ms() override;

    // --- for launchers -----------------------------------------------------------------------
    device_context & dev() const { return *dev_; }
    cl_command_queue queue() const { return queue_; }

    // The kernel `name` of cl_kernels/<file> compiled with `defs` and `extra_options` appended to
    // the build options (lazily, cached per backend).
    cl_kernel kernel(const char * file, const defines & defs, const char * name, const char * extra_options = "");

    // CL_KERNEL_WORK_GROUP_SIZE of k on this device: the largest work-group it can be launched with
    // (may be below CL_DEVICE_MAX_WORK_GROUP_SIZE, e.g. for kernels with large private or local use).
    size_t kernel_wg_limit(cl_kernel k) const;

    // kernel(), for a kernel that runs only with `local_size` work-items (the per-warp decodes, whose warps are
    // fixed when they compile): a device_error naming `what` (the op) when the device allows fewer.
    cl_kernel kernel_for_local_size(const char * file, const defines & defs, const char * name, size_t local_size,
                                    const std::string & what);

    // Enqueues k over `global` (rounded up to a multiple of `local` per axis; local may be null).
    void launch(cl_kernel k, unsigned dims, const size_t * global, const size_t * local);

    // Event slot for a command enqueued outside launch() (CLBlast, copies): non-null while timing or profiling;
    // the backend owns the event the command writes there. Call cancel_event_slot(slot) when the
    // command could not be enqueued. Valid until the next event_slot() call.
    cl_event * event_slot();
    void cancel_event_slot(cl_event * slot);

    // A device buffer of at least `bytes`, owned by the backend, reused across ops (in-order queue).
    cl_mem scratch(size_t bytes);

    // A work-group size for 1-D reductions: a power of two <= min(want, device limit).
    size_t reduction_wg(size_t want) const;

    // The ragged and Palu decodes' tasks planned to run at once (concurrent_decode_tasks); other ops:
    // one work-group per compute unit.
    int64_t concurrent_workgroups(const op_params & params) const override;
    // The ragged decodes' per-task cost for the balanced search (decode_task_cost); other ops 0.
    int64_t decode_task_cost(const op_params & params) const override;

    // The inline-assembly keyword ("__asm__" or "asm") that kernels with an NVIDIA tensor-core path
    // are built with (KVC_ASM), or nullptr where they take their portable path: not NVIDIA's driver,
    // the probe of nv_mma_probe.cpp failed, or KVCOMP_CL_TENSOR_CORES=0. Probed on the first call,
    // outside any timing.
    const char * tensor_core_asm();

  protected:
    void run_checked(const op_desc & op) override;

  private:
    void check_range(const buffer & b, size_t offset, size_t nbytes, const char * what) const;

    std::shared_ptr<device_context> dev_;
    cl_command_queue queue_ = nullptr;
    std::map<std::string, cl_kernel> kernels_;
    cl_mem scratch_ = nullptr;
    size_t scratch_size_ = 0;
    bool timing_ = false;
    std::vector<cl_event> events_;
    std::unique_ptr<op_profile> profile_;  // KVCOMP_PROFILE_OPS=1 (op_profile.h)
    bool tensor_cores_probed_ = false;        // tensor_core_asm() has probed
    const char * tensor_core_asm_ = nullptr;  // its answer (a string literal, or none)
};

inline cl_mem mem_of(const tensor & t) {
    return static_cast<const cl_buffer *>(t.buf)->mem();
}

// Where the decode-attention kernels write their split-KV partials: with n_splits > 1, a scratch
// buffer holding per (request, query head, split) the partial output [head_dim] and, from ml_off
// on, the (max, sum) pairs their merge kernel combines; with one split the kernel writes the output
// directly and `part` is an unused placeholder.
struct split_partials {
    cl_mem part;
    cl_ulong ml_off;
};
inline split_partials split_partials_for(cl_backend & be, const tensor & out, int64_t batch, int64_t n_q_heads,
                                         int64_t head_dim, int64_t n_splits) {
    if (n_splits <= 1) return {mem_of(out), 0};
    const size_t rows = size_t(batch * n_q_heads) * size_t(n_splits);
    return {be.scratch((rows * size_t(head_dim) + rows * 2) * sizeof(float)), cl_ulong(rows * size_t(head_dim))};
}
// Partials of the ragged decode ops (attn_decode_ragged, attn_decode_palu): per schedule row and
// query head of its group, the unnormalized output [max_width] and, from ml_off on, (max, sum).
// Without tasks `part` is an unused placeholder.
inline split_partials task_partials_for(cl_backend & be, const tensor & out, int64_t n_tasks, int64_t group,
                                        int64_t max_width) {
    if (n_tasks <= 0) return {mem_of(out), 0};
    const size_t rows = size_t(n_tasks * group);
    return {be.scratch((rows * size_t(max_width) + rows * 2) * sizeof(float)), cl_ulong(rows * size_t(max_width))};
}
// Merges the task partials of a ragged decode op (attn_decode_ragged, attn_decode_palu: heads in
// src6, the merge table in src8, out in dst0) for every (request, query head) row
// (cl_kernels/attn_decode_ragged_merge.cl). Runs for every row: the host does not know the
// table's contents on the device, and rows without tasks get zeros.
void merge_ragged_tasks(cl_backend & be, const op_desc & op, const ragged_layout & kv, int64_t batch,
                        int64_t n_q_heads, const split_partials & partials);

inline cl_ulong elem_off(const tensor & t) {
    return cl_ulong(t.offset / dtype_size(t.type));
}

// Kernel arguments: only fixed-size CL types, so a host int64_t can never silently meet a kernel
// `int` (a size mismatch that some drivers reject and others misread). Each call advances i.
template <typename T>
inline void set_scalar(cl_kernel k, cl_uint & i, const T & v) {
    KVCOMP_CL_CHECK(clSetKernelArg(k, i, sizeof(T), &v));
    ++i;
}
inline void set_arg(cl_kernel k, cl_uint & i, cl_mem v) {
    set_scalar(k, i, v);
}
inline void set_arg(cl_kernel k, cl_uint & i, cl_int v) {
    set_scalar(k, i, v);
}
inline void set_arg(cl_kernel k, cl_uint & i, cl_uint v) {
    set_scalar(k, i, v);
}
inline void set_arg(cl_kernel k, cl_uint & i, cl_ulong v) {
    set_scalar(k, i, v);
}
inline void set_arg(cl_kernel k, cl_uint & i, cl_float v) {
    set_scalar(k, i, v);
}
inline void set_arg(cl_kernel k, cl_uint & i, local_bytes v) {
    KVCOMP_CL_CHECK(clSetKernelArg(k, i, v.n, nullptr));
    ++i;
}
// A tensor view is two kernel arguments: (global T * buffer, ulong element offset).
struct view_arg {
    cl_mem mem;
    cl_ulong off;
};
inline void set_arg(cl_kernel k, cl_uint & i, view_arg v) {
    set_arg(k, i, v.mem);
    set_arg(k, i, v.off);
}
template <typename T>
void set_arg(cl_kernel, cl_uint &, T) = delete;

template <typename... A>
void set_args(cl_kernel k, const A &... args) {
    cl_uint i = 0;
    (set_arg(k, i, args), ...);
}

inline view_arg arg(const tensor & t) {
    return {mem_of(t), elem_off(t)};
}

// Query heads per work-group for a GQA group of `group` heads: its largest divisor that is at most `most`
// (the decodes read each KV byte once per work-group, for all of its heads).
inline int heads_per_work_group(int64_t group, int most) {
    for (int d = most; d > 1; --d)
        if (group % d == 0) return d;
    return 1;
}

// Narrowing for kernel `int` arguments; op sizes beyond 2^31 are rejected in supports().
inline cl_int to_int(int64_t v) {
    return static_cast<cl_int>(v);
}

inline size_t round_up(size_t v, size_t m) {
    return (v + m - 1) / m * m;
}

// dtype code of common.cl (KVC_F32 / KVC_F16 / KVC_BF16).
int dtype_code(dtype t);

// Launchers and their supports() checks (lib/opencl/<op>.cpp).
void run_copy(cl_backend & be, const op_desc & op);
void run_add(cl_backend & be, const op_desc & op);
void run_gemm(cl_backend & be, const op_desc & op);
void run_rms_norm(cl_backend & be, const op_desc & op);
void run_rope(cl_backend & be, const op_desc & op);
void run_silu_mul(cl_backend & be, const op_desc & op);
void run_softmax(cl_backend & be, const op_desc & op);
void run_get_rows(cl_backend & be, const op_desc & op);
void run_argmax(cl_backend & be, const op_desc & op);
void run_kv_append(cl_backend & be, const op_desc & op);
void run_attn_decode(cl_backend & be, const op_desc & op);
void run_attn_prefill(cl_backend & be, const op_desc & op);
void run_kv_quantize(cl_backend & be, const op_desc & op);
void run_kv_dequantize(cl_backend & be, const op_desc & op);
void run_attn_decode_quant(cl_backend & be, const op_desc & op);
void run_probe_scores(cl_backend & be, const op_desc & op);
void run_select_salient(cl_backend & be, const op_desc & op);
void run_head_project(cl_backend & be, const op_desc & op);
void run_kv_append_ragged(cl_backend & be, const op_desc & op);
void run_attn_decode_ragged(cl_backend & be, const op_desc & op);
void run_attn_prefill_ragged(cl_backend & be, const op_desc & op);
void run_attn_decode_palu(cl_backend & be, const op_desc & op);

// Decode tasks of attn_decode_ragged and attn_decode_palu a host schedule is cut for, for an op of
// `rows` (request, KV head) rows (backend::concurrent_workgroups; attn_decode_ragged.cpp says why).
int64_t concurrent_decode_tasks(const cl_backend & be, int64_t rows, bool palu);
// ... and the per-task cost their balanced search counts (backend::decode_task_cost), ragged decodes only.
int64_t decode_task_cost(const cl_backend & be, int64_t rows);

support supports_attn_decode(const cl_backend & be, const op_desc & op);
support supports_attn_prefill(const cl_backend & be, const op_desc & op);
support supports_kv_quantize(const cl_backend & be, const op_desc & op);
support supports_kv_dequantize(const cl_backend & be, const op_desc & op);
support supports_attn_decode_quant(const cl_backend & be, const op_desc & op);
support supports_probe_scores(const cl_backend & be, const op_desc & op);
support supports_select_salient(const cl_backend & be, const op_desc & op);
support supports_kv_append_ragged(const cl_backend & be, const op_desc & op);
support supports_attn_decode_ragged(const cl_backend & be, const op_desc & op);
support supports_attn_prefill_ragged(const cl_backend & be, const op_desc & op);
support supports_attn_decode_palu(const cl_backend & be, const op_desc & op);
support supports_head_project(const cl_backend & be, const op_desc & op);

}  // namespace kvcomp::cl
