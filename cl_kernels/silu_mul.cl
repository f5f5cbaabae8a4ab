// silu_mul.cl: SwiGLU gate, dst = silu(gate) * up with silu(x) = x / (1 + exp(-x)).
//
// Kernels: kvc_silu_mul_f32(gate, gate_off, up, up_off, dst, dst_off, n)
// NDRange: 1-D, global >= n = rows * cols (one element per work-item), any local size.
// Layout: flat f32 arrays; dst may alias gate or up.
// Preamble defines: none. exp() of a large -x gives inf and x / inf = -0, the correct limit.

kernel void kvc_silu_mul_f32(global const float * gate, ulong gate_off, global const float * up, ulong up_off,
                             global float * dst, ulong dst_off, ulong n) {
    const ulong i = get_global_id(0);
    if (i >= n) return;
    const float g = gate[gate_off + i];
    dst[dst_off + i] = g / (1.0f + exp(-g)) * up[up_off + i];
}
