// KVCOMP_CUDA_TIMELINE (block_timeline.h): the records' device buffer and their dump.
#include "block_timeline.h"

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "core/error.h"

namespace kvcomp::cuda::block_timeline {

namespace {

const char * path() {
    static const char * p = [] {
        const char * v = std::getenv("KVCOMP_CUDA_TIMELINE");
        return v && *v ? v : nullptr;
    }();
    return p;
}

uint64_t * g_records = nullptr;
size_t g_capacity = 0;  // u64 words
int64_t g_calls = 0;

}  // namespace

bool enabled() {
#ifdef KVCOMP_CUDA_TIMELINE
    return path() != nullptr;
#else
    return false;  // the kernels carry no stamps in this build
#endif
}

uint64_t * records(context & ctx, int64_t decode_blocks, int64_t merge_blocks) {
    const size_t words = size_t(4 * (decode_blocks + merge_blocks));
    if (words > g_capacity) {
        KVCOMP_CUDA_CHECK(cudaStreamSynchronize(ctx.stream));
        if (g_records) KVCOMP_CUDA_CHECK(cudaFree(g_records));
        KVCOMP_CUDA_CHECK(cudaMalloc(reinterpret_cast<void **>(&g_records), words * sizeof(uint64_t)));
        g_capacity = words;
    }
    KVCOMP_CUDA_CHECK(cudaMemsetAsync(g_records, 0, words * sizeof(uint64_t), ctx.stream));
    return g_records;
}

void dump(context & ctx, const char * decode_name, int64_t decode_blocks, int64_t merge_blocks) {
    const size_t n = size_t(decode_blocks + merge_blocks);
    std::vector<uint64_t> host(4 * n);
    KVCOMP_CUDA_CHECK(cudaMemcpyAsync(host.data(), g_records, host.size() * sizeof(uint64_t),
                                      cudaMemcpyDeviceToHost, ctx.stream));
    KVCOMP_CUDA_CHECK(cudaStreamSynchronize(ctx.stream));
    FILE * f = std::fopen(path(), "a");
    if (!f) KVCOMP_THROW(status::io_error, "KVCOMP_CUDA_TIMELINE: cannot open ", path(), " for appending");
    if (std::ftell(f) == 0) std::fprintf(f, "call,kernel,block,sm,start_ns,end_ns,info\n");
    for (size_t i = 0; i < n; ++i) {
        const uint64_t * r = &host[4 * i];
        if (r[1] == 0) continue;  // the block returned before its stamp
        const bool merge = int64_t(i) >= decode_blocks;
        std::fprintf(f, "%lld,%s,%lld,%llu,%llu,%llu,%llu\n", static_cast<long long>(g_calls),
                     merge ? "merge" : decode_name, static_cast<long long>(merge ? i - decode_blocks : i),
                     static_cast<unsigned long long>(r[2]), static_cast<unsigned long long>(r[0]),
                     static_cast<unsigned long long>(r[1]), static_cast<unsigned long long>(r[3]));
    }
    std::fclose(f);
    ++g_calls;
}

}  // namespace kvcomp::cuda::block_timeline
