// attn_decode_warps.cl: decode attention over paged fp16 K/V for NVIDIA's driver, in the form of
// cuda_backend/attn_decode.cu's kernel: every warp streams its own tokens through its lanes' slots of a
// cp.async ring in local memory, with no barrier until the end. attn_decode.cl's kvc_attn_decode_split is the
// portable kernel, whose work-group shares each tile of 64 tokens through local memory with three barriers.
//
// Kernel kvc_attn_decode_warps: one work-group of NW warps per (split, KV head x sub-group of GB query heads,
//   request), kvc_attn_decode_split's NDRange with local size 32 NW: local (32 NW, 1, 1), global (32 NW n_splits,
//   n_kv_heads * group / GB, batch). The split covers the same tokens as there.
//   Lanes: RL = HEAD_DIM / 8 lanes share a token row, lane lj of a row holding features [8 lj, 8 lj + 8) (one
//   16-byte chunk); a warp is 32 / RL row groups. Per iteration each warp takes U * 32 / RL consecutive tokens
//   (group tg of the warp: tokens tg, tg + 32 / RL, ...), the work-group NW times that. Each lane copies the K
//   and V chunks of its U tokens into its own slots of stage it % NST with cp.async (masked slots zero-filled,
//   no read) and later reads back only those bytes, so the ring needs no barrier; NST - 1 stages are in
//   flight while one is consumed, and the page numbers of a stage are looked up one stage ahead of its copies.
//   Scores: each lane has GB partial dot products over its 8 features; a butterfly reduce-scatter over the RL
//   lanes of its row (GB / 2 + GB / 4 + ... shuffles, then one per remaining step) leaves lane lj with the
//   full score of head kvc_lane_head(lj). q is pre-scaled by scale * log2(e), so the softmax uses exp2.
//   Online softmax: the running max moves only when a score of the warp exceeds it by more than
//   KVC_LAZY_MAX (common.cl), and then for the warp's row groups together, so their sums add at the end.
//   Values: every lane accumulates its 8 features of all GB heads, taking head i's probability from the
//   lane that holds it (kvc_head_lane).
//   End: the row groups of a warp are summed by shuffles, the warps merged in local memory; with one split
//   the normalized output, otherwise the split's unnormalized output and (running max, sum) in log2 units for
//   kvc_attn_decode_merge (attn_decode.cl), as kvc_attn_decode_split writes them.
// Layout and arguments: kvc_attn_decode_split's (attn_decode.cl); the pools' views start 16-byte aligned.
// Preamble defines: HEAD_DIM (64 or 128), PAGE_SIZE, GB (1, 2, 4 or 8: query heads per work-group), NW (warps
//   per work-group), U (tokens per lane and stage), NST (stages), RING_WAIT (NST - 1 as a literal: the
//   cp.async groups left in flight), KVC_ASM.

#if HEAD_DIM == 64
#define RL_LOG2 3
#elif HEAD_DIM == 128
#define RL_LOG2 4
#else
#error "kvc_attn_decode_warps takes HEAD_DIM 64 or 128"
#endif
#define RL (1 << RL_LOG2)       // lanes per token row
#define RG (32 / RL)            // row groups per warp
#define NT (32 * NW)            // work-items
#define ITER_T (NW * U * RG)    // tokens per work-group iteration
#define RING_V4 (NST * U * 2 * NT)                     // the ring: slot (stage, u, K | V) of work-item tid
#define MERGE_F (NW * GB * HEAD_DIM + 2 * NW * GB)     // the warps' outputs, maxima and sums at the end
#define AREA_V4 (RING_V4 > (MERGE_F + 3) / 4 ? RING_V4 : (MERGE_F + 3) / 4)

// The head whose full score lane lj of a row holds after kvc_butterfly, and the lowest lane holding head h.
KVC_INLINE int kvc_lane_head(int lj) {
    int h = 0;
#pragma unroll
    for (int k = 0; k < RL_LOG2; ++k) {
        const int n = GB >> k;
        if (n > 1 && (lj & (RL >> (k + 1)))) h += n / 2;
    }
    return h;
}
KVC_INLINE int kvc_head_lane(int h) {
    int lj = 0;
#pragma unroll
    for (int k = 0; k < RL_LOG2; ++k) {
        const int n = GB >> k;
        if (n > 1 && h >= n / 2) {
            lj |= RL >> (k + 1);
            h -= n / 2;
        }
    }
    return lj;
}

// Reduce-scatter of the GB partial sums v over the RL lanes of a row: returns the full sum of head
// kvc_lane_head(lj). Step k exchanges half of the n = GB >> k values the lane still holds.
KVC_INLINE float kvc_butterfly(float * v, int lj) {
#pragma unroll
    for (int k = 0; k < RL_LOG2; ++k) {
        const int dist = RL >> (k + 1), n = GB >> k;
        if (n > 1) {
            const bool up = (lj & dist) != 0;
#pragma unroll
            for (int i = 0; i < n / 2; ++i) {
                const float lower = v[i], upper = v[i + n / 2];  // selected as values: no indexed array
                v[i] = (up ? upper : lower) + kvc_shfl_xor(up ? lower : upper, dist);
            }
        } else {
            v[0] += kvc_shfl_xor(v[0], dist);
        }
    }
    return v[0];
}

