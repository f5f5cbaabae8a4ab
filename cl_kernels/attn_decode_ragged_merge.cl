// attn_decode_ragged_merge.cl: the merge of a ragged decode task list, shared by every ragged
// decode (attn_decode_ragged on fp16 and q4 pages, attn_decode_palu): each task wrote, per query
// head g < G of its KV head, its unnormalized output [MW] and (max, sum) from ml_off on
// (lib/opencl/cl_common.h, task_partials_for). Work-item (d, h, b) writes channel d of query head h
// of request b where the (request, KV head) row has several tasks (a single task wrote its output
// itself; a row without tasks gets zeros from kvc_merge_tasks).
// Preamble defines: G (query heads per KV head), MW (widest head).

kernel void kvc_attn_decode_ragged_merge(global const int * heads, ulong heads_off, global const int * merge,
                                         ulong merge_off, global float * out, ulong out_off, global const float * part,
                                         ulong ml_off, int n_kv_heads, int batch, int v_total) {
    const int d = get_global_id(0);
    const int h = get_global_id(1);
    const int b = get_global_id(2);
    const int c = h / G, g = h % G;
    heads += heads_off;
    const int vw = heads[c * 4 + 2], vo = heads[c * 4 + 3];
    if (d >= vw) return;
    merge += merge_off;
    const int i0 = merge[b * n_kv_heads + c], n = merge[b * n_kv_heads + c + 1] - i0;
    if (n == 1) return;  // written by its task
    global const int * tasks = merge + batch * n_kv_heads + 1 + i0;
    out[out_off + (ulong)b * G * v_total + (ulong)G * vo + g * vw + d] =
        kvc_merge_tasks(part, ml_off, tasks, n, G, MW, g, d);
}
