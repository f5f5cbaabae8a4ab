// The OpenCL backend: device enumeration, shared per-device contexts, queues, buffers, timing and
// dispatch of ops to the launchers in lib/opencl/<op>.cpp.
#include <algorithm>
#include <cstdlib>
#include <cstring>

#include <CL/cl_ext.h>

#include "core/registry.h"
#include "opencl/cl_common.h"
#include "opencl/op_profile.h"
#include "opencl/program_cache.h"

namespace kvcomp::cl {

std::string error_name(cl_int code) {
    const char * n = "unknown OpenCL error";
    switch (code) {
#define KVCOMP_CL_ERR(e) \
    case e:              \
        n = #e;          \
        break;
        KVCOMP_CL_ERR(CL_SUCCESS)
        KVCOMP_CL_ERR(CL_DEVICE_NOT_FOUND)
        KVCOMP_CL_ERR(CL_DEVICE_NOT_AVAILABLE)
        KVCOMP_CL_ERR(CL_COMPILER_NOT_AVAILABLE)
        KVCOMP_CL_ERR(CL_MEM_OBJECT_ALLOCATION_FAILURE)
        KVCOMP_CL_ERR(CL_OUT_OF_RESOURCES)
        KVCOMP_CL_ERR(CL_OUT_OF_HOST_MEMORY)
        KVCOMP_CL_ERR(CL_PROFILING_INFO_NOT_AVAILABLE)
        KVCOMP_CL_ERR(CL_MEM_COPY_OVERLAP)
        KVCOMP_CL_ERR(CL_IMAGE_FORMAT_MISMATCH)
        KVCOMP_CL_ERR(CL_IMAGE_FORMAT_NOT_SUPPORTED)
        KVCOMP_CL_ERR(CL_BUILD_PROGRAM_FAILURE)
        KVCOMP_CL_ERR(CL_MAP_FAILURE)
        KVCOMP_CL_ERR(CL_MISALIGNED_SUB_BUFFER_OFFSET)
        KVCOMP_CL_ERR(CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST)
        KVCOMP_CL_ERR(CL_COMPILE_PROGRAM_FAILURE)
        KVCOMP_CL_ERR(CL_LINKER_NOT_AVAILABLE)
        KVCOMP_CL_ERR(CL_LINK_PROGRAM_FAILURE)
        KVCOMP_CL_ERR(CL_DEVICE_PARTITION_FAILED)
        KVCOMP_CL_ERR(CL_KERNEL_ARG_INFO_NOT_AVAILABLE)
        KVCOMP_CL_ERR(CL_INVALID_VALUE)
        KVCOMP_CL_ERR(CL_INVALID_DEVICE_TYPE)
        KVCOMP_CL_ERR(CL_INVALID_PLATFORM)
        KVCOMP_CL_ERR(CL_INVALID_DEVICE)
        KVCOMP_CL_ERR(CL_INVALID_CONTEXT)
        KVCOMP_CL_ERR(CL_INVALID_QUEUE_PROPERTIES)
        KVCOMP_CL_ERR(CL_INVALID_COMMAND_QUEUE)
        KVCOMP_CL_ERR(CL_INVALID_HOST_PTR)
        KVCOMP_CL_ERR(CL_INVALID_MEM_OBJECT)
        KVCOMP_CL_ERR(CL_INVALID_IMAGE_FORMAT_DESCRIPTOR)
        KVCOMP_CL_ERR(CL_INVALID_IMAGE_SIZE)
        KVCOMP_CL_ERR(CL_INVALID_SAMPLER)
        KVCOMP_CL_ERR(CL_INVALID_BINARY)
        KVCOMP_CL_ERR(CL_INVALID_BUILD_OPTIONS)
        KVCOMP_CL_ERR(CL_INVALID_PROGRAM)
        KVCOMP_CL_ERR(CL_INVALID_PROGRAM_EXECUTABLE)
        KVCOMP_CL_ERR(CL_INVALID_KERNEL_NAME)
        KVCOMP_CL_ERR(CL_INVALID_KERNEL_DEFINITION)
        KVCOMP_CL_ERR(CL_INVALID_KERNEL)
        KVCOMP_CL_ERR(CL_INVALID_ARG_INDEX)
        KVCOMP_CL_ERR(CL_INVALID_ARG_VALUE)
        KVCOMP_CL_ERR(CL_INVALID_ARG_SIZE)
        KVCOMP_CL_ERR(CL_INVALID_KERNEL_ARGS)
        KVCOMP_CL_ERR(CL_INVALID_WORK_DIMENSION)
        KVCOMP_CL_ERR(CL_INVALID_WORK_GROUP_SIZE)
        KVCOMP_CL_ERR(CL_INVALID_WORK_ITEM_SIZE)
        KVCOMP_CL_ERR(CL_INVALID_GLOBAL_OFFSET)
        KVCOMP_CL_ERR(CL_INVALID_EVENT_WAIT_LIST)
        KVCOMP_CL_ERR(CL_INVALID_EVENT)
        KVCOMP_CL_ERR(CL_INVALID_OPERATION)
        KVCOMP_CL_ERR(CL_INVALID_GL_OBJECT)
        KVCOMP_CL_ERR(CL_INVALID_BUFFER_SIZE)
        KVCOMP_CL_ERR(CL_INVALID_MIP_LEVEL)
        KVCOMP_CL_ERR(CL_INVALID_GLOBAL_WORK_SIZE)
        KVCOMP_CL_ERR(CL_INVALID_PROPERTY)
        KVCOMP_CL_ERR(CL_INVALID_IMAGE_DESCRIPTOR)
        KVCOMP_CL_ERR(CL_INVALID_COMPILER_OPTIONS)
        KVCOMP_CL_ERR(CL_INVALID_LINKER_OPTIONS)
        KVCOMP_CL_ERR(CL_INVALID_DEVICE_PARTITION_COUNT)
#undef KVCOMP_CL_ERR
        case -1001:
            n = "CL_PLATFORM_NOT_FOUND_KHR";
            break;
        default:
            break;
    }
    return std::string(n) + " (" + std::to_string(code) + ")";
}

int dtype_code(dtype t) {
    switch (t) {
        case dtype::f32:
            return 0;
        case dtype::f16:
            return 1;
        case dtype::bf16:
            return 2;
        default:
            KVCOMP_THROW(status::internal, "opencl: dtype ", dtype_name(t), " has no kernel code");
    }
}

namespace {

// The only place KVCOMP_DEBUG_SYNC is read (for the OpenCL backend).
bool debug_sync() {
    static const bool on = [] {
        const char * v = std::getenv("KVCOMP_DEBUG_SYNC");
        return v && *v && std::string(v) != "0";
    }();
    return on;
}

std::string device_string(cl_device_id d, cl_device_info what) {
    size_t n = 0;
    KVCOMP_CL_CHECK(clGetDeviceInfo(d, what, 0, nullptr, &n));
    std::string s(n, '\0');
    if (n) KVCOMP_CL_CHECK(clGetDeviceInfo(d, what, n, s.data(), nullptr));
    while (!s.empty() && (s.back() == '\0' || s.back() == ' ')) s.pop_back();
    return s;
}

std::string platform_string(cl_platform_id p, cl_platform_info what) {
    size_t n = 0;
    KVCOMP_CL_CHECK(clGetPlatformInfo(p, what, 0, nullptr, &n));
    std::string s(n, '\0');
    if (n) KVCOMP_CL_CHECK(clGetPlatformInfo(p, what, n, s.data(), nullptr));
    while (!s.empty() && (s.back() == '\0' || s.back() == ' ')) s.pop_back();
    return s;
}

template <typename T>
T device_value(cl_device_id d, cl_device_info what) {
    T v{};
    KVCOMP_CL_CHECK(clGetDeviceInfo(d, what, sizeof(v), &v, nullptr));
    return v;
}

bool has_extension(const std::string & list, const std::string & prefix) {
    size_t pos = 0;
    while ((pos = list.find(prefix, pos)) != std::string::npos) {
        if (pos == 0 || list[pos - 1] == ' ') return true;
        pos += prefix.size();
    }
    return false;
}

device_info describe_device(cl_platform_id p, cl_device_id d, size_t index) {
    device_info i;
    i.name = "opencl:" + std::to_string(index);
    i.api = "OpenCL";
    i.device_name = device_string(d, CL_DEVICE_NAME);
    i.vendor = device_string(d, CL_DEVICE_VENDOR);
    i.platform = platform_string(p, CL_PLATFORM_NAME);
    i.driver_version = device_string(d, CL_DRIVER_VERSION);
    i.api_version = device_string(d, CL_DEVICE_VERSION);
    i.is_gpu = (device_value<cl_device_type>(d, CL_DEVICE_TYPE) & CL_DEVICE_TYPE_GPU) != 0;
    i.compute_units = int(device_value<cl_uint>(d, CL_DEVICE_MAX_COMPUTE_UNITS));
    i.global_mem_bytes = device_value<cl_ulong>(d, CL_DEVICE_GLOBAL_MEM_SIZE);
    const std::string ext = device_string(d, CL_DEVICE_EXTENSIONS);
    i.fp16_arith = has_extension(ext, "cl_khr_fp16");
    i.int8_dot =
        has_extension(ext, "cl_khr_integer_dot_product") || has_extension(ext, "cl_arm_integer_dot_product");
    return i;
}

void CL_CALLBACK context_error(const char * errinfo, const void *, size_t, void *) {
    // Asynchronous driver diagnostics; errors that matter also surface as failed calls.
    (void)errinfo;
}

}  // namespace

void enumerate_devices(std::vector<device_entry> & out, std::vector<std::string> & notes) {
    try {
        cl_uint n_platforms = 0;
        const cl_int err = clGetPlatformIDs(0, nullptr, &n_platforms);
        if (err != CL_SUCCESS || n_platforms == 0) {
            notes.push_back("OpenCL: no platforms (" + error_name(err == CL_SUCCESS ? -1001 : err) + ")");
            return;
        }
        std::vector<cl_platform_id> platforms(n_platforms);
        KVCOMP_CL_CHECK(clGetPlatformIDs(n_platforms, platforms.data(), nullptr));
        size_t index = 0;
        for (cl_platform_id p : platforms) {
            cl_uint n_devices = 0;
            const cl_int derr = clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, 0, nullptr, &n_devices);
            if (derr != CL_SUCCESS || n_devices == 0) {
                std::string pname = "?";
                try {
                    pname = platform_string(p, CL_PLATFORM_NAME);
                } catch (const error &) {
                }
                notes.push_back("OpenCL: platform '" + pname + "' has no devices (" + error_name(derr) + ")");
                continue;
            }
            std::vector<cl_device_id> devices(n_devices);
            KVCOMP_CL_CHECK(clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, n_devices, devices.data(), nullptr));
            for (cl_device_id d : devices) {
                const size_t this_index = index++;
                try {
                    device_info info = describe_device(p, d, this_index);
                    out.push_back({info, [p, d, info]() -> std::unique_ptr<backend> {
                                       return std::make_unique<cl_backend>(get_device_context(p, d, info));
                                   }});
                } catch (const error & e) {
                    notes.push_back("OpenCL: device opencl:" + std::to_string(this_index) +
                                    " skipped: " + e.what());
                }
            }
        }
    } catch (const std::exception & e) {
        notes.push_back(std::string("OpenCL: enumeration failed: ") + e.what());
    }
}

