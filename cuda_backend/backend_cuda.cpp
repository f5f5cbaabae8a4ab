// The CUDA backend: device enumeration, the backend object (one stream, one cuBLAS handle bound
// to it, a growable workspace), buffers, transfers, timing, and op dispatch to the *.cu files.
//
// Environment (read once per backend, here): KVCOMP_DEBUG_SYNC=1 synchronizes the stream after
// every op and reports any asynchronous fault against that op; KVCOMP_PROFILE_OPS=1 times every op
// on the stream and prints the per-op totals when the backend is destroyed (op_profile.h).
#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "backend_cuda.h"
#include "core/registry.h"
#include "op_profile.h"
#include "upload_staging.h"

namespace kvcomp::cuda {

std::string cuda_error_string(cudaError_t e) {
    (void)cudaGetLastError();  // see backend_cuda.h: do not report this failure twice
    return std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
}

std::string cublas_error_string(cublasStatus_t s) {
    return std::string(cublasGetStatusName(s)) + ": " + cublasGetStatusString(s);
}

cuda_buffer::~cuda_buffer() {
    // Destructors must not throw; a failure here (device already faulted) leaves nothing to do.
    int prev = -1;
    if (cudaGetDevice(&prev) == cudaSuccess && prev != device_) (void)cudaSetDevice(device_);
    (void)cudaFree(ptr_);
    if (prev >= 0 && prev != device_) (void)cudaSetDevice(prev);
    (void)cudaGetLastError();
}

void * context::workspace(size_t bytes) {
    if (bytes <= ws_size_ && ws_) return ws_;
    // Grow geometrically so a slowly increasing context length does not reallocate every step.
    const size_t want = std::max(bytes, ws_size_ + ws_size_ / 2);
    release_workspace();
    void * p = nullptr;
    const cudaError_t e = cudaMalloc(&p, want);
    if (e != cudaSuccess) {
        const std::string why = cuda_error_string(e);
        KVCOMP_THROW(e == cudaErrorMemoryAllocation ? status::out_of_memory : status::device_error,
                     "cuda:", device, ": workspace of ", want, " bytes: ", why);
    }
    ws_ = p;
    ws_size_ = want;
    return ws_;
}

void context::release_workspace() {
    if (!ws_) return;
    // Ops already enqueued may still read the old workspace.
    KVCOMP_CUDA_CHECK(cudaStreamSynchronize(stream));
    KVCOMP_CUDA_CHECK(cudaFree(ws_));
    ws_ = nullptr;
    ws_size_ = 0;
}

namespace {

bool env_flag(const char * name) {
    const char * v = std::getenv(name);
    return v && *v && std::string(v) != "0";
}

// Own copy of the op names: kvcomp_cuda links only kvcomp_base, not lib/core/op.cpp.
const char * op_label(op_type t) {
    static const char * const names[] = {"copy",   "add",       "gemm",        "rms_norm",
                                         "rope",   "silu_mul",  "softmax",     "get_rows",
                                         "argmax", "kv_append", "attn_decode", "attn_prefill",
                                         "kv_quantize", "attn_decode_quant", "probe_scores",
                                         "head_project", "kv_append_ragged", "attn_decode_ragged",
                                         "attn_prefill_ragged", "attn_decode_palu", "kv_dequantize",
                                         "select_salient"};
    static_assert(sizeof(names) / sizeof(names[0]) == size_t(op_type::count), "op_label is out of date");
    return size_t(t) < size_t(op_type::count) ? names[size_t(t)] : "?";
}

// Makes `device` current for the calling thread for the lifetime of the guard; every public
// method uses one because a backend may be driven from a thread whose current device differs.
class device_guard {
  public:
    explicit device_guard(int device) {
        KVCOMP_CUDA_CHECK(cudaGetDevice(&prev_));
        if (prev_ != device)
            KVCOMP_CUDA_CHECK(cudaSetDevice(device));
        else
            prev_ = -1;
    }
    ~device_guard() {
        if (prev_ >= 0) (void)cudaSetDevice(prev_);
    }
    device_guard(const device_guard &) = delete;
    device_guard & operator=(const device_guard &) = delete;

