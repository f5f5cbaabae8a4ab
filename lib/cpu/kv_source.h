// Token addressing of the K/V sources of kv_quantize and probe_scores (core/op.h, row_tokens).
#pragma once

#include <cstdint>

namespace kvcomp::cpu {

inline int64_t source_index(int64_t t, int64_t h, int64_t c, int64_t row_tokens, int64_t n_kv_heads,
                            int64_t head_dim) {
    if (row_tokens == 0) return (t * n_kv_heads + h) * head_dim + c;
    return (((t / row_tokens) * n_kv_heads + h) * row_tokens + t % row_tokens) * head_dim + c;
}

}  // namespace kvcomp::cpu
