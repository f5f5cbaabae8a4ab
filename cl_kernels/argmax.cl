// argmax.cl: index of the largest element of each row; ties go to the lowest index and NaN
// never wins (a row of NaN only gives 0).
//
// Kernels: kvc_argmax_f32(x, x_off, dst, dst_off, n)
// NDRange: 1-D, one work-group of WG_SIZE work-items per row: global = rows * WG_SIZE.
// Layout: x f32 [rows, n] row-major, dst i32 [rows].
// Preamble defines: WG_SIZE (power of two).

// Candidate (v, i) beats (bv, bi) when it is a number and larger, or equal with a lower index;
// i < 0 marks "no candidate yet".
inline bool kvc_argmax_better(float v, int i, float bv, int bi) {
    if (i < 0) return false;
    if (bi < 0) return true;
    return v > bv || (v == bv && i < bi);
}

kernel __attribute__((reqd_work_group_size(WG_SIZE, 1, 1)))
void kvc_argmax_f32(global const float * x, ulong x_off, global int * dst, ulong dst_off, int n) {
    local float vals[WG_SIZE];
    local int idxs[WG_SIZE];
    const int lid = get_local_id(0);
    const ulong row = get_group_id(0);
    x += x_off + row * (ulong)n;

    float bv = 0.0f;
    int bi = -1;
    for (int i = lid; i < n; i += WG_SIZE) {
        const float v = x[i];
        if (!isnan(v) && kvc_argmax_better(v, i, bv, bi)) {
            bv = v;
            bi = i;
        }
    }
    vals[lid] = bv;
    idxs[lid] = bi;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int stride = WG_SIZE / 2; stride > 0; stride >>= 1) {
        if (lid < stride && kvc_argmax_better(vals[lid + stride], idxs[lid + stride], vals[lid], idxs[lid])) {
            vals[lid] = vals[lid + stride];
            idxs[lid] = idxs[lid + stride];
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (lid == 0) dst[dst_off + row] = idxs[0] < 0 ? 0 : idxs[0];
}
