// get_rows: embedding lookup; an out-of-range id yields a zero row (see core/op.h).
#include "cpu/cpu_common.h"

namespace kvcomp::cpu {

void run_get_rows(const op_desc & op) {
    const auto & p = op.get<get_rows_params>();
    const int32_t * ids = ptr<const int32_t>(op.src[1]);
    float * d = ptr<float>(op.dst[0]);
    for (int64_t i = 0; i < p.n_ids; ++i) {
        const int64_t id = ids[i];
        const bool ok = id >= 0 && id < p.n_table_rows;
        for (int64_t j = 0; j < p.row_len; ++j)
            d[i * p.row_len + j] = ok ? load_float(op.src[0], id * p.row_len + j) : 0.0f;
    }
}

}  // namespace kvcomp::cpu
