// op_profile: see op_profile.h.
#include "opencl/op_profile.h"

#include <cstdio>

#include "opencl/cl_common.h"

namespace kvcomp::cl {

void op_profile::take(const char * label, std::vector<cl_event> & events, size_t first, bool shared) {
    table_.start();
    table_.add_call(label);
    for (size_t i = first; i < events.size(); ++i) {
        if (!events[i]) continue;
        if (shared) clRetainEvent(events[i]);
        pending_.push_back({events[i], label});
    }
    if (!shared) events.resize(first);
    if (pending_.size() >= kMaxPending) drain(kMaxPending / 2);
}

// Waits for and sums all but the newest `keep` events, releasing them. Every one of them is released
// and dropped even when one fails (the first error is thrown after), so none is released twice.
void op_profile::drain(size_t keep) {
    const size_t n = pending_.size() > keep ? pending_.size() - keep : 0;
    cl_int err = CL_SUCCESS;
    for (size_t i = 0; i < n; ++i) {
        const entry & e = pending_[i];
        cl_ulong start = 0, end = 0;
        cl_int st = clWaitForEvents(1, &e.event);
        if (st == CL_SUCCESS)
            st = clGetEventProfilingInfo(e.event, CL_PROFILING_COMMAND_START, sizeof(start), &start, nullptr);
        if (st == CL_SUCCESS)
            st = clGetEventProfilingInfo(e.event, CL_PROFILING_COMMAND_END, sizeof(end), &end, nullptr);
        if (st == CL_SUCCESS)
            table_.add_time(e.label, end > start ? double(end - start) * 1e-6 : 0.0);
        else if (err == CL_SUCCESS)
            err = st;
        clReleaseEvent(e.event);
    }
    pending_.erase(pending_.begin(), pending_.begin() + std::ptrdiff_t(n));
    KVCOMP_CL_CHECK(err);
}

void op_profile::report(const std::string & device_name) noexcept {
    (void)table_.report(device_name, [this] { drain(0); },
                        "; each op's time is the sum of its commands' execution times");
}

void op_profile::release() noexcept {
    for (const entry & e : pending_) clReleaseEvent(e.event);
    pending_.clear();
}

}  // namespace kvcomp::cl
