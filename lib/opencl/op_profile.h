// Per-op device time for KVCOMP_PROFILE_OPS=1 on OpenCL, as cuda_backend/op_profile.h does for CUDA:
// every command an op enqueues (kernels, CLBlast calls, copies) gets a profiling event, and the
// commands' execution times (CL_PROFILING_COMMAND_END - START) are summed per op name; uploads and
// downloads likewise. Printed to stderr (core/op_time_table.h) when the backend is destroyed, with the
// wall time from the first op: wall minus the ops' sum is time the device sat idle or the host spent
// enqueuing.
// Events are released as they are summed: once kMaxPending are outstanding the oldest half is waited
// for (a synchronization: profiling perturbs what it measures a little, never the results).
#pragma once

#include <CL/cl.h>

#include <string>
#include <vector>

#include "core/op_time_table.h"

namespace kvcomp::cl {

class op_profile {
  public:
    op_profile() = default;
    op_profile(const op_profile &) = delete;
    op_profile & operator=(const op_profile &) = delete;
    ~op_profile() { release(); }

    // The events [first, end) of `events` belong to one op called `label`. They move here, unless
    // `shared` (the backend's timer still needs them), in which case they are retained.
    void take(const char * label, std::vector<cl_event> & events, size_t first, bool shared);
    void report(const std::string & device_name) noexcept;
    void release() noexcept;

  private:
    static constexpr size_t kMaxPending = 4096;
    struct entry {
        cl_event event = nullptr;
        const char * label = nullptr;
    };
    void drain(size_t keep);

    std::vector<entry> pending_;
    op_time_table table_;  // device time and calls per op, the wall clock
};

}  // namespace kvcomp::cl
