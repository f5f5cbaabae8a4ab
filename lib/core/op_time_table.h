// The per-op table of KVCOMP_PROFILE_OPS, shared by the backends' profilers (cuda_backend/op_profile.h,
// lib/opencl/op_profile.h): device time and calls per op name, and the wall time from the first op.
// The backends measure (CUDA event pairs, OpenCL profiling events); this only sums and prints.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <string>

namespace kvcomp {

class op_time_table {
  public:
    void start();  // at an op: the wall clock starts at the first call
    bool started() const { return started_; }
    void add_call(const std::string & op) { ++totals_[op].count; }
    void add_time(const std::string & op, double ms) { totals_[op].ms += ms; }
    // To stderr: "KVCOMP_PROFILE_OPS <device>: wall W ms from the first op, ops S ms (P%)<extra>", then a
    // row per op (calls, total ms, mean us per call, share of S).
    void print(const std::string & device_name, const std::string & extra) const;
    // A backend's report when it is destroyed: nothing if no op ran; else `finish` (the backend waits
    // for and sums its outstanding events), then print(); a line saying the events could not be read
    // instead when finish throws. Returns whether the table was printed.
    bool report(const std::string & device_name, const std::function<void()> & finish,
                const std::string & extra) noexcept;

  private:
    struct total {
        double ms = 0.0;
        long long count = 0;
    };
    std::map<std::string, total> totals_;
    bool started_ = false;
    std::chrono::steady_clock::time_point wall_start_;
};

}  // namespace kvcomp
