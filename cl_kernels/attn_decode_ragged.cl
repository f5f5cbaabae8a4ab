// attn_decode_ragged.cl: decode attention in the reduced per-head dims (ZACK/FDC), one work-group
// per (row of the host's task list, sub-group of GB query heads) (lib/core/op.h "Decode task list").
//
// Kernels:
//   kvc_attn_decode_ragged: work-group (i, sg) runs schedule row i = (request b, KV head c, tokens
//     [first, end)) for query heads sg * GB .. sg * GB + GB - 1 of c's G (each K'/V' byte is read
//     once per sub-group; GB = G unless G > 8). The work-item mapping is attn_decode.cl's with the
//     row widths of head c, known at run time: a row of w halves is ceil(w / VEC) chunks of VEC
//     features, and work-items act as (token slot, lane) pairs, lane = chunk, so the lanes of a slot
//     read one row and the slots read successive rows (rows of a head are contiguous within a page).
//     Tokens go in tiles of NT:
//       1. K' of the tile is copied to local memory chunk by chunk (coalesced, SB loads in flight per
//          work-item); then work-item i computes the scores of token i for the GB heads against q
//          in local memory (pre-scaled by scale * log2(e), so the softmax uses exp2);
//       2. the online-softmax update: the running max m moves only when a score of the tile
//          exceeds it by more than KVC_LAZY_MAX (common.cl: such work-items propose their score
//          with a local atomic max at the end of 1b); rescale alpha, probabilities to local memory;
//       3. (slot, lane) pairs with ceil(v_width / VEC) lanes per slot accumulate p * v' over the
//          tile tokens of their slot, V_UNROLL rows in flight.
//     Loads are single vector loads when head c's rows are VEC-aligned (widths, offsets and page
//     strides multiples of VEC: ZACK/FDC ranks, rounded to 16), else guarded element loads with
//     zeros past the width; the choice is uniform over the work-group. At the end the slot
//     accumulators are summed in local memory. The only task of its (b, c) writes the normalized
//     output; otherwise the task writes its unnormalized output and (m, l) to the scratch buffer.
//     NDRange: local (NT, 1), global (NT * n_tasks, G / GB).
//   the merge of rows with several tasks: kvc_attn_decode_ragged_merge (attn_decode_ragged_merge.cl,
//     shared with the q4 pages and attn_decode_palu).
//     NDRange: local (WG), global (WG, n_kv_heads * G, batch): one work-group per (request, query head).
// Layout: q f32 [batch, G * k_total]; k_pages f16 [n_pages, PAGE_SIZE * k_total] (head c's part
//   of page p at p * PAGE_SIZE * k_total + PAGE_SIZE * k_offset(c), slot s at + s * k_width(c));
//   v_pages alike; heads i32 [n_kv_heads, 4]; schedule i32 [n_tasks, 4]; merge i32
//   [batch * n_kv_heads + 1 + n_tasks]; out f32 [batch, G * v_total]; scratch part: task i's
//   output for head g at (i * G + g) * MW, its (m, l) at ml_off + (i * G + g) * 2.
// Preamble defines: G (query heads per KV head), GB (query heads per work-group, divides G), NT
//   (work-group size = tile tokens, >= ceil(MW / VEC)), MW (bound on every width, the op's
//   max_width), VEC (4 or 8 features per chunk), PAGE_SIZE, V_UNROLL (V rows in flight).

#ifndef V_UNROLL
#define V_UNROLL 4
#endif
#define SB 4                         // K staging: chunks loaded per work-item before storing
#define MWV ((MW + VEC - 1) / VEC)   // chunks in the widest row
#define QSTR (MWV * VEC)             // staged q row in floats (zero past k_width)
#define KSTR (MWV + 8 / VEC)         // staged K row in chunks, padded by 16 bytes: successive rows
                                     // read by successive work-items fall in different banks
#define GBP (((GB + 3) / 4) * 4)     // heads padded to whole float4s in the score arrays

