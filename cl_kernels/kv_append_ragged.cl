// kv_append_ragged.cl: writes new tokens into ragged fp16 pages (each KV head its own width).
//
// Kernels: kvc_kv_append_ragged(k_new, k_off, v_new, v_off, batch_idx, bi_off, positions, pos_off,
//                               indptr, ip_off, indices, ind_off, heads, h_off, k_pages, kp_off,
//                               v_pages, vp_off, n_kv_heads, page_size, k_total, v_total, batch,
//                               n_pages)
//   Work-item (e, t) writes element e of token t's packed K row (e < k_total) and of its V row
//   (e < v_total): the head is found by scanning the heads table (a handful of entries), and the
//   element goes to page indices[indptr[b] + pos / page_size], head c's part at
//   page * page_size * total + page_size * offset(c), slot (pos % page_size) * width(c).
//   Consecutive work-items read consecutive inputs and, within a head, write consecutive halves.
// NDRange: global (>= max(k_total, v_total), n_tokens).
// Layout: k_new f32 [n_tokens, k_total], v_new f32 [n_tokens, v_total]; batch_idx, positions i32
//   [n_tokens]; indptr i32 [batch + 1]; indices i32 [nnz]; heads i32 [n_kv_heads, 4] = (k_width,
//   k_offset, v_width, v_offset); k_pages f16 [n_pages, page_size * k_total], v_pages alike.
// Entries that would land outside the pool (bad request, negative position, page out of range) are
// skipped, as in kv_append.cl (the host validates page tables). fp32 -> fp16 rounds to nearest even.
// Preamble defines: none.

// Element offset of element e of a packed row inside its page, or -1 if e is past the row.
inline long kvc_ragged_elem(global const int * heads, int n_kv_heads, int e, int which, int page_size, int slot) {
    for (int c = 0; c < n_kv_heads; ++c) {
        const int w = heads[c * 4 + 2 * which], off = heads[c * 4 + 2 * which + 1];
        if (e >= off && e < off + w) return (long)page_size * off + (long)slot * w + (e - off);
    }
    return -1;
}

kernel void kvc_kv_append_ragged(global const float * k_new, ulong k_off, global const float * v_new, ulong v_off,
                                 global const int * batch_idx, ulong bi_off, global const int * positions,
                                 ulong pos_off, global const int * indptr, ulong ip_off, global const int * indices,
                                 ulong ind_off, global const int * heads, ulong h_off, global half * k_pages,
                                 ulong kp_off, global half * v_pages, ulong vp_off, int n_kv_heads, int page_size,
                                 int k_total, int v_total, int batch, int n_pages) {
    const int e = get_global_id(0);
    const ulong t = get_global_id(1);
    if (e >= k_total && e >= v_total) return;
    const int b = batch_idx[bi_off + t];
    const int pos = positions[pos_off + t];
    if (b < 0 || b >= batch || pos < 0) return;
    const int entry = indptr[ip_off + b] + pos / page_size;
    if (entry >= indptr[ip_off + b + 1]) return;
    const int page = indices[ind_off + entry];
    if (page < 0 || page >= n_pages) return;
    heads += h_off;
    const int slot = pos % page_size;
    if (e < k_total) {
        const long o = kvc_ragged_elem(heads, n_kv_heads, e, 0, page_size, slot);
        if (o >= 0)
            vstore_half_rte(k_new[k_off + t * k_total + e], (ulong)page * page_size * k_total + o, k_pages + kp_off);
    }
    if (e < v_total) {
        const long o = kvc_ragged_elem(heads, n_kv_heads, e, 1, page_size, slot);
        if (o >= 0)
            vstore_half_rte(v_new[v_off + t * v_total + e], (ulong)page * page_size * v_total + o, v_pages + vp_off);
    }
}
