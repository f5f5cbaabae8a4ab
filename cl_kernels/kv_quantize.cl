// kv_quantize.cl: quantizes blocks of K/V tokens into slots of a quantized block pool.
// Format and quantizer: lib/core/qblock.h; the slots must be byte-identical to the CPU reference
// (lib/core/qblock_codec.cpp) and to CUDA, so this file reproduces its fp32 arithmetic operation by
// operation: no contraction (FP_CONTRACT OFF below; the program is built without -cl-mad-enable and
// with -cl-fp32-correctly-rounded-divide-sqrt), rint (half to even), min/max written as the same
// comparisons in the same token order (so -0/+0 ties resolve as on the CPU), f16 by
// vstore_half_rte after saturating at +-65504.
//
// Kernel kvc_kv_quantize: one work-group per (block, KV head); NDRange local (NT, 1, 1), global
// (NT, n_kv_heads, n_blocks); the work-group size is read at run time (any size works).
// Every byte of the head's region is written exactly once, by one work-item (parameters, codes,
// and zeros for unused capacity and padding), so no ordering between work-items is needed except
// at the barriers noted below. Work-items map to:
//   vscale      channels c (each loops over the block's tokens: max |v|, then sqrt);
//   kmin/kstep  channels c (min/max over the segment's tokens); the f16-rounded values go to local
//               memory for the key codes;
//   vmin/vstep  (token, value group) pairs (min/max over the group's channels); read back from
//               global memory by the value codes after a barrier with a global fence;
//   codes       bytes of the code rows: a work-item quantizes the 8/bits channels of its byte and
//               stores the whole byte (no read-modify-write).
// The block's header (n_hi, n_lo, 0, 0) is written by the work-group of KV head 0.
// Host-validated inputs (the CPU reference throws on them) are only guarded here: a block whose
// slot is outside the pool is skipped, counts are clamped to the capacities and token numbers to
// the source, so no access leaves its buffer.
// Preamble defines: lib/opencl/qblock_defines.h, plus K_DT and V_DT (dtype codes of k and v).

#pragma OPENCL FP_CONTRACT OFF

typedef KVC_TYPE(K_DT) k_t;
typedef KVC_TYPE(V_DT) v_t;

// Index of element (t, h, c) of a K/V source under the row_tokens addressing of core/op.h.
inline ulong kvc_src_index(int t, int h, int c, int row_tokens, int n_kv_heads) {
    if (row_tokens == 0) return ((ulong)t * n_kv_heads + h) * QB_HD + c;
    return (((ulong)(t / row_tokens) * n_kv_heads + h) * row_tokens + t % row_tokens) * QB_HD + c;
}
inline float kvc_k(global const k_t * p, int t, int h, int c, int row_tokens, int n_kv_heads) {
    return KVC_LOAD(K_DT, p, kvc_src_index(t, h, c, row_tokens, n_kv_heads));
}
inline float kvc_v(global const v_t * p, int t, int h, int c, int row_tokens, int n_kv_heads) {
    return KVC_LOAD(V_DT, p, kvc_src_index(t, h, c, row_tokens, n_kv_heads));
}

// f16 bits of x rounded to nearest even, saturated at +-65504 (NaN passes, as on the CPU).
inline ushort kvc_f16_sat(float x) {
    if (x > 65504.0f) x = 65504.0f;
    if (x < -65504.0f) x = -65504.0f;
    ushort u;
    vstore_half_rte(x, 0, (private half *)&u);
    return u;
}
inline float kvc_f16_val(ushort u) { return vload_half(0, (const private half *)&u); }

// code = step == 0 ? 0 : clamp(rint((x - mn) / step), 0, 2^bits - 1)
inline uint kvc_code(float x, float mn, float step, int bits) {
    if (step == 0.0f) return 0u;
    const float r = rint((x - mn) / step);
    const float top = (float)((1 << bits) - 1);
    return r <= 0.0f ? 0u : r >= top ? (uint)top : (uint)r;
}

