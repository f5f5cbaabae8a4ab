// gemm: batched row-major product with fp64 accumulation (the oracle for cuBLAS and CLBlast).
#include <vector>

#include "cpu/cpu_common.h"

namespace kvcomp::cpu {

void run_gemm(const op_desc & op) {
    const auto & p = op.get<gemm_params>();
    const tensor & a = op.src[0];
    const tensor & b = op.src[1];
    const tensor & c = op.dst[0];
    std::vector<double> row(size_t(p.n));
    for (int64_t bi = 0; bi < p.batch; ++bi) {
        const int64_t oa = bi * p.stride_a, ob = bi * p.stride_b, oc = bi * p.stride_c;
        for (int64_t i = 0; i < p.m; ++i) {
            std::fill(row.begin(), row.end(), 0.0);
            for (int64_t kk = 0; kk < p.k; ++kk) {
                const double av = load_float(a, oa + i * p.k + kk);
                if (av == 0.0) continue;
                for (int64_t j = 0; j < p.n; ++j) {
                    const int64_t bidx = p.trans_b ? ob + j * p.k + kk : ob + kk * p.n + j;
                    row[size_t(j)] += av * double(load_float(b, bidx));
                }
            }
            for (int64_t j = 0; j < p.n; ++j) {
                const int64_t ci = oc + i * p.n + j;
                double v = double(p.alpha) * row[size_t(j)];
                if (p.beta != 0.0f) v += double(p.beta) * double(load_float(c, ci));
                store_float(c, ci, float(v));
            }
        }
    }
}

}  // namespace kvcomp::cpu
