// attn_prefill: causal attention over a ragged batch, flash-attention style with K/V tiles in local
// memory (cl_kernels/attn_prefill.cl): on the tensor cores where NVIDIA's driver runs inline PTX
// mma.sync, else on the CUDA cores / vector units.
#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "opencl/cl_common.h"

namespace kvcomp::cl {

namespace {

constexpr float kLog2e = 1.44269504088896340736f;
constexpr int kMaxHeadDim = 256;
constexpr size_t kLocalBudget = 32 * 1024;  // leaves room for several work-groups per compute unit

constexpr int kMmaRows = 64;      // query rows per work-group of the tensor-core kernel (PM_BQ)
constexpr size_t kMmaItems = 128;  // its 4 warps of 16 rows

struct prefill_config {
    int bq = 16, bk = 32, tpr = 8;
};

size_t local_bytes_needed(const prefill_config & c, int64_t d) {
    return sizeof(float) * size_t(c.bq * (d + 1) + c.bk * (d + 1) + c.bk * d + int64_t(c.bq) * c.bk);
}

prefill_config choose_config(const cl_backend & be, int64_t d) {
    prefill_config c;
    c.tpr = d % 8 == 0 ? 8 : 4;
    while (c.bq > 1 && size_t(c.bq * c.tpr) > be.dev().max_work_group_size) c.bq /= 2;
    const size_t budget = std::min<size_t>(kLocalBudget, size_t(be.dev().local_mem_bytes));
    while (c.bk > 4 && local_bytes_needed(c, d) > budget) c.bk /= 2;
    return c;
}

}  // namespace

support supports_attn_prefill(const cl_backend & be, const op_desc & op) {
    const auto & p = op.get<attn_prefill_params>();
    if (p.head_dim % 4 != 0 || p.head_dim > kMaxHeadDim)
        return support::no("head_dim must be a multiple of 4 and at most 256, got " +
                           std::to_string(p.head_dim));
    const prefill_config c = choose_config(be, p.head_dim);
    if (local_bytes_needed(c, p.head_dim) > be.dev().local_mem_bytes)
        return support::no("not enough local memory for head_dim " + std::to_string(p.head_dim));
    if (p.n_tokens > 0x7fffffff) return support::no("n_tokens must fit in a 32-bit int");
    return support::yes();
}

void run_attn_prefill(cl_backend & be, const op_desc & op) {
    const auto & p = op.get<attn_prefill_params>();
    if (p.n_tokens == 0) return;
    const prefill_config c = choose_config(be, p.head_dim);
    defines defs;
    const bool with_lse = op.dst.size() > 1 && op.dst[1].buf;
    // The tensor-core kernel where it applies (NVIDIA's driver; 16-byte K/V rows it reads whole).
    // KVCOMP_CL_PREFILL_MMA=0 keeps the CUDA-core kernel (for timing one against the other).
    const char * opt_out = std::getenv("KVCOMP_CL_PREFILL_MMA");
    const char * kw = opt_out && std::strcmp(opt_out, "0") == 0 ? nullptr : be.tensor_core_asm();
    const bool mma = kw && p.head_dim % 16 == 0 && p.head_dim <= 128 && elem_off(op.src[1]) % 8 == 0 &&
                     elem_off(op.src[2]) % 8 == 0;
    // Query rows and work-items per work-group.
    const int64_t group_rows = mma ? kMmaRows : c.bq;
    const size_t group_items = mma ? kMmaItems : size_t(c.bq * c.tpr);
    if (mma) {
        defs.add("PREFILL_MMA", 1).add("HEAD_DIM", p.head_dim).add("KVC_ASM", kw);
    } else {
        defs.add("HEAD_DIM", p.head_dim).add("BQ", c.bq).add("BK", c.bk).add("TPR", c.tpr);
    }
    if (with_lse) defs.add("WITH_LSE", 1);
    cl_kernel k = be.kernel("attn_prefill.cl", defs, "kvc_attn_prefill");
    set_args(k, arg(op.src[0]), arg(op.src[1]), arg(op.src[2]), arg(op.src[3]), arg(op.dst[0]),
             to_int(p.n_q_heads), to_int(p.n_kv_heads), cl_float(p.scale * kLog2e));
    if (with_lse) {
        cl_uint next = 13;  // after the 13 arguments above (a view is a buffer and an offset)
        set_arg(k, next, arg(op.dst[1]));
    }
    // The grid covers max_seq_len query rows per request (the host knows it from the batch); tiles
    // past a request's end exit at once. Without a bound, n_tokens bounds every request.
    const int64_t rows = p.max_seq_len > 0 ? std::min(p.max_seq_len, p.n_tokens) : p.n_tokens;
    const size_t local[3] = {group_items, 1, 1};
    const size_t global[3] = {group_items * size_t((rows + group_rows - 1) / group_rows), size_t(p.n_q_heads),
                              size_t(p.batch)};
    be.launch(k, 3, global, local);
}

}  // namespace kvcomp::cl
