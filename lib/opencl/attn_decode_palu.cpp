// attn_decode_palu: Palu's decode, keys rebuilt from latents and rotated every step, scheduled and merged as
// attn_decode_ragged. On NVIDIA's driver, where inline PTX mma works, cl_kernels/attn_decode_palu_mma.cl
// (each warp rebuilds, rotates and scores its own 16-row steps on the tensor cores) wherever its conditions
// hold (warps_apply: those of CUDA's palu_mma_handles); elsewhere, and with KVCOMP_CL_PALU_WARPS=0,
// cl_kernels/attn_decode_palu.cl.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>

#include "opencl/backend_opencl.h"
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

// The arguments of both Palu kernels (attn_decode_palu.cl's list).
void set_palu_args(cl_kernel k, const op_desc & op, const split_partials & sp) {
    const auto & p = op.get<attn_decode_palu_params>();
    set_args(k, arg(op.src[0]), arg(op.src[1]), arg(op.src[2]), arg(op.src[3]), arg(op.src[4]), arg(op.src[5]),
             arg(op.src[6]), arg(op.src[7]), arg(op.src[8]), arg(op.src[9]), arg(op.dst[0]), sp.part, sp.ml_off,
             to_int(p.kv.n_kv_heads), to_int(p.kv.k_total), to_int(p.kv.v_total), cl_float(p.scale * kLog2e));
}

// The warp kernel (kvc_adp_warps): warps per work-group, query heads per work-group at most (the mma's 8
// columns are (hi, lo) of 4 heads), the widest latent it takes (B_c fragments of up to 8 latent steps,
// accumulators of up to 8 m-tiles).
constexpr int kWarps = 4;
constexpr int kWarpHeads = 4;
constexpr int64_t kWarpMaxWidth = 128;

struct warps_config {
    const char * asm_kw = nullptr;  // nullptr: the portable kernel runs
    int gb = 1;
    int64_t mw = 0;
};

// Mirrors the local arrays of kvc_adp_warps: B_c fragments (or the warps' merge), q fragments, the angle
// table and the warps' base-angle slots.
size_t warps_local_bytes(int64_t mw, int64_t hd, int64_t rot, bool neox) {
    const size_t mk = size_t((mw + 15) / 16), ncb = size_t(hd / 16), half = size_t(rot / 2);
    const size_t basis = ncb * mk * 32 * 16;
    const size_t merge = sizeof(float) * (size_t(kWarps) * 4 * 16 * mk + 2 * size_t(kWarps) * 4);
    const size_t stride = 2 * half + ((neox ? 16 : 8) - (2 * half) % 32 + 32) % 32;  // the kernel's TSTRIDE
    return std::max(basis, round_up(merge, 16)) + ncb * 32 * 8 + round_up(sizeof(float) * 16 * stride, 16) +
           round_up(sizeof(float) * size_t(kWarps) * 2 * std::max<size_t>(half, 1), 16);
}

// The warp kernel takes what CUDA's tensor-core Palu takes (cuda_backend/attn_decode_palu_mma.cu,
// palu_mma_handles): head_dim 64 or 128, f16 latents up to kWarpMaxWidth wide, an even rot_dim <= head_dim
// (neox: a multiple of 32, so that a pair's halves are whole 16-channel blocks); on NVIDIA's driver with
// inline PTX mma (not opted out with KVCOMP_CL_PALU_WARPS=0), when its arrays fit local memory.
warps_config warps_apply(cl_backend & be, const attn_decode_palu_params & p) {
    const char * opt_out = std::getenv("KVCOMP_CL_PALU_WARPS");
    if (opt_out && std::strcmp(opt_out, "0") == 0) return {};
    const bool neox = p.style == rope_style::neox;
    if (!((p.head_dim == 64 || p.head_dim == 128) && p.kv.bits == 16 && p.kv.max_width >= 1 &&
          p.kv.max_width <= kWarpMaxWidth && p.rot_dim >= 0 && p.rot_dim <= p.head_dim &&
          p.rot_dim % 2 == 0 && (!neox || p.rot_dim % 32 == 0)))
        return {};
    if (warps_local_bytes(p.kv.max_width, p.head_dim, p.rot_dim, neox) > be.dev().local_mem_bytes ||
        be.dev().max_work_group_size < size_t(32 * kWarps))
        return {};
    warps_config c;
    c.mw = p.kv.max_width;
    c.gb = heads_per_work_group(p.n_q_heads / p.kv.n_kv_heads, kWarpHeads);
    c.asm_kw = be.tensor_core_asm();
    return c;
}

// The op on kvc_adp_warps: one work-group per (task, sub-group of GB query heads), the portable kernel's
// arguments, partials and merge.
void run_warps(cl_backend & be, const op_desc & op, const warps_config & c) {
    const auto & p = op.get<attn_decode_palu_params>();
    const int64_t g = p.n_q_heads / p.kv.n_kv_heads;
    defines defs;
    defs.add("G", g)
        .add("GB", c.gb)
        .add("MW", c.mw)
        .add("HD", p.head_dim)
        .add("ROT", p.rot_dim)
        .add("STYLE", int(p.style))
        .add("PAGE_SIZE", p.kv.page_size)
        .add("NW", kWarps)
        .add("KVC_ASM", c.asm_kw);
    const split_partials sp = task_partials_for(be, op.dst[0], p.n_tasks, g, c.mw);
    if (p.n_tasks > 0) {
        const size_t local_size = 32 * kWarps;
        cl_kernel k =
            be.kernel_for_local_size("attn_decode_palu_mma.cl", defs, "kvc_adp_warps", local_size, describe(op));
        set_palu_args(k, op, sp);
        const size_t local[2] = {local_size, 1};
        const size_t global[2] = {local_size * size_t(p.n_tasks), size_t(g / c.gb)};
        be.launch(k, 2, global, local);
    }
    merge_ragged_tasks(be, op, p.kv, p.batch, p.n_q_heads, sp);
}

}  // namespace

std::string attn_decode_palu_kernel(backend & be, const attn_decode_palu_params & p) {
    auto * cb = dynamic_cast<cl_backend *>(&be);
    KVCOMP_CHECK_ARG(cb, "backend ", be.name(), " is not an OpenCL backend");
    return warps_apply(*cb, p).asm_kw ? "kvc_adp_warps" : "kvc_attn_decode_palu";
}

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
    if (const warps_config w = warps_apply(be, p); w.asm_kw) return run_warps(be, op, w);
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
    const split_partials sp = task_partials_for(be, op.dst[0], p.n_tasks, g, c.mw);
    if (p.n_tasks > 0) {
        cl_kernel k = be.kernel("attn_decode_palu.cl", defs, "kvc_attn_decode_palu");
        set_palu_args(k, op, sp);
        const size_t local[1] = {size_t(c.nt)};
        const size_t global[1] = {size_t(c.nt) * size_t(p.n_tasks)};
        be.launch(k, 1, global, local);
    }
    merge_ragged_tasks(be, op, p.kv, p.batch, p.n_q_heads, sp);
}

}  // namespace kvcomp::cl