#if VEC == 8
typedef float8 kvc_vec;
typedef uint4 kvc_raw;  // VEC fp16 values as raw bits
#define KVC_DOTQ(kv, q4, i) (dot((kv).lo, (q4)[2 * (i)]) + dot((kv).hi, (q4)[2 * (i) + 1]))
#define KVC_VLOADA_HALF(i, p) vloada_half8((i), (p))
#define KVC_VLOAD_HALF(i, p) vload_half8((i), (p))
#define KVC_VSTORE(v, p) vstore8((v), 0, (p))
#define KVC_RAW_OF(e) as_uint4((ushort8)((e)[0], (e)[1], (e)[2], (e)[3], (e)[4], (e)[5], (e)[6], (e)[7]))
#else
typedef float4 kvc_vec;
typedef uint2 kvc_raw;
#define KVC_DOTQ(kv, q4, i) dot((kv), (q4)[i])
#define KVC_VLOADA_HALF(i, p) vloada_half4((i), (p))
#define KVC_VLOAD_HALF(i, p) vload_half4((i), (p))
#define KVC_VSTORE(v, p) vstore4((v), 0, (p))
#define KVC_RAW_OF(e) as_uint2((ushort4)((e)[0], (e)[1], (e)[2], (e)[3]))
#endif

// Chunk c (features c * VEC ..) of the row of w halves at element `row`: one vector load when the
// head's rows are aligned (w is then a multiple of VEC), else element loads with zeros past w (a
// row's last chunk may be partial, and reading on could leave the pool). The element loads clamp
// their index and select instead of branching: PoCL's work-group compiler slows down badly with
// many branches between barriers.
inline kvc_raw kvc_load_raw(global const ushort * base, ulong row, int c, int w, bool aligned) {
    if (aligned) return ((global const kvc_raw *)(base + row))[c];
    ushort e[VEC];
#pragma unroll
    for (int i = 0; i < VEC; ++i) {
        const int d = c * VEC + i;
        const ushort x = base[row + min(d, w - 1)];
        e[i] = d < w ? x : (ushort)0;
    }
    return KVC_RAW_OF(e);
}

inline kvc_vec kvc_load_vec(global const half * base, ulong row, int c, int w, bool aligned) {
    if (aligned) return KVC_VLOADA_HALF(c, base + row);
    const kvc_raw r = kvc_load_raw((global const ushort *)base, row, c, w, false);
    return KVC_VLOAD_HALF(0, (const private half *)&r);
}

// Phase 1a: chunk kl of the K' rows ks, ks + kslots, ... < tn to local memory, SB loads in flight.
// Called with a literal `aligned`, so each copy is free of per-load branches; slots past the tile
// load a valid row again and store to the spare row NT.
inline void kvc_stage_k(local kvc_raw * k_l, global const ushort * k_pages, local const ulong * rows, int tn,
                        int ks, int kl, int kslots, int kw, bool aligned) {
    for (int j0 = ks; j0 < tn; j0 += SB * kslots) {
        kvc_raw r[SB];
#pragma unroll
        for (int u = 0; u < SB; ++u) r[u] = kvc_load_raw(k_pages, rows[min(j0 + u * kslots, tn - 1)], kl, kw, aligned);
#pragma unroll
        for (int u = 0; u < SB; ++u) {
            const int j = j0 + u * kslots;
            k_l[(j < tn ? j : NT) * KSTR + kl] = r[u];
        }
    }
}