inline void kvc_zero(global uchar * p, int from, int to, int tid, int nt) {
    for (int e = from + tid; e < to; e += nt) p[e] = 0;
}

// One precision segment of one head (capacity cap, n tokens tok[0..n)). km/ks: local scratch of
// QB_HD floats; vs: the head's f16-rounded vscale (QB_CS).
inline void kvc_encode_segment(global uchar * seg, int cap, int bits, int kstep_off, int vmin_off, int vstep_off,
                               int kcodes_off, int vcodes_off, int seg_bytes, int n, local const int * tok,
                               global const k_t * k, global const v_t * v, int h, int row_tokens,
                               int n_kv_heads, local const float * vs, local float * km, local float * ks) {
    const int tid = get_local_id(0), nt = get_local_size(0);
    const float levels = (float)((1 << bits) - 1);
    const int per_byte = 8 / bits, rb = QB_HD * bits / 8;
    global ushort * kmin = (global ushort *)seg;
    global ushort * kstep = (global ushort *)(seg + kstep_off);
    global ushort * vmin = (global ushort *)(seg + vmin_off);
    global ushort * vstep = (global ushort *)(seg + vstep_off);
    // km/ks may still be read by the previous segment's key codes.
    barrier(CLK_LOCAL_MEM_FENCE);

    // Keys: per-channel min/max over the segment's tokens, in token order.
    for (int c = tid; c < QB_HD; c += nt) {
        ushort um = 0, us = 0;
        if (n > 0) {
            float mn = INFINITY, mx = -INFINITY;
            for (int j = 0; j < n; ++j) {
                const float x = kvc_k(k, tok[j], h, c, row_tokens, n_kv_heads);
                mn = x < mn ? x : mn;
                mx = mx < x ? x : mx;
            }
            um = kvc_f16_sat(mn);
            us = kvc_f16_sat((mx - mn) / levels);
        }
        kmin[c] = um;
        kstep[c] = us;
        km[c] = kvc_f16_val(um);
        ks[c] = kvc_f16_val(us);
    }
    kvc_zero(seg, QB_HD * 2, kstep_off, tid, nt);
    kvc_zero(seg, kstep_off + QB_HD * 2, vmin_off, tid, nt);

    // Values: per (token, group) min/max of w = v / vscale over the group's channels, in order.
    for (int e = tid; e < n * QB_NG; e += nt) {
        const int j = e / QB_NG, c0 = (e % QB_NG) * QB_VG;
        float mn = INFINITY, mx = -INFINITY;
        for (int c = c0; c < c0 + QB_VG; ++c) {
            float w = kvc_v(v, tok[j], h, c, row_tokens, n_kv_heads);
#if QB_CS
            w = w / vs[c];
#endif
            mn = w < mn ? w : mn;
            mx = mx < w ? w : mx;
        }
        vmin[e] = kvc_f16_sat(mn);
        vstep[e] = kvc_f16_sat((mx - mn) / levels);
    }
    kvc_zero(seg, vmin_off + n * QB_NG * 2, vstep_off, tid, nt);
    kvc_zero(seg, vstep_off + n * QB_NG * 2, kcodes_off, tid, nt);
    // km/ks (local) and vmin/vstep (global, read back below by other work-items of this group).
    barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);

    // Code rows: one byte per work-item; rows beyond n and the padding are zeros.
    for (int e = tid; e < vcodes_off - kcodes_off; e += nt) {
        const int j = e / rb, b = e % rb;
        uint byte = 0;
        if (j < n)
            for (int i = 0; i < per_byte; ++i) {
                const int c = b * per_byte + i;
                const float x = kvc_k(k, tok[j], h, c, row_tokens, n_kv_heads);
                byte |= kvc_code(x, km[c], ks[c], bits) << (i * bits);
            }
        seg[kcodes_off + e] = (uchar)byte;
    }
    for (int e = tid; e < seg_bytes - vcodes_off; e += nt) {
        const int j = e / rb, b = e % rb;
        uint byte = 0;
        if (j < n)
            for (int i = 0; i < per_byte; ++i) {
                const int c = b * per_byte + i, g = j * QB_NG + c / QB_VG;
                float w = kvc_v(v, tok[j], h, c, row_tokens, n_kv_heads);
#if QB_CS
                w = w / vs[c];
#endif
                const float m16 = vload_half(g, (global const half *)vmin);
                const float s16 = vload_half(g, (global const half *)vstep);
                byte |= kvc_code(w, m16, s16, bits) << (i * bits);
            }
        seg[vcodes_off + e] = (uchar)byte;
    }
}

