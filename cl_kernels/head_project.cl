// head_project.cl: per-head product of a row slice with that head's basis (lib/core/op.h).
//
// Kernels: kvc_head_project(x, x_off, bases, b_off, table, t_off, y, y_off, in_total, out_total)
//   Work-item (j, h, t) computes output column j of head h for token t:
//     y[t, out_offset(h) + j] = sum_i x[t, in_offset(h) + i] * basis_h[i, j]   (fp32, fma)
//   Work-items with j >= out_width(h) exit, so columns no head names stay as they are.
//   Consecutive work-items read consecutive basis columns (coalesced); x is a broadcast read.
// NDRange: global (>= the widest out_width, n_heads, n_tokens).
// Layout: x f32 [n_tokens, in_total]; bases f32 flat; table i32 [n_heads, 5] = (in_offset,
//   in_width, basis_offset, out_offset, out_width); y f32 [n_tokens, out_total].
// Preamble defines: none.

kernel void kvc_head_project(global const float * x, ulong x_off, global const float * bases, ulong b_off,
                             global const int * table, ulong t_off, global float * y, ulong y_off, int in_total,
                             int out_total) {
    const int j = get_global_id(0);
    const int h = get_global_id(1);
    const ulong t = get_global_id(2);
    global const int * row = table + t_off + h * 5;
    const int in_o = row[0], in_w = row[1], bo = row[2], out_o = row[3], out_w = row[4];
    if (j >= out_w) return;
    global const float * xr = x + x_off + t * in_total + in_o;
    global const float * br = bases + b_off + bo + j;
    float acc = 0.0f;
    for (int i = 0; i < in_w; ++i) acc = fma(xr[i], br[(ulong)i * out_w], acc);
    y[y_off + t * out_total + out_o + j] = acc;
}
