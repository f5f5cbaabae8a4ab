// attn_decode: split-KV decode attention over paged fp16 K/V (cl_kernels/attn_decode.cl).
//
// Work decomposition: one work-group per (split, KV head x query sub-group, request). All query
// heads sharing a KV head (up to 8 per work-group) are handled together so each K/V page is read
// once per group. Long contexts are cut into n_splits chunks so that small batches still fill the
// device; partial results (unnormalized output, running max, sum) go to the backend's scratch buffer
// and a merge kernel combines them.
// On NVIDIA's driver, where the inline-PTX probe passes, cl_kernels/attn_decode_warps.cl runs instead
// wherever its conditions hold (warps_apply): CUDA's attn_decode kernel (each warp streams its own tokens
// through a cp.async ring), with the same splits' partials and merge. KVCOMP_CL_DECODE_WARPS=0 opts out.
#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "opencl/cl_common.h"

namespace kvcomp::cl {

namespace {

constexpr float kLog2e = 1.44269504088896340736f;  // scores use exp2: exp(x) = exp2(x * log2(e))
constexpr int kMaxHeadDim = 256;
constexpr int kMaxHeadsPerGroup = 8;
constexpr int kTileTokens = 64;  // NT: 64 measured faster than 128 on H200 (more resident work-groups)
constexpr int64_t kMinTokensPerSplit = 256;  // below this the merge costs more than the parallelism gains

struct decode_config {
    int gb = 1;        // query heads per work-group
    int vec = 4;       // features per vector load
    int nt = 64;       // work-group size = tokens per tile
    int v_unroll = 8;  // V rows in flight per work-item
    bool aligned = false;
};

decode_config choose_config(const cl_backend & be, const op_desc & op) {
    const auto & p = op.get<attn_decode_params>();
    decode_config c;
    c.gb = heads_per_work_group(p.n_q_heads / p.kv.n_kv_heads, kMaxHeadsPerGroup);
    // 8-wide loads halve the load instructions; with many heads per group the 8-wide accumulators
    // (gb * 8 registers) would crowd out the loads in flight, so fall back to 4.
    c.vec = (p.kv.head_dim % 8 == 0 && c.gb <= 4) ? 8 : 4;
    c.nt = int(be.reduction_wg(kTileTokens));
    // 8 V rows in flight per work-item (16 was no better overall on H200 and costs registers),
    // but no more than the tokens a slot sees per tile (LV), or the unrolled loop never runs.
    const int lanes = int(p.kv.head_dim) / c.vec;
    c.v_unroll = std::max(1, std::min(8, lanes));
    c.aligned = elem_off(op.src[1]) % uint64_t(c.vec) == 0 && elem_off(op.src[2]) % uint64_t(c.vec) == 0;
    return c;
}

// Mirrors the local arrays of kvc_attn_decode_split.
size_t local_bytes_needed(const decode_config & c, int64_t head_dim) {
    const size_t d = size_t(head_dim), nt = size_t(c.nt);
    const size_t tpv = nt / (d / size_t(c.vec));
    const size_t gbp = (size_t(c.gb) + 3) / 4 * 4;
    size_t bytes =
        sizeof(float) * (size_t(c.gb) * d + 2 * nt * gbp + tpv * d + tpv) + sizeof(cl_ulong) * 2 * nt;
    if (c.aligned) bytes += nt * (d + 8) * 2;  // staged K rows
    return bytes;
}

int choose_splits(const cl_backend & be, const attn_decode_params & p, const decode_config & c) {
    if (p.n_splits > 0) return p.n_splits;
    const int64_t groups = p.batch * p.kv.n_kv_heads * (p.n_q_heads / p.kv.n_kv_heads / c.gb);
    // Aim for about four resident work-groups per compute unit.
    const int64_t target = int64_t(std::max(1, be.info().compute_units)) * 4;
    const int64_t want = (target + groups - 1) / groups;
    const int64_t by_len =
        std::max<int64_t>(1, (p.max_seq_len + kMinTokensPerSplit - 1) / kMinTokensPerSplit);
    return int(std::clamp<int64_t>(want, 1, std::min<int64_t>(by_len, 1024)));
}

// attn_decode.cl's program for op (the portable kernel and the merge both kernels use).
defines portable_defines(const cl_backend & be, const op_desc & op) {
    const auto & p = op.get<attn_decode_params>();
    const decode_config c = choose_config(be, op);
    defines defs;
    defs.add("HEAD_DIM", p.kv.head_dim)
        .add("PAGE_SIZE", p.kv.page_size)
        .add("GB", c.gb)
        .add("NT", c.nt)
        .add("VEC", c.vec)
        .add("V_UNROLL", c.v_unroll)
        .add("KV_ALIGNED", c.aligned ? 1 : 0);
    return defs;
}

// kvc_attn_decode_warps: warps per work-group, and per GQA sub-group size GB the tokens per lane and stage
// (U) and the ring's stages (NST), as CUDA's attn_decode (measured there on an H200: 2 stages of U = 4
// saturate HBM; 8 heads take U = 2, NST = 4 for registers). Work-groups resident per compute unit, for the
// split count: the registers NVIDIA's driver gives it on an H200 (visit 131,
// docs/data/ocl_build_log_verbose_h200.log), 128 per work-item at sub-groups of up to 4 heads and 194 at 8,
// allow 4 and 2 of them on an SM of 64K.
constexpr int kWarps = 4;

struct warps_config {
    const char * asm_kw = nullptr;  // nullptr: the portable kernel runs
    int gb = 1;
    int u = 4;
    int nst = 2;
    int64_t resident_per_cu = 4;
};

int64_t warps_tokens_per_iter(const warps_config & c, int64_t head_dim) {
    return int64_t(kWarps) * c.u * (32 / (head_dim / 8));
}

// Mirrors kvc_attn_decode_warps' local array: the ring, or the warps' merge where larger.
size_t warps_local_bytes(const warps_config & c, int64_t head_dim) {
    const size_t ring = size_t(c.nst) * size_t(c.u) * 2 * 32 * kWarps * 16;
    const size_t merge =
        sizeof(float) * (size_t(kWarps) * size_t(c.gb) * size_t(head_dim) + 2 * kWarps * size_t(c.gb));
    return std::max(ring, merge);
}

// The per-warp kernel takes head_dim 64 or 128 with sub-groups of 1, 2, 4 or 8 query heads and K / V views
// that start 16-byte aligned (pools_aligned), on NVIDIA's driver where the inline-PTX probe passes (not opted
// out with KVCOMP_CL_DECODE_WARPS=0), when its ring fits local memory.
warps_config warps_apply(cl_backend & be, const attn_decode_params & p, bool pools_aligned) {
    const char * opt_out = std::getenv("KVCOMP_CL_DECODE_WARPS");
    if (opt_out && std::strcmp(opt_out, "0") == 0) return {};
    const int64_t d = p.kv.head_dim;
    if ((d != 64 && d != 128) || !pools_aligned) return {};
    warps_config c;
    c.gb = heads_per_work_group(p.n_q_heads / p.kv.n_kv_heads, kMaxHeadsPerGroup);
    if (c.gb != 1 && c.gb != 2 && c.gb != 4 && c.gb != 8) return {};
    if (c.gb == 8) c.u = 2, c.nst = 4, c.resident_per_cu = 2;
    if (warps_local_bytes(c, d) > be.dev().local_mem_bytes ||
        be.dev().max_work_group_size < size_t(32 * kWarps))
        return {};
    c.asm_kw = be.tensor_core_asm();
    return c;
}

// CUDA's rule: the split count whose work-groups fill the resident slots in the most even whole waves
// (a near-tie goes to fewer splits: less merge work), chunks >= kMinTokensPerSplit tokens and a whole
// number of the kernel's iterations.
void choose_warps_splits(const cl_backend & be, const attn_decode_params & p, const warps_config & c,
                         int * n_splits, int64_t * chunk) {
    const int64_t per_iter = warps_tokens_per_iter(c, p.kv.head_dim);
    const auto ceil_div = [](int64_t a, int64_t b) { return (a + b - 1) / b; };
    int64_t splits = p.n_splits;
    if (splits <= 0 && p.max_seq_len > 0) {
        const int64_t work = p.batch * p.kv.n_kv_heads * (p.n_q_heads / p.kv.n_kv_heads / c.gb);
        const int64_t slots = int64_t(std::max(1, be.info().compute_units)) * c.resident_per_cu;
        const int64_t most =
            std::min(std::max<int64_t>(1, p.max_seq_len / kMinTokensPerSplit), 2 * ceil_div(slots, work) + 1);
        double best = 0.0;
        splits = 1;
        for (int64_t s = 1; s <= most; ++s) {
            const double eff = double(work * s) / double(ceil_div(work * s, slots) * slots);
            if (eff > best + 0.02) best = eff, splits = s;
        }
    }
    splits = std::clamp<int64_t>(splits, 1, 1024);
    *chunk = ceil_div(ceil_div(std::max<int64_t>(p.max_seq_len, 1), splits), per_iter) * per_iter;
    *n_splits = int(p.n_splits > 0 ? splits : std::max<int64_t>(1, ceil_div(p.max_seq_len, *chunk)));
}

// Either decode kernel k over the op: kvc_attn_decode_split's arguments and NDRange (local_size work-items
// per (split, KV head x sub-group of gb query heads, request)), then, with several splits, the merge of their
// partials (kvc_attn_decode_merge in attn_decode.cl's program of merge_defs, portable_defines).
void launch_splits(cl_backend & be, const op_desc & op, cl_kernel k, size_t local_size, int gb, int n_splits,
                   int64_t chunk, const defines & merge_defs) {
    const auto & p = op.get<attn_decode_params>();
    const int64_t d = p.kv.head_dim;
    const split_partials sp = split_partials_for(be, op.dst[0], p.batch, p.n_q_heads, d, n_splits);
    set_args(k, arg(op.src[0]), arg(op.src[1]), arg(op.src[2]), arg(op.src[3]), arg(op.src[4]),
             arg(op.src[5]), arg(op.dst[0]), sp.part, sp.ml_off, to_int(p.kv.n_kv_heads), to_int(p.n_q_heads),
             cl_int(n_splits), to_int(chunk), cl_float(p.scale * kLog2e));
    const size_t sub_groups = size_t(p.n_q_heads / p.kv.n_kv_heads / gb);
    const size_t local[3] = {local_size, 1, 1};
    const size_t global[3] = {local_size * size_t(n_splits), size_t(p.kv.n_kv_heads) * sub_groups,
                              size_t(p.batch)};
    be.launch(k, 3, global, local);
    if (n_splits <= 1) return;
    cl_kernel mk = be.kernel("attn_decode.cl", merge_defs, "kvc_attn_decode_merge");
    set_args(mk, sp.part, sp.ml_off, arg(op.dst[0]), to_int(p.n_q_heads), cl_int(n_splits));
    const size_t mlocal[3] = {size_t(std::min<int64_t>(d, 128)), 1, 1};
    const size_t mglobal[3] = {size_t(d), size_t(p.n_q_heads), size_t(p.batch)};
    be.launch(mk, 3, mglobal, mlocal);
}

// The per-warp kernel and, with several splits, the merge.
void run_warps(cl_backend & be, const op_desc & op, const warps_config & c) {
    const auto & p = op.get<attn_decode_params>();
    int n_splits = 1;
    int64_t chunk = 0;
    choose_warps_splits(be, p, c, &n_splits, &chunk);
    defines defs;
    defs.add("HEAD_DIM", p.kv.head_dim)
        .add("PAGE_SIZE", p.kv.page_size)
        .add("GB", c.gb)
        .add("NW", kWarps)
        .add("U", c.u)
        .add("NST", c.nst)
        .add("RING_WAIT", c.nst - 1)
        .add("KVC_ASM", c.asm_kw);
    const size_t local_size = 32 * kWarps;
    cl_kernel k = be.kernel_for_local_size("attn_decode_warps.cl", defs, "kvc_attn_decode_warps", local_size,
                                           describe(op));
    launch_splits(be, op, k, local_size, c.gb, n_splits, chunk, portable_defines(be, op));
}

}  // namespace

std::string attn_decode_kernel(backend & be, const attn_decode_params & p) {
    auto * cb = dynamic_cast<cl_backend *>(&be);
    KVCOMP_CHECK_ARG(cb, "backend ", be.name(), " is not an OpenCL backend");
    return warps_apply(*cb, p, true).asm_kw ? "kvc_attn_decode_warps" : "kvc_attn_decode_split";
}

support supports_attn_decode(const cl_backend & be, const op_desc & op) {
    const auto & p = op.get<attn_decode_params>();
    if (p.kv.head_dim % 4 != 0 || p.kv.head_dim > kMaxHeadDim)
        return support::no("head_dim must be a multiple of 4 and at most 256, got " +
                           std::to_string(p.kv.head_dim));
    const decode_config c = choose_config(be, op);
    if (c.nt < p.kv.head_dim / c.vec)
        return support::no("device work-group limit too small for head_dim " + std::to_string(p.kv.head_dim));
    if (local_bytes_needed(c, p.kv.head_dim) > be.dev().local_mem_bytes)
        return support::no("not enough local memory for head_dim " + std::to_string(p.kv.head_dim));
    if (p.kv.n_pages * p.kv.page_size > 0x7fffffff || p.max_seq_len > 0x7fffffff)
        return support::no("sequence lengths must fit in 32-bit ints");
    return support::yes();
}

void run_attn_decode(cl_backend & be, const op_desc & op) {
    const auto & p = op.get<attn_decode_params>();
    const bool aligned = elem_off(op.src[1]) % 8 == 0 && elem_off(op.src[2]) % 8 == 0;
    if (const warps_config w = warps_apply(be, p, aligned); w.asm_kw) return run_warps(be, op, w);
    const decode_config c = choose_config(be, op);
    const int n_splits = choose_splits(be, p, c);
    const int64_t per_split = (p.max_seq_len + n_splits - 1) / n_splits;
    const int64_t chunk = int64_t(round_up(size_t(std::max<int64_t>(per_split, 1)), size_t(c.nt)));
    const defines defs = portable_defines(be, op);
    cl_kernel k = be.kernel("attn_decode.cl", defs, "kvc_attn_decode_split");
    launch_splits(be, op, k, size_t(c.nt), c.gb, n_splits, chunk, defs);
}

}  // namespace kvcomp::cl
