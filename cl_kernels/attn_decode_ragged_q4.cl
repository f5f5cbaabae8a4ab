// attn_decode_ragged_q4.cl: attn_decode_ragged over q4 ragged pages (ragged_layout::bits == 4;
// format in lib/core/ragged_q4.h): the codes and f16 (min, step) of each row are read from the pages
// and dequantized in registers, no f16 copy of the cache is made.
//
// Kernels:
//   kvc_attn_decode_ragged_q4: work-group (i, sg) runs schedule row i = (request b, KV head c,
//     tokens [first, end)) for query heads sg * GB .. sg * GB + GB - 1 of c's G, so each code byte
//     is read once per sub-group (GB = G unless G > 8). A row is 32-bit words: word 0 holds the f16
//     (min, step), words 1.. eight 4-bit codes each. Tokens go in tiles of NT:
//       1. the tile's K rows are copied to local memory word by word, work-items acting as (token
//          slot, word) pairs so that a slot's loads cover one contiguous row; then work-item j
//          scores token j of the tile for the GB heads against q in local memory (pre-scaled by
//          scale * log2(e), so the softmax uses exp2): q.k^ = step * sum_i q_i code_i + min * sum_i q_i
//          (padding codes are 0 and q is zero past k_width). It also stages its token's V (min, step);
//       2. the online-softmax update with the lazily moved running max m of common.cl (rescale
//          alpha, probabilities to local memory);
//       3. work-items act as (token slot, lane) pairs, lane l owning channels [8l, 8l + 8), i.e. one
//          code word of each V row; over its slot's tokens it accumulates (p * step) * code per
//          channel and p * min once per token and head (the min is shared by the row's channels),
//          V_UNROLL rows in flight.
//     At the end the slot accumulators are summed in local memory. The only task of its (b, c) writes
//     the normalized output; otherwise the task writes its unnormalized output and (m, l) to the
//     scratch buffer (attn_decode_ragged.cl's layout).
//     NDRange: local (NT, 1), global (NT * n_tasks, G / GB).
//   the merge: kvc_attn_decode_ragged_merge (attn_decode_ragged_merge.cl).
//     NDRange: local (WG), global (WG, n_kv_heads * G, batch): one work-group per (request, query head).
// Layout: q f32 [batch, G * k_total]; k_pages u8 [n_pages, PAGE_SIZE * k_row_bytes] (head c's rows
//   at p * PAGE_SIZE * k_row_bytes + PAGE_SIZE * row_offset(c), slot s at + s * row_bytes(k_width(c)),
//   row_offset = the row sizes of the heads before c); v_pages alike; heads, schedule, merge, out and
//   the scratch as attn_decode_ragged.cl. Rows are 4-byte aligned (the host checks the views), so
//   the kernel addresses the pages in 32-bit words.
// Preamble defines: G (query heads per KV head), GB (query heads per work-group, divides G), NT
//   (work-group size = tile tokens, >= words of the widest row), MW (bound on every width),
//   PAGE_SIZE, V_UNROLL (V rows in flight per work-item).

#define MW8 (((MW + 7) / 8) * 8)       // staged q row, zero past k_width
#define RW (1 + MW8 / 8)               // words of the widest row
#define KSTR (RW | 1)                  // staged K row stride in words: odd, so that work-items
                                       // reading successive rows hit different banks
#define GBP (((GB + 3) / 4) * 4)       // heads padded to whole float4s in the score arrays

// Row words (1 + ceil(w / 8)) before head c in a token's words (which: 0 K, 1 V).
inline uint kvc_q4_row_offset(global const int * heads, int c, int which) {
    uint off = 0;
    for (int i = 0; i < c; ++i) off += 1 + (heads[i * 4 + 2 * which] + 7) / 8;
    return off;
}

// The eight codes of a word, channels 8l .. 8l + 7 of its row, as floats (low nibble first).
inline float8 kvc_q4_codes(uint u) {
    const uint4 lo = (uint4)(u, u >> 4, u >> 8, u >> 12) & (uint4)(15u);
    const uint4 hi = (uint4)(u >> 16, u >> 20, u >> 24, u >> 28) & (uint4)(15u);
    return (float8)(convert_float4(lo), convert_float4(hi));
}

