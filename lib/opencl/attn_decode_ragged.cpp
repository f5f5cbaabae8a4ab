// attn_decode_ragged: decode attention in reduced per-head dims over a host task list
// (cl_kernels/attn_decode_ragged.cl): one work-group per schedule row, then a merge kernel for
// the (request, KV head) rows cut into several tasks (and zeros for requests without tokens).
// q4 pages (kv.bits == 4) run cl_kernels/attn_decode_ragged_q4.cl (codes dequantized in registers).
// fp16 pages on NVIDIA's driver, where inline PTX mma works, run cl_kernels/attn_decode_ragged_mma.cl
// (each warp streams its own tiles, scores and values on the tensor cores) wherever its conditions hold
// (warps_apply); elsewhere, and with KVCOMP_CL_RAGGED_WARPS=0, cl_kernels/attn_decode_ragged.cl.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>

#include "core/ragged_q4.h"
#include "opencl/backend_opencl.h"
#include "opencl/cl_common.h"

namespace kvcomp::cl {

namespace {

constexpr float kLog2e = 1.44269504088896340736f;
constexpr int kTileTokens = 64;             // NT as attn_decode (more resident work-groups than 128)
constexpr int kMaxHeadsPerGroup = 8;        // GB: larger GQA groups are split over work-groups
constexpr int64_t kMaxGroup = 16;           // G the merge and the partials are sized for
constexpr size_t kLocalBudget = 36 * 1024;  // above this the tile shrinks (occupancy, 48 KB limit)
constexpr size_t kMergeGroup = 128;         // work-group size of the merge (merge_ragged_tasks)
constexpr size_t kMergeLanes = 32;          // ... and its channels per work-group (lanes of a slice)

struct ragged_config {
    int nt = kTileTokens;
    int gb = 1;        // query heads per work-group
    int vec = 8;       // features per chunk
    int v_unroll = 4;  // V rows in flight per work-item
    int64_t mw = 0;    // the op's max_width: bounds every width, sizes local arrays and partials
};

// Mirrors the local arrays of kvc_attn_decode_ragged.
size_t local_bytes_needed(const ragged_config & c) {
    const size_t nt = size_t(c.nt), vec = size_t(c.vec), gb = size_t(c.gb);
    const size_t mwv = (size_t(c.mw) + vec - 1) / vec, gbp = (gb + 3) / 4 * 4;
    return sizeof(float) * (gb * mwv * vec + 3 * gb + 2 * nt * gbp + gb * nt * (vec + 1)) +  // 3 gb: m_l, mx_l
           sizeof(cl_ushort) * (nt + 1) * (mwv + 8 / vec) * vec + sizeof(cl_ulong) * 4 * nt;
}

int heads_per_group(const attn_decode_ragged_params & p, int most) {
    return heads_per_work_group(p.n_q_heads / p.kv.n_kv_heads, most);
}

ragged_config choose_config(const cl_backend & be, const attn_decode_ragged_params & p) {
    ragged_config c;
    c.gb = heads_per_group(p, kMaxHeadsPerGroup);
    // As attn_decode: 8-wide chunks halve the load instructions, but with many heads per
    // work-group the gb * 8 accumulators crowd out the loads in flight.
    c.vec = c.gb <= 4 ? 8 : 4;
    c.mw = p.kv.max_width;
    c.nt = int(be.reduction_wg(kTileTokens));
    // Wide heads (max_width > 128) would leave one work-group per compute unit: halve the tile
    // while a slot still covers the widest row (nt >= ceil(mw / vec)).
    const size_t budget = std::min<size_t>(kLocalBudget, size_t(be.dev().local_mem_bytes));
    while (local_bytes_needed(c) > budget && c.nt / 2 >= (c.mw + c.vec - 1) / c.vec) c.nt /= 2;
    return c;
}

constexpr int kQ4Tile = 64;  // tile tokens (work-group size) of the q4 kernel

// The q4 kernel's work-group: GB as the f16 kernel's, NT = the tile (>= the words of the widest row).
struct q4_config {
    int nt = kQ4Tile;
    int gb = 1;
    int v_unroll = 4;
    int64_t mw = 0;
    int64_t row_words() const { return 1 + (mw + 7) / 8; }
};

// Mirrors the local arrays of kvc_attn_decode_ragged_q4.
size_t q4_local_bytes(const q4_config & c) {
    const size_t nt = size_t(c.nt), gb = size_t(c.gb), gbp = (gb + 3) / 4 * 4;
    const size_t mw8 = (size_t(c.mw) + 7) / 8 * 8, kstr = size_t(c.row_words()) | 1;
    return sizeof(float) * (gb * mw8 + 4 * gb + 2 * nt * gbp + gb * nt * 9 + 2 * nt) + sizeof(cl_uint) * (nt * kstr + 4 * nt);
}

q4_config choose_q4_config(const cl_backend & be, const attn_decode_ragged_params & p) {
    q4_config c;
    c.gb = choose_config(be, p).gb;
    c.mw = p.kv.max_width;
    c.nt = int(be.reduction_wg(kQ4Tile));
    return c;
}

// The arguments of every ragged decode kernel (portable and per-warp alike): attn_decode_ragged.cl's list, with
// the K and V row bytes before the scale for q4 pages.
void set_ragged_args(cl_kernel k, const op_desc & op, const split_partials & sp) {
    const auto & p = op.get<attn_decode_ragged_params>();
    const auto set = [&](auto... tail) {
        set_args(k, arg(op.src[0]), arg(op.src[1]), arg(op.src[2]), arg(op.src[3]), arg(op.src[4]),
                 arg(op.src[5]), arg(op.src[6]), arg(op.src[7]), arg(op.src[8]), arg(op.dst[0]), sp.part, sp.ml_off,
                 to_int(p.kv.n_kv_heads), to_int(p.kv.k_total), to_int(p.kv.v_total), tail...);
    };
    if (p.kv.bits == 4)
        set(to_int(p.kv.k_row_bytes), to_int(p.kv.v_row_bytes), cl_float(p.scale * kLog2e));
    else
        set(cl_float(p.scale * kLog2e));
}

// q4 pages: one work-group per (task, sub-group of GB query heads).
void run_q4(cl_backend & be, const op_desc & op) {
    const auto & p = op.get<attn_decode_ragged_params>();
    const int64_t g = p.n_q_heads / p.kv.n_kv_heads;
    const q4_config c = choose_q4_config(be, p);
    defines defs;
    defs.add("G", g)
        .add("GB", c.gb)
        .add("NT", c.nt)
        .add("MW", c.mw)
        .add("PAGE_SIZE", p.kv.page_size)
        .add("V_UNROLL", c.v_unroll);
    const split_partials sp = task_partials_for(be, op.dst[0], p.n_tasks, g, p.kv.max_width);
    if (p.n_tasks > 0) {
        cl_kernel k = be.kernel("attn_decode_ragged_q4.cl", defs, "kvc_attn_decode_ragged_q4");
        set_ragged_args(k, op, sp);
        const size_t local[2] = {size_t(c.nt), 1};
        const size_t global[2] = {size_t(c.nt) * size_t(p.n_tasks), size_t(g / c.gb)};
        be.launch(k, 2, global, local);
    }
    merge_ragged_tasks(be, op, p.kv, p.batch, p.n_q_heads, sp);
}

// The warp kernels (kvc_adr_warps for f16 pages, kvc_adr_q4_warps for 4-bit pages): warps per work-group,
// query heads per work-group at most (the mma's 8 columns are (hi, lo) of 4 heads), the widest head they take
// (accumulators of 16-channel m-tiles up to 8), and the smallest stage per warp (bytes): narrower layouts get
// tiles of more than 16 rows.
constexpr int kWarps = 4;
constexpr int kWarpHeads = 4;
constexpr int64_t kWarpMaxWidth = 128;
constexpr int64_t kWarpMinStageBytes = 8192;

// Bytes of a stage row of a width-w head: f16 rows in whole 16-channel steps plus 8 halves (kvc_adr_warps'
// padding); 4-bit rows as they are (core/ragged_q4.h).
int64_t warp_stage_row_bytes(int32_t bits, int64_t w) {
    return bits == 4 ? ragged_q4_row_bytes(w) : 2 * (16 * ((w + 15) / 16) + 8);
}

struct warps_config {
    const char * asm_kw = nullptr;  // nullptr: the work-group kernel runs
    int gb = 1;
    int64_t stage_bytes = 0;  // 16 rows of the widest K and V heads at least (4-bit rows: and 16 bytes of slack)
    int64_t mw = 0;
    int64_t q_width = 0;  // the kernel's staged q row: 16-channel steps (f16), 32-channel groups (4-bit)
};

// Mirrors the local arrays of both warp kernels: q of 4 heads, the warps' stages or the merge.
size_t warps_local_bytes(const warps_config & c) {
    const size_t qw = size_t(c.q_width);
    const size_t merge = sizeof(float) * (kWarps * 4 * qw + 2 * kWarps * 4);
    return sizeof(float) * 4 * qw + std::max(size_t(kWarps) * size_t(c.stage_bytes), merge);
}

// A warp kernel takes pages of heads up to kWarpMaxWidth wide on NVIDIA's driver with inline PTX mma (not
// opted out with KVCOMP_CL_RAGGED_WARPS=0), when its stages fit local memory.
warps_config warps_apply(cl_backend & be, const attn_decode_ragged_params & p) {
    const char * opt_out = std::getenv("KVCOMP_CL_RAGGED_WARPS");
    if (opt_out && std::strcmp(opt_out, "0") == 0) return {};
    if (p.kv.max_width < 1 || p.kv.max_width > kWarpMaxWidth) return {};
    warps_config c;
    c.mw = p.kv.max_width;
    const bool q4 = p.kv.bits == 4;
    c.q_width = q4 ? 32 * ((c.mw + 31) / 32) : 16 * ((c.mw + 15) / 16);
    c.stage_bytes = std::max(16 * 2 * warp_stage_row_bytes(p.kv.bits, c.mw) + (q4 ? 16 : 0), kWarpMinStageBytes);
    c.gb = heads_per_group(p, kWarpHeads);
    if (warps_local_bytes(c) > be.dev().local_mem_bytes || be.dev().max_work_group_size < size_t(32 * kWarps))
        return {};
    c.asm_kw = be.tensor_core_asm();
    return c;
}

// The pages on a warp kernel.
void run_warps(cl_backend & be, const op_desc & op, const warps_config & c) {
    const auto & p = op.get<attn_decode_ragged_params>();
    const bool q4 = p.kv.bits == 4;
    const int64_t g = p.n_q_heads / p.kv.n_kv_heads;
    defines defs;
    defs.add("G", g)
        .add("GB", c.gb)
        .add("MW", c.mw)
        .add("PAGE_SIZE", p.kv.page_size)
        .add("NW", kWarps)
        .add(q4 ? "STAGE_B" : "STAGE_H", q4 ? c.stage_bytes : c.stage_bytes / 2)
        .add("KVC_ASM", c.asm_kw);
    const split_partials sp = task_partials_for(be, op.dst[0], p.n_tasks, g, c.mw);
    if (p.n_tasks > 0) {
        const size_t local_size = 32 * kWarps;
        cl_kernel k = be.kernel_for_local_size(q4 ? "attn_decode_ragged_q4_mma.cl" : "attn_decode_ragged_mma.cl",
                                               defs, q4 ? "kvc_adr_q4_warps" : "kvc_adr_warps", local_size,
                                               describe(op));
        set_ragged_args(k, op, sp);
        const size_t local[2] = {local_size, 1};
        const size_t global[2] = {local_size * size_t(p.n_tasks), size_t(g / c.gb)};
        be.launch(k, 2, global, local);
    }
    merge_ragged_tasks(be, op, p.kv, p.batch, p.n_q_heads, sp);
}

}  // namespace

std::string attn_decode_ragged_kernel(backend & be, const attn_decode_ragged_params & p) {
    auto * cb = dynamic_cast<cl_backend *>(&be);
    KVCOMP_CHECK_ARG(cb, "backend ", be.name(), " is not an OpenCL backend");
    const bool q4 = p.kv.bits == 4;
    if (warps_apply(*cb, p).asm_kw) return q4 ? "kvc_adr_q4_warps" : "kvc_adr_warps";
    return q4 ? "kvc_attn_decode_ragged_q4" : "kvc_attn_decode_ragged";
}

// OpenCL has no occupancy query. Cut for one task per compute unit, the decodes ran two warps per SM
// on an H200 through NVIDIA's driver, too few to hide their load latency. Cut for 8 x the compute
// units (one pass, docs/data/bench_ops_ocl_worker_scales8_h200.csv, scales 1-8), the balanced f16
// decode took 22-39 % less time at batch 16 from 32K and the q4 decode 49-53 % less; at batch 1 it
// was 2-4 % slower at two points (f16 p70 1 x 32K, q4 p70 1 x 4K) and equal or faster at the rest.
// The Palu decode (attn_decode_palu.cl, 128 work-items) alike: cut for one per compute unit it took
// 1.25-1.41x its time at 8 at batch 16 and 0.99-1.47x at batch 1 (one pass,
// docs/data/bench_ops_ocl_palu_scales_h200.csv). CPU devices (PoCL) run one work-group per core at a
// time.
// Fewer (request, KV head) rows than half the compute units: 4 x. Such a row is cut into
// 8 x CUs / rows >= 16 tasks, each of which pays its start and its partial, and the row's merge reads
// every partial; with the per-warp kernels, 4 x took 0.89-0.98x the time of 8 x at batches 1-8 and
// 1.01x at batch 16 (H200, geometric means over the f16 p50 / p70 and q4 p70 rows at 32K and 128K,
// docs/data/bench_ops_ocl_worker_scales_batches_h200.csv, visit 141; batch 16 x 8 KV heads is 128 rows on 132 CUs).
// Palu keeps 8 x: its scales were measured with its own kernel, not by batch.
int64_t concurrent_decode_tasks(const cl_backend & be, int64_t rows, bool palu) {
    const int64_t cus = std::max(1, be.info().compute_units);
    if (!be.info().is_gpu) return cus;
    const bool few_rows = !palu && rows * 2 <= cus;
    return cus * (few_rows ? 4 : 8);
}

// The balanced search's per-task cost (backend::decode_task_cost) for the ragged decodes on GPUs: 16384
// (CUDA's) where a (request, KV head) row has at least 16 compute units to itself, else 0. With a cost per
// task the search cuts fewer, longer tasks. Against 0 (H200, NVIDIA's driver, with the channel-block merge,
// two passes; f16 p50 / p70 and q4 p70 rows): batch 1 (8 rows on 132 CUs) 0.77-0.90 x the time at 1 x 128K,
// where the search cut 527-528 tasks instead of 1584-2112, and 1.00-1.03 x at 1 x 32K (the same count);
// batch 2 0.89-0.91 x at 32K but 0.97-1.10 x at 128K; batch 4 0.79-1.03 x at 32K, 1.08-1.16 x at 128K;
// batch 16 0.92-1.05 x (docs/data/bench_ops_ocl_task_cost_merge_h200.csv and _rule_h200.csv, visits 147-148).
// CUDA's workers are its resident blocks; OpenCL's are an estimate (4 or 8 x CUs against 5 resident
// work-groups of kvc_adr_warps per SM), which may be why the finer cut wins there from batch 2 on.
int64_t decode_task_cost(const cl_backend & be, int64_t rows) {
    constexpr int64_t kRaggedDecodeTaskCost = 16384;
    const int64_t cus = std::max(1, be.info().compute_units);
    return be.info().is_gpu && rows * 16 <= cus ? kRaggedDecodeTaskCost : 0;
}

support supports_attn_decode_ragged(const cl_backend & be, const op_desc & op) {
    const auto & p = op.get<attn_decode_ragged_params>();
    const int64_t g = p.n_q_heads / p.kv.n_kv_heads;
    if (g > kMaxGroup) return support::no("GQA group above " + std::to_string(kMaxGroup) + " query heads");
    if (p.kv.bits == 4) {
        if (op.src[1].offset % 4 != 0 || op.src[2].offset % 4 != 0)
            return support::no("q4 ragged pages must start on a 4-byte boundary");
        if (p.kv.n_pages * p.kv.page_size * std::max(p.kv.k_row_bytes, p.kv.v_row_bytes) > 0xffffffffLL * 4 ||
            p.n_tasks > 0x7fffffff)
            return support::no("q4 page pool must fit in 32-bit word offsets and the task list in 32-bit counts");
        const q4_config c = choose_q4_config(be, p);
        if (c.nt < c.row_words())
            return support::no("device work-group limit too small for q4 rows of max_width " +
                               std::to_string(p.kv.max_width));
        if (q4_local_bytes(c) > be.dev().local_mem_bytes)
            return support::no("not enough local memory for q4 rows of max_width " + std::to_string(p.kv.max_width));
        return support::yes();
    }
    const ragged_config c = choose_config(be, p);
    if (c.nt < (c.mw + c.vec - 1) / c.vec)
        return support::no("device work-group limit too small for max_width " +
                           std::to_string(p.kv.max_width));
    if (local_bytes_needed(c) > be.dev().local_mem_bytes)
        return support::no("not enough local memory for max_width " + std::to_string(p.kv.max_width));
    if (p.kv.n_pages * p.kv.page_size > 0x7fffffff || p.max_seq_len > 0x7fffffff || p.n_tasks > 0x7fffffff)
        return support::no("sizes must fit in 32-bit ints");
    return support::yes();
}

void run_attn_decode_ragged(cl_backend & be, const op_desc & op) {
    const auto & p = op.get<attn_decode_ragged_params>();
    if (const warps_config w = warps_apply(be, p); w.asm_kw) return run_warps(be, op, w);
    if (p.kv.bits == 4) return run_q4(be, op);
    const ragged_config c = choose_config(be, p);
    const int64_t g = p.n_q_heads / p.kv.n_kv_heads;
    defines defs;
    defs.add("G", g)
        .add("GB", c.gb)
        .add("NT", c.nt)
        .add("MW", c.mw)
        .add("VEC", c.vec)
        .add("PAGE_SIZE", p.kv.page_size)
        .add("V_UNROLL", c.v_unroll);
    const split_partials sp = task_partials_for(be, op.dst[0], p.n_tasks, g, c.mw);
    if (p.n_tasks > 0) {
        cl_kernel k = be.kernel("attn_decode_ragged.cl", defs, "kvc_attn_decode_ragged");
        set_ragged_args(k, op, sp);
        const size_t local[2] = {size_t(c.nt), 1};
        const size_t global[2] = {size_t(c.nt) * size_t(p.n_tasks), size_t(g / c.gb)};
        be.launch(k, 2, global, local);
    }
    merge_ragged_tasks(be, op, p.kv, p.batch, p.n_q_heads, sp);
}

void merge_ragged_tasks(cl_backend & be, const op_desc & op, const ragged_layout & kv, int64_t batch,
                        int64_t n_q_heads, const split_partials & partials) {
    // A work-group of 128 per (32-channel block, request, query head): 4 slices of 32 lanes, each
    // slice adding a quarter of the row's tasks, so a batch-1 row of 66-264 tasks spreads over
    // 4 x 8 x 4 work-groups (at 8 KV heads of width <= 128) and each lane's chain is a quarter of
    // them. Devices with smaller work-groups get the largest power of two they allow (fewer slices).
    const size_t wg = be.reduction_wg(kMergeGroup);
    const size_t lanes = std::min<size_t>(wg, kMergeLanes);
    const size_t blocks = (size_t(kv.max_width) + lanes - 1) / lanes;
    defines defs;
    defs.add("G", n_q_heads / kv.n_kv_heads).add("MW", kv.max_width).add("WG", wg).add("L", lanes);
    cl_kernel mk = be.kernel("attn_decode_ragged_merge.cl", defs, "kvc_attn_decode_ragged_merge");
    set_args(mk, arg(op.src[6]), arg(op.src[8]), arg(op.dst[0]), partials.part, partials.ml_off,
             to_int(kv.n_kv_heads), to_int(batch), to_int(kv.v_total));
    const size_t mlocal[3] = {wg, 1, 1};
    const size_t mglobal[3] = {wg * blocks, size_t(n_q_heads), size_t(batch)};
    be.launch(mk, 3, mglobal, mlocal);
}

}  // namespace kvcomp::cl
