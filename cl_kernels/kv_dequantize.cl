// kv_dequantize.cl: quantized KV blocks back to K/V rows (ZipCache's re-quantize-everything mode
// reads its old tokens through it). Format and formulas: lib/core/qblock.h; the rows must equal the
// CPU reference (lib/core/qblock_codec.cpp, decode_head) bit for bit, so each value is computed with
// the same fp32 operations in the same order and no contraction (FP_CONTRACT OFF; the program is
// built without -cl-mad-enable):
//   k^ = (float)code * kstep + kmin,   v^ = ((float)code * vstep + vmin) * vscale   (QB_CS)
// f16 rows: saturated at +-65504, then vstore_half_rte (qblock.h's f16()).
//
// Kernel kvc_kv_dequantize: one work-group per (listed block, KV head); NDRange local (NT, 1, 1),
// global (NT, n_kv_heads, n_blocks); any work-group size works. Work-item e of the group loops
// over the (token j, channel c) elements of the head, e = j * QB_HD + c, j < QB_BT: tokens the header
// does not name (j >= n_hi + n_lo) are written as zeros, so every output element is written once.
// Output token number: block * QB_BT + j, addressed by row_tokens as in core/op.h.
// Host-validated inputs (the CPU reference throws on them) are only guarded: a slot outside the
// pool gives zero rows, header counts are clamped to the capacities.
// Preamble defines: lib/opencl/qblock_defines.h, plus O_DT (dtype code of the k and v outputs).

#pragma OPENCL FP_CONTRACT OFF

typedef KVC_TYPE(O_DT) o_t;

inline float kvc_out(float x) {
#if O_DT == KVC_F16
    x = x > 65504.0f ? 65504.0f : x;  // saturate like qblock::f16_sat (NaN passes)
    x = x < -65504.0f ? -65504.0f : x;
#endif
    return x;
}

inline uint kvc_code_at(global const uchar * row, int c, int bits) {
    const int bit = c * bits;
    return ((uint)row[bit / 8] >> (bit % 8)) & (uint)((1 << bits) - 1);
}

// Token j (segment-relative) channel c of one segment: writes k^ and v^ into *kx, *vx.
inline void kvc_dequant(global const uchar * seg, int cap_vstep, int kcodes, int vcodes, int bits, int j, int c,
                        global const uchar * head, float * kx, float * vx) {
    const int rb = QB_HD * bits / 8, g = j * QB_NG + c / QB_VG;
    const float kc = (float)kvc_code_at(seg + kcodes + j * rb, c, bits);
    const float vc = (float)kvc_code_at(seg + vcodes + j * rb, c, bits);
    const float kstep = vload_half(c, (global const half *)(seg + QB_HI_KSTEP));  // same offset in every segment
    const float kmin = vload_half(c, (global const half *)seg);
    const float vstep = vload_half(g, (global const half *)(seg + cap_vstep));
    const float vmin = vload_half(g, (global const half *)(seg + QB_HI_VMIN));    // same offset in every segment
    const float kprod = kc * kstep;
    *kx = kprod + kmin;
    const float vprod = vc * vstep;
    float w = vprod + vmin;
#if QB_CS
    w = w * vload_half(c, (global const half *)head);
#endif
    *vx = w;
}

kernel void kvc_kv_dequantize(global const uchar * pool, ulong pool_off, global const int * slots, ulong slots_off,
                              global o_t * k, ulong k_off, global o_t * v, ulong v_off, int row_tokens,
                              int n_kv_heads, int n_slots) {
    const int tid = get_local_id(0), nt = get_local_size(0);
    const int h = get_group_id(1), blk = get_group_id(2);
    const int slot = slots[slots_off + blk];
    const bool ok = slot >= 0 && slot < n_slots;
    global const uchar * sp = pool + pool_off + (ulong)(ok ? slot : 0) * QB_SLOT_BYTES;
    const int n_hi = ok ? clamp(((global const int *)sp)[0], 0, QB_HI_CAP) : 0;
    const int n_lo = ok ? clamp(((global const int *)sp)[1], 0, QB_LO_CAP) : 0;
    global const uchar * head = sp + QB_HEADER + (ulong)h * QB_HEAD_BYTES;
    k += k_off;
    v += v_off;
    for (int e = tid; e < QB_BT * QB_HD; e += nt) {
        const int j = e / QB_HD, c = e % QB_HD;
        float kx = 0.0f, vx = 0.0f;
#if QB_HI_BYTES > 0
        if (j < n_hi)
            kvc_dequant(head + QB_HI_OFF, QB_HI_VSTEP, QB_HI_KCODES, QB_HI_VCODES, QB_HI_BITS, j, c, head, &kx, &vx);
#endif
#if QB_LO_BYTES > 0
        if (j >= n_hi && j < n_hi + n_lo)
            kvc_dequant(head + QB_LO_OFF, QB_LO_VSTEP, QB_LO_KCODES, QB_LO_VCODES, QB_LO_BITS, j - n_hi, c, head, &kx,
                        &vx);
#endif
        const int t = blk * QB_BT + j;
        const ulong at = row_tokens == 0
                             ? ((ulong)t * n_kv_heads + h) * QB_HD + c
                             : (((ulong)(t / row_tokens) * n_kv_heads + h) * row_tokens + t % row_tokens) * QB_HD + c;
        KVC_STORE(O_DT, k, at, kvc_out(kx));
        KVC_STORE(O_DT, v, at, kvc_out(vx));
    }
}