// Phase 3 for one lane: V rows vs, vs + vslots, ... < tn of the tile; rows past the tile reload
// row tn - 1 and get p = 0.
inline void kvc_q4_accumulate_v(float8 * acc, float * bias, float * lsum, global const uint * v_words,
                                local const uint * vrow_l, local const float2 * vpar_l, local const float4 * p4,
                                int tn, int vs, int vl, int vslots) {
    for (int j0 = vs; j0 < tn; j0 += V_UNROLL * vslots) {
        uint w[V_UNROLL];
#pragma unroll
        for (int u = 0; u < V_UNROLL; ++u) w[u] = v_words[vrow_l[min(j0 + u * vslots, tn - 1)] + 1 + vl];
#pragma unroll
        for (int u = 0; u < V_UNROLL; ++u) {
            const int j = j0 + u * vslots, jr = min(j, tn - 1);
            const float2 par = vpar_l[jr];  // (min, step)
            const float8 cd = kvc_q4_codes(w[u]);
#pragma unroll
            for (int k = 0; k < GBP / 4; ++k) {
                const float4 pv = p4[jr * (GBP / 4) + k];
                const float pp[4] = {pv.x, pv.y, pv.z, pv.w};
#pragma unroll
                for (int g = 4 * k; g < 4 * k + 4 && g < GB; ++g) {
                    const float p = j < tn ? pp[g - 4 * k] : 0.0f;
                    acc[g] += (p * par.y) * cd;
                    bias[g] += p * par.x;
                    lsum[g] += p;
                }
            }
        }
    }
}

