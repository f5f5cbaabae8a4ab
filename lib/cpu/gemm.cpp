// gemm: batched row-major product with fp64 accumulation (the oracle for cuBLAS and CLBlast).
// Operands are converted to double once per batch item so the inner loop is a contiguous dot
// product; the result is the same as the textbook triple loop, only faster.
#include <vector>

#include "cpu/cpu_common.h"

namespace kvcomp::cpu {

namespace {

// Rows of a (rows x cols) matrix at element offset `off` of t, as doubles; transposed when asked.
std::vector<double> to_double(const tensor & t, int64_t off, int64_t rows, int64_t cols, bool transpose) {
    std::vector<double> out(static_cast<size_t>(rows * cols));
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c)
            out[size_t(transpose ? c * rows + r : r * cols + c)] = load_float(t, off + r * cols + c);
    return out;
}

}  // namespace

void run_gemm(const op_desc & op) {
    const auto & p = op.get<gemm_params>();
    const tensor & c = op.dst[0];
    for (int64_t bi = 0; bi < p.batch; ++bi) {
        const std::vector<double> a = to_double(op.src[0], bi * p.stride_a, p.m, p.k, false);
        // B as [n, k] rows: stored that way with trans_b, transposed from [k, n] otherwise.
        const std::vector<double> b = p.trans_b ? to_double(op.src[1], bi * p.stride_b, p.n, p.k, false)
                                                : to_double(op.src[1], bi * p.stride_b, p.k, p.n, true);
        for (int64_t i = 0; i < p.m; ++i) {
            const double * ar = a.data() + i * p.k;
            for (int64_t j = 0; j < p.n; ++j) {
                const double * br = b.data() + j * p.k;
                double acc = 0.0;
                for (int64_t kk = 0; kk < p.k; ++kk) acc += ar[kk] * br[kk];
                const int64_t ci = bi * p.stride_c + i * p.n + j;
                double v = double(p.alpha) * acc;
                if (p.beta != 0.0f) v += double(p.beta) * double(load_float(c, ci));
                store_float(c, ci, float(v));
            }
        }
    }
}

}  // namespace kvcomp::cpu
