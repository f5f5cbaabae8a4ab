// op_profile: see op_profile.h.
#include "op_profile.h"

#include <algorithm>
#include <cstdio>

#include "backend_cuda.h"

namespace kvcomp::cuda {

cudaEvent_t op_profile::take_event() {
    if (!free_.empty()) {
        cudaEvent_t e = free_.back();
        free_.pop_back();
        return e;
    }
    cudaEvent_t e = nullptr;
    KVCOMP_CUDA_CHECK(cudaEventCreate(&e));
    return e;
}

void op_profile::begin(cudaStream_t stream) {
    const auto now = std::chrono::steady_clock::now();
    if (!table_.started()) last_end_ = now;
    table_.start();
    open_.label = nullptr;
    gap_ms_ = std::chrono::duration<double, std::milli>(now - last_end_).count();
    if (pending_.size() >= kMaxPending) drain(kMaxPending / 2);
    open_.start = take_event();
    KVCOMP_CUDA_CHECK(cudaEventRecord(open_.start, stream));
}

void op_profile::end(const char * label, cudaStream_t stream) {
    open_.stop = take_event();
    open_.label = label;
    KVCOMP_CUDA_CHECK(cudaEventRecord(open_.stop, stream));
    pending_.push_back(open_);
    open_ = pair{};
    if (gap_ms_ > 0.05) {
        total & g = gaps_[std::string(last_label_) + " -> " + label];
        g.ms += gap_ms_;
        ++g.count;
    }
    last_label_ = label;
    last_end_ = std::chrono::steady_clock::now();
}

// Waits for and sums all but the newest `keep` pairs, returning their events to the free list.
void op_profile::drain(size_t keep) {
    const size_t n = pending_.size() > keep ? pending_.size() - keep : 0;
    for (size_t i = 0; i < n; ++i) {
        pair & p = pending_[i];
        KVCOMP_CUDA_CHECK(cudaEventSynchronize(p.stop));
        float ms = 0.0f;
        KVCOMP_CUDA_CHECK(cudaEventElapsedTime(&ms, p.start, p.stop));
        table_.add_time(p.label, double(ms));
        table_.add_call(p.label);
        free_.push_back(p.start);
        free_.push_back(p.stop);
    }
    pending_.erase(pending_.begin(), pending_.begin() + std::ptrdiff_t(n));
}

void op_profile::report(const std::string & device_name) noexcept {
    char extra[128];
    std::snprintf(extra, sizeof(extra), ", host in synchronize %.1f ms, in upload/download calls %.1f ms",
                  host_wait_ms_, transfer_ms_);
    if (!table_.report(device_name, [this] { drain(0); }, extra)) return;
    std::fprintf(stderr, "  host gaps between enqueuing two ops (over 50 us), largest first:\n");
    std::vector<std::pair<double, std::string>> by_time;
    for (const auto & kv : gaps_) by_time.emplace_back(kv.second.ms, kv.first);
    std::sort(by_time.rbegin(), by_time.rend());
    for (size_t i = 0; i < by_time.size() && i < 12; ++i) {
        const total & g = gaps_[by_time[i].second];
        std::fprintf(stderr, "  %-40s %8lld %10.2f ms %10.2f us each\n", by_time[i].second.c_str(), g.count, g.ms,
                     1000.0 * g.ms / double(g.count));
    }
}

void op_profile::release() noexcept {
    for (pair & p : pending_) free_.push_back(p.start), free_.push_back(p.stop);
    pending_.clear();
    if (open_.start) free_.push_back(open_.start), open_.start = nullptr;
    for (cudaEvent_t e : free_) (void)cudaEventDestroy(e);
    free_.clear();
}

}  // namespace kvcomp::cuda