std::shared_ptr<device_context> get_device_context(cl_platform_id platform, cl_device_id device,
                                                   const device_info & info) {
    // Contexts live until exit and are deliberately never released: releasing OpenCL objects from
    // static destructors races the ICD loader's and drivers' own teardown (crashes at exit on some
    // stacks). The map itself is leaked for the same reason.
    static std::mutex mutex;
    static auto * contexts = new std::map<cl_device_id, std::shared_ptr<device_context>>();
    std::lock_guard<std::mutex> lock(mutex);
    auto it = contexts->find(device);
    if (it != contexts->end()) return it->second;

    auto dc = std::make_shared<device_context>();
    dc->platform = platform;
    dc->device = device;
    dc->info = info;
    const cl_context_properties props[] = {CL_CONTEXT_PLATFORM, cl_context_properties(platform), 0};
    cl_int err = CL_SUCCESS;
    dc->context = clCreateContext(props, 1, &device, context_error, nullptr, &err);
    if (err != CL_SUCCESS)
        KVCOMP_THROW(status::backend_unavailable, "OpenCL: cannot create a context on ", info.name, " (",
                     info.device_name, "): ", error_name(err));
    dc->platform_version = platform_string(platform, CL_PLATFORM_VERSION);
    dc->max_work_group_size = device_value<size_t>(device, CL_DEVICE_MAX_WORK_GROUP_SIZE);
    dc->local_mem_bytes = device_value<cl_ulong>(device, CL_DEVICE_LOCAL_MEM_SIZE);
    dc->max_alloc_bytes = device_value<cl_ulong>(device, CL_DEVICE_MAX_MEM_ALLOC_SIZE);
    const std::string ext = device_string(device, CL_DEVICE_EXTENSIONS);
    dc->fp64 = has_extension(ext, "cl_khr_fp64");
    if (has_extension(ext, "cl_nv_device_attribute_query"))
        dc->nv_compute_major = int(device_value<cl_uint>(device, CL_DEVICE_COMPUTE_CAPABILITY_MAJOR_NV));
    dc->programs = std::make_unique<program_cache>(
        dc->context, device, info.device_name + '\n' + info.driver_version + '\n' + dc->platform_version);
    contexts->emplace(device, dc);
    return dc;
}

