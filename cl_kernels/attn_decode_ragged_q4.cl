// attn_decode_ragged_q4.cl: attn_decode_ragged over q4 ragged pages (ragged_layout::bits == 4;
// format in lib/core/ragged_q4.h): the codes and f16 (min, step) of each row are read from the pages
// and dequantized in registers, no f16 copy of the cache is made.
//
// Kernels:
//   kvc_attn_decode_ragged_q4: work-group (i, h) runs schedule row i = (request b, KV head c,
//     tokens [first, end)) for query head h (< G) of c. Tokens go in tiles of NT:
//       1. work-item j scores token first + j of the tile against q in local memory (pre-scaled by
//          scale * log2(e)): q.k^ = step * sum_i q_i code_i + min * sum_i q_i, the codes read one
//          32-bit word (8 channels) at a time (padding codes are 0 and q is zero past k_width);
//          it also stages its token's V row offset and (min, step);
//       2. every work-item scans the tile's scores for the maximum and applies the online-softmax
//          update (running max m in log2 units, rescale alpha);
//       3. work-item j accumulates p * v^ for channels j, j + NT, ... (ND of them) over the tile.
//     The only task of its (b, c) writes the normalized output; otherwise the task writes its
//     unnormalized output and (m, l) to the scratch buffer (attn_decode_ragged.cl's layout).
//     NDRange: local (NT, 1), global (NT * n_tasks, G).
//   the merge: kvc_attn_decode_ragged_merge (attn_decode_ragged_merge.cl).
//     NDRange: local (WG), global (WG, n_kv_heads * G, batch): one work-group per (request, query head).
// Layout: q f32 [batch, G * k_total]; k_pages u8 [n_pages, page_size * k_row_bytes] (head c's rows
//   at p * page_size * k_row_bytes + page_size * row_offset(c), slot s at + s * row_bytes(k_width(c)),
//   row_offset = the row sizes of the heads before c); v_pages alike; heads, schedule, merge, out and
//   the scratch as attn_decode_ragged.cl. Rows are 4-byte aligned (the host checks the views).
// Preamble defines: G (query heads per KV head), NT (work-group size = tile tokens), MW (bound on
//   every width), ND (= ceil(MW / NT): output channels per work-item).

#define MW8 (((MW + 7) / 8) * 8)  // staged q row, zero past k_width

// Byte offset of head c's rows within a token's bytes (which: 0 K, 1 V).
inline int kvc_q4_row_offset(global const int * heads, int c, int which) {
    int off = 0;
    for (int i = 0; i < c; ++i) off += 4 + 4 * ((heads[i * 4 + 2 * which] + 7) / 8);
    return off;
}

inline float kvc_q4_param(global const uchar * row, int i) {
    return vload_half(i, (global const half *)row);
}

