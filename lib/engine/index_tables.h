// Small i32 index tables (plans, row lists, positions) that a KV method uploads before an op.
#pragma once

#include <cstdint>
#include <vector>

#include "core/backend.h"
#include "core/tensor.h"

namespace kvcomp::engine {

// Packs the arrays into `buf` (grown as needed) and returns an i32 view of each, in order, each
// 16-byte aligned (an empty array gets a 1-element view). The upload is ordered after the work
// already enqueued, so a buffer can be reused from call to call.
std::vector<tensor> upload_index_tables(backend & be, buffer_ptr & buf,
                                        const std::vector<std::vector<int32_t>> & arrays);

}  // namespace kvcomp::engine
