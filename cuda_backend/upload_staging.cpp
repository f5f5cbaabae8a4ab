// upload_staging: see upload_staging.h.
#include "upload_staging.h"

#include <cstring>

#include "backend_cuda.h"

namespace kvcomp::cuda {

bool upload_staging::init() {
    if (host_) return true;
    if (unavailable_) return false;
    if (cudaHostAlloc(reinterpret_cast<void **>(&host_), kSlots * kSlotBytes, cudaHostAllocDefault) != cudaSuccess) {
        (void)cudaGetLastError();  // clear it: the synchronous path still works
        host_ = nullptr;
        unavailable_ = true;
        return false;
    }
    for (auto & e : done_) KVCOMP_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    return true;
}

bool upload_staging::enqueue(void * dst, const void * src, size_t nbytes, cudaStream_t stream) {
    if (nbytes > kSlotBytes || !init()) return false;
    const size_t slot = next_;
    next_ = (next_ + 1) % kSlots;
    char * stage = host_ + slot * kSlotBytes;
    if (used_[slot]) KVCOMP_CUDA_CHECK(cudaEventSynchronize(done_[slot]));  // its last copy has run
    std::memcpy(stage, src, nbytes);
    KVCOMP_CUDA_CHECK(cudaMemcpyAsync(dst, stage, nbytes, cudaMemcpyHostToDevice, stream));
    KVCOMP_CUDA_CHECK(cudaEventRecord(done_[slot], stream));
    used_[slot] = true;
    return true;
}

void upload_staging::release() noexcept {
    for (auto & e : done_) {
        if (e) (void)cudaEventDestroy(e);
        e = nullptr;
    }
    if (host_) (void)cudaFreeHost(host_);
    host_ = nullptr;
    for (auto & u : used_) u = false;
}

}  // namespace kvcomp::cuda