  private:
    int prev_ = -1;
};

// With profiling: the host time of one upload or download call (a pageable download blocks inside
// cudaMemcpyAsync until the stream reaches it).
class transfer_timer {
  public:
    explicit transfer_timer(op_profile * p) : p_(p) {
        if (p_) t0_ = std::chrono::steady_clock::now();
    }
    ~transfer_timer() {
        if (p_) p_->add_transfer(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0_).count());
    }
    transfer_timer(const transfer_timer &) = delete;
    transfer_timer & operator=(const transfer_timer &) = delete;

  private:
    op_profile * p_;
    std::chrono::steady_clock::time_point t0_;
};

class cuda_backend : public backend {
  public:
    cuda_backend(int device, device_info info) : info_(std::move(info)), debug_sync_(env_flag("KVCOMP_DEBUG_SYNC")),
          profile_(env_flag("KVCOMP_PROFILE_OPS") ? std::make_unique<op_profile>() : nullptr) {
        ctx_.device = device;
        device_guard g(device);
        KVCOMP_CUDA_CHECK(cudaDeviceGetAttribute(&ctx_.sm_count, cudaDevAttrMultiProcessorCount, device));
        KVCOMP_CUDA_CHECK(cudaDeviceGetAttribute(&ctx_.cc_major, cudaDevAttrComputeCapabilityMajor, device));
        KVCOMP_CUDA_CHECK(cudaDeviceGetAttribute(&ctx_.cc_minor, cudaDevAttrComputeCapabilityMinor, device));
        const char * dl = std::getenv("KVCOMP_DEPENDENT_LAUNCH");
        ctx_.dependent_launch = ctx_.cc_major >= 9 && !(dl && std::string(dl) == "0");
        try {
            // Non-blocking: no implicit ordering with the legacy default stream of other code.
            KVCOMP_CUDA_CHECK(cudaStreamCreateWithFlags(&ctx_.stream, cudaStreamNonBlocking));
            KVCOMP_CUBLAS_CHECK(cublasCreate(&ctx_.cublas));
            KVCOMP_CUBLAS_CHECK(cublasSetStream(ctx_.cublas, ctx_.stream));
            // Default math never uses TF32 for fp32 (the contract says fp32 math); forbidding
            // reduced-precision reductions keeps split-K sums of f16 outputs in fp32.
            KVCOMP_CUBLAS_CHECK(cublasSetMathMode(
                ctx_.cublas,
                cublasMath_t(CUBLAS_DEFAULT_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)));
            KVCOMP_CUDA_CHECK(cudaEventCreate(&t0_));
            KVCOMP_CUDA_CHECK(cudaEventCreate(&t1_));
        } catch (...) {
            destroy();
            throw;
        }
    }
    ~cuda_backend() override {
        try {
            device_guard g(ctx_.device);
            if (ctx_.stream) (void)cudaStreamSynchronize(ctx_.stream);
            if (profile_) profile_->report(info_.device_name + " (" + name() + ")");
            ctx_.release_workspace();
        } catch (...) {
            // A faulted device: nothing more can be done while tearing down.
        }
        destroy();
    }

    const device_info & info() const override { return info_; }

    support supports(const op_desc & op) const override {
        switch (op.type) {
            case op_type::gemm: return supports_gemm(op);
            case op_type::attn_decode: return supports_attn_decode(op);
            case op_type::attn_prefill: return supports_attn_prefill(op);
            case op_type::kv_quantize: return supports_kv_quantize(op);
            case op_type::kv_dequantize: return supports_kv_dequantize(op);
            case op_type::attn_decode_quant: return supports_attn_decode_quant(op);
            case op_type::probe_scores: return supports_probe_scores(op);
            case op_type::select_salient: return supports_select_salient(op);
            case op_type::head_project: return supports_head_project(op);
            case op_type::kv_append_ragged: return supports_kv_append_ragged(op);
            case op_type::attn_decode_ragged: return supports_attn_decode_ragged(op);
            case op_type::attn_prefill_ragged: return supports_attn_prefill_ragged(op);
            case op_type::attn_decode_palu: return supports_attn_decode_palu(op);
            case op_type::count: return support::no("unknown op");
            default: return support::yes();
        }
    }

