// The head widths the CUDA attention kernels are compiled for, and the dispatch from a run-time
// head_dim to a kernel template: multiples of 16 from 32 to 128. The models' widths are 64 and 128;
// the others are the reduced caches of kivi / zipcache with lowrank=, rank=R.
#pragma once

#include <cstdint>
#include <type_traits>

#include "backend_cuda.h"

namespace kvcomp::cuda {

// Calls f(std::integral_constant<int, D>) for D = head_dim and returns what f returns. Step 32 limits
// the widths to the multiples of 32 (kernels whose lanes own D / 32 features each). The caller's
// supports() has checked the width; another one is an internal error.
template <int Step = 16, typename F>
auto with_head_dim(int64_t head_dim, F && f) {
    static_assert(Step == 16 || Step == 32, "widths: multiples of 16 or of 32");
    switch (head_dim) {
        case 32: return f(std::integral_constant<int, 32>{});
        case 64: return f(std::integral_constant<int, 64>{});
        case 96: return f(std::integral_constant<int, 96>{});
        case 128: return f(std::integral_constant<int, 128>{});
        default: break;
    }
    if constexpr (Step == 16) {
        switch (head_dim) {
            case 48: return f(std::integral_constant<int, 48>{});
            case 80: return f(std::integral_constant<int, 80>{});
            case 112: return f(std::integral_constant<int, 112>{});
            default: break;
        }
    }
    KVCOMP_THROW(status::internal, "no CUDA kernel for head_dim ", head_dim, " (multiples of ", Step,
                 " from 32 to 128)");
}

}  // namespace kvcomp::cuda
