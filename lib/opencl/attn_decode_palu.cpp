// attn_decode_palu: Palu's decode, keys rebuilt from latents and rotated every step
// (cl_kernels/attn_decode_palu.cl), scheduled and merged as attn_decode_ragged.
#include <algorithm>

#include "opencl/cl_common.h"

namespace kvcomp::cl {

namespace {

constexpr float kLog2e = 1.44269504088896340736f;
// 128 work-items: at head_dim 128, G = 4 and 32-token tiles, one key block (8 tokens x 4 dims), one
// (token, head) score and one value lane each. On an H200 through NVIDIA's driver that was 1.8-2.1x
// faster than 64 work-items at Llama-3-8B shapes (docs/data/bench_ops_ocl_palu_blocked_h200.csv).
constexpr int kGroupSize = 128;
constexpr int64_t kMaxGroup = 16;
constexpr size_t kLocalBudget = 32 * 1024;  // leaves room for more than one work-group per unit
constexpr int kTileQuantum = 8;             // the key build's blocks are 8 tokens

struct palu_config {
    int nt = kGroupSize, tt = kGroupSize;  // work-group size, tile tokens
    int64_t mw = 0;
};

// Mirrors the local arrays of kvc_attn_decode_palu.
size_t local_bytes_needed(const palu_config & c, int64_t g, int64_t hd, int64_t rot) {
    const size_t tt = size_t(c.tt), gs = size_t(g), d = size_t(hd);
    return sizeof(float) * (gs * d + tt * d + 2 * tt * gs + size_t(rot)) +
           sizeof(cl_ushort) * tt * size_t(c.mw) + sizeof(cl_ulong) * 2 * tt;
}

// The largest tile (a power of two from the work-group size down to kTileQuantum) whose arrays fit.
palu_config choose_config(const cl_backend & be, const attn_decode_palu_params & p) {
    palu_config c;
    c.nt = int(be.reduction_wg(kGroupSize));
    c.mw = p.kv.max_width;
    const int64_t g = p.n_q_heads / p.kv.n_kv_heads;
    const size_t budget = std::min<size_t>(kLocalBudget, size_t(be.dev().local_mem_bytes));
    c.tt = std::max(c.nt, kTileQuantum);
    while (c.tt > kTileQuantum && local_bytes_needed(c, g, p.head_dim, p.rot_dim) > budget) c.tt /= 2;
    return c;
}

}  // namespace

support supports_attn_decode_palu(const cl_backend & be, const op_desc & op) {
    const auto & p = op.get<attn_decode_palu_params>();
    const int64_t g = p.n_q_heads / p.kv.n_kv_heads;
    if (g > kMaxGroup) return support::no("GQA group above " + std::to_string(kMaxGroup) + " query heads");
    if (p.head_dim % 4 != 0) return support::no("head_dim must be a multiple of 4");
    if (local_bytes_needed(choose_config(be, p), g, p.head_dim, p.rot_dim) > be.dev().local_mem_bytes)
        return support::no("not enough local memory for head_dim " + std::to_string(p.head_dim));
    if (p.kv.n_pages * p.kv.page_size > 0x7fffffff || p.max_seq_len > 0x7fffffff || p.n_tasks > 0x7fffffff)
        return support::no("sizes must fit in 32-bit ints");
    return support::yes();
}

void run_attn_decode_palu(cl_backend & be, const op_desc & op) {
    const auto & p = op.get<attn_decode_palu_params>();
    const palu_config c = choose_config(be, p);
    const int64_t g = p.n_q_heads / p.kv.n_kv_heads;
    defines defs;
    defs.add("G", g)
        .add("NT", c.nt)
        .add("TT", c.tt)
        .add("MW", c.mw)
        .add("HD", p.head_dim)
        .add("ROT", p.rot_dim)
        .add("STYLE", int(p.style))
        .add("PAGE_SIZE", p.kv.page_size);
    const tensor & out = op.dst[0];
    const auto [part, ml_off] = task_partials_for(be, out, p.n_tasks, g, c.mw);
    if (p.n_tasks > 0) {
        cl_kernel k = be.kernel("attn_decode_palu.cl", defs, "kvc_attn_decode_palu");
        set_args(k, arg(op.src[0]), arg(op.src[1]), arg(op.src[2]), arg(op.src[3]), arg(op.src[4]),
                 arg(op.src[5]), arg(op.src[6]), arg(op.src[7]), arg(op.src[8]), arg(op.src[9]), arg(out),
                 part, ml_off, to_int(p.kv.n_kv_heads), to_int(p.kv.k_total), to_int(p.kv.v_total),
                 cl_float(p.scale * kLog2e));
        const size_t local[1] = {size_t(c.nt)};
        const size_t global[1] = {size_t(c.nt) * size_t(p.n_tasks)};
        be.launch(k, 1, global, local);
    }
    merge_ragged_tasks(be, op, p.kv, p.batch, p.n_q_heads, {part, ml_off});
}

}  // namespace kvcomp::cl
