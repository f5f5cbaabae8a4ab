// The quantized block's slot geometry (core/qblock.h) as plain kernel-argument fields, shared by
// the kernels that address slots field by field (kv_quantize, kv_dequantize): sizes, bit widths
// and the byte offsets of every array, computed once on the host.
#pragma once

#include <cstdint>

#include "core/qblock.h"

namespace kvcomp::cuda {

struct qblock_geometry {
    int64_t slot_bytes, head_bytes;
    int n_kv_heads, head_dim, hi_tokens, lo_tokens, hi_bits, lo_bits, v_group;
    int64_t head_hi, head_lo;                // segment offsets within a head region
    int64_t seg_kstep, seg_vmin;             // segment-relative offsets that do not depend on the capacity
    int64_t hi_vstep, hi_kcodes, hi_vcodes;  // capacity-dependent offsets, hi segment
    int64_t lo_vstep, lo_kcodes, lo_vcodes;  // and lo segment
    bool channel_scale;
};

inline qblock_geometry make_qblock_geometry(const qblock_layout & q) {
    qblock_geometry g{};
    g.slot_bytes = q.slot_bytes();
    g.head_bytes = q.head_bytes();
    g.n_kv_heads = int(q.n_kv_heads);
    g.head_dim = int(q.head_dim);
    g.hi_tokens = q.hi_tokens;
    g.lo_tokens = q.lo_tokens;
    g.hi_bits = q.hi_bits;
    g.lo_bits = q.lo_bits;
    g.v_group = q.v_group;
    g.head_hi = q.head_hi();
    g.head_lo = q.head_lo();
    g.seg_kstep = q.seg_kstep();
    g.seg_vmin = q.seg_vmin();
    g.hi_vstep = q.seg_vstep(q.hi_tokens);
    g.hi_kcodes = q.seg_kcodes(q.hi_tokens);
    g.hi_vcodes = q.seg_vcodes(q.hi_tokens, q.hi_bits);
    g.lo_vstep = q.seg_vstep(q.lo_tokens);
    g.lo_kcodes = q.seg_kcodes(q.lo_tokens);
    g.lo_vcodes = q.seg_vcodes(q.lo_tokens, q.lo_bits);
    g.channel_scale = q.channel_scale;
    return g;
}

}  // namespace kvcomp::cuda
