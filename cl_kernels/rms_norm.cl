// rms_norm.cl: RMS normalization with a weight, dst[r,:] = x[r,:] / sqrt(mean(x[r,:]^2) + eps) * w.
//
// Kernels: kvc_rms_norm(x, x_off, w, w_off, dst, dst_off, n, eps)
// NDRange: 1-D, one work-group of WG_SIZE work-items per row: global = rows * WG_SIZE.
// Layout: x, dst f32 [rows, n] row-major; w [n] of dtype W_DT. dst may alias x: every element is
// read and written by the same work-item, and writes start after the sum is complete.
// Preamble defines: WG_SIZE (power of two), W_DT (KVC_F32 / KVC_F16).

kernel __attribute__((reqd_work_group_size(WG_SIZE, 1, 1)))
void kvc_rms_norm(global const float * x, ulong x_off, global const KVC_TYPE(W_DT) * w, ulong w_off,
                  global float * dst, ulong dst_off, int n, float eps) {
    local float red[WG_SIZE];
    const int lid = get_local_id(0);
    const ulong row = get_group_id(0);
    x += x_off + row * (ulong)n;
    dst += dst_off + row * (ulong)n;
    w += w_off;

    float s = 0.0f;
    for (int i = lid; i < n; i += WG_SIZE) s += x[i] * x[i];
    red[lid] = s;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int stride = WG_SIZE / 2; stride > 0; stride >>= 1) {
        if (lid < stride) red[lid] += red[lid + stride];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    // Division and sqrt rather than rsqrt: rsqrt may be several ulp off on some devices.
    const float inv = 1.0f / sqrt(red[0] / (float)n + eps);
    for (int i = lid; i < n; i += WG_SIZE) dst[i] = x[i] * inv * KVC_LOAD(W_DT, w, i);
}
