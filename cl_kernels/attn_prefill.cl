// attn_prefill.cl: causal attention over a ragged batch of prompts (fp16 K/V, fp32 math).
//
// Kernels: kvc_attn_prefill(q, q_off, k, k_off, v, v_off, seq_indptr, si_off, out, out_off,
//                           n_q_heads, n_kv_heads, qscale)
//   One work-group per (query tile of BQ rows, query head, request). Request b owns rows
//   [seq_indptr[b], seq_indptr[b+1]); its token i attends to its tokens 0..i. Work-groups whose tile
//   starts past the request's end exit at once (the grid is sized by max_seq_len). For each key tile
//   of BK tokens (only up to the tile's last query: causal), K and V are staged in local memory as
//   fp32; work-item (row, r) of the BQ x TPR work-group computes the scores of its row for keys
//   r, r+TPR, ..., then every work-item of the row runs the same online-softmax update (running
//   max and sum in registers, exp2 with q pre-scaled by scale * log2(e)) and accumulates
//   p * V for its HEAD_DIM / TPR output features (strided by TPR so local reads are contiguous).
//   NDRange: local (BQ * TPR, 1, 1), global (BQ * TPR * ceil(max_seq_len / BQ), n_q_heads, batch).
// Layout: q, out f32 [n_tokens, n_q_heads, HEAD_DIM]; k, v f16 [n_tokens, n_kv_heads, HEAD_DIM];
//   seq_indptr i32 [batch + 1]; query head h reads KV head h / (n_q_heads / n_kv_heads).
// Preamble defines: HEAD_DIM, BQ, BK, TPR (divides HEAD_DIM); WITH_LSE adds the lse output (the
// natural-log softmax denominator of each row and head).

#define NT (BQ * TPR)
#define DPT (HEAD_DIM / TPR)  // output features per work-item
#define LDK (HEAD_DIM + 1)     // padded row: the TPR work-items of a row read different K rows

kernel __attribute__((reqd_work_group_size(NT, 1, 1)))
void kvc_attn_prefill(global const float * q, ulong q_off, global const half * k, ulong k_off,
                      global const half * v, ulong v_off, global const int * seq_indptr, ulong si_off,
                      global float * out, ulong out_off, int n_q_heads, int n_kv_heads, float qscale
#ifdef WITH_LSE
                      , global float * lse, ulong lse_off
#endif
                      ) {
    local float q_l[BQ * LDK];
    local float k_l[BK * LDK];
    local float v_l[BK * HEAD_DIM];
    local float s_l[BQ * BK];

    const int tid = get_local_id(0);
    const int q_begin = get_group_id(0) * BQ;
    const int qh = get_group_id(1);
    const int b = get_group_id(2);
    const int s0 = seq_indptr[si_off + b];
    const int len = seq_indptr[si_off + b + 1] - s0;
    if (q_begin >= len) return;  // uniform across the work-group, before any barrier
    const int kvh = qh / (n_q_heads / n_kv_heads);
    q += q_off;
    k += k_off;
    v += v_off;
    out += out_off;

    for (int i = tid; i < BQ * HEAD_DIM; i += NT) {
        const int r = i / HEAD_DIM, d = i % HEAD_DIM;
        const int qi = q_begin + r;
        q_l[r * LDK + d] = qi < len ? q[((ulong)(s0 + qi) * n_q_heads + qh) * HEAD_DIM + d] * qscale : 0.0f;
    }

    const int row = tid / TPR, r = tid % TPR;
    const int qi = q_begin + row;  // this work-item's query (may be >= len in the last tile)
    float acc[DPT];
    for (int c = 0; c < DPT; ++c) acc[c] = 0.0f;
    float m = -INFINITY, l = 0.0f;

    const int k_stop = min(len, q_begin + BQ);
    for (int k0 = 0; k0 < k_stop; k0 += BK) {
        barrier(CLK_LOCAL_MEM_FENCE);  // previous tile fully consumed (and q_l written)
        for (int i = tid; i < BK * HEAD_DIM; i += NT) {
            const int j = i / HEAD_DIM, d = i % HEAD_DIM;
            const int kj = k0 + j;
            float kv = 0.0f, vv = 0.0f;
            if (kj < len) {
                const ulong src = ((ulong)(s0 + kj) * n_kv_heads + kvh) * HEAD_DIM + d;
                kv = vload_half(src, k);
                vv = vload_half(src, v);
            }
            k_l[j * LDK + d] = kv;
            v_l[j * HEAD_DIM + d] = vv;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int j = r; j < BK; j += TPR) {
            const int kj = k0 + j;
            float s = -INFINITY;
            if (kj <= qi && kj < len) {
                s = 0.0f;
                for (int d = 0; d < HEAD_DIM; ++d) s = fma(q_l[row * LDK + d], k_l[j * LDK + d], s);
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
        for (int c = 0; c < DPT; ++c) acc[c] *= alpha;
        for (int j = 0; j < BK; ++j) {
            const float p = exp2(s_l[row * BK + j] - mn);
            l += p;
            for (int c = 0; c < DPT; ++c) acc[c] = fma(p, v_l[j * HEAD_DIM + r + c * TPR], acc[c]);
        }
        m = mn;
    }
    if (qi < len) {
        global float * o = out + ((ulong)(s0 + qi) * n_q_heads + qh) * HEAD_DIM;
        const float inv = l > 0.0f ? 1.0f / l : 0.0f;
        for (int c = 0; c < DPT; ++c) o[r + c * TPR] = acc[c] * inv;
#ifdef WITH_LSE
        // m is in log2 units (qscale holds log2 e); every row sees at least itself, so l > 0.
        if (r == 0) lse[lse_off + (ulong)(s0 + qi) * n_q_heads + qh] = m / M_LOG2E_F + log(l);
#endif
    }
}
