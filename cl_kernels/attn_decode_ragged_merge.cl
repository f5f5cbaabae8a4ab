// attn_decode_ragged_merge.cl: the merge of a ragged decode task list, shared by every ragged
// decode (attn_decode_ragged on fp16 and q4 pages, attn_decode_palu): each task wrote, per query
// head g < G of its KV head, its unnormalized output [MW] and (max, sum) in log2 units from ml_off
// on (lib/opencl/cl_common.h, task_partials_for). The merged output of query head g of (request b,
// KV head c) over the row's tasks i is sum_i 2^(m_i - M) o_i / sum_i 2^(m_i - M) l_i, M = max_i m_i.
//
// Kernels:
//   kvc_attn_decode_ragged_merge: work-group (blk, h, b) merges channels [blk * L, blk * L + L) of
//     query head h = c * G + g of request b. A row with one task was written by that task (the
//     work-group exits), as does a channel block past the head's width; a row without tasks, or
//     whose tasks saw no tokens (M = -inf), gets zeros.
//       1. the work-items read the tasks' maxima in parallel (task lid, lid + WG, ...) and reduce
//          M in local memory;
//       2. the work-group is S = WG / L slices of L lanes: slice s adds the row's tasks s, s + S, ...
//          in order, lane j the channel blk * L + j of each (w_i o_i[d], w_i = 2^(m_i - M), each
//          lane computing the weights of its slice's tasks); lane 0 of a slice also adds w_i l_i;
//       3. the slices' sums are added in slice order through local memory, sum_i w_i l_i by a tree
//          of a fixed shape, and slice 0 writes the block's channels divided by it.
//     Results do not change from run to run. (This replaced one work-group per query head whose
//     work-items each walked all of the row's tasks for one channel: at batch 1 a row has 66-264
//     tasks and the 32 work-groups of 8 KV heads x 4 query heads left most compute units idle.)
//     NDRange: local (WG, 1, 1), global (WG * NB, n_kv_heads * G, batch), NB = ceil(MW / L).
// Layout: heads i32 [n_kv_heads, 4] = (k_width, k_offset, v_width, v_offset); merge i32
//   [batch * n_kv_heads + 1 + n_tasks] (row (b, c)'s tasks are entries merge[b * n_kv_heads + c]
//   .. merge[b * n_kv_heads + c + 1] of the task indices after the offsets); out f32
//   [batch, G * v_total]; part: task i's output for head g at (i * G + g) * MW, its (m, l) at
//   ml_off + (i * G + g) * 2.
// Preamble defines: G (query heads per KV head), MW (widest head: the partials' stride), WG
//   (work-group size, a power of two), L (lanes per slice: channels per work-group, a power of two
//   dividing WG).

// Reductions of one value per work-item over the work-group, as trees of a fixed shape (so the
// sum is the same every run). Every work-item gets the result; `scratch` may be reused after.
inline float kvc_merge_group_max(local float * scratch, float v, int lid) {
    scratch[lid] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int stride = WG / 2; stride > 0; stride >>= 1) {
        if (lid < stride) scratch[lid] = fmax(scratch[lid], scratch[lid + stride]);
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    const float r = scratch[0];
    barrier(CLK_LOCAL_MEM_FENCE);
    return r;
}

inline float kvc_merge_group_sum(local float * scratch, float v, int lid) {
    scratch[lid] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int stride = WG / 2; stride > 0; stride >>= 1) {
        if (lid < stride) scratch[lid] += scratch[lid + stride];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    const float r = scratch[0];
    barrier(CLK_LOCAL_MEM_FENCE);
    return r;
}

kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void kvc_attn_decode_ragged_merge(global const int * heads, ulong heads_off, global const int * merge,
                                  ulong merge_off, global float * out, ulong out_off,
                                  global const float * part, ulong ml_off, int n_kv_heads, int batch,
                                  int v_total) {
    const int S = WG / L;
    local float reduce_scratch[WG];
    local float slice_acc[WG];  // [S][L]: each slice's sums of the block's channels
    const int lid = get_local_id(0);
    const int lane = lid % L, slice = lid / L;
    const int blk = get_group_id(0);
    const int h = get_group_id(1);
    const int b = get_group_id(2);
    const int c = h / G, g = h % G;
    heads += heads_off;
    const int v_width = heads[c * 4 + 2], vo = heads[c * 4 + 3];
    const int vw = min(v_width, MW);  // channels to write (the partials hold MW)
    merge += merge_off;
    const int i0 = merge[b * n_kv_heads + c], n = merge[b * n_kv_heads + c + 1] - i0;
    // Both uniform over the work-group, before any barrier.
    if (n == 1) return;           // written by its task
    if (blk * L >= vw) return;    // a block past the head's width
    global const int * tasks = merge + batch * n_kv_heads + 1 + i0;
    global const float * ml = part + ml_off;

    float m = -INFINITY;
    for (int i = lid; i < n; i += WG) m = fmax(m, ml[((ulong)tasks[i] * G + g) * 2]);
    const float mx = kvc_merge_group_max(reduce_scratch, m, lid);
    // No tokens in any task: nothing to add (2^(-inf - -inf) would be NaN); l stays 0 -> zeros.
    const int n_add = mx == -INFINITY ? 0 : n;

    const int d = blk * L + lane;
    const bool has_d = d < vw;
    float acc = 0.0f, l_part = 0.0f;
#pragma unroll 4
    for (int i = slice; i < n_add; i += S) {
        const ulong row = (ulong)tasks[i] * G + g;
        const float w = exp2(ml[row * 2] - mx);
        if (has_d) acc += w * part[row * MW + d];
        if (lane == 0) l_part += w * ml[row * 2 + 1];
    }
    slice_acc[lid] = acc;
    const float l = kvc_merge_group_sum(reduce_scratch, l_part, lid);  // its barriers order slice_acc too
    if (slice != 0 || !has_d) return;
    float o = 0.0f;
    for (int s2 = 0; s2 < S; ++s2) o += slice_acc[s2 * L + lane];
    global float * dst = out + out_off + (ulong)b * G * v_total + (ulong)G * vo + g * v_width;
    dst[d] = l > 0.0f ? o / l : 0.0f;
}
