// probe_scores: ZipCache saliency scores of keys under probe queries (cl_kernels/probe_scores.cl).
//
// Two deterministic passes: the per-(probe, query head) log-denominators (unless the caller
// supplies them) into the backend's scratch buffer, then one work-item per key summing over the
// rows (probe, query head) of its request in a fixed order. No float atomics, so results do not
// depend on scheduling. The ragged form (batch > 0) serves a whole step's requests in one call;
// each probe only walks its own request's keys. Both passes stage RT query rows at a time in local
// memory against keys held in private memory (RT = 16, fewer when local memory is short). On NVIDIA's
// driver the column sums run on the tensor cores (PROBE_MMA in the kernel file).
#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "opencl/cl_common.h"

namespace kvcomp::cl {

namespace {

constexpr float kLog2e = 1.44269504088896340736f;  // dots are pre-scaled so the kernels use exp2
constexpr size_t kLseGroup = 128;                   // keys per work-group in the lse pass
constexpr size_t kKeyGroup = 64;                    // keys per work-group in the scores pass
constexpr size_t kMaxRowTile = 16;                  // query rows staged per tile
constexpr size_t kMmaKeys = 128;                    // keys (and work-items) per work-group of the tensor-core kernel

// Local memory of kvc_probe_lse (the larger of the two kernels) for a row tile and work-group size.
size_t lse_local_bytes(int64_t head_dim, size_t rt, size_t nt) {
    return sizeof(float) * (rt * size_t(head_dim) + 2 * rt * nt);
}

// The largest row tile (a power of two <= 16) whose kernels fit the device's local memory; 0: none.
size_t row_tile(const cl_backend & be, int64_t head_dim, size_t nt) {
    for (size_t rt = kMaxRowTile; rt >= 1; rt /= 2)
        if (lse_local_bytes(head_dim, rt, nt) + 64 <= be.dev().local_mem_bytes) return rt;
    return 0;
}

}  // namespace

support supports_probe_scores(const cl_backend & be, const op_desc & op) {
    const auto & p = op.get<probe_scores_params>();
    if (p.head_dim > 1024) return support::no("head_dim must be at most 1024");
    if (p.n_keys > 0x7fffffff || p.n_probes > 0x7fffffff || p.row_tokens > 0x7fffffff || p.batch > 0x7fffffff)
        return support::no("keys, probes, row_tokens and batch must fit in 32-bit ints");
    if (row_tile(be, p.head_dim, be.reduction_wg(kLseGroup)) == 0)
        return support::no("not enough local memory for head_dim " + std::to_string(p.head_dim));
    return support::yes();
}

void run_probe_scores(cl_backend & be, const op_desc & op) {
    const auto & p = op.get<probe_scores_params>();
    const float qscale = p.scale * kLog2e;
    defines base;
    base.add("HEAD_DIM", p.head_dim).add("K_DT", dtype_code(op.src[2].type));

    // NT sizes kvc_probe_lse's local arrays, so it is a compile-time constant: rebuild smaller if the
    // device cannot run that kernel with NT work-items. Both kernels come from this one program.
    defines defs;
    cl_kernel lse_k = nullptr;
    size_t nt = be.reduction_wg(kLseGroup);
    for (;; nt /= 2) {
        defs = base;
        defs.add("NT", nt).add("RT", row_tile(be, p.head_dim, nt));
        lse_k = be.kernel("probe_scores.cl", defs, "kvc_probe_lse");
        if (nt == 1 || be.kernel_wg_limit(lse_k) >= nt) break;
    }

    // Single-request form: the indptr arguments are not read; any valid buffer stands in.
    const view_arg probe_ip = p.batch > 0 ? arg(op.src[5]) : arg(op.src[1]);
    const view_arg key_ip = p.batch > 0 ? arg(op.src[6]) : arg(op.src[1]);
    cl_mem lse = p.use_lse ? mem_of(op.src[4]) : mem_of(op.dst[0]);  // the latter: n_probes == 0, never read
    const cl_ulong lse_off = p.use_lse ? elem_off(op.src[4]) : 0;
    if (!p.use_lse && p.n_probes > 0) {
        lse = be.scratch(size_t(p.n_probes * p.n_q_heads) * sizeof(float));
        set_args(lse_k, arg(op.src[0]), arg(op.src[1]), arg(op.src[2]), arg(op.src[3]), probe_ip, key_ip, lse,
                 to_int(p.n_probes), to_int(p.n_keys), to_int(p.n_q_heads), to_int(p.n_kv_heads),
                 to_int(p.row_tokens), to_int(p.batch), cl_float(qscale));
        const size_t rt = row_tile(be, p.head_dim, nt);
        const size_t n_rows = size_t(p.n_probes * (p.n_q_heads / p.n_kv_heads));
        const size_t local[3] = {nt, 1, 1};
        const size_t global[3] = {nt, (n_rows + rt - 1) / rt, size_t(p.n_kv_heads)};
        be.launch(lse_k, 3, global, local);
    }

    // The column sums on the tensor cores where NVIDIA's driver runs inline PTX mma.sync (head_dim a
    // multiple of 16 up to 128: two keys' A operands per lane stay in registers); KVCOMP_CL_PROBE_MMA=0
    // keeps the CUDA-core kernel (for timing one against the other).
    const char * opt_out = std::getenv("KVCOMP_CL_PROBE_MMA");
    const char * kw = opt_out && std::strcmp(opt_out, "0") == 0 ? nullptr : be.tensor_core_asm();
    const bool mma = kw && p.head_dim % 16 == 0 && p.head_dim <= 128;
    cl_kernel k = nullptr;
    size_t wg = kMmaKeys, n_items = size_t((p.n_keys + kMmaKeys - 1) / kMmaKeys) * kMmaKeys;
    if (mma) {
        defines mdefs = base;
        mdefs.add("PROBE_MMA", 1).add("KVC_ASM", kw);
        k = be.kernel("probe_scores.cl", mdefs, "kvc_probe_scores");
    } else {
        k = be.kernel("probe_scores.cl", defs, "kvc_probe_scores");
        wg = be.reduction_wg(kKeyGroup);
        while (wg > 1 && wg > be.kernel_wg_limit(k)) wg /= 2;
        n_items = size_t(p.n_keys);
    }
    set_args(k, arg(op.src[0]), arg(op.src[1]), arg(op.src[2]), arg(op.src[3]), lse, lse_off, probe_ip, key_ip,
             arg(op.dst[0]), to_int(p.n_probes), to_int(p.n_keys), to_int(p.n_q_heads), to_int(p.n_kv_heads),
             to_int(p.row_tokens), to_int(p.batch), cl_float(qscale));
    const size_t local[3] = {wg, 1, 1};
    const size_t global[3] = {n_items, size_t(p.n_kv_heads), 1};
    be.launch(k, 3, global, local);
}

}  // namespace kvcomp::cl
