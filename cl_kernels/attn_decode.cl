// attn_decode.cl: decode attention (one query token per request) over paged fp16 K/V, split-KV.
//
// Kernels:
//   kvc_attn_decode_split: one work-group per (split, KV head x query sub-group, request); it
//     handles GB query heads that share one KV head, so every K/V row is read once for all of
//     them. The split covers tokens [split * chunk, min(len, (split + 1) * chunk)); the last split
//     also takes anything beyond (robust to a too-small max_seq_len). Tokens go in tiles of NT:
//       1. K of the tile is copied to local memory with coalesced VEC-wide loads (K_STAGE, needs
//          KV_ALIGNED; otherwise each work-item reads its row from global memory), then work-item
//          i computes the scores of token i for the GB heads against q in local memory (q is
//          pre-scaled by scale * log2(e), so the softmax uses exp2);
//       2. the online-softmax update: the running max m moves only when a score of the tile
//          exceeds it by more than KVC_LAZY_MAX (common.cl: such work-items propose their score with
//          a local atomic max at the end of 1b; no scan of the tile, no reduction tree, no extra
//          barrier); rescale alpha = exp2(m_old - m_new), probabilities p = exp2(s - m) to local memory;
//       3. work-items become (token slot, lane): lane l owns features [l*VEC, (l+1)*VEC), so the
//          lanes of a slot read one V row with contiguous vector loads (V_UNROLL rows in flight),
//          accumulating p * v for the GB heads over the tile tokens of their slot.
//     At the end the TPV slot accumulators are summed in local memory. With n_splits == 1 the
//     normalized result goes straight to out; otherwise the unnormalized sum o, the running max m
//     (log2 domain) and the sum l go to the scratch buffer.
//     NDRange: local (NT, 1, 1), global (NT * n_splits, n_kv_heads * group / GB, batch).
//   kvc_attn_decode_merge: combines the splits of each (request, query head):
//     out = sum_s 2^(m_s - M) o_s / sum_s 2^(m_s - M) l_s with M = max_s m_s; a request with no
//     tokens (every m_s = -inf) gives zeros. NDRange: global (>= HEAD_DIM, n_q_heads, batch).
// Layout (lib/core/op.h): q, out f32 [batch, n_q_heads, HEAD_DIM]; k_pages, v_pages f16
//   [n_pages, n_kv_heads, PAGE_SIZE, HEAD_DIM]; indptr i32 [batch + 1], indices i32 [nnz],
//   last_page_len i32 [batch]; scratch `part` (f32) holds part_o [batch, n_q_heads, n_splits, HEAD_DIM]
//   at element 0 and part_ml [batch, n_q_heads, n_splits, 2] at element ml_off.
// Preamble defines: HEAD_DIM (multiple of VEC), PAGE_SIZE, GB (query heads per work-group, divides
//   the GQA group), NT (work-group size = tile tokens, >= HEAD_DIM / VEC), VEC (4 or 8 features per
//   vector load), KV_ALIGNED (1: pools start 2*VEC-byte aligned: aligned vector loads, K staging),
//   V_UNROLL (V rows in flight per work-item), K_CVT (how staged K is read back: 0 vloada_half from
//   local memory, 1 raw vector load + vload_half from a private copy).

#ifndef V_UNROLL
#define V_UNROLL 4
#endif
#ifndef K_CVT
#define K_CVT 0
#endif
#define K_STAGE KV_ALIGNED

#define LV (HEAD_DIM / VEC)        // lanes per K/V row
#define TPV (NT / LV)              // token slots in the value phase
#define HD4 (HEAD_DIM / 4)
#define GBP (((GB + 3) / 4) * 4)   // heads padded to whole float4s in the score arrays
#ifndef SB
#define SB (LV < 16 ? LV : 16)     // K staging: raw vectors loaded per work-item before storing
#endif
#define KROWV (LV + 8 / VEC)       // staged K row in raw vectors, padded by 16 bytes: successive
                                   // rows read by successive work-items fall in different banks

#if VEC == 8
typedef float8 kvc_vec;
typedef uint4 kvc_raw;  // VEC fp16 values as raw bits
#define KVC_DOTQ(kv, q4, i) (dot((kv).lo, (q4)[2 * (i)]) + dot((kv).hi, (q4)[2 * (i) + 1]))
#define KVC_VLOADA_HALF(i, p) vloada_half8((i), (p))
#define KVC_VLOAD_HALF(i, p) vload_half8((i), (p))
#else
typedef float4 kvc_vec;
typedef uint2 kvc_raw;
#define KVC_DOTQ(kv, q4, i) dot((kv), (q4)[i])
#define KVC_VLOADA_HALF(i, p) vloada_half4((i), (p))
#define KVC_VLOAD_HALF(i, p) vload_half4((i), (p))
#endif

#if KV_ALIGNED
#define KVC_LOAD_KV(p, i) KVC_VLOADA_HALF(i, p)
#else
#define KVC_LOAD_KV(p, i) KVC_VLOAD_HALF(i, p)
#endif

