// Per-op GPU time for KVCOMP_PROFILE_OPS=1: an event pair around every op on the backend's stream,
// summed per op name; the host time spent inside transfers and synchronizations; and the host's
// gaps between enqueuing two ops (summed per "previous -> next" pair, gaps over 50 us): a long gap
// after a synchronization is time the device sits idle while the host works. Printed to stderr when the backend is destroyed. What it answers: where
// the device time of a run goes, and how much of the wall time the device sat idle (wall minus the
// ops' sum), e.g. while a KV method ranks tokens on the host between two layers.
// Events are recycled: once kMaxPending pairs are outstanding the oldest are waited for and summed,
// so a long run holds a bounded number of events (that wait is itself a synchronization: profiling
// perturbs what it measures a little, never the results).
#pragma once

#include <cuda_runtime.h>

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "core/op_time_table.h"

namespace kvcomp::cuda {

class op_profile {
  public:
    op_profile() = default;
    op_profile(const op_profile &) = delete;
    op_profile & operator=(const op_profile &) = delete;
    ~op_profile() { release(); }

    void begin(cudaStream_t stream);                   // before an op is enqueued
    void end(const char * label, cudaStream_t stream);  // after it is enqueued
    void add_host_wait(double ms) { host_wait_ms_ += ms; }
    void add_transfer(double ms) { transfer_ms_ += ms; }
    // Sums what is outstanding and prints the table (device name in the title); then frees the events.
    void report(const std::string & device_name) noexcept;
    void release() noexcept;

  private:
    static constexpr size_t kMaxPending = 4096;
    struct pair {
        cudaEvent_t start = nullptr, stop = nullptr;
        const char * label = nullptr;
    };
    void drain(size_t keep);
    cudaEvent_t take_event();

    std::vector<pair> pending_;
    std::vector<cudaEvent_t> free_;
    pair open_;
    struct total {
        double ms = 0.0;
        long long count = 0;
    };
    op_time_table table_;  // device time per op, the wall clock
    std::map<std::string, total> gaps_;
    const char * last_label_ = "start";
    double gap_ms_ = 0.0;  // host time from the previous op to the one being enqueued
    std::chrono::steady_clock::time_point last_end_;
    double host_wait_ms_ = 0.0, transfer_ms_ = 0.0;
};

}  // namespace kvcomp::cuda
