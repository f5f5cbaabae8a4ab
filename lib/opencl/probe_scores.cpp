// probe_scores: ZipCache saliency scores of keys under probe queries (cl_kernels/probe_scores.cl).
//
// Two deterministic passes: the per-(probe, query head) log-denominators (unless the caller
// supplies them) into the backend's scratch buffer, then one work-item per key summing over the
// group's query heads and the probes of its request in a fixed order. No float atomics, so
// results do not depend on scheduling. The ragged form (batch > 0) serves a whole step's requests
// in one call; each probe only walks its own request's keys.
#include <algorithm>

#include "opencl/cl_common.h"

namespace kvcomp::cl {

namespace {

constexpr float kLog2e = 1.44269504088896340736f;  // dots are pre-scaled so the kernels use exp2
constexpr size_t kLseGroup = 128;                   // keys per work-group in the lse pass
constexpr size_t kKeyGroup = 64;                    // keys per work-group in the scores pass

}  // namespace

support supports_probe_scores(const cl_backend & be, const op_desc & op) {
    const auto & p = op.get<probe_scores_params>();
    if (p.head_dim > 1024) return support::no("head_dim must be at most 1024");
    if (p.n_keys > 0x7fffffff || p.n_probes > 0x7fffffff || p.row_tokens > 0x7fffffff || p.batch > 0x7fffffff)
        return support::no("keys, probes, row_tokens and batch must fit in 32-bit ints");
    if (sizeof(float) * size_t(p.head_dim) + 2 * sizeof(float) * kLseGroup > be.dev().local_mem_bytes)
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
        defs.add("NT", nt);
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
                 to_int(p.n_keys), to_int(p.n_q_heads), to_int(p.n_kv_heads), to_int(p.row_tokens),
                 to_int(p.batch), cl_float(qscale));
        const size_t local[3] = {nt, 1, 1};
        const size_t global[3] = {nt, size_t(p.n_q_heads), size_t(p.n_probes)};
        be.launch(lse_k, 3, global, local);
    }

    cl_kernel k = be.kernel("probe_scores.cl", defs, "kvc_probe_scores");
    size_t wg = be.reduction_wg(kKeyGroup);
    while (wg > 1 && wg > be.kernel_wg_limit(k)) wg /= 2;
    set_args(k, arg(op.src[0]), arg(op.src[1]), arg(op.src[2]), arg(op.src[3]), lse, lse_off, probe_ip, key_ip,
             arg(op.dst[0]), to_int(p.n_probes), to_int(p.n_keys), to_int(p.n_q_heads), to_int(p.n_kv_heads),
             to_int(p.row_tokens), to_int(p.batch), cl_float(qscale));
    const size_t local[3] = {wg, 1, 1};
    const size_t global[3] = {size_t(p.n_keys), size_t(p.n_kv_heads), 1};
    be.launch(k, 3, global, local);
}

}  // namespace kvcomp::cl
