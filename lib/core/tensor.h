// Tensor views: a typed, contiguous, row-major window into a backend buffer.
//
// A view does not own memory. shape[0] is the outermost (slowest) axis and the last used axis is
// contiguous; unused trailing axes are 1. offset is in bytes from the start of the buffer.
// Ops read their dimensions from their parameter struct; the views' shapes are checked against
// those parameters (op_check.cpp) so that a mismatch is an error, not an out-of-bounds access.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "core/dtype.h"

namespace kvcomp {

class buffer;

struct tensor {
    buffer * buf = nullptr;
    size_t offset = 0;  // bytes
    dtype type = dtype::f32;
    std::array<int64_t, 4> shape{{1, 1, 1, 1}};
    int ndim = 1;

    int64_t numel() const { return shape[0] * shape[1] * shape[2] * shape[3]; }
    size_t nbytes() const { return size_t(numel()) * dtype_size(type); }
    bool valid() const { return buf != nullptr; }
};

// "f32[3,5]" for messages.
std::string describe(const tensor & t);

// View of `buf` at byte `offset` with the given shape (1 to 4 axes, outermost first).
tensor make_tensor(buffer * buf, dtype type, std::initializer_list<int64_t> shape, size_t offset = 0);

}  // namespace kvcomp
