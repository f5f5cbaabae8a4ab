// The paged fp16 decode window of the quantizing methods (kv_method_quant.h): a request's window
// slots s = 0 .. window - 1 live in its pages, slot s at page pages[s / page_tokens], token
// s % page_tokens of a pool f16 [n_pages, n_kv_heads, page_tokens, head_dim]. Pages are taken as
// the window fills and returned when it is flushed, so a request holds ceil(tokens / page_tokens)
// pages of window, not a whole window's row.
//
// The flushes read whole windows as contiguous head-major rows [n_kv_heads, window, head_dim]
// (probe_scores' and kv_quantize's row_tokens form, and the requant workspace): gather_window
// copies them there (f16 -> f32, exact) with one get_rows over the pool's token rows.
#pragma once

#include <cstdint>
#include <vector>

#include "core/backend.h"
#include "core/tensor.h"

namespace kvcomp::engine {

struct window_pool_shape {
    int64_t n_pages = 0, n_kv_heads = 0, page_tokens = 0, head_dim = 0;
    int64_t token_rows() const { return n_pages * n_kv_heads * page_tokens; }  // rows of head_dim
};

// Appends to `ids` the pool's token rows of slots 0 .. window - 1 of a window with these pages,
// head-major ([n_kv_heads][window]): get_rows then writes the window's [n_kv_heads, window, head_dim].
void append_window_rows(std::vector<int32_t> & ids, const window_pool_shape & w,
                        const std::vector<int32_t> & pages, int64_t window);

// dst (f32, n_ids * head_dim elements) = the pool's token rows `ids` (i32 [n_ids]), converted.
void gather_window(backend & be, const window_pool_shape & w, buffer & pool, const tensor & ids,
                   int64_t n_ids, const tensor & dst);

}  // namespace kvcomp::engine
