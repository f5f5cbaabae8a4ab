// attn_prefill_ragged.cl: causal prefill attention with per-head Q/K and V widths (ZACK/FDC).
//
// Kernels: kvc_attn_prefill_ragged(q, q_off, k, k_off, v, v_off, seq_indptr, si_off, heads, h_off,
//                                  out, out_off, n_kv_heads, k_total, v_total, balanced, qscale)
//   Work-group (block, query head h, request b) handles the query rows [block * RB, (block + 1) *
//   RB) of h in sub-tiles of BQ rows; RB = BQ * f_h with f_h = 1 (plain) or, balanced (ZACK/FDC
//   §5.3), f_h = max(1, round(d_sum^max / d_sum^h)), d_sum = k_width + v_width + 1: narrow heads
//   take proportionally more rows, so every work-group does about the same work. The grid is sized
//   for f = 1; blocks starting past the request's end exit at once. Each sub-tile runs as
//   attn_prefill.cl: K/V tiles of BK tokens (up to the sub-tile's last query: causal) staged in
//   local memory as fp32, work-item (row, r) of the BQ x TPR work-group scores its row for keys r,
//   r + TPR, ..., online softmax in registers (exp2, q pre-scaled by scale * log2 e), p * V for
//   output features r, r + TPR, ... < v_width.
//   NDRange: local (BQ * TPR), global (BQ * TPR * ceil(max_seq_len / BQ), n_kv_heads * G, batch).
// Layout: q f32 [n_tokens, G * k_total] (head h = c * G + i at G * k_offset(c) + i * k_width(c));
//   k f16 [n_tokens, k_total], v f16 [n_tokens, v_total] (head c at its offset); heads i32
//   [n_kv_heads, 4]; seq_indptr i32 [batch + 1]; out f32 [n_tokens, G * v_total].
// Preamble defines: G, MW (bound on every width), BQ, BK, TPR.

#define NT (BQ * TPR)
#define DPT ((MW + TPR - 1) / TPR)  // output features per work-item (bound)
#define LDK (MW + 1)                 // padded row: the TPR work-items of a row read different K rows

kernel __attribute__((reqd_work_group_size(NT, 1, 1)))
void kvc_attn_prefill_ragged(global const float * q, ulong q_off, global const half * k, ulong k_off,
                             global const half * v, ulong v_off, global const int * seq_indptr, ulong si_off,
                             global const int * heads, ulong h_off, global float * out, ulong out_off,
                             int n_kv_heads, int k_total, int v_total, int balanced, float qscale) {
    local float q_l[BQ * LDK];
    local float k_l[BK * LDK];
    local float v_l[BK * MW];
    local float s_l[BQ * BK];

    const int tid = get_local_id(0);
    const int h = get_group_id(1);
    const int b = get_group_id(2);
    const int c = h / G, gi = h % G;
    heads += h_off;
    const int kw = heads[c * 4], ko = heads[c * 4 + 1], vw = heads[c * 4 + 2], vo = heads[c * 4 + 3];
    int f = 1;
    if (balanced) {
        int dmax = 0;
        for (int i = 0; i < n_kv_heads; ++i) dmax = max(dmax, heads[i * 4] + heads[i * 4 + 2] + 1);
        const int dh = kw + vw + 1;
        f = max(1, (dmax + dh / 2) / dh);
    }
    const int s0 = seq_indptr[si_off + b];
    const int len = seq_indptr[si_off + b + 1] - s0;
    const int rb = BQ * f;
    const int block_begin = get_group_id(0) * rb;
    if (block_begin >= len) return;  // uniform across the work-group, before any barrier
    q += q_off + (ulong)G * ko + (ulong)gi * kw;
    k += k_off + ko;
    v += v_off + vo;
    out += out_off + (ulong)G * vo + (ulong)gi * vw;
    const ulong q_stride = (ulong)G * k_total, o_stride = (ulong)G * v_total;

    const int row = tid / TPR, r = tid % TPR;
    for (int q_begin = block_begin; q_begin < min(len, block_begin + rb); q_begin += BQ) {
        barrier(CLK_LOCAL_MEM_FENCE);  // the previous sub-tile is done with q_l
        for (int i = tid; i < BQ * kw; i += NT) {
            const int rr = i / kw, d = i % kw;
            const int qi = q_begin + rr;
            q_l[rr * LDK + d] = qi < len ? q[(ulong)(s0 + qi) * q_stride + d] * qscale : 0.0f;
        }
        const int qi = q_begin + row;  // this work-item's query (may be >= len in the last tile)
        float acc[DPT];
        for (int cc = 0; cc < DPT; ++cc) acc[cc] = 0.0f;
        float m = -INFINITY, l = 0.0f;
        const int k_stop = min(len, q_begin + BQ);
        for (int k0 = 0; k0 < k_stop; k0 += BK) {
            barrier(CLK_LOCAL_MEM_FENCE);  // previous tile fully consumed (and q_l written)
            for (int i = tid; i < BK * kw; i += NT) {
                const int j = i / kw, d = i % kw;
                const int kj = k0 + j;
                k_l[j * LDK + d] = kj < len ? vload_half((ulong)(s0 + kj) * k_total + d, k) : 0.0f;
            }
            for (int i = tid; i < BK * vw; i += NT) {
                const int j = i / vw, d = i % vw;
                const int kj = k0 + j;
                v_l[j * MW + d] = kj < len ? vload_half((ulong)(s0 + kj) * v_total + d, v) : 0.0f;
            }
            barrier(CLK_LOCAL_MEM_FENCE);
            for (int j = r; j < BK; j += TPR) {
                const int kj = k0 + j;
                float s = -INFINITY;
                if (kj <= qi && kj < len) {
                    s = 0.0f;
                    for (int d = 0; d < kw; ++d) s = fma(q_l[row * LDK + d], k_l[j * LDK + d], s);
                }
                s_l[row * BK + j] = s;
            }
            barrier(CLK_LOCAL_MEM_FENCE);
            float mt = -INFINITY;
            for (int j = 0; j < BK; ++j) mt = fmax(mt, s_l[row * BK + j]);
            const float mn = fmax(m, mt);
            if (mn == -INFINITY) continue;  // nothing visible yet for this row (only rows past len)
            const float alpha = exp2(m - mn);
            l *= alpha;
            for (int cc = 0; cc < DPT; ++cc) acc[cc] *= alpha;
            for (int j = 0; j < BK; ++j) {
                const float p = exp2(s_l[row * BK + j] - mn);
                l += p;
                for (int cc = 0; cc < DPT; ++cc) {
                    const int d = r + cc * TPR;
                    if (d < vw) acc[cc] = fma(p, v_l[j * MW + d], acc[cc]);
                }
            }
            m = mn;
        }
        if (qi < len) {
            global float * o = out + (ulong)(s0 + qi) * o_stride;
            const float inv = l > 0.0f ? 1.0f / l : 0.0f;
            for (int cc = 0; cc < DPT; ++cc) {
                const int d = r + cc * TPR;
                if (d < vw) o[d] = acc[cc] * inv;
            }
        }
    }
}