// Phase 3: p * v' over the V' rows vs, vs + vslots, ... < tn for lane vl, V_UNROLL rows in flight;
// rows past the tile reload row tn - 1 and get p = 0.
inline void kvc_accumulate_v(kvc_vec * acc, float * lsum, global const half * v_pages, local const ulong * rows,
                             local const float4 * p4, int tn, int vs, int vl, int vslots, int vw, bool aligned) {
    for (int j0 = vs; j0 < tn; j0 += V_UNROLL * vslots) {
        kvc_vec vv[V_UNROLL];
#pragma unroll
        for (int u = 0; u < V_UNROLL; ++u)
            vv[u] = kvc_load_vec(v_pages, rows[min(j0 + u * vslots, tn - 1)], vl, vw, aligned);
#pragma unroll
        for (int u = 0; u < V_UNROLL; ++u) {
            const int j = j0 + u * vslots;
            const int jr = min(j, NT - 1);
#pragma unroll
            for (int k = 0; k < GBP / 4; ++k) {
                const float4 pv = p4[jr * (GBP / 4) + k];
                const float pp[4] = {pv.x, pv.y, pv.z, pv.w};
#pragma unroll
                for (int g = 4 * k; g < 4 * k + 4 && g < GB; ++g) {
                    const float p = j < tn ? pp[g - 4 * k] : 0.0f;
                    acc[g] += p * vv[u];
                    lsum[g] += p;
                }
            }
        }
    }
}

