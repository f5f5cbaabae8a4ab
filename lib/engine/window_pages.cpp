// Paged decode windows: see window_pages.h.
#include "engine/window_pages.h"

#include "core/error.h"

namespace kvcomp::engine {

void append_window_rows(std::vector<int32_t> & ids, const window_pool_shape & w,
                        const std::vector<int32_t> & pages, int64_t window) {
    KVCOMP_CHECK_ARG(int64_t(pages.size()) * w.page_tokens >= window, "window of ", window,
                     " slots has only ", pages.size(), " pages of ", w.page_tokens);
    for (int64_t h = 0; h < w.n_kv_heads; ++h)
        for (int64_t s = 0; s < window; ++s) {
            const int64_t page = pages[size_t(s / w.page_tokens)];
            ids.push_back(int32_t((page * w.n_kv_heads + h) * w.page_tokens + s % w.page_tokens));
        }
}

void gather_window(backend & be, const window_pool_shape & w, buffer & pool, const tensor & ids,
                   int64_t n_ids, const tensor & dst) {
    be.run(make_op(get_rows_params{n_ids, w.head_dim, w.token_rows()},
                   {make_tensor(&pool, dtype::f16, {w.token_rows(), w.head_dim}), ids}, {dst}));
}

}  // namespace kvcomp::engine