// --- cl_buffer / cl_backend -------------------------------------------------------------------------

cl_buffer::~cl_buffer() {
    if (mem_) clReleaseMemObject(mem_);
}

cl_backend::cl_backend(std::shared_ptr<device_context> dev) : dev_(std::move(dev)) {
    cl_int err = CL_SUCCESS;
    queue_ = clCreateCommandQueue(dev_->context, dev_->device, CL_QUEUE_PROFILING_ENABLE, &err);
    if (err != CL_SUCCESS)
        KVCOMP_THROW(status::backend_unavailable, "OpenCL: cannot create a command queue on ",
                     dev_->info.name, ": ", error_name(err));
    const char * profile = std::getenv("KVCOMP_PROFILE_OPS");
    if (profile && std::strcmp(profile, "1") == 0) profile_ = std::make_unique<op_profile>();
}

cl_backend::~cl_backend() {
    // Destructors must not throw: errors here can only be reported by ignoring them.
    if (queue_) clFinish(queue_);
    if (profile_) profile_->report(dev_->info.device_name + " (" + name() + ")");
    profile_.reset();
    for (cl_event e : events_) clReleaseEvent(e);
    for (auto & kv : kernels_) clReleaseKernel(kv.second);
    if (scratch_) clReleaseMemObject(scratch_);
    if (queue_) clReleaseCommandQueue(queue_);
}