    buffer_ptr alloc(size_t nbytes) override {
        device_guard g(ctx_.device);
        void * p = nullptr;
        // Never 0 bytes: every buffer has a distinct, valid address.
        const cudaError_t e = cudaMalloc(&p, nbytes ? nbytes : 1);
        if (e != cudaSuccess) {
            const std::string why = cuda_error_string(e);
            KVCOMP_THROW(e == cudaErrorMemoryAllocation ? status::out_of_memory : status::device_error,
                         name(), ": cudaMalloc of ", nbytes, " bytes failed: ", why);
        }
        return std::make_unique<cuda_buffer>(*this, nbytes, p, ctx_.device);
    }

    void upload(buffer & dst, size_t offset, const void * src, size_t nbytes) override {
        check_range(dst, offset, nbytes, "upload");
        if (nbytes == 0) return;
        device_guard g(ctx_.device);
        // src may be freed as soon as this returns: staged through pinned memory (no wait), or
        // copied directly and waited for when it does not fit a staging slot.
        const transfer_timer timer(profile_.get());
        void * d = static_cast<cuda_buffer &>(dst).data() + offset;
        if (staging_.enqueue(d, src, nbytes, ctx_.stream)) return;
        KVCOMP_CUDA_CHECK(cudaMemcpyAsync(d, src, nbytes, cudaMemcpyHostToDevice, ctx_.stream));
        KVCOMP_CUDA_CHECK(cudaStreamSynchronize(ctx_.stream));
    }

    void download(const buffer & src, size_t offset, void * dst, size_t nbytes) override {
        check_range(src, offset, nbytes, "download");
        if (nbytes == 0) return;
        device_guard g(ctx_.device);
        const transfer_timer timer(profile_.get());
        KVCOMP_CUDA_CHECK(cudaMemcpyAsync(dst, static_cast<const cuda_buffer &>(src).data() + offset, nbytes,
                                          cudaMemcpyDeviceToHost, ctx_.stream));
        wait_stream();
    }

    void synchronize() override {
        device_guard g(ctx_.device);
        wait_stream();
    }

    void timer_start() override {
        device_guard g(ctx_.device);
        KVCOMP_CUDA_CHECK(cudaEventRecord(t0_, ctx_.stream));
        timing_ = true;
    }
    double timer_stop_ms() override {
        KVCOMP_CHECK_ARG(timing_, name(), ": timer_stop_ms() without timer_start()");
        timing_ = false;
        device_guard g(ctx_.device);
        KVCOMP_CUDA_CHECK(cudaEventRecord(t1_, ctx_.stream));
        KVCOMP_CUDA_CHECK(cudaEventSynchronize(t1_));
        float ms = 0.0f;
        KVCOMP_CUDA_CHECK(cudaEventElapsedTime(&ms, t0_, t1_));
        return double(ms);
    }

    // The ragged decodes' schedule rows resident at once (the occupancy calculator, ragged_common.cuh).
    int64_t concurrent_workgroups(const op_params & params) const override {
        device_guard g(ctx_.device);
        if (const auto * p = std::get_if<attn_decode_ragged_params>(&params)) return concurrent_rows_attn_decode_ragged(*p);
        if (const auto * p = std::get_if<attn_decode_palu_params>(&params)) return concurrent_rows_attn_decode_palu(*p);
        return backend::concurrent_workgroups(params);
    }

