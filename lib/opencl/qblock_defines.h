// The quantized block layout (core/qblock.h) as #define lines for the kernels that read or write
// slots (kv_quantize.cl, attn_decode_quant.cl). Every offset comes from qblock_layout itself, so
// the kernels never restate the layout arithmetic.
//
// Defines (all byte offsets; a segment's arrays are relative to the segment start, the segments
// relative to the head start, the head at QB_HEADER + h * QB_HEAD_BYTES in its slot):
//   QB_HD head_dim, QB_VG v_group, QB_NG value groups per token, QB_CS channel_scale (0/1),
//   QB_BT block tokens, QB_HEADER, QB_HEAD_BYTES, QB_SLOT_BYTES, QB_VSCALE_BYTES;
//   per segment S in {HI, LO}: QB_S_CAP, QB_S_BITS, QB_S_OFF, QB_S_KSTEP, QB_S_VMIN, QB_S_VSTEP,
//   QB_S_KCODES, QB_S_VCODES, QB_S_BYTES (kmin is at offset 0; QB_S_BYTES is 0 for an empty
//   segment).
#pragma once

#include "core/qblock.h"
#include "opencl/cl_common.h"

namespace kvcomp::cl {

inline void add_qblock_defines(defines & d, const qblock_layout & q) {
    d.add("QB_HD", q.head_dim)
        .add("QB_VG", q.v_group)
        .add("QB_NG", q.v_groups())
        .add("QB_CS", q.channel_scale ? 1 : 0)
        .add("QB_BT", q.block_tokens())
        .add("QB_HEADER", qblock_layout::header_bytes)
        .add("QB_HEAD_BYTES", q.head_bytes())
        .add("QB_SLOT_BYTES", q.slot_bytes())
        .add("QB_VSCALE_BYTES", q.vscale_bytes());
    auto seg = [&](const char * s, int32_t cap, int32_t bits, int64_t off) {
        const std::string p = std::string("QB_") + s + "_";
        d.add((p + "CAP").c_str(), cap)
            .add((p + "BITS").c_str(), bits)
            .add((p + "OFF").c_str(), off)
            .add((p + "KSTEP").c_str(), q.seg_kstep())
            .add((p + "VMIN").c_str(), q.seg_vmin())
            .add((p + "VSTEP").c_str(), q.seg_vstep(cap))
            .add((p + "KCODES").c_str(), q.seg_kcodes(cap))
            .add((p + "VCODES").c_str(), q.seg_vcodes(cap, bits))
            .add((p + "BYTES").c_str(), q.seg_bytes(cap, bits));
    };
    seg("HI", q.hi_tokens, q.hi_bits, q.head_hi());
    seg("LO", q.lo_tokens, q.lo_bits, q.head_lo());
}

}  // namespace kvcomp::cl