buffer_ptr cl_backend::alloc(size_t nbytes) {
    if (nbytes > dev_->max_alloc_bytes)
        KVCOMP_THROW(status::out_of_memory, name(), ": allocation of ", nbytes,
                     " bytes exceeds CL_DEVICE_MAX_MEM_ALLOC_SIZE (", dev_->max_alloc_bytes, ")");
    cl_int err = CL_SUCCESS;
    cl_mem mem = clCreateBuffer(dev_->context, CL_MEM_READ_WRITE, std::max<size_t>(nbytes, 1), nullptr, &err);
    if (err == CL_MEM_OBJECT_ALLOCATION_FAILURE || err == CL_OUT_OF_RESOURCES ||
        err == CL_OUT_OF_HOST_MEMORY || err == CL_INVALID_BUFFER_SIZE)
        KVCOMP_THROW(status::out_of_memory, name(), ": allocation of ", nbytes,
                     " bytes failed: ", error_name(err));
    KVCOMP_CL_CHECK(err);
    return std::make_unique<cl_buffer>(*this, nbytes, mem);
}

void cl_backend::check_range(const buffer & b, size_t offset, size_t nbytes, const char * what) const {
    KVCOMP_CHECK_ARG(&b.owner() == this, name(), ": ", what, " with a buffer of backend ", b.owner().name());
    KVCOMP_CHECK_ARG(offset <= b.size() && nbytes <= b.size() - offset, name(), ": ", what, " of ", nbytes,
                     " bytes at offset ", offset, " overruns a buffer of ", b.size(), " bytes");
}

