// Runs independent host jobs on several threads: the per-layer host work of a prefill step (e.g.
// ranking every prompt's tokens per KV head for ZipCache) sits between device calls, so its wall
// time adds directly to TTFT.
#pragma once

#include <cstdint>
#include <functional>

namespace kvcomp::host {

// Calls job(i) for every i in [0, n), on up to min(n, hardware threads, 16) threads (the calling
// thread included). Jobs must be independent (write disjoint data); the results then do not depend
// on the thread count. The first exception a job throws is rethrown here after all threads join.
void parallel_for(int64_t n, const std::function<void(int64_t)> & job);

}  // namespace kvcomp::host
