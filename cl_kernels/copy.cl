// copy.cl: dtype conversion between f32, f16 and bf16 (same-dtype copies use clEnqueueCopyBuffer).
//
// Kernels: kvc_copy(src, src_off, dst, dst_off, n)
// NDRange: 1-D, global >= n (one element per work-item), any local size.
// Layout: flat arrays of n elements at element offsets src_off / dst_off.
// Preamble defines: SRC_DT, DST_DT (KVC_F32 / KVC_F16 / KVC_BF16). Stores round to nearest even.

kernel void kvc_copy(global const KVC_TYPE(SRC_DT) * src, ulong src_off,
                     global KVC_TYPE(DST_DT) * dst, ulong dst_off, ulong n) {
    const ulong i = get_global_id(0);
    if (i >= n) return;
    src += src_off;
    dst += dst_off;
    KVC_STORE(DST_DT, dst, i, KVC_LOAD(SRC_DT, src, i));
}
