// attn_decode_ragged: decode attention in reduced per-head dims over a host task list
// (cl_kernels/attn_decode_ragged.cl): one work-group per schedule row, then a merge kernel for
// the (request, KV head) rows cut into several tasks (and zeros for requests without tokens).
#include <algorithm>

#include "opencl/cl_common.h"

namespace kvcomp::cl {

namespace {

constexpr float kLog2e = 1.44269504088896340736f;
constexpr int kTileTokens = 64;
constexpr int64_t kMaxGroup = 16;  // G accumulators of MW / NT features each live in registers

struct ragged_config {
    int nt = kTileTokens;
    int64_t mw = 0;  // the op's max_width: bounds every width, sizes local arrays and partials
};

ragged_config choose_config(const cl_backend & be, const attn_decode_ragged_params & p) {
    ragged_config c;
    c.nt = int(be.reduction_wg(kTileTokens));
    c.mw = p.kv.max_width;
    return c;
}

// Mirrors the local arrays of kvc_attn_decode_ragged.
size_t local_bytes_needed(const ragged_config & c, int64_t g) {
    const size_t nt = size_t(c.nt), mw = size_t(c.mw), gs = size_t(g);
    return sizeof(float) * (gs * mw + 2 * nt * gs) + sizeof(cl_ushort) * nt * mw + sizeof(cl_ulong) * 2 * nt;
}

}  // namespace

support supports_attn_decode_ragged(const cl_backend & be, const op_desc & op) {
    const auto & p = op.get<attn_decode_ragged_params>();
    const int64_t g = p.n_q_heads / p.kv.n_kv_heads;
    if (g > kMaxGroup) return support::no("GQA group above " + std::to_string(kMaxGroup) + " query heads");
    if (local_bytes_needed(choose_config(be, p), g) > be.dev().local_mem_bytes)
        return support::no("not enough local memory for max_width " + std::to_string(p.kv.max_width));
    if (p.kv.n_pages * p.kv.page_size > 0x7fffffff || p.max_seq_len > 0x7fffffff || p.n_tasks > 0x7fffffff)
        return support::no("sizes must fit in 32-bit ints");
    return support::yes();
}

void run_attn_decode_ragged(cl_backend & be, const op_desc & op) {
    const auto & p = op.get<attn_decode_ragged_params>();
    const ragged_config c = choose_config(be, p);
    const int64_t g = p.n_q_heads / p.kv.n_kv_heads;
    defines defs;
    defs.add("G", g).add("NT", c.nt).add("MW", c.mw);
    const tensor & out = op.dst[0];
    const auto [part, ml_off] = task_partials_for(be, out, p.n_tasks, g, c.mw);
    if (p.n_tasks > 0) {
        cl_kernel k = be.kernel("attn_decode_ragged.cl", defs, "kvc_attn_decode_ragged");
        set_args(k, arg(op.src[0]), arg(op.src[1]), arg(op.src[2]), arg(op.src[3]), arg(op.src[4]),
                 arg(op.src[5]), arg(op.src[6]), arg(op.src[7]), arg(op.src[8]), arg(out), part, ml_off,
                 to_int(p.kv.n_kv_heads), to_int(p.kv.page_size), to_int(p.kv.k_total), to_int(p.kv.v_total),
                 cl_float(p.scale * kLog2e));
        const size_t local[1] = {size_t(c.nt)};
        const size_t global[1] = {size_t(c.nt) * size_t(p.n_tasks)};
        be.launch(k, 1, global, local);
    }
    // Rows with several tasks are merged, rows without any get zeros (the host alone knows the
    // table's contents on the device, so this runs for every row and skips single-task rows).
    cl_kernel mk = be.kernel("attn_decode_ragged.cl", defs, "kvc_attn_decode_ragged_merge");
    set_args(mk, arg(op.src[6]), arg(op.src[8]), arg(out), part, ml_off, to_int(p.kv.n_kv_heads),
             to_int(p.batch), to_int(p.kv.v_total));
    const size_t mlocal[3] = {size_t(std::min<int64_t>(round_up(size_t(c.mw), 32), 128)), 1, 1};
    const size_t mglobal[3] = {size_t(c.mw), size_t(p.n_q_heads), size_t(p.batch)};
    be.launch(mk, 3, mglobal, mlocal);
}

}  // namespace kvcomp::cl