kernel void kvc_kv_quantize(global const k_t * k, ulong k_off, global const v_t * v, ulong v_off,
                            global const int * plan, ulong plan_off, global const int * rows, ulong rows_off,
                            global uchar * pool, ulong pool_off, int n_src_tokens, int row_tokens, int n_kv_heads,
                            int n_slots) {
    local int tok[QB_BT];
    local float vs[QB_HD], km[QB_HD], ks[QB_HD];
    const int tid = get_local_id(0), nt = get_local_size(0);
    const int h = get_group_id(1), blk = get_group_id(2);

    plan += plan_off + (ulong)blk * 3;
    const int slot = plan[0];
    if (slot < 0 || slot >= n_slots) return;  // uniform over the work-group: no barrier is skipped
    // (an empty source admits no token at all)
    const int n_hi = n_src_tokens > 0 ? clamp(plan[1], 0, QB_HI_CAP) : 0;
    const int n_lo = n_src_tokens > 0 ? clamp(plan[2], 0, QB_LO_CAP) : 0;
    global uchar * slot_p = pool + pool_off + (ulong)slot * QB_SLOT_BYTES;
    if (h == 0 && tid < 4) ((global int *)slot_p)[tid] = tid == 0 ? n_hi : tid == 1 ? n_lo : 0;

    rows += rows_off + ((ulong)blk * n_kv_heads + h) * QB_BT;
    for (int j = tid; j < n_hi + n_lo; j += nt) tok[j] = clamp(rows[j], 0, n_src_tokens - 1);
    k += k_off;
    v += v_off;
    global uchar * head = slot_p + QB_HEADER + (ulong)h * QB_HEAD_BYTES;
    barrier(CLK_LOCAL_MEM_FENCE);  // tok

#if QB_CS
    // vscale = f16(sqrt(max |v[t,c]|)) over the whole block, 1 when that rounds to 0.
    for (int c = tid; c < QB_HD; c += nt) {
        float a = 0.0f;
        for (int j = 0; j < n_hi + n_lo; ++j) {
            const float x = fabs(kvc_v(v, tok[j], h, c, row_tokens, n_kv_heads));
            a = a < x ? x : a;
        }
        ushort u = kvc_f16_sat(sqrt(a));
        if (kvc_f16_val(u) == 0.0f) u = 0x3c00;  // 1.0
        ((global ushort *)head)[c] = u;
        vs[c] = kvc_f16_val(u);
    }
    kvc_zero(head, QB_HD * 2, QB_VSCALE_BYTES, tid, nt);
#endif
    // (the barrier at the start of each segment publishes vs)
#if QB_HI_BYTES > 0
    kvc_encode_segment(head + QB_HI_OFF, QB_HI_CAP, QB_HI_BITS, QB_HI_KSTEP, QB_HI_VMIN, QB_HI_VSTEP, QB_HI_KCODES,
                       QB_HI_VCODES, QB_HI_BYTES, n_hi, tok, k, v, h, row_tokens, n_kv_heads, vs, km, ks);
#endif
#if QB_LO_BYTES > 0
    kvc_encode_segment(head + QB_LO_OFF, QB_LO_CAP, QB_LO_BITS, QB_LO_KSTEP, QB_LO_VMIN, QB_LO_VSTEP, QB_LO_KCODES,
                       QB_LO_VCODES, QB_LO_BYTES, n_lo, tok + n_hi, k, v, h, row_tokens, n_kv_heads, vs, km, ks);
#endif
}