// Eight features of one staged chunk.
KVC_INLINE void kvc_unpack8(local const uint4 * chunk, float * f) {
    const float8 x = vload_half8(0, (local const half *)chunk);
    f[0] = x.s0, f[1] = x.s1, f[2] = x.s2, f[3] = x.s3, f[4] = x.s4, f[5] = x.s5, f[6] = x.s6, f[7] = x.s7;
}

// Page and slot of this lane's U tokens starting at tok0 (every RG-th token; slot -1 past t_end).
KVC_INLINE void kvc_locate(int * pg, int * slot, global const int * pidx, int tok0, int t_end) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
        const int tok = tok0 + u * RG;
        slot[u] = -1;
        pg[u] = 0;
        if (tok < t_end) {
            slot[u] = tok % PAGE_SIZE;
            pg[u] = pidx[tok / PAGE_SIZE];
        }
    }
}

// This lane's K and V chunks of the located tokens into its slots of stage st, as one cp.async group.
KVC_INLINE void kvc_issue(local uint4 * ring, int st, int tid, const int * pg, const int * slot,
                          global const ushort * kbase, global const ushort * vbase, ulong page_stride) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
        const bool valid = slot[u] >= 0;
        const ulong off = valid ? (ulong)pg[u] * page_stride + (ulong)slot[u] * HEAD_DIM : 0;
        local uint4 * dst = ring + ((st * U + u) * 2) * NT + tid;
        kvc_cp_async16_fill(dst, kbase + off, valid ? 16 : 0);
        kvc_cp_async16_fill(dst + NT, vbase + off, valid ? 16 : 0);
    }
    kvc_cp_async_commit();  // one group per stage, empty ones included, so that the counts line up
}

kernel __attribute__((reqd_work_group_size(NT, 1, 1)))
void kvc_attn_decode_warps(global const float * q, ulong q_off, global const ushort * k_pages, ulong k_off,
                           global const ushort * v_pages, ulong v_off, global const int * indptr, ulong indptr_off,
                           global const int * indices, ulong indices_off, global const int * last_len,
                           ulong last_len_off, global float * out, ulong out_off, global float * part, ulong ml_off,
                           int n_kv_heads, int n_q_heads, int n_splits, int chunk, float qscale) {
    local uint4 area[AREA_V4];  // the ring; at the end the warps' merge

    const int tid = get_local_id(0), lane = tid & 31, warp = tid >> 5;
    const int tg = lane / RL, lj = lane % RL, row0 = lane & ~(RL - 1);
    const int split = get_group_id(0), hg = get_group_id(1), b = get_group_id(2);
    const int group = n_q_heads / n_kv_heads, subs = group / GB;
    const int kvh = hg / subs, qh0 = kvh * group + (hg % subs) * GB;

    indptr += indptr_off;
    last_len += last_len_off;
    const int p0 = indptr[b], np = indptr[b + 1] - p0;
    const int len = np <= 0 ? 0 : (np - 1) * PAGE_SIZE + last_len[b];
    const int t_begin = min(split * chunk, len);
    const int t_end = split == n_splits - 1 ? len : min(len, t_begin + chunk);
    global const int * pidx = indices + indices_off + p0;

    // This lane's 8 features of each head's q.
    const ulong head_row = (ulong)b * n_q_heads + qh0;
    float qv[GB][8];
#pragma unroll
    for (int i = 0; i < GB; ++i) {
        const float8 x = vload8(0, q + q_off + (head_row + i) * HEAD_DIM + 8 * lj) * qscale;
        qv[i][0] = x.s0, qv[i][1] = x.s1, qv[i][2] = x.s2, qv[i][3] = x.s3;
        qv[i][4] = x.s4, qv[i][5] = x.s5, qv[i][6] = x.s6, qv[i][7] = x.s7;
    }
    float o[GB][8];
#pragma unroll
    for (int i = 0; i < GB; ++i)
#pragma unroll
        for (int j = 0; j < 8; ++j) o[i][j] = 0.0f;
    float m = -INFINITY, l = 0.0f;  // of head kvc_lane_head(lj), shared by the warp's row groups

    const ulong page_stride = (ulong)n_kv_heads * PAGE_SIZE * HEAD_DIM;
    const ulong head_off = (ulong)kvh * PAGE_SIZE * HEAD_DIM + 8 * lj;
    global const ushort * kbase = k_pages + k_off + head_off;
    global const ushort * vbase = v_pages + v_off + head_off;
    const int first = t_begin + warp * U * RG + tg;  // this lane's token of u = 0 in iteration 0
    const int n_iter = (t_end - t_begin + ITER_T - 1) / ITER_T;

    int pg[U], slot[U];
    kvc_locate(pg, slot, pidx, first, t_end);
#pragma unroll
    for (int st = 0; st < NST - 1; ++st) {
        kvc_issue(area, st, tid, pg, slot, kbase, vbase, page_stride);
        kvc_locate(pg, slot, pidx, first + (st + 1) * ITER_T, t_end);
    }

    for (int it = 0; it < n_iter; ++it) {
        kvc_issue(area, (it + NST - 1) % NST, tid, pg, slot, kbase, vbase, page_stride);  // the stage read last
        kvc_locate(pg, slot, pidx, first + (it + NST) * ITER_T, t_end);
        KVC_CP_ASYNC_WAIT_GROUP(RING_WAIT);  // this iteration's group has landed
        local const uint4 * stage = area + (it % NST) * U * 2 * NT + tid;
        const int tok0 = first + it * ITER_T;

        float s[U], mt = -INFINITY;
#pragma unroll
        for (int u = 0; u < U; ++u) {
            float kf[8], dots[GB];
            kvc_unpack8(stage + 2 * u * NT, kf);
#pragma unroll
            for (int i = 0; i < GB; ++i) {
                float acc = 0.0f;
#pragma unroll
                for (int j = 0; j < 8; ++j) acc = fma(qv[i][j], kf[j], acc);
                dots[i] = acc;
            }
            const float full = kvc_butterfly(dots, lj);
            s[u] = tok0 + u * RG < t_end ? full : -INFINITY;
            mt = fmax(mt, s[u]);
        }

        // The running max moves for the whole warp or not at all (-inf + KVC_LAZY_MAX: the first score moves it).
        if (kvc_any(mt > m + KVC_LAZY_MAX)) {
#pragma unroll
            for (int off = RL; off < 32; off <<= 1) mt = fmax(mt, kvc_shfl_xor(mt, off));
            const float mn = fmax(m, mt);
            const float alpha = native_exp2(m - (mn == -INFINITY ? 0.0f : mn));  // nothing seen yet: 0
            m = mn;
            l *= alpha;
#pragma unroll
            for (int i = 0; i < GB; ++i) {
                const float ai = kvc_shfl_idx(alpha, row0 + kvc_head_lane(i));
#pragma unroll
                for (int j = 0; j < 8; ++j) o[i][j] *= ai;
            }
        }
        const float mu = m == -INFINITY ? 0.0f : m;
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const float p = native_exp2(s[u] - mu);
            l += p;
            float vf[8];
            kvc_unpack8(stage + (2 * u + 1) * NT, vf);
#pragma unroll
            for (int i = 0; i < GB; ++i) {
                const float pi = kvc_shfl_idx(p, row0 + kvc_head_lane(i));
#pragma unroll
                for (int j = 0; j < 8; ++j) o[i][j] = fma(pi, vf[j], o[i][j]);
            }
        }
    }
    // The groups still in flight only zero-fill masked slots; they land before the ring becomes the merge.
    KVC_CP_ASYNC_WAIT_GROUP(0);

    // The warp's row groups share m: their sums add.
