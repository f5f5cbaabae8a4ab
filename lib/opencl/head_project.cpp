// head_project: per-head basis products (cl_kernels/head_project.cl): a tiled SGEMM per head for
// prefill-sized calls, a k-split kernel for a few tokens (decode steps).
#include <algorithm>

#include "opencl/cl_common.h"

namespace kvcomp::cl {

namespace {

constexpr int64_t kSmallMaxTokens = 64;  // up to here kvc_head_project_small (as CUDA's kSmallMaxTokens)
constexpr size_t kTileTokens = 128;      // HP_BM, also the tiled kernel's work-items
constexpr size_t kSmallTokens = 8;       // HS_TOK
constexpr size_t kSmallCols = 64;        // HS_COLS

}  // namespace

support supports_head_project(const cl_backend &, const op_desc & op) {
    const auto & p = op.get<head_project_params>();
    if (p.n_tokens > 0x7fffffff || p.in_total > 0x7fffffff || p.out_total > 0x7fffffff)
        return support::no("n_tokens, in_total and out_total must fit in 32-bit ints");
    return support::yes();
}

void run_head_project(cl_backend & be, const op_desc & op) {
    const auto & p = op.get<head_project_params>();
    if (p.n_tokens == 0) return;
    const bool small = p.n_tokens <= kSmallMaxTokens;
    // Slices of 64 work-items splitting the input dims: 4 where the device takes 256 work-items.
    const size_t slices = std::clamp<size_t>(be.dev().max_work_group_size / kSmallCols, 1, 4);
    defines defs;
    defs.add("MAX_W", max_ragged_width).add("HS_SLICES", slices);
    cl_kernel k = be.kernel("head_project.cl", defs, small ? "kvc_head_project_small" : "kvc_head_project_tiled");
    set_args(k, arg(op.src[0]), arg(op.src[1]), arg(op.src[2]), arg(op.dst[0]), to_int(p.in_total),
             to_int(p.out_total), to_int(p.n_tokens));
    if (small) {
        // The widths live in the device table: column chunks cover the widest a head may have.
        const size_t items = kSmallCols * slices;
        const size_t local[3] = {items, 1, 1};
        const size_t global[3] = {items * size_t((p.n_tokens + kSmallTokens - 1) / kSmallTokens), size_t(p.n_heads),
                                  size_t((max_ragged_width + kSmallCols - 1) / kSmallCols)};
        be.launch(k, 3, global, local);
    } else {
        const size_t local[3] = {kTileTokens, 1, 1};
        const size_t global[3] = {kTileTokens * size_t((p.n_tokens + kTileTokens - 1) / kTileTokens),
                                  size_t(p.n_heads), 1};
        be.launch(k, 3, global, local);
    }
}

}  // namespace kvcomp::cl
