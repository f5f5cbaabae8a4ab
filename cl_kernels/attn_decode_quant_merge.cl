// attn_decode_quant_merge.cl: the split-KV merge of the quantized decodes (attn_decode_quant.cl's
// kvc_adq_split and attn_decode_quant_mma.cl's kvc_adq_warps write the same partials).
//
// Kernel kvc_adq_merge: combines the splits of each (request, query head) like attn_decode's merge and
//   writes lse = ln(sum_s 2^(m_s - M) l_s) + M ln 2 (-inf and out = 0 when there is no token).
//   NDRange global (>= QB_HD, n_q_heads, batch).
// Layout: part (f32) holds part_o [batch, n_q_heads, n_splits, QB_HD] at element 0 and part_ml
//   [batch, n_q_heads, n_splits, 2] (running max in log2 units, sum) at element ml_off; out f32
//   [batch, n_q_heads, QB_HD]; lse f32 [batch, n_q_heads].
// Preamble defines: QB_HD (head_dim).

#define KVC_LN2 0.69314718055994530942f

kernel void kvc_adq_merge(global const float * part, ulong ml_off, global float * out, ulong out_off,
                          global float * lse, ulong lse_off, int n_q_heads, int n_splits) {
    const int d = get_global_id(0);
    if (d >= QB_HD) return;
    const ulong hr = get_global_id(2) * (ulong)n_q_heads + get_global_id(1);
    float log2_den;
    out[out_off + hr * QB_HD + d] = kvc_merge_splits(part, ml_off, hr, n_splits, QB_HD, d, &log2_den);
    if (d == 0) lse[lse_off + hr] = log2_den * KVC_LN2;  // -inf stays -inf
}
