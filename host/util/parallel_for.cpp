// parallel_for: see parallel_for.h.
#include "host/util/parallel_for.h"

#include <algorithm>
#include <atomic>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace kvcomp::host {

void parallel_for(int64_t n, const std::function<void(int64_t)> & job) {
    if (n <= 0) return;
    const int64_t hw = std::max<int64_t>(1, int64_t(std::thread::hardware_concurrency()));
    const int64_t n_threads = std::min<int64_t>({n, hw, 16});
    if (n_threads == 1) {
        for (int64_t i = 0; i < n; ++i) job(i);
        return;
    }
    std::atomic<int64_t> next{0};
    std::exception_ptr error;
    std::mutex error_mutex;
    auto worker = [&] {
        for (int64_t i = next++; i < n; i = next++) {
            try {
                job(i);
            } catch (...) {
                std::lock_guard<std::mutex> lock(error_mutex);
                if (!error) error = std::current_exception();
                next = n;  // stop handing out jobs
            }
        }
    };
    std::vector<std::thread> threads;
    for (int64_t t = 1; t < n_threads; ++t) threads.emplace_back(worker);
    worker();
    for (auto & t : threads) t.join();
    if (error) std::rethrow_exception(error);
}

}  // namespace kvcomp::host