kernel __attribute__((reqd_work_group_size(NT, 1, 1)))
void kvc_attn_decode_ragged_q4(global const float * q, ulong q_off, global const uchar * k_pages, ulong k_off,
                               global const uchar * v_pages, ulong v_off, global const int * indptr, ulong indptr_off,
                               global const int * indices, ulong indices_off, global const int * last_len,
                               ulong last_len_off, global const int * heads, ulong heads_off,
                               global const int * sched, ulong sched_off, global const int * merge, ulong merge_off,
                               global float * out, ulong out_off, global float * part, ulong ml_off, int n_kv_heads,
                               int k_total, int v_total, int page_size, int k_row_bytes, int v_row_bytes,
                               float qscale) {
    local float q_l[MW8];
    local float s_l[NT], p_l[NT];
    local float2 vpar_l[NT];  // (min, step) of the tile's V rows
    local ulong vrow_l[NT];   // byte offsets of the tile's V rows

    const int tid = get_local_id(0);
    const int task = get_group_id(0);
    const int h = get_group_id(1);  // query head within c's G
    global const int * row = sched + sched_off + (ulong)task * 4;
    const int b = row[0], c = row[1], first = row[2], end = row[3];
    heads += heads_off;
    const int kw = heads[c * 4], ko = heads[c * 4 + 1], vw = heads[c * 4 + 2], vo = heads[c * 4 + 3];
    merge += merge_off;
    const int n_in_list = merge[b * n_kv_heads + c + 1] - merge[b * n_kv_heads + c];
    const int p0 = indptr[indptr_off + b];
    indices += indices_off;
    k_pages += k_off;
    v_pages += v_off;
    const int krb = 4 + 4 * ((kw + 7) / 8), vrb = 4 + 4 * ((vw + 7) / 8);
    const ulong k_head = (ulong)page_size * kvc_q4_row_offset(heads, c, 0);
    const ulong v_head = (ulong)page_size * kvc_q4_row_offset(heads, c, 1);

    global const float * qg = q + q_off + (ulong)b * G * k_total + (ulong)G * ko + (ulong)h * kw;
    for (int d = tid; d < MW8; d += NT) q_l[d] = d < kw ? qg[d] * qscale : 0.0f;
    barrier(CLK_LOCAL_MEM_FENCE);
    float qsum = 0.0f;
    for (int d = 0; d < kw; ++d) qsum += q_l[d];

    float m_run = -INFINITY, lsum = 0.0f;
    float acc[ND];
#pragma unroll
    for (int k = 0; k < ND; ++k) acc[k] = 0.0f;

    for (int t0 = first; t0 < end; t0 += NT) {
        const int tn = min(NT, end - t0);
        // 1. scores; the V rows of the tile
        float s = -INFINITY;
        if (tid < tn) {
            const int t = t0 + tid;
            const ulong pg = (ulong)indices[p0 + t / page_size], sl = (ulong)(t % page_size);
            global const uchar * kr = k_pages + pg * page_size * k_row_bytes + k_head + sl * krb;
            global const uint * words = (global const uint *)(kr + 4);
            float dot = 0.0f;
            for (int wi = 0; wi < (kw + 7) / 8; ++wi) {
                const uint u = words[wi];
#pragma unroll
                for (int n = 0; n < 8; ++n) dot += q_l[wi * 8 + n] * (float)((u >> (4 * n)) & 15u);
            }
            s = kvc_q4_param(kr, 1) * dot + kvc_q4_param(kr, 0) * qsum;
            const ulong vr = pg * page_size * v_row_bytes + v_head + sl * vrb;
            vrow_l[tid] = vr;
            vpar_l[tid] = (float2)(kvc_q4_param(v_pages + vr, 0), kvc_q4_param(v_pages + vr, 1));
        }
        s_l[tid] = s;
        barrier(CLK_LOCAL_MEM_FENCE);
        // 2. online-softmax update (the tile has a token, so mn is finite)
        float mt = -INFINITY;
        for (int j = 0; j < tn; ++j) mt = fmax(mt, s_l[j]);
        const float mn = fmax(m_run, mt), alpha = exp2(m_run - mn);
        m_run = mn;
        lsum *= alpha;
#pragma unroll
        for (int k = 0; k < ND; ++k) acc[k] *= alpha;
        p_l[tid] = tid < tn ? exp2(s - mn) : 0.0f;
        barrier(CLK_LOCAL_MEM_FENCE);
        // 3. values: channel d = tid + k * NT of every row of the tile
        for (int j = 0; j < tn; ++j) {
            const float p = p_l[j];
            const float2 par = vpar_l[j];
            global const uchar * codes = v_pages + vrow_l[j] + 4;
            lsum += p;
#pragma unroll
            for (int k = 0; k < ND; ++k) {
                const int d = tid + k * NT;
                if (d < vw) acc[k] += p * ((float)((codes[d / 2] >> (4 * (d & 1))) & 15) * par.y + par.x);
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE);  // the next tile rewrites s_l, p_l and the V rows
    }

#pragma unroll
    for (int k = 0; k < ND; ++k) {
        const int d = tid + k * NT;
        if (d >= vw) continue;
        if (n_in_list == 1)
            out[out_off + (ulong)b * G * v_total + (ulong)G * vo + (ulong)h * vw + d] =
                lsum > 0.0f ? acc[k] / lsum : 0.0f;
        else
            part[((ulong)task * G + h) * MW + d] = acc[k];
    }
    if (n_in_list != 1 && tid == 0) {
        part[ml_off + ((ulong)task * G + h) * 2] = m_run;
        part[ml_off + ((ulong)task * G + h) * 2 + 1] = lsum;
    }
}
