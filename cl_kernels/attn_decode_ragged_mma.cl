// attn_decode_ragged_mma.cl: decode attention in the reduced per-head dims (ZACK / FDC) over fp16 ragged
// pages, for NVIDIA's driver: every warp streams its own tiles of the task's K' and V' rows and computes
// scores and values on the tensor cores. It is the OpenCL form of cuda_backend/attn_decode_ragged_mma.cu
// (its fragment layouts, per-warp streams and end-of-task merge); attn_decode_ragged.cl is the portable
// kernel, whose work-group shares every tile through local memory with three barriers per tile.
//
// Kernel kvc_adr_warps: one work-group of NW warps per (row of the host's task list, sub-group of GB <= 4
//   query heads) (lib/core/op.h "Decode task list"); NDRange local (32 NW, 1), global (32 NW n_tasks,
//   G / GB). The task is (request b, KV head c, tokens [first, end)); its tokens are cut into tiles of tt
//   rows (a multiple of 16 that fits the warp's stage: narrower heads get longer tiles) and warp w takes
//   tiles w, w + NW, ... Per tile the warp's lanes copy the tile's K' and V' rows into the warp's stage
//   (16-byte cp.async chunks where the head's rows are 8-half aligned, else element by element), wait
//   for their own copies, meet at bar.warp.sync, and then run each 16-row step themselves:
//     scores  S^T = K' Q^T: M = 16 rows (A = K' rows from the stage), N = 8 columns = (hi, lo) f16 parts
//             of q for 4 heads (B, in registers for the whole task), K = 16 channels. Lane (g, t) =
//             (lane / 4, lane % 4) holds head t's scores of rows g and g + 8.
//     softmax per lane (kvc_softmax_lazy), the running max shared by the 8 lanes of a head.
//     values  O^T = V'^T P'^T: M = 16 channels (row g: channel 16 m + 2 g, row g + 8: the next one; A =
//             two rows' channel pairs merged by prmt), N = 8 = (hi, lo) of p for 4 heads, K = 16 rows.
//   Stage rows are padded to 16 n + 8 halves (n: the head's 16-channel steps), so the 8 rows a fragment
//   load reads fall into 8 different bank groups; K' columns from the width up to 16 n are zeroed (q is
//   zero there, and 0 * NaN would poison a score), V' columns past the width reach only output channels
//   that are never stored. Rows past the task's tokens read the tile's last row and get score -inf.
//   At the end the warps' states merge in local memory; the only task of its (b, c) writes the
//   normalized output, otherwise the task writes its unnormalized output and (m, l) for the merge
//   kernel (attn_decode_ragged_merge.cl), as attn_decode_ragged.cl.
// Layout and arguments: attn_decode_ragged.cl's.
// Preamble defines: G, GB (divides G, <= 4), MW (<= 128: bound on every width), PAGE_SIZE, NW (warps per
//   work-group), STAGE_H (halves of one warp's stage: at least 16 rows of the widest K' and V' heads),
//   KVC_ASM.

#define MK ((MW + 15) / 16)    // 16-channel steps of the widest head
#define QW (16 * MK)           // staged q row (floats; zeros past the head's width)
#define MERGE_F (NW * 4 * QW + 2 * NW * 4)
#define AREA_H (NW * STAGE_H > 2 * MERGE_F ? NW * STAGE_H : 2 * MERGE_F)  // halves, a multiple of 8
// Rows [0, n) of one head (width w, padded to wp = whole 16-channel steps, stride sr halves in the stage) of the
// tile starting at token tok0 into dst. A token's row is at page * page_elems + head_elems + slot * w in
// pages. vec: 16-byte chunks (w, the offsets and the page stride multiples of 8 halves); lane l copies
// chunk l % cpr of rows l / cpr, l / cpr + 32 / cpr, ... (cpr = wp / 8 chunks, those past w are zeros).
KVC_INLINE void kvc_stage_head(local ushort * dst, int sr, global const ushort * pages, ulong page_elems,
                               ulong head_elems, int w, int wp, global const int * pidx, int tok0, int n, int lane,
                               bool vec) {
    if (vec) {
        const int cpr = wp / 8, step = 32 / cpr, col = lane % cpr;
        const int r0 = lane < step * cpr ? lane / cpr : n;
        const bool zero = 8 * col >= w;
        for (int r = r0; r < n; r += step) {
            local ushort * d = dst + r * sr + 8 * col;
            if (zero) {
                *(local uint4 *)d = (uint4)(0u);
            } else {
                const int tok = tok0 + r;
                const ulong pg = (ulong)pidx[tok / PAGE_SIZE];
                kvc_cp_async16(d, pages + pg * page_elems + head_elems + (ulong)(tok % PAGE_SIZE) * w + 8 * col);
            }
        }
    } else {
        for (int e = lane; e < n * wp; e += 32) {
            const int r = e / wp, c = e % wp, tok = tok0 + r;
            const ulong pg = (ulong)pidx[tok / PAGE_SIZE];
            dst[r * sr + c] = c < w ? pages[pg * page_elems + head_elems + (ulong)(tok % PAGE_SIZE) * w + c] : (ushort)0;
        }
    }
}

