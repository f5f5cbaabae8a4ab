// get_rows: embedding lookup into f32 rows (cl_kernels/get_rows.cl).
#include "opencl/cl_common.h"

namespace kvcomp::cl {

void run_get_rows(cl_backend & be, const op_desc & op) {
    const auto & p = op.get<get_rows_params>();
    if (p.n_ids == 0) return;
    defines defs;
    defs.add("TABLE_DT", dtype_code(op.src[0].type));
    cl_kernel k = be.kernel("get_rows.cl", defs, "kvc_get_rows");
    set_args(k, arg(op.src[0]), arg(op.src[1]), arg(op.dst[0]), to_int(p.row_len), to_int(p.n_table_rows));
    const size_t lx = std::min<size_t>(be.reduction_wg(256), round_up(size_t(p.row_len), 32));
    const size_t local[2] = {lx, 1};
    const size_t global[2] = {size_t(p.row_len), size_t(p.n_ids)};
    be.launch(k, 2, global, local);
}

}  // namespace kvcomp::cl