    // The balanced search's per-task cost for the ragged decodes (f16 and q4 pages). Against 0, 16384
    // took 0.92 / 0.93 / 0.99 x the time at batches 1 / 4 / 16 (H200, two passes, geometric means over
    // the p50 / p70 f16 and p70 q4 rows at 32K and 128K; at most +0.9 % in a cell; 1 x 128K q4 p70
    // 0.070 -> 0.050 ms: docs/data/bench_ops_task_cost_h200.csv, visit 142): where batch x KV heads is
    // small, fewer and longer tasks than the tail alone asks for. Palu (compute-bound) keeps 0.
    int64_t decode_task_cost(const op_params & params) const override {
        constexpr int64_t kRaggedDecodeTaskCost = 16384;
        if (std::holds_alternative<attn_decode_ragged_params>(params)) return kRaggedDecodeTaskCost;
        return backend::decode_task_cost(params);
    }

    // The balanced search's tail for the ragged decodes of f16 pages. Per-block stamps (visit 150,
    // docs/RESULTS.md "block by block") showed an H200's fastest SM running its blocks in 0.70-0.83 x the
    // slowest's mean time, so a static cut of equal costs leaves the slots idle for 10-20 % of a decode's
    // span; small tasks at the end of the list go to the SMs that free first. A 10 % tail took 0.95-1.00 x
    // the time of none wherever its pieces cost at least 32768 (1 x 128K, 4 x 32K-128K, 16 x 32K-128K at
    // the half- and 70 %-rank profiles), 20 % was no better (docs/data/bench_ops_tail_h200.csv, visit 151);
    // with the floor that keeps 1 x 32K's smaller pieces out, 0.935-0.985 x at those points
    // (bench_ops_tail_rule_h200.csv, visit 152; two passes each). q4 pages were not measured: 0.
    int64_t decode_tail_percent(const op_params & params) const override {
        constexpr int64_t kRaggedDecodeTail = 10;
        if (const auto * p = std::get_if<attn_decode_ragged_params>(&params))
            return p->kv.bits == 16 ? kRaggedDecodeTail : 0;
        return backend::decode_tail_percent(params);
    }

  protected:
    void run_checked(const op_desc & op) override {
        device_guard g(ctx_.device);
        if (profile_) profile_->begin(ctx_.stream);
        switch (op.type) {
            case op_type::copy: run_copy(ctx_, op); break;
            case op_type::add: run_add(ctx_, op); break;
            case op_type::gemm: run_gemm(ctx_, op); break;
            case op_type::rms_norm: run_rms_norm(ctx_, op); break;
            case op_type::rope: run_rope(ctx_, op); break;
            case op_type::silu_mul: run_silu_mul(ctx_, op); break;
            case op_type::softmax: run_softmax(ctx_, op); break;
            case op_type::get_rows: run_get_rows(ctx_, op); break;
            case op_type::argmax: run_argmax(ctx_, op); break;
            case op_type::kv_append: run_kv_append(ctx_, op); break;
            case op_type::attn_decode: run_attn_decode(ctx_, op); break;
            case op_type::attn_prefill: run_attn_prefill(ctx_, op); break;
            case op_type::kv_quantize: run_kv_quantize(ctx_, op); break;
            case op_type::kv_dequantize: run_kv_dequantize(ctx_, op); break;
            case op_type::attn_decode_quant: run_attn_decode_quant(ctx_, op); break;
            case op_type::probe_scores: run_probe_scores(ctx_, op); break;
            case op_type::select_salient: run_select_salient(ctx_, op); break;
            case op_type::head_project: run_head_project(ctx_, op); break;
            case op_type::kv_append_ragged: run_kv_append_ragged(ctx_, op); break;
            case op_type::attn_decode_ragged: run_attn_decode_ragged(ctx_, op); break;
            case op_type::attn_prefill_ragged: run_attn_prefill_ragged(ctx_, op); break;
            case op_type::attn_decode_palu: run_attn_decode_palu(ctx_, op); break;
            default: KVCOMP_THROW(status::internal, name(), ": no kernel for op ", op_label(op.type));
        }
        if (profile_) profile_->end(op_label(op.type), ctx_.stream);
        if (debug_sync_) {
            const cudaError_t e = cudaStreamSynchronize(ctx_.stream);
            if (e != cudaSuccess)
                KVCOMP_THROW(status::device_error, name(), ": op ", op_label(op.type),
                             " failed (KVCOMP_DEBUG_SYNC): ", cuda_error_string(e));
        }
    }

