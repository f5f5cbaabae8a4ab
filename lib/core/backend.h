// The backend interface: registry -> device -> backend (one queue/stream) -> buffer.
//
// A backend is one in-order queue (OpenCL command queue, CUDA stream, or the calling thread for
// the CPU reference) on one device. It owns the buffers it allocates; a buffer must only be used
// with the backend that made it (checked in run()). Ops are enqueued by run() and may complete
// asynchronously; download() and synchronize() wait. All methods throw kvcomp::error.
//
// Thread safety: a backend is used by one thread at a time. Different backends are independent.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/op.h"

namespace kvcomp {

class backend;

// What a device is, as reported by its API. Shown by `kvcomp info`.
struct device_info {
    std::string name;            // selection name: "cpu", "opencl:0", "cuda:0"
    std::string api;             // "CPU", "OpenCL", "CUDA"
    std::string device_name;     // "NVIDIA H200", "pthread-...", ...
    std::string vendor;
    std::string platform;        // OpenCL platform name / CUDA runtime version
    std::string driver_version;
    std::string api_version;     // "OpenCL 3.0 CUDA", "compute capability 9.0", ...
    bool is_gpu = false;
    int compute_units = 0;
    uint64_t global_mem_bytes = 0;
    bool fp16_arith = false;     // native fp16 arithmetic (cl_khr_fp16 / sm_53+)
    bool int8_dot = false;       // int8 dot-product instructions (cl_khr_integer_dot_product / dp4a)
};

// Device memory owned by one backend. Released on destruction.
class buffer {
public:
    buffer(backend & owner, size_t size) : owner_(&owner), size_(size) {}
    virtual ~buffer() = default;
    buffer(const buffer &) = delete;
    buffer & operator=(const buffer &) = delete;

    size_t size() const { return size_; }
    backend & owner() const { return *owner_; }

private:
    backend * owner_;
    size_t size_;
};

using buffer_ptr = std::unique_ptr<buffer>;

// Answer of supports(): ok, or why not (named in UNSUPPORTED errors and in `support` mode).
struct support {
    bool ok = true;
    std::string reason;
    static support yes() { return {}; }
    static support no(std::string why) { return {false, std::move(why)}; }
};

class backend {
public:
    virtual ~backend() = default;

    virtual const device_info & info() const = 0;
    const std::string & name() const { return info().name; }

    // Whether run(op) would work for these dtypes and shapes (op must pass check_op).
    virtual support supports(const op_desc & op) const = 0;

    // Validates (check_op, supports, buffer ownership and bounds) and enqueues the op.
    // Throws invalid_argument for a malformed op, unsupported with the reason otherwise.
    void run(const op_desc & op);

    virtual buffer_ptr alloc(size_t nbytes) = 0;  // contents undefined
    virtual void upload(buffer & dst, size_t offset, const void * src, size_t nbytes) = 0;
    virtual void download(const buffer & src, size_t offset, void * dst, size_t nbytes) = 0;
    virtual void synchronize() = 0;

    // Device-side timing for benchmarks: elapsed device time of everything enqueued between
    // timer_start() and timer_stop(), in milliseconds (OpenCL profiling events, CUDA events, wall
    // clock on the CPU). timer_stop() waits for that work.
    virtual void timer_start() = 0;
    virtual double timer_stop_ms() = 0;

    // How many work-groups of an op with these parameters the device runs at once, over all its
    // compute units: what a host scheduler that cuts work into waves plans for (the decode task
    // lists of host/lowrank/decode_schedule.h, one work-group per task). An op that launches several
    // work-groups per task counts tasks. Default: one per compute unit; CUDA asks its occupancy
    // calculator about the kernel run() would pick; OpenCL GPUs plan 8 per compute unit, 4 for ragged
    // decodes of few (request, KV head) rows (the params' batch counts).
    virtual int64_t concurrent_workgroups(const op_params & params) const;

    // The cost a host scheduler counts once per task of such an op, in its own units (the balanced
    // decode schedule's task_cost, host/lowrank/decode_schedule.h): what a task costs beside its
    // tokens (its start, its partial and the merge's read of it). Default 0: the search weighs the
    // tail alone. CUDA: 16384 for the ragged decodes, whose workers are its resident blocks; OpenCL GPUs
    // the same where a (request, KV head) row has 16 compute units or more to itself (batch 1).
    virtual int64_t decode_task_cost(const op_params & params) const;

    // The balanced decode schedule's tail in percent (decode_schedule_options::tail_percent): the share
    // of each (request, KV head)'s tokens cut into small tasks at the end of the list, which the compute
    // units that finish first take. Default 0. CUDA: 10 for the ragged decodes of f16 pages.
    virtual int64_t decode_tail_percent(const op_params & params) const;

protected:
    virtual void run_checked(const op_desc & op) = 0;  // op already validated
};

// Convenience: allocate and upload a host array; download into a vector.
template <typename T>
buffer_ptr upload_vector(backend & be, const std::vector<T> & v) {
    buffer_ptr b = be.alloc(std::max<size_t>(1, v.size() * sizeof(T)));
    if (!v.empty()) be.upload(*b, 0, v.data(), v.size() * sizeof(T));
    return b;
}

}  // namespace kvcomp
