// head_project: per-head product of a packed row slice with that head's basis (fp64 accumulation).
#include "cpu/ragged_common.h"

namespace kvcomp::cpu {

void run_head_project(const op_desc & op) {
    const auto & p = op.get<head_project_params>();
    const float * x = ptr<const float>(op.src[0]);
    const float * bases = ptr<const float>(op.src[1]);
    const int32_t * table = ptr<const int32_t>(op.src[2]);
    float * y = ptr<float>(op.dst[0]);
    // The host promises the ranges; the oracle verifies them so a bad table fails here first.
    for (int64_t h = 0; h < p.n_heads; ++h) {
        const int64_t in_off = table[h * 5], in_w = table[h * 5 + 1], b_off = table[h * 5 + 2];
        const int64_t out_off = table[h * 5 + 3], out_w = table[h * 5 + 4];
        KVCOMP_CHECK_ARG(in_w >= 1 && in_w <= max_ragged_width && out_w >= 1 && out_w <= max_ragged_width,
                         describe(op), ": head ", h, " has widths in ", in_w, ", out ", out_w,
                         " (must be in [1, ", max_ragged_width, "])");
        KVCOMP_CHECK_ARG(in_off >= 0 && in_off + in_w <= p.in_total && out_off >= 0 &&
                             out_off + out_w <= p.out_total && b_off >= 0 &&
                             b_off + in_w * out_w <= p.n_basis,
                         describe(op), ": head ", h, " ranges (in ", in_off, "+", in_w, ", out ", out_off,
                         "+", out_w, ", basis ", b_off, "+", in_w * out_w, ") leave their rows");
    }
    std::vector<double> acc;
    for (int64_t t = 0; t < p.n_tokens; ++t) {
        for (int64_t h = 0; h < p.n_heads; ++h) {
            const int64_t in_off = table[h * 5], in_w = table[h * 5 + 1], b_off = table[h * 5 + 2];
            const int64_t out_off = table[h * 5 + 3], out_w = table[h * 5 + 4];
            acc.assign(size_t(out_w), 0.0);
            const float * xr = x + t * p.in_total + in_off;
            for (int64_t i = 0; i < in_w; ++i) {
                const float * br = bases + b_off + i * out_w;
                for (int64_t j = 0; j < out_w; ++j) acc[size_t(j)] += double(xr[i]) * double(br[j]);
            }
            for (int64_t j = 0; j < out_w; ++j) y[t * p.out_total + out_off + j] = float(acc[size_t(j)]);
        }
    }
}

}  // namespace kvcomp::cpu