kernel __attribute__((reqd_work_group_size(NT, 1, 1)))
void kvc_attn_decode_ragged_q4(global const float * q, ulong q_off, global const uchar * k_pages, ulong k_off,
                               global const uchar * v_pages, ulong v_off, global const int * indptr, ulong indptr_off,
                               global const int * indices, ulong indices_off, global const int * last_len,
                               ulong last_len_off, global const int * heads, ulong heads_off,
                               global const int * sched, ulong sched_off, global const int * merge, ulong merge_off,
                               global float * out, ulong out_off, global float * part, ulong ml_off, int n_kv_heads,
                               int k_total, int v_total, int k_row_bytes, int v_row_bytes, float qscale) {
    local float4 q4[GB * MW8 / 4];
    local float qsum_l[GB];
    local uint k_l[NT * KSTR];        // K rows of the tile
    local float2 vpar_l[NT];          // V (min, step) of the tile's tokens
    local float4 p4[NT * GBP / 4];    // probabilities of the tile, [token][head]
    local int mx_l[2 * GB];           // the running max's proposals (kvc_propose_max)
    local float m_l[GB];              // the running maxima at the end (kvc_ragged_task_output)
    local uint krow_l[2 * NT], vrow_l[2 * NT];  // row word offsets in the pools: this tile, next
    local float o_l[GB * NT * 8];     // slot accumulators at the end, [head][slot][lane][8]
    local float lsum_l[GB * NT];      // slot sums at the end, [head][slot]
    local float * q_l = (local float *)q4;
    local float * p_l = (local float *)p4;

    const int tid = get_local_id(0);
    const int task = get_group_id(0);
    const int g0 = get_group_id(1) * GB;  // first query head of c in this work-group
    heads += heads_off;
    const kvc_ragged_task T =
        kvc_ragged_task_at(sched + sched_off, heads, merge + merge_off, indptr + indptr_off, task, n_kv_heads);
    const int b = T.b, c = T.c, first = T.first, end = T.end, kw = T.kw, ko = T.ko, vw = T.vw, vo = T.vo;
    const int n_in_list = T.n_in_list, p0 = T.p0;
    indices += indices_off;
    global const uint * k_words = (global const uint *)(k_pages + k_off);
    global const uint * v_words = (global const uint *)(v_pages + v_off);

    // (slot, word) mappings of K staging and of the value phase; one division each per work-item.
    const int lk = 1 + (kw + 7) / 8, lv = max(1, (vw + 7) / 8);
    const int ks = tid / lk, kl = tid % lk, kslots = NT / lk;
    const int vs = tid / lv, vl = tid % lv, vslots = NT / lv;
    const uint k_page = (uint)PAGE_SIZE * (uint)(k_row_bytes / 4), v_page = (uint)PAGE_SIZE * (uint)(v_row_bytes / 4);
    const uint k_head = (uint)PAGE_SIZE * kvc_q4_row_offset(heads, c, 0);
    const uint v_head = (uint)PAGE_SIZE * kvc_q4_row_offset(heads, c, 1);
    const uint krw = (uint)lk, vrw = (uint)(1 + (vw + 7) / 8);

    global const float * qg = q + q_off + (ulong)b * G * k_total + (ulong)G * ko + (ulong)g0 * kw;
    for (int i = tid; i < GB * MW8; i += NT) {
        const int g = i / MW8, d = i % MW8;
        q_l[i] = d < kw ? qg[g * kw + d] * qscale : 0.0f;
    }
#define KVC_ROWS(dst, t, j)                                       \
    do {                                                          \
        const uint pg_ = (uint)indices[p0 + (t) / PAGE_SIZE];     \
        const uint sl_ = (uint)((t) % PAGE_SIZE);                 \
        krow_l[(dst) + (j)] = pg_ * k_page + k_head + sl_ * krw;  \
        vrow_l[(dst) + (j)] = pg_ * v_page + v_head + sl_ * vrw;  \
    } while (0)
    if (tid < end - first) KVC_ROWS(0, first + tid, tid);
    kvc_clear_max(mx_l, GB);
    barrier(CLK_LOCAL_MEM_FENCE);  // q, the first tile's rows, the empty max slots
    if (tid < GB) {
        float sum = 0.0f;
        for (int d = 0; d < kw; ++d) sum += q_l[tid * MW8 + d];
        qsum_l[tid] = sum;
    }

    float m_run[GB], lsum[GB], bias[GB];
    float8 acc[GB];
#pragma unroll
    for (int g = 0; g < GB; ++g) {
        m_run[g] = -INFINITY;
        lsum[g] = 0.0f;
        bias[g] = 0.0f;
        acc[g] = (float8)(0.0f);
    }

    // Three barriers per tile; the next tile's rows are looked up during this one (double-buffered),
    // and every local array a tile writes was last read before one of the current tile's barriers.
    for (int t0 = first, it = 0; t0 < end; t0 += NT, ++it) {
        const int tn = min(NT, end - t0);
        const int cur = (it & 1) * NT, nxt = ((it & 1) ^ 1) * NT;
        // 1a. stage the K rows
        if (ks < kslots)
            for (int j = ks; j < tn; j += kslots) k_l[j * KSTR + kl] = k_words[krow_l[cur + j] + kl];
        barrier(CLK_LOCAL_MEM_FENCE);
        // 1b. scores of token t0 + tid, and its V (min, step)
        float s[GB];
#pragma unroll
        for (int g = 0; g < GB; ++g) s[g] = tid < tn ? 0.0f : -INFINITY;
        if (tid < tn) {
            local const uint * kr = k_l + tid * KSTR;
            float qc[GB];  // sum_i q_i code_i
#pragma unroll
            for (int g = 0; g < GB; ++g) qc[g] = 0.0f;
            for (int wi = 1; wi < lk; ++wi) {
                const float8 cd = kvc_q4_codes(kr[wi]);
#pragma unroll
                for (int g = 0; g < GB; ++g)
                    qc[g] += dot(cd.lo, q4[g * (MW8 / 4) + 2 * wi - 2]) + dot(cd.hi, q4[g * (MW8 / 4) + 2 * wi - 1]);
            }
            const float2 kp = vload_half2(0, (local const half *)kr);  // (min, step)
#pragma unroll
            for (int g = 0; g < GB; ++g) s[g] = kp.y * qc[g] + kp.x * qsum_l[g];
            vpar_l[tid] = vload_half2(0, (global const half *)(v_words + vrow_l[cur + tid]));
        }
#pragma unroll
        for (int g = 0; g < GB; ++g) kvc_propose_max(mx_l, it, GB, g, s[g], m_run[g]);
        if (tid < end - t0 - NT) KVC_ROWS(nxt, t0 + NT + tid, tid);
        barrier(CLK_LOCAL_MEM_FENCE);
        // 2. online-softmax update (rows past tn get p = 0)
        float alpha[GB];
#pragma unroll
        for (int g = 0; g < GB; ++g) {
            // alpha from the moved max, as attn_decode_quant.cl: the same number as kvc_take_max's, and
            // 1.01-1.04x faster than it on NVIDIA's driver (H200, docs/data/bench_ops_ocl_q4_alpha_h200.csv).
            const float m_old = m_run[g];
            kvc_take_max(mx_l, it, GB, g, &m_run[g]);
            alpha[g] = m_run[g] == m_old ? 1.0f : exp2(m_old - m_run[g]);
        }
        kvc_reset_next_max(mx_l, it, GB);
#pragma unroll
        for (int g = 0; g < GB; ++g) {
            lsum[g] *= alpha[g];
            bias[g] *= alpha[g];
            acc[g] *= alpha[g];
            p_l[tid * GBP + g] = exp2(s[g] - m_run[g]);
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        // 3. values
        if (vs < vslots && vw > 0) kvc_q4_accumulate_v(acc, bias, lsum, v_words, vrow_l + cur, vpar_l, p4, tn, vs, vl, vslots);
    }
#undef KVC_ROWS

    // Sum the slot accumulators (the min terms added back per slot); every head at once, so one
    // barrier (a barrier per head in an unrolled loop makes PoCL's work-group compiler take minutes).
    if (vs < vslots) {
#pragma unroll
        for (int g = 0; g < GB; ++g) {
            vstore8(acc[g] + bias[g], 0, o_l + (g * NT + vs * lv + vl) * 8);
            if (vl == 0) lsum_l[g * NT + vs] = lsum[g];
        }
    }
    if (tid == 0) {
#pragma unroll
        for (int g = 0; g < GB; ++g) m_l[g] = m_run[g];
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    kvc_ragged_task_output(o_l, lsum_l, GB, NT, NT * 8, lv * 8, vslots, vw, n_in_list, m_l,
                           out + out_off + (ulong)b * G * v_total + (ulong)G * vo + (ulong)g0 * vw, part,
                           (ulong)task * G + g0, MW, ml_off);
}
