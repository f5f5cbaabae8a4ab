// softmax.cl: row softmax with a scale, dst[r,:] = softmax(scale * x[r,:]).
//
// Kernels: kvc_softmax_f32(x, x_off, dst, dst_off, n, scale)
// NDRange: 1-D, one work-group of WG_SIZE work-items per row: global = rows * WG_SIZE.
// Layout: x, dst f32 [rows, n] row-major; dst may alias x (each element is read and written by
// the same work-item, writes after both reductions).
// Preamble defines: WG_SIZE (power of two).

kernel __attribute__((reqd_work_group_size(WG_SIZE, 1, 1)))
void kvc_softmax_f32(global const float * x, ulong x_off, global float * dst, ulong dst_off, int n, float scale) {
    local float red[WG_SIZE];
    const int lid = get_local_id(0);
    const ulong row = get_group_id(0);
    x += x_off + row * (ulong)n;
    dst += dst_off + row * (ulong)n;

    float m = -INFINITY;
    for (int i = lid; i < n; i += WG_SIZE) m = fmax(m, scale * x[i]);
    red[lid] = m;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int stride = WG_SIZE / 2; stride > 0; stride >>= 1) {
        if (lid < stride) red[lid] = fmax(red[lid], red[lid + stride]);
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    m = red[0];
    barrier(CLK_LOCAL_MEM_FENCE);  // everyone has read red[0] before it is reused

    float s = 0.0f;
    for (int i = lid; i < n; i += WG_SIZE) s += exp(scale * x[i] - m);
    red[lid] = s;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int stride = WG_SIZE / 2; stride > 0; stride >>= 1) {
        if (lid < stride) red[lid] += red[lid + stride];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    const float inv = 1.0f / red[0];
    for (int i = lid; i < n; i += WG_SIZE) dst[i] = exp(scale * x[i] - m) * inv;
}
