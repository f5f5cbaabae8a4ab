// attn_decode: split-KV decode attention over paged fp16 K/V (cl_kernels/attn_decode.cl).
//
// Work decomposition: one work-group per (split, KV head x query sub-group, request). All query
// heads sharing a KV head (up to 8 per work-group) are handled together so each K/V page is read
// once per group. Long contexts are cut into n_splits chunks so that small batches still fill the
// device; partial results (unnormalized output, running max, sum) go to the backend's scratch buffer
// and a merge kernel combines them.
#include <algorithm>

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

}  // namespace

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
    const decode_config c = choose_config(be, op);
    const int n_splits = choose_splits(be, p, c);
    const int64_t per_split = (p.max_seq_len + n_splits - 1) / n_splits;
    const int64_t chunk = int64_t(round_up(size_t(std::max<int64_t>(per_split, 1)), size_t(c.nt)));
    const int64_t d = p.kv.head_dim;

    defines defs;
    defs.add("HEAD_DIM", d)
        .add("PAGE_SIZE", p.kv.page_size)
        .add("GB", c.gb)
        .add("NT", c.nt)
        .add("VEC", c.vec)
        .add("V_UNROLL", c.v_unroll)
        .add("KV_ALIGNED", c.aligned ? 1 : 0);

    const tensor & out = op.dst[0];
    const auto [part, ml_off] = split_partials_for(be, out, p.batch, p.n_q_heads, d, n_splits);
    const float qscale = p.scale * kLog2e;

    cl_kernel k = be.kernel("attn_decode.cl", defs, "kvc_attn_decode_split");
    set_args(k, arg(op.src[0]), arg(op.src[1]), arg(op.src[2]), arg(op.src[3]), arg(op.src[4]),
             arg(op.src[5]), arg(out), part, ml_off, to_int(p.kv.n_kv_heads), to_int(p.n_q_heads),
             cl_int(n_splits), to_int(chunk), cl_float(qscale));
    const size_t sub_groups = size_t(p.n_q_heads / p.kv.n_kv_heads / c.gb);
    const size_t local[3] = {size_t(c.nt), 1, 1};
    const size_t global[3] = {size_t(c.nt) * size_t(n_splits), size_t(p.kv.n_kv_heads) * sub_groups,
                              size_t(p.batch)};
    be.launch(k, 3, global, local);

    if (n_splits > 1) {
        cl_kernel mk = be.kernel("attn_decode.cl", defs, "kvc_attn_decode_merge");
        set_args(mk, part, ml_off, arg(out), to_int(p.n_q_heads), cl_int(n_splits));
        const size_t mlocal[3] = {size_t(std::min<int64_t>(d, 128)), 1, 1};
        const size_t mglobal[3] = {size_t(d), size_t(p.n_q_heads), size_t(p.batch)};
        be.launch(mk, 3, mglobal, mlocal);
    }
}

}  // namespace kvcomp::cl
