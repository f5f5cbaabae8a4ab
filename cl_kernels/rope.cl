// rope.cl: rotary position embedding of the first rot_dim features of every head.
//
// Kernels: kvc_rope_f32(x, x_off, pos, pos_off, ff, ff_off, dst, dst_off, n_heads, head_dim, rot_dim,
//                       theta, has_ff)
// NDRange: 2-D, global = (>= head_dim - rot_dim / 2, n_tokens * n_heads), any local size. Work-item
// i < rot_dim/2 rotates pair i; the others copy feature rot_dim + (i - rot_dim/2) unchanged.
// Layout: x, dst f32 [n_tokens, n_heads, head_dim] (dst may alias x: each pair is read and written by
// one work-item); pos i32 [n_tokens]; ff f32 [rot_dim / 2] when has_ff (else ignored).
// Pairs: STYLE 0 (neox) rotates (i, i + rot_dim/2); STYLE 1 (interleaved) rotates (2i, 2i+1).
// angle(pos, i) = pos * theta^(-2i/rot_dim) / ff[i]. The angle and its sine/cosine are computed in
// double where the device has cl_khr_fp64: positions reach 10^5 and an fp32 angle of that size
// carries ~10^-2 rad of rounding error; without fp64 the fp32 path is used.
// Preamble defines: STYLE (0 neox, 1 interleaved).

#ifdef cl_khr_fp64
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#endif

kernel void kvc_rope_f32(global const float * x, ulong x_off, global const int * pos, ulong pos_off,
                         global const float * ff, ulong ff_off, global float * dst, ulong dst_off, int n_heads,
                         int head_dim, int rot_dim, float theta, int has_ff) {
    const int i = get_global_id(0);
    const ulong th = get_global_id(1);  // token * n_heads + head
    const int half_rot = rot_dim / 2;
    if (i >= head_dim - half_rot) return;
    x += x_off + th * (ulong)head_dim;
    dst += dst_off + th * (ulong)head_dim;
    if (i >= half_rot) {
        const int f = rot_dim + (i - half_rot);
        dst[f] = x[f];
        return;
    }
    const int p = pos[pos_off + th / (ulong)n_heads];
#if STYLE == 0
    const int a = i, b = i + half_rot;
#else
    const int a = 2 * i, b = 2 * i + 1;
#endif
#ifdef cl_khr_fp64
    double ang = (double)p * pow((double)theta, -2.0 * (double)i / (double)rot_dim);
    if (has_ff) ang /= (double)ff[ff_off + i];
    const float c = (float)cos(ang), s = (float)sin(ang);
#else
    float ang = (float)p * pow(theta, -2.0f * (float)i / (float)rot_dim);
    if (has_ff) ang /= ff[ff_off + i];
    const float c = cos(ang), s = sin(ang);
#endif
    const float x0 = x[a], x1 = x[b];
    dst[a] = x0 * c - x1 * s;
    dst[b] = x0 * s + x1 * c;
}
