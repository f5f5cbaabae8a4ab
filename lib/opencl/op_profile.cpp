// op_profile: see op_profile.h.
#include "opencl/op_profile.h"

#include <cstdio>

#include "opencl/cl_common.h"

namespace kvcomp::cl {

void op_profile::take(const char * label, std::vector<cl_event> & events, size_t first, bool shared) {
    if (!started_) wall_start_ = std::chrono::steady_clock::now(), started_ = true;
    ++ops_[label];
    for (size_t i = first; i < events.size(); ++i) {
        if (!events[i]) continue;
        if (shared) clRetainEvent(events[i]);
        pending_.push_back({events[i], label});
    }
    if (!shared) events.resize(first);
    if (pending_.size() >= kMaxPending) drain(kMaxPending / 2);
}

// Waits for and sums all but the newest `keep` events, releasing them.
void op_profile::drain(size_t keep) {
    const size_t n = pending_.size() > keep ? pending_.size() - keep : 0;
    for (size_t i = 0; i < n; ++i) {
        const entry & e = pending_[i];
        KVCOMP_CL_CHECK(clWaitForEvents(1, &e.event));
        cl_ulong start = 0, end = 0;
        KVCOMP_CL_CHECK(clGetEventProfilingInfo(e.event, CL_PROFILING_COMMAND_START, sizeof(start), &start, nullptr));
        KVCOMP_CL_CHECK(clGetEventProfilingInfo(e.event, CL_PROFILING_COMMAND_END, sizeof(end), &end, nullptr));
        total & t = totals_[e.label];
        t.ms += end > start ? double(end - start) * 1e-6 : 0.0;
        ++t.commands;
        clReleaseEvent(e.event);
    }
    pending_.erase(pending_.begin(), pending_.begin() + std::ptrdiff_t(n));
}

void op_profile::report(const std::string & device_name) noexcept {
    if (!started_) return;
    try {
        drain(0);
    } catch (...) {
        std::fprintf(stderr, "KVCOMP_PROFILE_OPS: %s: events could not be read (device fault?)\n",
                     device_name.c_str());
        return;
    }
    const double wall =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - wall_start_).count();
    double sum = 0.0;
    for (const auto & kv : totals_) sum += kv.second.ms;
    std::fprintf(stderr, "KVCOMP_PROFILE_OPS %s: wall %.1f ms from the first op, commands %.1f ms (%.1f%%)\n",
                 device_name.c_str(), wall, sum, wall > 0 ? 100.0 * sum / wall : 0.0);
    std::fprintf(stderr, "  %-22s %10s %10s %12s %10s %7s\n", "op", "calls", "commands", "total ms", "mean us",
                 "share");
    for (const auto & kv : totals_) {
        const long long calls = ops_[kv.first];
        std::fprintf(stderr, "  %-22s %10lld %10lld %12.2f %10.2f %6.1f%%\n", kv.first.c_str(), calls,
                     kv.second.commands, kv.second.ms, calls ? 1000.0 * kv.second.ms / double(calls) : 0.0,
                     sum > 0 ? 100.0 * kv.second.ms / sum : 0.0);
    }
}

void op_profile::release() noexcept {
    for (const entry & e : pending_) clReleaseEvent(e.event);
    pending_.clear();
}

}  // namespace kvcomp::cl
