// kv_append.cl: writes new K/V tokens into paged fp16 pages (HND layout, see lib/core/op.h).
//
// Kernels: kvc_kv_append(k_new, k_off, v_new, v_off, batch_idx, bi_off, positions, pos_off, indptr,
//                        ip_off, indices, ind_off, k_pages, kp_off, v_pages, vp_off,
//                        n_kv_heads, page_size, head_dim, batch, n_pages)
// NDRange: 2-D, global = (>= head_dim, n_tokens * n_kv_heads): one feature of K and V per work-item.
// Layout: k_new, v_new [n_tokens, n_kv_heads, head_dim] of dtypes K_DT, V_DT; batch_idx, positions i32
// [n_tokens]; indptr i32 [batch + 1]; indices i32 [nnz]; k_pages, v_pages f16
// [n_pages, n_kv_heads, page_size, head_dim]. Token t of request b at position pos goes to page
// indices[indptr[b] + pos / page_size], slot pos % page_size.
// The host validates page tables; entries that would still point outside the pool (bad request,
// negative position, page out of range) are skipped rather than written out of bounds.
// Preamble defines: K_DT, V_DT (KVC_F32 / KVC_F16). f16 -> f16 is exact; f32 rounds to nearest even.

kernel void kvc_kv_append(global const KVC_TYPE(K_DT) * k_new, ulong k_off, global const KVC_TYPE(V_DT) * v_new,
                          ulong v_off, global const int * batch_idx, ulong bi_off, global const int * positions,
                          ulong pos_off, global const int * indptr, ulong ip_off, global const int * indices,
                          ulong ind_off, global half * k_pages, ulong kp_off, global half * v_pages, ulong vp_off,
                          int n_kv_heads, int page_size, int head_dim, int batch, int n_pages) {
    const int d = get_global_id(0);
    const ulong th = get_global_id(1);  // token * n_kv_heads + head
    if (d >= head_dim) return;
    const ulong t = th / (ulong)n_kv_heads;
    const int h = (int)(th % (ulong)n_kv_heads);
    const int b = batch_idx[bi_off + t];
    const int pos = positions[pos_off + t];
    if (b < 0 || b >= batch || pos < 0) return;
    const int slot_page = indptr[ip_off + b] + pos / page_size;
    if (slot_page >= indptr[ip_off + b + 1]) return;
    const int page = indices[ind_off + slot_page];
    if (page < 0 || page >= n_pages) return;
    const ulong dst = (((ulong)page * n_kv_heads + h) * page_size + pos % page_size) * head_dim + d;
    const ulong src = th * head_dim + d;
    vstore_half_rte(KVC_LOAD(K_DT, k_new + k_off, src), dst, k_pages + kp_off);
    vstore_half_rte(KVC_LOAD(V_DT, v_new + v_off, src), dst, v_pages + vp_off);
}