// Scores of rows r0 .. r0 + 15 of the staged K' (nk steps, stride sk halves; rows >= hi read row hi - 1):
// head t's of rows r0 + g (.x) and r0 + g + 8 (.y), -inf past hi.
KVC_INLINE float2 kvc_tile_scores(local const ushort * ks, int sk, int nk, int r0, int hi, const uint * bq0,
                                  const uint * bq1, int g, int t) {
    local const ushort * ka = ks + min(r0 + g, hi - 1) * sk + 2 * t;
    local const ushort * kb = ks + min(r0 + g + 8, hi - 1) * sk + 2 * t;
    float d0 = 0.0f, d1 = 0.0f, d2 = 0.0f, d3 = 0.0f, e0 = 0.0f, e1 = 0.0f, e2 = 0.0f, e3 = 0.0f;
#pragma unroll
    for (int kk = 0; kk < MK; ++kk) {
        if (kk < nk) {  // uniform
            const uint a0 = *(local const uint *)(ka + 16 * kk), a1 = *(local const uint *)(kb + 16 * kk);
            const uint a2 = *(local const uint *)(ka + 16 * kk + 8), a3 = *(local const uint *)(kb + 16 * kk + 8);
            if (kk & 1)  // two accumulators halve the chain of dependent mma
                KVC_MMA_16816(e0, e1, e2, e3, a0, a1, a2, a3, bq0[kk], bq1[kk]);
            else
                KVC_MMA_16816(d0, d1, d2, d3, a0, a1, a2, a3, bq0[kk], bq1[kk]);
        }
    }
    return (float2)(r0 + g < hi ? (d0 + e0) + (d1 + e1) : -INFINITY, r0 + g + 8 < hi ? (d2 + e2) + (d3 + e3) : -INFINITY);
}

// Adds rows r0 .. r0 + 15 of the staged V' (nv m-tiles, stride sv halves) weighted by this lane's p0 (row
// r0 + g) and p1 (row r0 + g + 8) to o (o[4m], o[4m + 1]: channel 16m + 2g, hi and lo columns of head t;
// o[4m + 2], o[4m + 3]: channel 16m + 2g + 1).
KVC_INLINE void kvc_tile_values(float * o, local const ushort * vs, int sv, int nv, int r0, int hi, float p0,
                                float p1, int g, int t) {
    float w[4];
    kvc_transpose_p(p0, p1, g, t, w);
    uint b0, b1;
    kvc_p_frag(w[0], w[1], w[2], w[3], g & 1, &b0, &b1);
    local const ushort * vr[4];  // rows 2t, 2t + 1, 2t + 8, 2t + 9 at channel 2g
#pragma unroll
    for (int k = 0; k < 4; ++k) vr[k] = vs + min(r0 + 2 * t + (k & 1) + (k >> 1) * 8, hi - 1) * sv + 2 * g;
#pragma unroll
    for (int m = 0; m < MK; ++m) {
        if (m < nv) {  // uniform
            const uint x0 = *(local const uint *)(vr[0] + 16 * m), x1 = *(local const uint *)(vr[1] + 16 * m);
            const uint x2 = *(local const uint *)(vr[2] + 16 * m), x3 = *(local const uint *)(vr[3] + 16 * m);
            KVC_MMA_16816(o[4 * m], o[4 * m + 1], o[4 * m + 2], o[4 * m + 3], kvc_prmt(x0, x1, 0x5410u),
                          kvc_prmt(x0, x1, 0x7632u), kvc_prmt(x2, x3, 0x5410u), kvc_prmt(x2, x3, 0x7632u), b0, b1);
        }
    }
}