void cl_backend::upload(buffer & dst, size_t offset, const void * src, size_t nbytes) {
    check_range(dst, offset, nbytes, "upload");
    if (nbytes == 0) return;
    cl_event * ev = event_slot();
    const cl_int err = clEnqueueWriteBuffer(queue_, static_cast<cl_buffer &>(dst).mem(), CL_TRUE, offset,
                                            nbytes, src, 0, nullptr, ev);
    if (err != CL_SUCCESS) cancel_event_slot(ev);
    KVCOMP_CL_CHECK(err);
    if (profile_) profile_->take("upload", events_, events_.size() - 1, timing_);
}

void cl_backend::download(const buffer & src, size_t offset, void * dst, size_t nbytes) {
    check_range(src, offset, nbytes, "download");
    if (nbytes == 0) return;
    cl_event * ev = event_slot();
    const cl_int err = clEnqueueReadBuffer(queue_, static_cast<const cl_buffer &>(src).mem(), CL_TRUE, offset,
                                           nbytes, dst, 0, nullptr, ev);
    if (err != CL_SUCCESS) cancel_event_slot(ev);
    KVCOMP_CL_CHECK(err);
    if (profile_) profile_->take("download", events_, events_.size() - 1, timing_);
}

void cl_backend::synchronize() {
    KVCOMP_CL_CHECK(clFinish(queue_));
}

void cl_backend::timer_start() {
    for (cl_event e : events_) clReleaseEvent(e);
    events_.clear();
    timing_ = true;
}

double cl_backend::timer_stop_ms() {
    timing_ = false;
    KVCOMP_CL_CHECK(clFinish(queue_));
    std::vector<cl_event> events;
    events.swap(events_);
    cl_ulong first = ~cl_ulong(0), last = 0;
    cl_int err = CL_SUCCESS;
    for (cl_event e : events) {
        cl_ulong start = 0, end = 0;
        if (err == CL_SUCCESS)
            err = clGetEventProfilingInfo(e, CL_PROFILING_COMMAND_START, sizeof(start), &start, nullptr);
        if (err == CL_SUCCESS)
            err = clGetEventProfilingInfo(e, CL_PROFILING_COMMAND_END, sizeof(end), &end, nullptr);
        first = std::min(first, start);
        last = std::max(last, end);
        clReleaseEvent(e);
    }
    KVCOMP_CL_CHECK(err);
    if (events.empty() || last < first) return 0.0;
    return double(last - first) * 1e-6;
}

cl_event * cl_backend::event_slot() {
    if (!timing_ && !profile_) return nullptr;
    events_.push_back(nullptr);
    return &events_.back();
}

void cl_backend::cancel_event_slot(cl_event * slot) {
    // The command was not enqueued, so the slot holds no event.
    if (slot && !events_.empty() && slot == &events_.back()) events_.pop_back();
}

cl_kernel cl_backend::kernel(const char * file, const defines & defs, const char * kname,
                             const char * extra_options) {
    std::string key = std::string(file) + '\n' + kname + '\n' + extra_options + '\n' + defs.text();
    auto it = kernels_.find(key);
    if (it != kernels_.end()) return it->second;
    cl_program program = dev_->programs->get(file, defs.text(), extra_options);
    cl_int err = CL_SUCCESS;
    cl_kernel k = clCreateKernel(program, kname, &err);
    if (err != CL_SUCCESS)
        KVCOMP_THROW(status::kernel_build_failed, "OpenCL: kernel ", kname, " not found in ", file, ": ",
                     error_name(err));
    kernels_.emplace(std::move(key), k);
    return k;
}

