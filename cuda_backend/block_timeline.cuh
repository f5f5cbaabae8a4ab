// Per-block start and end stamps of a kernel (the device side; the host's is block_timeline.h), for
// reading where a decode's time goes: which SM ran a block, when it started and ended, on the GPU's
// nanosecond clock. Compiled in only by the CMake option KVCOMP_CUDA_TIMELINE=ON (else every stamp is
// empty and records() is never asked for); then the environment turns it on: KVCOMP_CUDA_TIMELINE=FILE
// makes attn_decode_ragged (the tensor-core kernel of f16 pages and its merge) record every call and
// append the records to FILE as CSV (block_timeline::dump). Each recording call waits for the stream,
// so times the host takes around it mean nothing.
//
// Record of block (x, y) of a grid: 4 u64 at (y * gridDim.x + x) * 4: start ns, end ns, SM id, and a
// kernel-defined word (the decode: tokens << 32 | k_width << 16 | v_width; the merge: tasks merged).
// Blocks that return before their end stamp leave it zero, and dump skips them.
#pragma once

#include <cstdint>

#include "block_timeline.h"
#include "common.cuh"

namespace kvcomp::cuda {

__device__ __forceinline__ uint64_t global_ns() {
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

__device__ __forceinline__ uint32_t sm_id() {
    uint32_t s;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(s));
    return s;
}

// The stamps of the block's record in `records` (nothing when it is null), from thread 0. Free functions
// reading the kernel's argument at each call, so no pointer stays live in registers across the kernel
// (the decodes run at the edge of their register budget).
__device__ __forceinline__ uint64_t * block_record(uint64_t * records) {
    return records + 4 * (uint64_t(blockIdx.y) * gridDim.x + blockIdx.x);
}
#ifdef KVCOMP_CUDA_TIMELINE
__device__ __forceinline__ void stamp_start(uint64_t * records) {
    if (records && threadIdx.x == 0) {
        uint64_t * r = block_record(records);
        r[0] = global_ns(), r[2] = sm_id();
    }
}
__device__ __forceinline__ void stamp_info(uint64_t * records, uint64_t info) {
    if (records && threadIdx.x == 0) block_record(records)[3] = info;
}
__device__ __forceinline__ void stamp_end(uint64_t * records) {
    if (records && threadIdx.x == 0) block_record(records)[1] = global_ns();
}
#else
__device__ __forceinline__ void stamp_start(uint64_t *) {}
__device__ __forceinline__ void stamp_info(uint64_t *, uint64_t) {}
__device__ __forceinline__ void stamp_end(uint64_t *) {}
#endif

}  // namespace kvcomp::cuda
