// The host side of block_timeline.cuh: whether KVCOMP_CUDA_TIMELINE names a file, a device buffer for
// a call's block records, and the dump of those records to the file as CSV.
#pragma once

#include <cstdint>

#include "backend_cuda.h"

namespace kvcomp::cuda::block_timeline {

// On when the build has the stamps (CMake KVCOMP_CUDA_TIMELINE=ON) and KVCOMP_CUDA_TIMELINE names a file.
bool enabled();
// Zeroed device records for `decode_blocks` + `merge_blocks` blocks (the merge's after the decode's),
// valid until the next call; kept for the process (a diagnostic, never freed).
uint64_t * records(context & ctx, int64_t decode_blocks, int64_t merge_blocks);
// Waits for the stream and appends the stamped records of the last records() to the file, one line
// per block: call, kernel, block, sm, start_ns, end_ns, info (a header first when the file is empty).
void dump(context & ctx, const char * decode_name, int64_t decode_blocks, int64_t merge_blocks);

}  // namespace kvcomp::cuda::block_timeline
