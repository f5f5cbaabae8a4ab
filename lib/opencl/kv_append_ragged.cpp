// kv_append_ragged: scatter new tokens into ragged fp16 pools, or quantize them into q4 rows
// (kv.bits == 4, core/ragged_q4.h) (cl_kernels/kv_append_ragged.cl).
#include <algorithm>

#include "opencl/cl_common.h"

namespace kvcomp::cl {

namespace {

// The q4 rows must match the CPU reference byte for byte (as kv_quantize's slots).
constexpr const char * kExactOptions = "-cl-fp32-correctly-rounded-divide-sqrt";

}  // namespace

support supports_kv_append_ragged(const cl_backend & be, const op_desc & op) {
    const auto & p = op.get<kv_append_ragged_params>();
    if (p.kv.bits != 4) return support::yes();
    cl_device_fp_config cfg = 0;
    if (clGetDeviceInfo(be.dev().device, CL_DEVICE_SINGLE_FP_CONFIG, sizeof(cfg), &cfg, nullptr) !=
            CL_SUCCESS ||
        (cfg & CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT) == 0)
        return support::no(
            "q4 ragged pages: device does not round fp32 division correctly, codes could not "
            "match the reference");
    if (op.dst[0].offset % 4 != 0 || op.dst[1].offset % 4 != 0)
        return support::no("q4 ragged pages must start on a 4-byte boundary");
    if (p.kv.n_pages * p.kv.page_size * std::max(p.kv.k_row_bytes, p.kv.v_row_bytes) > 0x7fffffffLL * 4)
        return support::no("q4 page pool too large");
    return support::yes();
}

void run_kv_append_ragged(cl_backend & be, const op_desc & op) {
    const auto & p = op.get<kv_append_ragged_params>();
    if (p.n_tokens == 0) return;
    const bool q4 = p.kv.bits == 4;
    cl_kernel k = q4 ? be.kernel("kv_append_ragged.cl", defines{}, "kvc_kv_append_ragged_q4", kExactOptions)
                     : be.kernel("kv_append_ragged.cl", defines{}, "kvc_kv_append_ragged");
    set_args(k, arg(op.src[0]), arg(op.src[1]), arg(op.src[2]), arg(op.src[3]), arg(op.src[4]),
             arg(op.src[5]), arg(op.src[6]), arg(op.dst[0]), arg(op.dst[1]), to_int(p.kv.n_kv_heads),
             to_int(p.kv.page_size), to_int(p.kv.k_total), to_int(p.kv.v_total), to_int(p.batch),
             to_int(p.kv.n_pages));
    if (q4) {
        // One work-item per (token, K or V row of a head).
        cl_uint i = 24;  // after the 9 (buffer, offset) pairs and 6 ints above
        set_arg(k, i, to_int(p.kv.k_row_bytes));
        set_arg(k, i, to_int(p.kv.v_row_bytes));
        const size_t rows = size_t(2 * p.kv.n_kv_heads);
        const size_t local[2] = {std::min<size_t>(rows, 64), 1};
        const size_t global[2] = {round_up(rows, local[0]), size_t(p.n_tokens)};
        be.launch(k, 2, global, local);
        return;
    }
    const size_t cols = size_t(std::max(p.kv.k_total, p.kv.v_total));
    const size_t local[2] = {std::min<size_t>(128, round_up(cols, 32)), 1};
    const size_t global[2] = {cols, size_t(p.n_tokens)};
    be.launch(k, 2, global, local);
}

}  // namespace kvcomp::cl