kernel __attribute__((reqd_work_group_size(NT, 1, 1)))
void kvc_attn_decode_ragged(global const float * q, ulong q_off, global const ushort * k_pages, ulong k_off,
                            global const half * v_pages, ulong v_off, global const int * indptr, ulong indptr_off,
                            global const int * indices, ulong indices_off, global const int * last_len,
                            ulong last_len_off, global const int * heads, ulong heads_off,
                            global const int * sched, ulong sched_off, global const int * merge, ulong merge_off,
                            global float * out, ulong out_off, global float * part, ulong ml_off, int n_kv_heads,
                            int k_total, int v_total, float qscale) {
    local float4 q4[GB * QSTR / 4];
    local kvc_raw k_l[(NT + 1) * KSTR];  // K' rows of the tile (fp16 bits), a spare row
    local float4 p4[NT * GBP / 4];  // probabilities of the tile, [token][head]
    local int mx_l[2 * GB];         // the running max's proposals (kvc_propose_max)
    local float m_l[GB];              // the running maxima at the end (kvc_ragged_task_output)
    local float o_l[GB * NT * VEC];  // slot accumulators at the end, [head][slot][lane][VEC]
    local float lsum_l[GB * NT];     // slot sums at the end, [head][slot]
    local ulong krow_l[2 * NT], vrow_l[2 * NT];  // row offsets in the pools: this tile, next
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
    k_pages += k_off;
    v_pages += v_off;

    // (slot, lane) mappings of K staging and of the value phase; one division each per work-item.
    const int lk = (kw + VEC - 1) / VEC, lv = (vw + VEC - 1) / VEC;
    const int ks = tid / lk, kl = tid % lk, kslots = NT / lk;
    const int vs = tid / lv, vl = tid % lv, vslots = NT / lv;
    const bool k_al = k_off % VEC == 0 && kw % VEC == 0 && ko % VEC == 0 && k_total % VEC == 0;
    const bool v_al = v_off % VEC == 0 && vw % VEC == 0 && vo % VEC == 0 && v_total % VEC == 0;

    global const float * qg = q + q_off + (ulong)b * G * k_total + (ulong)G * ko + (ulong)g0 * kw;
    for (int i = tid; i < GB * QSTR; i += NT) {
        const int g = i / QSTR, d = i % QSTR;
        q_l[i] = d < kw ? qg[g * kw + d] * qscale : 0.0f;
    }

    const ulong k_page = (ulong)PAGE_SIZE * k_total, v_page = (ulong)PAGE_SIZE * v_total;
    const ulong k_head = (ulong)PAGE_SIZE * ko, v_head = (ulong)PAGE_SIZE * vo;
#define KVC_ROWS(dst, t, j)                                                \
    do {                                                                   \
        const ulong pg_ = (ulong)indices[p0 + (t) / PAGE_SIZE];            \
        const ulong sl_ = (ulong)((t) % PAGE_SIZE);                        \
        krow_l[(dst) + (j)] = pg_ * k_page + k_head + sl_ * (ulong)kw;     \
        vrow_l[(dst) + (j)] = pg_ * v_page + v_head + sl_ * (ulong)vw;     \
    } while (0)

    float m_run[GB], lsum[GB];
    kvc_vec acc[GB];
#pragma unroll
    for (int g = 0; g < GB; ++g) {
        m_run[g] = -INFINITY;
        lsum[g] = 0.0f;
        acc[g] = (kvc_vec)(0.0f);
    }
    if (tid < end - first) KVC_ROWS(0, first + tid, tid);
    kvc_clear_max(mx_l, GB);
    barrier(CLK_LOCAL_MEM_FENCE);  // q, the first tile's rows, the empty max slots

    // Three barriers per tile; as in attn_decode.cl the next tile's rows are looked up during this
    // one (double-buffered), and every local array a tile writes was last read before one of the
    // current tile's barriers.
    for (int t0 = first, it = 0; t0 < end; t0 += NT, ++it) {
        const int tn = min(NT, end - t0);
        const int cur = (it & 1) * NT, nxt = ((it & 1) ^ 1) * NT;
        // 1a. stage K'
        if (ks < kslots) {
            if (k_al)
                kvc_stage_k(k_l, k_pages, krow_l + cur, tn, ks, kl, kslots, kw, true);
            else
                kvc_stage_k(k_l, k_pages, krow_l + cur, tn, ks, kl, kslots, kw, false);
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        // 1b. scores of token t0 + tid
        float s[GB];
#pragma unroll
        for (int g = 0; g < GB; ++g) s[g] = tid < tn ? 0.0f : -INFINITY;
        if (tid < tn) {
            const local half * kr = (const local half *)(k_l + tid * KSTR);
            for (int cc = 0; cc < lk; ++cc) {
                const kvc_vec kv = KVC_VLOADA_HALF(cc, kr);
#pragma unroll
                for (int g = 0; g < GB; ++g) s[g] += KVC_DOTQ(kv, q4 + g * (QSTR / 4), cc);
            }
        }
#pragma unroll
        for (int g = 0; g < GB; ++g) kvc_propose_max(mx_l, it, GB, g, s[g], m_run[g]);
        if (tid < end - t0 - NT) KVC_ROWS(nxt, t0 + NT + tid, tid);
        barrier(CLK_LOCAL_MEM_FENCE);
        // 2. online-softmax update (rows past tn get p = 0)
        float alpha[GB];
#pragma unroll
        for (int g = 0; g < GB; ++g) alpha[g] = kvc_take_max(mx_l, it, GB, g, &m_run[g]);
        kvc_reset_next_max(mx_l, it, GB);
#pragma unroll
        for (int g = 0; g < GB; ++g) {
            lsum[g] *= alpha[g];
            acc[g] *= alpha[g];
            p_l[tid * GBP + g] = exp2(s[g] - m_run[g]);
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        // 3. values
        if (vs < vslots) {
            if (v_al)
                kvc_accumulate_v(acc, lsum, v_pages, vrow_l + cur, p4, tn, vs, vl, vslots, vw, true);
            else
                kvc_accumulate_v(acc, lsum, v_pages, vrow_l + cur, p4, tn, vs, vl, vslots, vw, false);
        }
    }
#undef KVC_ROWS

    // Sum the slot accumulators; every head at once, so one barrier (a barrier per head in an
    // unrolled loop makes PoCL's work-group compiler take minutes).
    if (vs < vslots) {
#pragma unroll
        for (int g = 0; g < GB; ++g) {
            KVC_VSTORE(acc[g], o_l + (g * NT + vs * lv + vl) * VEC);
            if (vl == 0) lsum_l[g * NT + vs] = lsum[g];
        }
    }
    if (tid == 0) {
#pragma unroll
        for (int g = 0; g < GB; ++g) m_l[g] = m_run[g];
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    kvc_ragged_task_output(o_l, lsum_l, GB, NT, NT * VEC, lv * VEC, vslots, vw, n_in_list, m_l,
                           out + out_off + (ulong)b * G * v_total + (ulong)G * vo + (ulong)g0 * vw, part,
                           (ulong)task * G + g0, MW, ml_off);
}
