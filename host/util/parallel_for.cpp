// parallel_for: see parallel_for.h.
//
// The workers are created once and kept (one pool per process): a prefill calls parallel_for a
// few times per layer, and creating threads each time cost ~0.1 ms per thread on the GPU host's
// virtual machine, time during which the device sat idle. A call runs one batch of jobs at a time
// (concurrent callers wait for the pool); a call made from inside a job runs serially.
#include "host/util/parallel_for.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace kvcomp::host {

namespace {

thread_local bool in_pool_job = false;

class worker_pool {
  public:
    explicit worker_pool(int64_t n_workers) {
        for (int64_t i = 0; i < n_workers; ++i) threads_.emplace_back([this] { work(); });
    }
    ~worker_pool() {
        {
            std::lock_guard<std::mutex> lock(m_);
            stop_ = true;
        }
        wake_.notify_all();
        for (auto & t : threads_) t.join();
    }
    worker_pool(const worker_pool &) = delete;
    worker_pool & operator=(const worker_pool &) = delete;

    int64_t size() const { return int64_t(threads_.size()); }

    // Runs job(0 .. n-1) on `helpers` pool threads plus the calling thread.
    void run(int64_t n, int64_t helpers, const std::function<void(int64_t)> & job) {
        std::lock_guard<std::mutex> one_batch(batch_);
        {
            std::lock_guard<std::mutex> lock(m_);
            job_ = &job;
            n_ = n;
            next_ = 0;
            error_ = nullptr;
            wanted_ = helpers;
            active_ = 0;
            ++generation_;
        }
        wake_.notify_all();
        drain();
        std::unique_lock<std::mutex> lock(m_);
        wanted_ = 0;  // late wakers take no part
        done_.wait(lock, [this] { return active_ == 0; });
        job_ = nullptr;
        if (error_) std::rethrow_exception(error_);
    }

  private:
    void work() {
        uint64_t seen = 0;
        std::unique_lock<std::mutex> lock(m_);
        for (;;) {
            wake_.wait(lock, [&] { return stop_ || (generation_ != seen && wanted_ > 0); });
            if (stop_) return;
            seen = generation_;
            --wanted_;
            ++active_;
            lock.unlock();
            drain();
            lock.lock();
            if (--active_ == 0) done_.notify_all();
        }
    }
    // Takes jobs until none is left (or one failed).
    void drain() {
        in_pool_job = true;
        for (int64_t i = next_++; i < n_; i = next_++) {
            try {
                (*job_)(i);
            } catch (...) {
                std::lock_guard<std::mutex> lock(m_);
                if (!error_) error_ = std::current_exception();
                next_ = n_;  // stop handing out jobs
            }
        }
        in_pool_job = false;
    }

    std::vector<std::thread> threads_;
    std::mutex batch_, m_;
    std::condition_variable wake_, done_;
    const std::function<void(int64_t)> * job_ = nullptr;
    int64_t n_ = 0;
    std::atomic<int64_t> next_{0};
    std::exception_ptr error_;
    int64_t wanted_ = 0, active_ = 0;
    uint64_t generation_ = 0;
    bool stop_ = false;
};

int64_t max_threads() {
    return std::min<int64_t>(std::max<int64_t>(1, int64_t(std::thread::hardware_concurrency())), 16);
}

}  // namespace

void parallel_for(int64_t n, const std::function<void(int64_t)> & job) {
    if (n <= 0) return;
    const int64_t n_threads = std::min<int64_t>(n, max_threads());
    if (n_threads == 1 || in_pool_job) {
        for (int64_t i = 0; i < n; ++i) job(i);
        return;
    }
    static worker_pool pool(max_threads() - 1);
    pool.run(n, n_threads - 1, job);
}

}  // namespace kvcomp::host
