// add.cl: elementwise sum of two f32 arrays.
//
// Kernels: kvc_add_f32(a, a_off, b, b_off, dst, dst_off, n)
// NDRange: 1-D, global >= n (one element per work-item), any local size.
// Layout: flat f32 arrays; dst may alias a or b (each element is read before it is written, by the
// same work-item).
// Preamble defines: none.

kernel void kvc_add_f32(global const float * a, ulong a_off, global const float * b, ulong b_off,
                        global float * dst, ulong dst_off, ulong n) {
    const ulong i = get_global_id(0);
    if (i >= n) return;
    dst[dst_off + i] = a[a_off + i] + b[b_off + i];
}