  private:
    // Blocks until the stream is idle; with profiling, the time blocked is the device's backlog.
    void wait_stream() {
        if (!profile_) {
            KVCOMP_CUDA_CHECK(cudaStreamSynchronize(ctx_.stream));
            return;
        }
        const auto t0 = std::chrono::steady_clock::now();
        KVCOMP_CUDA_CHECK(cudaStreamSynchronize(ctx_.stream));
        profile_->add_host_wait(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }

    void check_range(const buffer & b, size_t offset, size_t nbytes, const char * what) const {
        KVCOMP_CHECK_ARG(&b.owner() == this, name(), ": ", what, " with a buffer of backend ",
                         b.owner().name());
        KVCOMP_CHECK_ARG(offset <= b.size() && nbytes <= b.size() - offset, name(), ": ", what, " of ",
                         nbytes, " bytes at offset ", offset, " overruns a buffer of ", b.size(), " bytes");
    }

    void destroy() noexcept {
        if (profile_) profile_->release();
        staging_.release();  // callers synchronized the stream first
        if (t1_) (void)cudaEventDestroy(t1_);
        if (t0_) (void)cudaEventDestroy(t0_);
        if (ctx_.cublas) (void)cublasDestroy(ctx_.cublas);
        if (ctx_.stream) (void)cudaStreamDestroy(ctx_.stream);
        t0_ = t1_ = nullptr;
        ctx_.cublas = nullptr;
        ctx_.stream = nullptr;
        (void)cudaGetLastError();
    }

    device_info info_;
    context ctx_;
    bool debug_sync_ = false;
    std::unique_ptr<op_profile> profile_;
    bool timing_ = false;
    cudaEvent_t t0_ = nullptr, t1_ = nullptr;
    upload_staging staging_;
};

std::string version_string(int v) {  // 13000 -> "13.0"
    return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
}

}  // namespace

void enumerate_devices(std::vector<device_entry> & out, std::vector<std::string> & notes) {
    try {
        int count = 0;
        const cudaError_t e = cudaGetDeviceCount(&count);
        if (e != cudaSuccess || count <= 0) {
            notes.push_back("CUDA: not available (no device: " +
                            (e != cudaSuccess ? cuda_error_string(e) : std::string("0 devices")) + ")");
            return;
        }
        int runtime = 0, driver = 0;
        if (cudaRuntimeGetVersion(&runtime) != cudaSuccess) runtime = 0;
        if (cudaDriverGetVersion(&driver) != cudaSuccess) driver = 0;
        (void)cudaGetLastError();
        for (int i = 0; i < count; ++i) {
            cudaDeviceProp prop{};
            const cudaError_t pe = cudaGetDeviceProperties(&prop, i);
            if (pe != cudaSuccess) {
                notes.push_back("CUDA: device " + std::to_string(i) + " skipped: " + cuda_error_string(pe));
                continue;
            }
            device_info d;
            d.name = "cuda:" + std::to_string(i);
            d.api = "CUDA";
            d.device_name = prop.name;
            d.vendor = "NVIDIA";
            d.platform = "CUDA runtime " + version_string(runtime);
            d.driver_version = version_string(driver);
            d.api_version =
                "compute capability " + std::to_string(prop.major) + "." + std::to_string(prop.minor);
            d.is_gpu = true;
            d.compute_units = prop.multiProcessorCount;
            d.global_mem_bytes = uint64_t(prop.totalGlobalMem);
            const int cc = prop.major * 10 + prop.minor;
            d.fp16_arith = cc >= 53;
            d.int8_dot = cc >= 61;  // dp4a
            out.push_back({d, [i, d] { return std::unique_ptr<backend>(new cuda_backend(i, d)); }});
        }
    } catch (const std::exception & ex) {
        notes.push_back(std::string("CUDA: not available (") + ex.what() + ")");
    }
}

}  // namespace kvcomp::cuda