cl_kernel cl_backend::kernel_for_local_size(const char * file, const defines & defs, const char * kname,
                                            size_t local_size, const std::string & what) {
    cl_kernel k = kernel(file, defs, kname);
    if (kernel_wg_limit(k) < local_size)
        KVCOMP_THROW(status::device_error, what, ": the device runs ", kname, " with at most ", kernel_wg_limit(k),
                     " work-items, fewer than its ", local_size);
    return k;
}

size_t cl_backend::kernel_wg_limit(cl_kernel k) const {
    size_t n = 0;
    KVCOMP_CL_CHECK(clGetKernelWorkGroupInfo(k, dev_->device, CL_KERNEL_WORK_GROUP_SIZE, sizeof(n), &n, nullptr));
    return n;
}

void cl_backend::launch(cl_kernel k, unsigned dims, const size_t * global, const size_t * local) {
    size_t g[3] = {1, 1, 1};
    for (unsigned i = 0; i < dims; ++i) {
        if (global[i] == 0) return;  // empty range: nothing to do (a zero size is an error in CL 1.2)
        g[i] = local ? round_up(global[i], local[i]) : global[i];
    }
    cl_event * ev = event_slot();
    const cl_int err = clEnqueueNDRangeKernel(queue_, k, dims, nullptr, g, local, 0, nullptr, ev);
    if (err != CL_SUCCESS) cancel_event_slot(ev);
    KVCOMP_CL_CHECK(err);
}

cl_mem cl_backend::scratch(size_t bytes) {
    if (bytes <= scratch_size_) return scratch_;
    // Release is safe while earlier commands still use it: OpenCL keeps the memory until they finish.
    if (scratch_) clReleaseMemObject(scratch_);
    scratch_ = nullptr;
    scratch_size_ = 0;
    const size_t grown = std::max(bytes, size_t(1) << 20);
    cl_int err = CL_SUCCESS;
    scratch_ = clCreateBuffer(dev_->context, CL_MEM_READ_WRITE, grown, nullptr, &err);
    if (err != CL_SUCCESS)
        KVCOMP_THROW(status::out_of_memory, name(), ": scratch buffer of ", grown,
                     " bytes: ", error_name(err));
    scratch_size_ = grown;
    return scratch_;
}

size_t cl_backend::reduction_wg(size_t want) const {
    size_t wg = 1;
    while (wg * 2 <= std::min(want, dev_->max_work_group_size)) wg *= 2;
    return wg;
}

int64_t cl_backend::concurrent_workgroups(const op_params & params) const {
    if (const auto * p = std::get_if<attn_decode_ragged_params>(&params))
        return concurrent_decode_tasks(*this, p->batch * p->kv.n_kv_heads, false);
    if (const auto * p = std::get_if<attn_decode_palu_params>(&params))
        return concurrent_decode_tasks(*this, p->batch * p->kv.n_kv_heads, true);
    return backend::concurrent_workgroups(params);
}

int64_t cl_backend::decode_task_cost(const op_params & params) const {
    if (const auto * p = std::get_if<attn_decode_ragged_params>(&params))
        return cl::decode_task_cost(*this, p->batch * p->kv.n_kv_heads);
    return backend::decode_task_cost(params);
}

support cl_backend::supports(const op_desc & op) const {
    // Kernel index arithmetic uses 32-bit ints for per-row and per-head extents.
    constexpr int64_t int_max = 0x7fffffff;
    switch (op.type) {
        case op_type::gemm: {
            const auto & p = op.get<gemm_params>();
            if (p.m > int_max || p.n > int_max || p.k > int_max || p.batch > int_max)
                return support::no("gemm dimensions must fit in 32-bit ints");
            return support::yes();
        }
        case op_type::attn_decode:
            return supports_attn_decode(*this, op);
        case op_type::attn_prefill:
            return supports_attn_prefill(*this, op);
        case op_type::kv_quantize:
            return supports_kv_quantize(*this, op);
        case op_type::kv_dequantize:
            return supports_kv_dequantize(*this, op);
        case op_type::attn_decode_quant:
            return supports_attn_decode_quant(*this, op);
        case op_type::probe_scores:
            return supports_probe_scores(*this, op);
        case op_type::select_salient:
            return supports_select_salient(*this, op);
        case op_type::kv_append_ragged:
            return supports_kv_append_ragged(*this, op);
        case op_type::attn_decode_ragged:
            return supports_attn_decode_ragged(*this, op);
        case op_type::attn_prefill_ragged:
            return supports_attn_prefill_ragged(*this, op);
        case op_type::attn_decode_palu:
            return supports_attn_decode_palu(*this, op);
        case op_type::head_project:
            return supports_head_project(*this, op);
        case op_type::count:
            return support::no("unknown op");
        default:
            return support::yes();
    }
}

