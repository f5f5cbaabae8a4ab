// attn_decode_quant: split-KV decode attention over quantized KV blocks plus an fp16 window.
//
// Two kernels: on NVIDIA's driver, where inline PTX mma works, cl_kernels/attn_decode_quant_mma.cl
// (each warp streams its own blocks, scores and values on the tensor cores) wherever its conditions
// hold (warps_apply); elsewhere, and with KVCOMP_CL_QUANT_WARPS=0, cl_kernels/attn_decode_quant.cl.
// Work decomposition as attn_decode: one work-group per (split, KV head x query sub-group, request),
// the query heads of a KV head (up to 8 per work-group, 4 in the warp kernel) together so each block
// is read once per group. Splits cut a request's block list into equal runs (the window goes to the
// last split); partials go to the backend's scratch buffer and attn_decode_quant_merge.cl combines
// them and writes lse.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>

#include "opencl/backend_opencl.h"
#include "opencl/cl_common.h"
#include "opencl/qblock_defines.h"

namespace kvcomp::cl {

namespace {

constexpr float kLog2e = 1.44269504088896340736f;  // scores use exp2: exp(x) = exp2(x * log2(e))
constexpr int kMaxHeadsPerGroup = 8;
constexpr size_t kTileTokens = 64;           // NT: covers a ZipCache segment (<= 60) or a KIVI block in one tile
constexpr int64_t kMinTokensPerSplit = 256;  // below this the merge costs more than the parallelism gains
// The split target. On an H200 through NVIDIA's driver (docs/data/bench_ops_ocl_quant_splits_h200.csv),
// 16 work-groups per compute unit took 15-19 % less time than 4 at batch 16 from 32K (17 splits per
// row instead of 5): 4 left about ten warps per SM waiting on their loads. At batch 1 the same target
// cut rows into 128-256 splits, and the merge, which walks a row's splits serially, made 1 x 32K and
// 1 x 128K 5-11 % slower. So: 16 per compute unit unless that makes more than kMaxSplitsPerRow
// splits, else 4 per compute unit (batch 1 keeps its 64-66 splits). Both branches were measured.
constexpr int64_t kGroupsPerComputeUnit = 16;
constexpr int64_t kGroupsPerComputeUnitFewRows = 4;
constexpr int64_t kMaxSplitsPerRow = 64;

// The warp kernel: warps per work-group, query heads per work-group at most (the mma's 8 columns
// are (hi, lo) of 4 heads), blocks per warp a split should hold at least (so that each warp has a next
// block to load while it computes one).
constexpr int kWarps = 4;
constexpr int kWarpHeads = 4;
constexpr int64_t kMinBlocksPerWarp = 2;
// The smallest block region that the warp kernel brings in by bulk copies (Hopper). Against the
// warps' own 16-byte loads (docs/data/bench_ops_ocl_quant_bulk_dims_h200.csv, H200) they made
// ZipCache's regions of 5.4 to 10.4 KiB (head widths 64 to 128) 1.00-1.21 x faster, and KIVI-2's of
// 1.5 and 3 KiB (widths 64, 128) 0.89-1.02 x; KIVI-2's 2.25 KiB at width 96 gained (1.13-1.23 x at
// batch 16), which the region size does not explain. KIVI-4's 5 KiB at 128: 1.05-1.13 x
// (bench_ops_ocl_quant_bulk_kivi4_h200.csv).
constexpr int64_t kBulkMinBytes = 4096;

int heads_per_group(const attn_decode_quant_params & p, int most) {
    return heads_per_work_group(p.n_q_heads / p.q.n_kv_heads, most);
}

// Mirrors the local arrays of kvc_adq_split.
size_t local_bytes_needed(const qblock_layout & q, int gb, size_t nt) {
    const size_t d = size_t(q.head_dim), tpv = nt / (d / 4), gbp = size_t(gb + 3) / 4 * 4;
    const size_t end_sums = sizeof(float) * size_t(gb) * (tpv * d + tpv + 1);  // shares the block's array
    // q, p_l and the tensor-core path's s_l and running maxima (counted whether or not it is taken).
    return sizeof(float) * (size_t(gb) * d + 3 * nt * gbp + size_t(gb)) + std::max(size_t(q.head_bytes()), end_sums);
}

// Mirrors the local arrays of kvc_adq_warps: q of 4 heads, the warps' stages (with bulk copies each
// holds the slot's 16-byte header too) or the merge, the mbarriers.
size_t warps_local_bytes(const qblock_layout & q, bool bulk) {
    const size_t d = size_t(q.head_dim), stage = size_t(q.head_bytes()) + (bulk ? 16 : 0);
    const size_t merge = sizeof(float) * (kWarps * 4 * d + 2 * kWarps * 4);
    return sizeof(float) * 4 * d + std::max(kWarps * stage, merge) + (bulk ? 8 * kWarps : 0);
}

// Whether kvc_adq_warps brings blocks in by bulk copies (KVC_BULK): NVIDIA compute capability 9 (Hopper,
// where they were measured; other generations keep the loads, which compile everywhere) and regions of at
// least kBulkMinBytes whose stages, 16 bytes larger, fit; KVCOMP_CL_BULK_COPY=0 never, =1 at every size
// (for A/Bs).
bool warps_bulk_copy(const cl_backend & be, const qblock_layout & q) {
    if (be.dev().nv_compute_major != 9) return false;
    const char * env = std::getenv("KVCOMP_CL_BULK_COPY");
    if (env && std::strcmp(env, "0") == 0) return false;
    if (warps_local_bytes(q, true) > be.dev().local_mem_bytes) return false;
    return (env && std::strcmp(env, "1") == 0) || q.head_bytes() >= kBulkMinBytes;
}

// How the warp kernel runs a layout: the inline-assembly keyword (nullptr: the work-group kernel runs)
// and whether blocks come in by bulk copies. Decided once per launch.
struct warps_choice {
    const char * asm_kw = nullptr;
    bool bulk = false;
};

// The warp kernel takes layout q on NVIDIA's driver with inline PTX mma (not opted out with
// KVCOMP_CL_QUANT_WARPS=0), head_dim a multiple of 16 from 32 to 128, value groups of whole m-tiles, and
// a stage per warp in local memory.
warps_choice warps_apply(cl_backend & be, const qblock_layout & q) {
    const char * opt_out = std::getenv("KVCOMP_CL_QUANT_WARPS");
    if (opt_out && std::strcmp(opt_out, "0") == 0) return {};
    const int64_t d = q.head_dim;
    if (d < 32 || d > 128 || d % 16 != 0 || q.v_group <= 0 || q.v_group % 16 != 0 || d % q.v_group != 0)
        return {};
    const bool bulk = warps_bulk_copy(be, q);
    if (warps_local_bytes(q, bulk) > be.dev().local_mem_bytes || be.dev().max_work_group_size < size_t(32 * kWarps))
        return {};
    const char * kw = be.tensor_core_asm();
    return {kw, kw != nullptr && bulk};
}

// The same for an op, whose window rows must also be 32-bit aligned.
warps_choice warps_apply(cl_backend & be, const op_desc & op) {
    if (op.src[4].offset % 4 != 0 || op.src[5].offset % 4 != 0) return {};
    return warps_apply(be, op.get<attn_decode_quant_params>().q);
}

}  // namespace

std::string attn_decode_quant_kernel(backend & be, const qblock_layout & q) {
    auto * cb = dynamic_cast<cl_backend *>(&be);
    KVCOMP_CHECK_ARG(cb, "backend ", be.name(), " is not an OpenCL backend");
    const warps_choice w = warps_apply(*cb, q);
    if (!w.asm_kw) return "kvc_adq_split";
    return w.bulk ? "kvc_adq_warps (bulk copies)" : "kvc_adq_warps";
}

support supports_attn_decode_quant(const cl_backend & be, const op_desc & op) {
    const auto & p = op.get<attn_decode_quant_params>();
    if (op.src[1].offset % 16 != 0)
        return support::no("pool view must start on a 16-byte boundary (slot arrays are 16-byte aligned)");
    if (p.q.head_dim / 4 > int64_t(kTileTokens) || size_t(p.q.head_dim / 4) > be.dev().max_work_group_size)
        return support::no("head_dim " + std::to_string(p.q.head_dim) + " needs more work-items than a work-group has");
    if (local_bytes_needed(p.q, heads_per_group(p, kMaxHeadsPerGroup), kTileTokens) > be.dev().local_mem_bytes)
        return support::no("a block head of " + std::to_string(p.q.head_bytes()) +
                           " bytes does not fit in local memory with the kernel's other arrays");
    if (p.q.slot_bytes() > 0x7fffffff || p.max_tokens > 0x7fffffff || p.n_slots > 0x7fffffff ||
        p.win_tokens > 0x7fffffff || p.n_win_pages > 0x7fffffff || p.win_page_tokens > 0x7fffffff)
        return support::no("slot size, token counts and slots must fit in 32-bit ints");
    return support::yes();
}

namespace {

// Splits: about kGroupsPerComputeUnit work-groups per compute unit (fewer for few rows, above), at
// least kMinTokensPerSplit tokens and min_blocks blocks each, and whole runs of blocks. Returns
// (n_splits, blocks per split).
std::pair<int64_t, int64_t> pick_splits(const cl_backend & be, const attn_decode_quant_params & p, int64_t groups,
                                        int64_t min_blocks) {
    const qblock_layout & q = p.q;
    const int64_t max_blocks = std::max<int64_t>(1, (p.max_tokens + q.block_tokens() - 1) / q.block_tokens());
    int64_t n_splits = p.n_splits;
    if (n_splits <= 0) {
        const int64_t cus = std::max(1, be.info().compute_units);
        int64_t want = (cus * kGroupsPerComputeUnit + groups - 1) / groups;
        if (want > kMaxSplitsPerRow) want = (cus * kGroupsPerComputeUnitFewRows + groups - 1) / groups;
        const int64_t by_len = std::max<int64_t>(
            1, std::min((p.max_tokens + kMinTokensPerSplit - 1) / kMinTokensPerSplit, max_blocks / min_blocks));
        n_splits = std::clamp<int64_t>(want, 1, std::min<int64_t>({by_len, max_blocks, 1024}));
    }
    const int64_t chunk = (max_blocks + n_splits - 1) / n_splits;
    if (p.n_splits <= 0) n_splits = (max_blocks + chunk - 1) / chunk;  // no empty trailing splits
    return {n_splits, chunk};
}

}  // namespace

void run_attn_decode_quant(cl_backend & be, const op_desc & op) {
    const auto & p = op.get<attn_decode_quant_params>();
    const qblock_layout & q = p.q;
    const int64_t d = q.head_dim;
    const warps_choice wc = warps_apply(be, op);
    const char * warps_asm = wc.asm_kw;
    const int gb = heads_per_group(p, warps_asm ? kWarpHeads : kMaxHeadsPerGroup);
    const int64_t subs = p.n_q_heads / q.n_kv_heads / gb;

    defines defs;
    add_qblock_defines(defs, q);
    defs.add("GB", gb);
    cl_kernel k = nullptr;
    size_t local_size = 32 * kWarps;
    if (warps_asm) {
        defs.add("NW", kWarps).add("KVC_ASM", warps_asm);
        if (wc.bulk) defs.add("KVC_BULK", 1);
        k = be.kernel_for_local_size("attn_decode_quant_mma.cl", defs, "kvc_adq_warps", local_size, describe(op));
    } else {
        // NT sizes local arrays (compile-time); fall back to smaller work-groups (>= head_dim / 4) when
        // the device cannot run the kernel with NT work-items.
        for (local_size = be.reduction_wg(kTileTokens);; local_size /= 2) {
            defines nt_defs = defs;
            nt_defs.add("NT", local_size);
            // The segments' scores on the tensor cores (the kernel's KVC_NV_MMA): 4 heads per mma, whole warps.
            if (gb <= 4 && local_size % 32 == 0 && d % 16 == 0)
                if (const char * kw = be.tensor_core_asm()) nt_defs.add("KVC_NV_MMA", 1).add("KVC_ASM", kw);
            k = be.kernel("attn_decode_quant.cl", nt_defs, "kvc_adq_split");
            if (be.kernel_wg_limit(k) >= local_size) break;
            if (local_size / 2 < size_t(d / 4))
                KVCOMP_THROW(status::device_error, describe(op), ": the device runs kvc_adq_split with at most ",
                             be.kernel_wg_limit(k), " work-items, fewer than head_dim / 4 = ", d / 4);
        }
    }

    const auto [n_splits, chunk] = pick_splits(be, p, p.batch * q.n_kv_heads * subs, warps_asm ? kWarps * kMinBlocksPerWarp : 1);
    const tensor & out = op.dst[0];
    const tensor & lse = op.dst[1];
    const auto [part, ml_off] = split_partials_for(be, out, p.batch, p.n_q_heads, d, n_splits);
    set_args(k, arg(op.src[0]), arg(op.src[1]), arg(op.src[2]), arg(op.src[3]), arg(op.src[4]),
             arg(op.src[5]), arg(op.src[6]), arg(op.src[7]), arg(out), arg(lse), part, ml_off,
             to_int(q.n_kv_heads), to_int(p.n_q_heads), to_int(p.n_slots), to_int(p.n_win_rows),
             to_int(p.win_tokens), to_int(p.n_win_pages), to_int(p.win_page_tokens), cl_int(n_splits),
             to_int(chunk), cl_float(p.scale * kLog2e));
    const size_t local[3] = {local_size, 1, 1};
    const size_t global[3] = {local_size * size_t(n_splits), size_t(q.n_kv_heads * subs), size_t(p.batch)};
    be.launch(k, 3, global, local);

    if (n_splits > 1) {
        defines merge_defs;
        merge_defs.add("QB_HD", d);
        cl_kernel mk = be.kernel("attn_decode_quant_merge.cl", merge_defs, "kvc_adq_merge");
        set_args(mk, part, ml_off, arg(out), arg(lse), to_int(p.n_q_heads), cl_int(n_splits));
        const size_t mlocal[3] = {size_t(std::min<int64_t>(d, 128)), 1, 1};
        const size_t mglobal[3] = {size_t(d), size_t(p.n_q_heads), size_t(p.batch)};
        be.launch(mk, 3, mglobal, mlocal);
    }
}

}  // namespace kvcomp::cl
