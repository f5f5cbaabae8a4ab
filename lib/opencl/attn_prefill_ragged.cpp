// attn_prefill_ragged: causal prefill with per-head widths, plain or balanced row blocks
// (cl_kernels/attn_prefill_ragged.cl).
#include <algorithm>

#include "opencl/cl_common.h"

namespace kvcomp::cl {

namespace {

constexpr float kLog2e = 1.44269504088896340736f;
constexpr size_t kLocalBudget = 32 * 1024;  // leaves room for several work-groups per compute unit

struct prefill_config {
    int bq = 16, bk = 32, tpr = 8;
};

// Mirrors the local arrays of kvc_attn_prefill_ragged.
size_t local_bytes_needed(const prefill_config & c, int64_t mw) {
    return sizeof(float) * size_t(c.bq * (mw + 1) + c.bk * (mw + 1) + c.bk * mw + int64_t(c.bq) * c.bk);
}

prefill_config choose_config(const cl_backend & be, int64_t mw) {
    prefill_config c;
    while (c.bq > 1 && size_t(c.bq * c.tpr) > be.dev().max_work_group_size) c.bq /= 2;
    const size_t budget = std::min<size_t>(kLocalBudget, size_t(be.dev().local_mem_bytes));
    while (c.bk > 4 && local_bytes_needed(c, mw) > budget) c.bk /= 2;
    return c;
}

}  // namespace

support supports_attn_prefill_ragged(const cl_backend & be, const op_desc & op) {
    const auto & p = op.get<attn_prefill_ragged_params>();
    const prefill_config c = choose_config(be, p.max_width);
    if (local_bytes_needed(c, p.max_width) > be.dev().local_mem_bytes)
        return support::no("not enough local memory for max_width " + std::to_string(p.max_width));
    if (p.n_tokens * p.n_q_heads / p.n_kv_heads * std::max(p.k_total, p.v_total) > 0x7fffffff)
        return support::no("n_tokens * row length must fit in a 32-bit int");
    return support::yes();
}

void run_attn_prefill_ragged(cl_backend & be, const op_desc & op) {
    const auto & p = op.get<attn_prefill_ragged_params>();
    if (p.n_tokens == 0) return;
    const prefill_config c = choose_config(be, p.max_width);
    defines defs;
    defs.add("G", p.n_q_heads / p.n_kv_heads)
        .add("MW", p.max_width)
        .add("BQ", c.bq)
        .add("BK", c.bk)
        .add("TPR", c.tpr);
    cl_kernel k = be.kernel("attn_prefill_ragged.cl", defs, "kvc_attn_prefill_ragged");
    set_args(k, arg(op.src[0]), arg(op.src[1]), arg(op.src[2]), arg(op.src[3]), arg(op.src[4]),
             arg(op.dst[0]), to_int(p.n_kv_heads), to_int(p.k_total), to_int(p.v_total),
             cl_int(p.balanced ? 1 : 0), cl_float(p.scale * kLog2e));
    // Sized for one BQ block per work-group (the plain split): with balanced row blocks, the
    // blocks of narrow heads past the request's end exit at once.
    const int64_t rows = p.max_seq_len > 0 ? std::min(p.max_seq_len, p.n_tokens) : p.n_tokens;
    const size_t nt = size_t(c.bq * c.tpr);
    const size_t local[3] = {nt, 1, 1};
    const size_t global[3] = {nt * size_t((rows + c.bq - 1) / c.bq), size_t(p.n_q_heads), size_t(p.batch)};
    be.launch(k, 3, global, local);
}

}  // namespace kvcomp::cl