#pragma unroll
    for (int off = RL; off < 32; off <<= 1) {
        l += kvc_shfl_xor(l, off);
#pragma unroll
        for (int i = 0; i < GB; ++i)
#pragma unroll
            for (int j = 0; j < 8; ++j) o[i][j] += kvc_shfl_xor(o[i][j], off);
    }
    barrier(CLK_LOCAL_MEM_FENCE);  // every lane is done with its ring slots
    local float * sm_o = (local float *)area;        // [NW][GB][HEAD_DIM]
    local float * sm_m = sm_o + NW * GB * HEAD_DIM;  // [NW][GB]
    local float * sm_l = sm_m + NW * GB;             // [NW][GB]
    if (tg == 0) {
#pragma unroll
        for (int i = 0; i < GB; ++i)
#pragma unroll
            for (int j = 0; j < 8; ++j) sm_o[(warp * GB + i) * HEAD_DIM + 8 * lj + j] = o[i][j];
        const int h = kvc_lane_head(lj);
        if (lj == kvc_head_lane(h)) {
            sm_m[warp * GB + h] = m;
            sm_l[warp * GB + h] = l;
        }
    }
    barrier(CLK_LOCAL_MEM_FENCE);

    for (int idx = tid; idx < GB * HEAD_DIM; idx += NT) {
        const int i = idx / HEAD_DIM, d = idx % HEAD_DIM;
        float mx = -INFINITY;
#pragma unroll
        for (int w = 0; w < NW; ++w) mx = fmax(mx, sm_m[w * GB + i]);
        float num = 0.0f, den = 0.0f;
        if (mx != -INFINITY) {
#pragma unroll
            for (int w = 0; w < NW; ++w) {
                const float wt = native_exp2(sm_m[w * GB + i] - mx);  // 0 for a warp that saw no token
                num = fma(wt, sm_o[(w * GB + i) * HEAD_DIM + d], num);
                den = fma(wt, sm_l[w * GB + i], den);
            }
        }
        const ulong row = head_row + i;
        if (n_splits == 1) {
            out[out_off + row * HEAD_DIM + d] = den > 0.0f ? num / den : 0.0f;
        } else {
            part[(row * n_splits + split) * HEAD_DIM + d] = num;
            if (d == 0) {
                part[ml_off + (row * n_splits + split) * 2] = mx;
                part[ml_off + (row * n_splits + split) * 2 + 1] = den;
            }
        }
    }
}