kernel __attribute__((reqd_work_group_size(32 * NW, 1, 1)))
void kvc_adr_warps(global const float * q, ulong q_off, global const ushort * k_pages, ulong k_off,
                   global const ushort * v_pages, ulong v_off, global const int * indptr, ulong indptr_off,
                   global const int * indices, ulong indices_off, global const int * last_len, ulong last_len_off,
                   global const int * heads, ulong heads_off, global const int * sched, ulong sched_off,
                   global const int * merge, ulong merge_off, global float * out, ulong out_off, global float * part,
                   ulong ml_off, int n_kv_heads, int k_total, int v_total, float qscale) {
    local float q_l[4 * QW];          // q * qscale of the GB heads, zero past the width and for heads >= GB
    local uint4 area4[AREA_H / 8];  // the warps' stages; at the end the merge
    local ushort * area = (local ushort *)area4;

    const int tid = get_local_id(0), lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
    const int task = get_group_id(0), g0 = get_group_id(1) * GB;
    heads += heads_off;
    const kvc_ragged_task T =
        kvc_ragged_task_at(sched + sched_off, heads, merge + merge_off, indptr + indptr_off, task, n_kv_heads);
    const int b = T.b, first = T.first, end = T.end, ko = T.ko, vo = T.vo;
    const int kw = clamp(T.kw, 1, MW), vw = clamp(T.vw, 1, MW);
    global const int * pidx = indices + indices_off + T.p0;
    k_pages += k_off;
    v_pages += v_off;

    global const float * qg = q + q_off + (ulong)b * G * k_total + (ulong)G * ko + (ulong)g0 * kw;
    kvc_stage_q(q_l, qg, kw, QW, GB, qscale, 32 * NW);
    barrier(CLK_LOCAL_MEM_FENCE);

    // q's B fragments: column g = head g / 2, hi (even g) or what f16 missed (odd g); channels 16kk + 2t,
    // + 1 (bq0) and + 8, + 9 (bq1).
    const int nk = (kw + 15) / 16, nv = (vw + 15) / 16;
    uint bq0[MK], bq1[MK];
    {
        local const float * qh = q_l + (g >> 1) * QW;
#pragma unroll
        for (int kk = 0; kk < MK; ++kk) {
            const int c = 16 * kk + 2 * t;
            bq0[kk] = kvc_split_pair(qh[c], qh[c + 1], g & 1);
            bq1[kk] = kvc_split_pair(qh[c + 8], qh[c + 9], g & 1);
        }
    }

    // Stage geometry: rows of 16 n + 8 halves, T rows of K' then T rows of V'.
    const int sk = 16 * nk + 8, sv = 16 * nv + 8;
    const int tt = max(16, STAGE_H / (sk + sv) / 16 * 16);
    const bool k_vec = k_off % 8 == 0 && kw % 8 == 0 && ko % 8 == 0 && k_total % 8 == 0;
    const bool v_vec = v_off % 8 == 0 && vw % 8 == 0 && vo % 8 == 0 && v_total % 8 == 0;
    const ulong k_page = (ulong)PAGE_SIZE * k_total, v_page = (ulong)PAGE_SIZE * v_total;
    const ulong k_head = (ulong)PAGE_SIZE * ko, v_head = (ulong)PAGE_SIZE * vo;
    local ushort * ks = area + warp * STAGE_H;
    local ushort * vs = ks + tt * sk;

    float o[4 * MK];
#pragma unroll
    for (int i = 0; i < 4 * MK; ++i) o[i] = 0.0f;
    float m = -INFINITY, l = 0.0f;

    const int n_tiles = end > first ? (end - first + tt - 1) / tt : 0;
    for (int j = warp; j < n_tiles; j += NW) {
        const int tok0 = first + j * tt, hi = min(tt, end - tok0);
        kvc_warp_sync();  // every lane is done with the previous tile
        kvc_stage_head(ks, sk, k_pages, k_page, k_head, kw, 16 * nk, pidx, tok0, hi, lane, k_vec);
        kvc_stage_head(vs, sv, v_pages, v_page, v_head, vw, 16 * nv, pidx, tok0, hi, lane, v_vec);
        kvc_cp_async_wait();
        kvc_warp_sync();  // the tile is in the stage for every lane
        for (int r0 = 0; r0 < hi; r0 += 16) {
            const float2 s = kvc_tile_scores(ks, sk, nk, r0, hi, bq0, bq1, g, t);
            float p0, p1;
            int moved;
            const float alpha = kvc_softmax_lazy(&m, &l, s.x, s.y, &p0, &p1, &moved);
            if (moved) {  // warp-uniform
#pragma unroll
                for (int i = 0; i < 4 * MK; ++i) o[i] *= alpha;
            }
            kvc_tile_values(o, vs, sv, nv, r0, hi, p0, p1, g, t);
        }
    }
    l = kvc_head_sum(l);

    // Merge the warps: outputs [NW][4][QW], maxima and sums [NW][4], in the stages' memory.
    barrier(CLK_LOCAL_MEM_FENCE);  // every warp is done with its stage
    local float * sm = (local float *)area;
    KVC_STORE_WARP_STATE(sm, o, MK, NW, QW, warp, g, t, m, l);
    barrier(CLK_LOCAL_MEM_FENCE);
    const ulong prow0 = (ulong)task * G + g0;
    global float * out_h0 = out + out_off + (ulong)b * G * v_total + (ulong)G * vo + (ulong)g0 * vw;
    kvc_ragged_warps_output(sm, NW, QW, GB, 32 * NW, vw, T.n_in_list, out_h0, part, prow0, MW, ml_off);
}
