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

// kvc_kv_append_ragged_q4(same arguments, k_pages / v_pages as uchar, then k_row_bytes, v_row_bytes)
//   kv.bits == 4: work-item (r, t) quantizes row r of token t (r < n_kv_heads: K of head r, else V
//   of head r - n_kv_heads) into its q4 row (format and quantizer: lib/core/ragged_q4.h): min/max
//   over the row, f16 min and step, then the codes one 32-bit word (8 channels) at a time, padding
//   codes 0. The rows must match the CPU reference byte for byte: built with
//   -cl-fp32-correctly-rounded-divide-sqrt and no contraction (below), rint = half to even.
//   NDRange: global (2 * n_kv_heads, n_tokens). Rows start 4-byte aligned (row totals and row
//   sizes are multiples of 4; the host keeps the pools' offsets so).
#pragma OPENCL FP_CONTRACT OFF

// f16 bits of x rounded to nearest even, saturated at +-65504, NaN passing (as ragged_q4_half).
inline ushort kvc_q4_half(float x) {
    if (x > 65504.0f) x = 65504.0f;
    if (x < -65504.0f) x = -65504.0f;
    ushort u;
    vstore_half_rte(x, 0, (private half *)&u);
    return u;
}

kernel void kvc_kv_append_ragged_q4(global const float * k_new, ulong k_off, global const float * v_new, ulong v_off,
                                    global const int * batch_idx, ulong bi_off, global const int * positions,
                                    ulong pos_off, global const int * indptr, ulong ip_off, global const int * indices,
                                    ulong ind_off, global const int * heads, ulong h_off, global uchar * k_pages,
                                    ulong kp_off, global uchar * v_pages, ulong vp_off, int n_kv_heads, int page_size,
                                    int k_total, int v_total, int batch, int n_pages, int k_row_bytes,
                                    int v_row_bytes) {
    const int r = get_global_id(0);
    const ulong t = get_global_id(1);
    if (r >= 2 * n_kv_heads) return;
    const int b = batch_idx[bi_off + t];
    const int pos = positions[pos_off + t];
    if (b < 0 || b >= batch || pos < 0) return;
    const int entry = indptr[ip_off + b] + pos / page_size;
    if (entry >= indptr[ip_off + b + 1]) return;
    const int page = indices[ind_off + entry];
    if (page < 0 || page >= n_pages) return;
    heads += h_off;
    const int which = r >= n_kv_heads, c = r - which * n_kv_heads;
    // Byte offset of head c's rows in a token's bytes: the sizes of the rows before it.
    int row_off = 0;
    for (int i = 0; i < c; ++i) row_off += 4 + 4 * ((heads[i * 4 + 2 * which] + 7) / 8);
    const int w = heads[c * 4 + 2 * which], eo = heads[c * 4 + 2 * which + 1];
    const int rb = 4 + 4 * ((w + 7) / 8), total = which ? v_row_bytes : k_row_bytes;
    global const float * x = which ? v_new + v_off + t * v_total + eo : k_new + k_off + t * k_total + eo;
    global uchar * row = (which ? v_pages + vp_off : k_pages + kp_off) + (ulong)page * page_size * total +
                         (ulong)page_size * row_off + (ulong)(pos % page_size) * rb;
    float mn = x[0], mx = x[0];
    for (int i = 1; i < w; ++i) {
        mn = fmin(mn, x[i]);
        mx = fmax(mx, x[i]);
    }
    const ushort hmin = kvc_q4_half(mn), hstep = kvc_q4_half((mx - mn) / 15.0f);
    const float fmn = vload_half(0, (const private half *)&hmin), fst = vload_half(0, (const private half *)&hstep);
    ((global ushort *)row)[0] = hmin;
    ((global ushort *)row)[1] = hstep;
    global uint * words = (global uint *)(row + 4);
    for (int i0 = 0; i0 < w; i0 += 8) {
        uint word = 0;
        for (int i = i0; i < min(i0 + 8, w); ++i) {
            const float q = fst == 0.0f ? 0.0f : clamp(rint((x[i] - fmn) / fst), 0.0f, 15.0f);
            word |= (uint)q << (4 * (i - i0));
        }
        words[i0 / 8] = word;
    }
}
