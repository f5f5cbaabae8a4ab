// Pinned host staging for backend::upload. The backend contract lets the caller free its source as
// soon as upload() returns; copying straight from it forces a stream synchronization per upload,
// and every one drains the GPU's queue (the prefill of a quantizing method uploads tables several
// times per layer). Instead the bytes are copied into a slot of pinned host memory and the device
// copy is enqueued behind the work already on the stream; a slot is reused only once the event
// recorded after its copy has completed (with several slots that wait is almost never real).
// Uploads larger than a slot, or without pinned memory, fall back to the synchronous copy.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

namespace kvcomp::cuda {

class upload_staging {
  public:
    static constexpr size_t kSlots = 4;
    static constexpr size_t kSlotBytes = size_t(4) << 20;

    upload_staging() = default;
    upload_staging(const upload_staging &) = delete;
    upload_staging & operator=(const upload_staging &) = delete;
    ~upload_staging() { release(); }

    // Enqueues the copy of nbytes from host src to device dst on `stream` and returns true, or
    // returns false (nothing done) when it cannot stage them; throws on a CUDA error.
    bool enqueue(void * dst, const void * src, size_t nbytes, cudaStream_t stream);
    // Frees the pinned memory and events; the stream must have no staged copy in flight.
    void release() noexcept;

  private:
    bool init();

    char * host_ = nullptr;
    cudaEvent_t done_[kSlots] = {};
    bool used_[kSlots] = {};
    size_t next_ = 0;
    bool unavailable_ = false;  // pinned memory could not be had: always fall back
};

}  // namespace kvcomp::cuda