void cl_backend::run_checked(const op_desc & op) {
    const size_t first_event = events_.size();  // this op's commands' events (op_profile)
    switch (op.type) {
        case op_type::copy:
            run_copy(*this, op);
            break;
        case op_type::add:
            run_add(*this, op);
            break;
        case op_type::gemm:
            run_gemm(*this, op);
            break;
        case op_type::rms_norm:
            run_rms_norm(*this, op);
            break;
        case op_type::rope:
            run_rope(*this, op);
            break;
        case op_type::silu_mul:
            run_silu_mul(*this, op);
            break;
        case op_type::softmax:
            run_softmax(*this, op);
            break;
        case op_type::get_rows:
            run_get_rows(*this, op);
            break;
        case op_type::argmax:
            run_argmax(*this, op);
            break;
        case op_type::kv_append:
            run_kv_append(*this, op);
            break;
        case op_type::head_project:
            run_head_project(*this, op);
            break;
        case op_type::kv_append_ragged:
            run_kv_append_ragged(*this, op);
            break;
        case op_type::attn_decode_ragged:
            run_attn_decode_ragged(*this, op);
            break;
        case op_type::attn_prefill_ragged:
            run_attn_prefill_ragged(*this, op);
            break;
        case op_type::attn_decode_palu:
            run_attn_decode_palu(*this, op);
            break;
        case op_type::attn_decode:
            run_attn_decode(*this, op);
            break;
        case op_type::attn_prefill:
            run_attn_prefill(*this, op);
            break;
        case op_type::kv_quantize:
            run_kv_quantize(*this, op);
            break;
        case op_type::kv_dequantize:
            run_kv_dequantize(*this, op);
            break;
        case op_type::attn_decode_quant:
            run_attn_decode_quant(*this, op);
            break;
        case op_type::probe_scores:
            run_probe_scores(*this, op);
            break;
        case op_type::select_salient:
            run_select_salient(*this, op);
            break;
        default:
            KVCOMP_THROW(status::internal, "opencl: unhandled op ", describe(op));
    }
    if (profile_) profile_->take(op_name(op.type), events_, first_event, timing_);
    if (debug_sync()) {
        const cl_int err = clFinish(queue_);
        if (err != CL_SUCCESS)
            KVCOMP_THROW(status::device_error, describe(op), " on ", name(),
                         " failed (KVCOMP_DEBUG_SYNC): ", error_name(err));
    }
}

// --- hooks of backend_opencl.h --------------------------------------------------------------------

bool is_opencl_backend(const backend & be) {
    return dynamic_cast<const cl_backend *>(&be) != nullptr;
}

namespace {
cl_backend & as_cl(const backend & be) {
    auto * cb = dynamic_cast<const cl_backend *>(&be);
    KVCOMP_CHECK_ARG(cb, "backend ", be.name(), " is not an OpenCL backend");
    return const_cast<cl_backend &>(*cb);
}
}  // namespace

void compile_for_test(backend & be, const std::string & source, const std::string & label) {
    as_cl(be).dev().programs->get_source(label, source);
}

program_cache_stats cache_stats(const backend & be) {
    return as_cl(be).dev().programs->stats();
}

void clear_memory_cache(backend & be) {
    as_cl(be).dev().programs->clear_memory();
}

}  // namespace kvcomp::cl