inline kvc_vec kvc_load_staged(const local kvc_raw * row, int c) {
#if K_CVT == 1
    const kvc_raw r = row[c];
    return KVC_VLOAD_HALF(0, (const private half *)&r);
#else
    return KVC_VLOADA_HALF(c, (const local half *)row);
#endif
}

kernel __attribute__((reqd_work_group_size(NT, 1, 1)))
void kvc_attn_decode_split(global const float * q, ulong q_off, global const half * k_pages, ulong k_off,
                           global const half * v_pages, ulong v_off, global const int * indptr, ulong indptr_off,
                           global const int * indices, ulong indices_off, global const int * last_len,
                           ulong last_len_off, global float * out, ulong out_off, global float * part,
                           ulong ml_off, int n_kv_heads, int n_q_heads, int n_splits, int chunk, float qscale) {
    local float4 q4[GB * HD4];
    local float4 p4[NT * GBP / 4];  // probabilities of the tile, [token][head]
    local int mx_l[2 * GB];         // the running max's proposals (kvc_propose_max)
    local float4 o4[TPV * HD4];     // slot accumulators at the end
    local float lsum_l[TPV];
    local ulong row_l[2 * NT];      // element offset of each token's row in the pools: this tile, next
#if K_STAGE
    local kvc_raw k_l[NT * KROWV];  // K rows of the tile (fp16 bits)
#endif
    local float * p_l = (local float *)p4;

    const int tid = get_local_id(0);
    const int split = get_group_id(0);
    const int hg = get_group_id(1);
    const int b = get_group_id(2);
    const int group = n_q_heads / n_kv_heads;
    const int subs = group / GB;
    const int kvh = hg / subs;
    const int qh0 = kvh * group + (hg % subs) * GB;

    indptr += indptr_off;
    indices += indices_off;
    last_len += last_len_off;
    k_pages += k_off;
    v_pages += v_off;
    const int p0 = indptr[b];
    const int np = indptr[b + 1] - p0;
    const int len = np <= 0 ? 0 : (np - 1) * PAGE_SIZE + last_len[b];
    const int t_begin = split * chunk;
    const int t_end = split == n_splits - 1 ? len : min(len, t_begin + chunk);

    const ulong head_row = (ulong)b * n_q_heads + qh0;  // row of query head qh0 in q / out
    global const float * qg = q + q_off + head_row * HEAD_DIM;
    for (int i = tid; i < GB * HD4; i += NT) q4[i] = vload4(i, qg) * qscale;

    const ulong page_stride = (ulong)n_kv_heads * PAGE_SIZE * HEAD_DIM;
    const ulong head_off = (ulong)kvh * PAGE_SIZE * HEAD_DIM;
    const int lane = tid % LV, slot = tid / LV;

    float m_run[GB], lsum[GB];
    kvc_vec acc[GB];
#pragma unroll
    for (int g = 0; g < GB; ++g) {
        m_run[g] = -INFINITY;
        lsum[g] = 0.0f;
        acc[g] = (kvc_vec)(0.0f);
    }

#define KVC_ROW(t) \
    ((ulong)indices[p0 + (t) / PAGE_SIZE] * page_stride + head_off + (ulong)((t) % PAGE_SIZE) * HEAD_DIM)
    if (tid < t_end - t_begin && tid < NT) row_l[tid] = KVC_ROW(t_begin + tid);
    kvc_clear_max(mx_l, GB);
    barrier(CLK_LOCAL_MEM_FENCE);  // q4, the first tile's rows, the empty max slots

    // Three barriers per tile. The rows of tile i+1 are looked up during tile i (double-buffered
    // row_l), and no barrier closes a tile: every local array a tile writes was last read before
    // one of the current tile's barriers, which all work-items must pass first.
    for (int t0 = t_begin, it = 0; t0 < t_end; t0 += NT, ++it) {
        const int tn = min(NT, t_end - t0);
        local ulong * rows = row_l + (it & 1) * NT;
        local ulong * next_rows = row_l + ((it & 1) ^ 1) * NT;
#if K_STAGE
        // 1a. stage K: consecutive work-items copy consecutive 2*VEC-byte pieces of a row.
        if (tn == NT) {
            // SB loads are issued before their stores so they are in flight together.
            for (int i0 = 0; i0 < LV; i0 += SB) {
                kvc_raw r[SB];
#pragma unroll
                for (int i = 0; i < SB; ++i) {
                    const int e = tid + (i0 + i) * NT;
                    if (i0 + i < LV) r[i] = ((global const kvc_raw *)(k_pages + rows[e / LV]))[e % LV];
                }
#pragma unroll
                for (int i = 0; i < SB; ++i) {
                    const int e = tid + (i0 + i) * NT;
                    if (i0 + i < LV) k_l[(e / LV) * KROWV + e % LV] = r[i];
                }
            }
        } else {
            for (int e = tid; e < tn * LV; e += NT)
                k_l[(e / LV) * KROWV + e % LV] = ((global const kvc_raw *)(k_pages + rows[e / LV]))[e % LV];
        }
        barrier(CLK_LOCAL_MEM_FENCE);
#endif
        // 1b. scores of token t0 + tid
        float s[GB];
#pragma unroll
        for (int g = 0; g < GB; ++g) s[g] = tid < tn ? 0.0f : -INFINITY;
        if (tid < tn) {
#if K_STAGE
            const local kvc_raw * krow = k_l + tid * KROWV;
#else
            global const half * krow = k_pages + rows[tid];
#endif
#pragma unroll
            for (int c = 0; c < LV; ++c) {
#if K_STAGE
                const kvc_vec kv = kvc_load_staged(krow, c);
#else
                const kvc_vec kv = KVC_LOAD_KV(krow, c);
#endif
#pragma unroll
                for (int g = 0; g < GB; ++g) s[g] += KVC_DOTQ(kv, q4 + g * HD4, c);
            }
        }
#pragma unroll
        for (int g = 0; g < GB; ++g) kvc_propose_max(mx_l, it, GB, g, s[g], m_run[g]);
        if (tid < t_end - t0 - NT && tid < NT) next_rows[tid] = KVC_ROW(t0 + NT + tid);
        barrier(CLK_LOCAL_MEM_FENCE);
        // 2. online-softmax update
        float alpha[GB];
#pragma unroll
        for (int g = 0; g < GB; ++g) alpha[g] = kvc_take_max(mx_l, it, GB, g, &m_run[g]);
        kvc_reset_next_max(mx_l, it, GB);
#pragma unroll
        for (int g = 0; g < GB; ++g) p_l[tid * GBP + g] = exp2(s[g] - m_run[g]);
        barrier(CLK_LOCAL_MEM_FENCE);
        // 3. values
#pragma unroll
        for (int g = 0; g < GB; ++g) {
            lsum[g] *= alpha[g];
            acc[g] *= alpha[g];
        }
        if (slot < TPV) {
            int j = slot;
            for (; j + (V_UNROLL - 1) * TPV < tn; j += V_UNROLL * TPV) {
                kvc_vec vv[V_UNROLL];
#pragma unroll
                for (int u = 0; u < V_UNROLL; ++u) vv[u] = KVC_LOAD_KV(v_pages + rows[j + u * TPV], lane);
#pragma unroll
                for (int u = 0; u < V_UNROLL; ++u) {
#pragma unroll
                    for (int k = 0; k < GBP / 4; ++k) {
                        const float4 pv = p4[(j + u * TPV) * (GBP / 4) + k];
                        const float pp[4] = {pv.x, pv.y, pv.z, pv.w};
#pragma unroll
                        for (int g = 4 * k; g < 4 * k + 4 && g < GB; ++g) {
                            acc[g] += pp[g - 4 * k] * vv[u];
                            lsum[g] += pp[g - 4 * k];
                        }
                    }
                }
            }
            for (; j < tn; j += TPV) {
                const kvc_vec vv = KVC_LOAD_KV(v_pages + rows[j], lane);
#pragma unroll
                for (int g = 0; g < GB; ++g) {
                    const float p = p_l[j * GBP + g];
                    acc[g] += p * vv;
                    lsum[g] += p;
                }
            }
        }
    }
#undef KVC_ROW

    // Sum the slot accumulators of each head and write the result or the split's partials.
    local float * o_l = (local float *)o4;
#pragma unroll
    for (int g = 0; g < GB; ++g) {
        if (slot < TPV) {
#if VEC == 8
            vstore8(acc[g], 0, o_l + slot * HEAD_DIM + lane * VEC);
#else
            vstore4(acc[g], 0, o_l + slot * HEAD_DIM + lane * VEC);
#endif
            if (lane == 0) lsum_l[slot] = lsum[g];
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        float l = 0.0f;
        for (int sl = 0; sl < TPV; ++sl) l += lsum_l[sl];
        for (int d = tid; d < HEAD_DIM; d += NT) {
            float o = 0.0f;
            for (int sl = 0; sl < TPV; ++sl) o += o_l[sl * HEAD_DIM + d];
            if (n_splits == 1)
                out[out_off + (head_row + g) * HEAD_DIM + d] = l > 0.0f ? o / l : 0.0f;
            else
                part[((head_row + g) * n_splits + split) * HEAD_DIM + d] = o;
        }
        if (n_splits > 1 && tid == 0) {
            part[ml_off + ((head_row + g) * n_splits + split) * 2] = m_run[g];
            part[ml_off + ((head_row + g) * n_splits + split) * 2 + 1] = l;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
}

kernel void kvc_attn_decode_merge(global const float * part, ulong ml_off, global float * out, ulong out_off,
                                  int n_q_heads, int n_splits) {
    const int d = get_global_id(0);
    if (d >= HEAD_DIM) return;
    const ulong hr = get_global_id(2) * (ulong)n_q_heads + get_global_id(1);
    float log2_den;
    out[out_off + hr * HEAD_DIM + d] = kvc_merge_splits(part, ml_off, hr, n_splits, HEAD_DIM, d, &log2_den);
}
