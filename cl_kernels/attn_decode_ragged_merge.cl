// attn_decode_ragged_merge.cl: the merge of a ragged decode task list, shared by every ragged
// decode (attn_decode_ragged on fp16 and q4 pages, attn_decode_palu): each task wrote, per query
// head g < G of its KV head, its unnormalized output [MW] and (max, sum) in log2 units from ml_off
// on (lib/opencl/cl_common.h, task_partials_for). The merged output of query head g of (request b,
// KV head c) over the row's tasks i is sum_i 2^(m_i - M) o_i / sum_i 2^(m_i - M) l_i, M = max_i m_i.
//
// Kernels:
//   kvc_attn_decode_ragged_merge: work-group (h, b) merges query head h = c * G + g of request b.
//     A row with one task was written by that task (the work-group exits); a row without tasks,
//     or whose tasks saw no tokens (M = -inf), gets zeros.
//       1. the work-items read the tasks' maxima in parallel (task lid, lid + WG, ...) and reduce
//          M in local memory;
//       2. the tasks go in chunks of WG: work-item j computes the weight 2^(m_i - M) of task
//          i = chunk + j once, into local memory, with its part of sum_i w_i l_i; then every
//          work-item adds w_i * o_i[d] over the chunk's tasks for its channels d = lid, lid + WG,
//          ... < v_width (ND of them), so a task's output row is read once, coalesced across d;
//       3. sum_i w_i l_i is reduced in local memory and the channels are written divided by it.
//     Both reductions are trees of a fixed shape, and each channel adds its tasks in task order,
//     so results do not change from run to run.
//     (This replaced one work-item per channel that read all of the row's (m, l) pairs twice and
//     recomputed every weight per channel; at batch 1 and long contexts a row has 60-70 tasks.)
//     NDRange: local (WG, 1, 1), global (WG, n_kv_heads * G, batch).
// Layout: heads i32 [n_kv_heads, 4] = (k_width, k_offset, v_width, v_offset); merge i32
//   [batch * n_kv_heads + 1 + n_tasks] (row (b, c)'s tasks are entries merge[b * n_kv_heads + c]
//   .. merge[b * n_kv_heads + c + 1] of the task indices after the offsets); out f32
//   [batch, G * v_total]; part: task i's output for head g at (i * G + g) * MW, its (m, l) at
//   ml_off + (i * G + g) * 2.
// Preamble defines: G (query heads per KV head), MW (widest head: the partials' stride), WG
//   (work-group size, a power of two), ND (= ceil(MW / WG): output channels per work-item).

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
    local float reduce_scratch[WG];
    local float chunk_weight[WG];  // 2^(m_i - M) of the chunk's tasks
    local ulong chunk_row[WG];     // where the chunk's output rows start in part
    const int lid = get_local_id(0);
    const int h = get_group_id(1);
    const int b = get_group_id(2);
    const int c = h / G, g = h % G;
    heads += heads_off;
    const int v_width = heads[c * 4 + 2], vo = heads[c * 4 + 3];
    const int vw = min(v_width, MW);  // channels to write (the partials hold MW)
    merge += merge_off;
    const int i0 = merge[b * n_kv_heads + c], n = merge[b * n_kv_heads + c + 1] - i0;
    if (n == 1) return;  // written by its task; uniform over the work-group, before any barrier
    global const int * tasks = merge + batch * n_kv_heads + 1 + i0;
    global const float * ml = part + ml_off;

    float m = -INFINITY;
    for (int i = lid; i < n; i += WG) m = fmax(m, ml[((ulong)tasks[i] * G + g) * 2]);
    const float mx = kvc_merge_group_max(reduce_scratch, m, lid);
    // No tokens in any task: nothing to add (2^(-inf - -inf) would be NaN); l stays 0 -> zeros.
    const int n_add = mx == -INFINITY ? 0 : n;

    float acc[ND];
    for (int j = 0; j < ND; ++j) acc[j] = 0.0f;
    float l_part = 0.0f;
    for (int first = 0; first < n_add; first += WG) {
        const int chunk = min(WG, n_add - first);
        if (lid < chunk) {
            const ulong row = (ulong)tasks[first + lid] * G + g;
            const float w = exp2(ml[row * 2] - mx);
            chunk_weight[lid] = w;
            chunk_row[lid] = row * MW;
            l_part += w * ml[row * 2 + 1];
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int j = 0; j < ND; ++j) {
            const int d = lid + j * WG;
            if (d < vw) {
                float o = acc[j];
#pragma unroll 4
                for (int i = 0; i < chunk; ++i) o += chunk_weight[i] * part[chunk_row[i] + d];
                acc[j] = o;
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE);  // the next chunk overwrites the weights
    }
    const float l = kvc_merge_group_sum(reduce_scratch, l_part, lid);

    global float * dst = out + out_off + (ulong)b * G * v_total + (ulong)G * vo + g * v_width;
    for (int j = 0; j < ND; ++j) {
        const int d = lid + j * WG;
        if (d < vw) dst[d] = l > 0.0f ? acc[j] / l : 0.0f;
    }
}
