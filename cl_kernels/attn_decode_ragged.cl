// attn_decode_ragged.cl: decode attention in the reduced per-head dims (ZACK/FDC), one work-group
// per row of the host's task list (lib/core/op.h "Decode task list").
//
// Kernels:
//   kvc_attn_decode_ragged: work-group i runs schedule row i = (request b, KV head c, tokens
//     [first, end)) for the G query heads of c (each K'/V' byte is read once for the group).
//     Tokens go in tiles of NT:
//       1. the tile's K' rows (k_width halves each; a head's tokens are contiguous in a page, so a
//          tile within a page is one contiguous block) are copied to local memory by consecutive
//          work-items reading consecutive halves (coalesced); work-item i then scores token i
//          against the G query rows in local memory (q pre-scaled by scale * log2(e): exp2);
//       2. every work-item scans the tile's scores for the per-head maximum and applies the
//          online-softmax update (running max m, rescale alpha, probabilities to local memory);
//       3. work-item i accumulates p * v' for features i, i + NT, ... of the G heads, reading
//          each V' row with consecutive work-items on consecutive halves.
//     The only task of its (b, c) writes the normalized output; otherwise the task writes its
//     unnormalized output and (m, l) to the scratch buffer for kvc_attn_decode_ragged_merge.
//     NDRange: local (NT), global (NT * n_tasks).
//   kvc_attn_decode_ragged_merge: element d of query head h of request b: zeros for a (b, c)
//     without tasks, nothing for one with a single task, kvc_merge_tasks otherwise.
//     NDRange: global (>= MW, n_kv_heads * G, batch).
// Layout: q f32 [batch, G * k_total]; k_pages f16 [n_pages, page_size * k_total] (head c's part
//   of page p at p * page_size * k_total + page_size * k_offset(c), slot s at + s * k_width(c));
//   v_pages alike; heads i32 [n_kv_heads, 4]; schedule i32 [n_tasks, 4]; merge i32
//   [batch * n_kv_heads + 1 + n_tasks]; out f32 [batch, G * v_total]; scratch part: task i's
//   output for head g at (i * G + g) * MW, its (m, l) at ml_off + (i * G + g) * 2.
// Preamble defines: G (query heads per KV head), NT (work-group size = tile tokens), MW (bound on
//   every width, the op's max_width).

#define VPT ((MW + NT - 1) / NT)  // V features per work-item

kernel __attribute__((reqd_work_group_size(NT, 1, 1)))
void kvc_attn_decode_ragged(global const float * q, ulong q_off, global const ushort * k_pages, ulong k_off,
                            global const half * v_pages, ulong v_off, global const int * indptr, ulong indptr_off,
                            global const int * indices, ulong indices_off, global const int * last_len,
                            ulong last_len_off, global const int * heads, ulong heads_off,
                            global const int * sched, ulong sched_off, global const int * merge, ulong merge_off,
                            global float * out, ulong out_off, global float * part, ulong ml_off, int n_kv_heads,
                            int page_size, int k_total, int v_total, float qscale) {
    local float q_l[G * MW];
    local ushort k_l[NT * MW];  // fp16 bits of the tile's K' rows
    local float s_l[NT * G];
    local float p_l[NT * G];
    local ulong krow_l[NT], vrow_l[NT];

    const int tid = get_local_id(0);
    const int task = get_group_id(0);
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

    global const float * qg = q + q_off + (ulong)b * G * k_total + (ulong)G * ko;
    for (int i = tid; i < G * kw; i += NT) q_l[i] = qg[i] * qscale;

    float m_run[G], lsum[G], acc[G][VPT];
    for (int g = 0; g < G; ++g) {
        m_run[g] = -INFINITY;
        lsum[g] = 0.0f;
        for (int v = 0; v < VPT; ++v) acc[g][v] = 0.0f;
    }
    for (int t0 = first; t0 < end; t0 += NT) {
        const int tn = min(NT, end - t0);
        barrier(CLK_LOCAL_MEM_FENCE);  // the previous tile is consumed (and q_l is written)
        if (tid < tn) {
            const int j = t0 + tid;
            const ulong page = (ulong)indices[p0 + j / page_size];
            const ulong slot = (ulong)(j % page_size);
            krow_l[tid] = page * page_size * k_total + (ulong)page_size * ko + slot * kw;
            vrow_l[tid] = page * page_size * v_total + (ulong)page_size * vo + slot * vw;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        // 1. stage K' and score
        for (int e = tid; e < tn * kw; e += NT) k_l[e] = k_pages[krow_l[e / kw] + e % kw];
        barrier(CLK_LOCAL_MEM_FENCE);
        float s[G];
        for (int g = 0; g < G; ++g) s[g] = -INFINITY;
        if (tid < tn) {
            for (int g = 0; g < G; ++g) s[g] = 0.0f;
            for (int d = 0; d < kw; ++d) {
                const float kv = vload_half(tid * kw + d, (local const half *)k_l);
                for (int g = 0; g < G; ++g) s[g] = fma(q_l[g * kw + d], kv, s[g]);
            }
        }
        for (int g = 0; g < G; ++g) s_l[tid * G + g] = s[g];
        barrier(CLK_LOCAL_MEM_FENCE);
        // 2. online softmax
        float mt[G];
        for (int g = 0; g < G; ++g) mt[g] = -INFINITY;
        for (int j = 0; j < tn; ++j)
            for (int g = 0; g < G; ++g) mt[g] = fmax(mt[g], s_l[j * G + g]);
        for (int g = 0; g < G; ++g) {
            const float mn = fmax(m_run[g], mt[g]);  // finite: the tile has a token
            const float alpha = exp2(m_run[g] - mn);
            m_run[g] = mn;
            lsum[g] *= alpha;
            for (int v = 0; v < VPT; ++v) acc[g][v] *= alpha;
            p_l[tid * G + g] = exp2(s[g] - mn);
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        // 3. values
        for (int j = 0; j < tn; ++j) {
            global const half * vr = v_pages + vrow_l[j];
            for (int g = 0; g < G; ++g) lsum[g] += p_l[j * G + g];
            for (int v = 0; v < VPT; ++v) {
                const int d = tid + v * NT;
                if (d < vw) {
                    const float vv = vload_half(d, vr);
                    for (int g = 0; g < G; ++g) acc[g][v] = fma(p_l[j * G + g], vv, acc[g][v]);
                }
            }
        }
    }
    for (int g = 0; g < G; ++g) {
        for (int v = 0; v < VPT; ++v) {
            const int d = tid + v * NT;
            if (d >= vw) continue;
            if (n_in_list == 1)
                out[out_off + (ulong)b * G * v_total + (ulong)G * vo + g * vw + d] = acc[g][v] / lsum[g];
            else
                part[((ulong)task * G + g) * MW + d] = acc[g][v];
        }
        if (n_in_list != 1 && tid == 0) {
            part[ml_off + ((ulong)task * G + g) * 2] = m_run[g];
            part[ml_off + ((ulong)task * G + g) * 2 + 1] = lsum[g];
        }
    }
}

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
