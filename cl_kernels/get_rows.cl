// get_rows.cl: embedding lookup, dst[i,:] = table[ids[i],:] as f32; an id outside
// [0, n_table_rows) gives a row of zeros.
//
// Kernels: kvc_get_rows(table, table_off, ids, ids_off, dst, dst_off, row_len, n_table_rows)
// NDRange: 2-D, global = (>= row_len, n_ids): one element per work-item, any local size.
// Layout: table [n_table_rows, row_len] of dtype TABLE_DT, ids i32 [n_ids], dst f32 [n_ids, row_len].
// Preamble defines: TABLE_DT (KVC_F32 / KVC_F16 / KVC_BF16).

kernel void kvc_get_rows(global const KVC_TYPE(TABLE_DT) * table, ulong table_off, global const int * ids,
                         ulong ids_off, global float * dst, ulong dst_off, int row_len, int n_table_rows) {
    const int c = get_global_id(0);
    const ulong r = get_global_id(1);
    if (c >= row_len) return;
    const int id = ids[ids_off + r];
    float v = 0.0f;
    if (id >= 0 && id < n_table_rows) v = KVC_LOAD(TABLE_DT, table + table_off, (ulong)id * row_len + c);
    dst[dst_off + r * row_len + c] = v;
}
