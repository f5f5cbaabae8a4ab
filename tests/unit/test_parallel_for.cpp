// parallel_for's persistent pool: every job runs exactly once per call, over many calls; a job's
// exception reaches the caller and the pool stays usable; a parallel_for inside a job runs; callers
// on several threads at once each get their own jobs run.
#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <thread>
#include <vector>

#include "host/util/parallel_for.h"

using kvcomp::host::parallel_for;

TEST(parallel_for, every_job_once_over_many_calls) {
    for (int64_t n : {0, 1, 2, 7, 100, 1000}) {
        for (int rep = 0; rep < 50; ++rep) {
            std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
            parallel_for(n, [&](int64_t i) { hits[size_t(i)]++; });
            for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[size_t(i)].load(), 1) << "n=" << n << " i=" << i;
        }
    }
}

TEST(parallel_for, exception_reaches_caller_and_pool_recovers) {
    EXPECT_THROW(parallel_for(64, [](int64_t i) {
                     if (i == 17) throw std::runtime_error("job 17");
                 }),
                 std::runtime_error);
    std::atomic<int64_t> sum{0};
    parallel_for(64, [&](int64_t i) { sum += i; });
    EXPECT_EQ(sum.load(), 64 * 63 / 2);
}

TEST(parallel_for, nested_call_runs) {
    std::vector<std::atomic<int>> hits(16 * 8);
    parallel_for(16, [&](int64_t i) { parallel_for(8, [&](int64_t j) { hits[size_t(i * 8 + j)]++; }); });
    for (auto & h : hits) EXPECT_EQ(h.load(), 1);
}

TEST(parallel_for, concurrent_callers) {
    std::vector<std::atomic<int64_t>> sums(4);
    std::vector<std::thread> callers;
    for (int c = 0; c < 4; ++c)
        callers.emplace_back([&, c] {
            for (int rep = 0; rep < 20; ++rep) parallel_for(100, [&](int64_t i) { sums[size_t(c)] += i; });
        });
    for (auto & t : callers) t.join();
    for (auto & s : sums) EXPECT_EQ(s.load(), 20 * 100 * 99 / 2);
}
