// attn_decode_ragged_q4_mma.cl: decode attention in the reduced per-head dims (zack / fdc with kv_bits=4)
// over 4-bit ragged pages (lib/core/ragged_q4.h), for NVIDIA's driver: every warp streams its own tiles and
// computes scores and values on the tensor cores with the codes themselves as mma operands. It is the OpenCL
// form of cuda_backend/attn_decode_ragged_q4_mma.cu (its algebra, channel order and fragment layouts; see its
// banner), over the per-warp tiles of attn_decode_ragged_mma.cl. attn_decode_ragged_q4.cl is the portable
// kernel, whose work-group shares each tile through local memory with three barriers per tile.
//
// Kernel kvc_adr_q4_warps: one work-group of NW warps per (row of the host's task list, sub-group of GB <= 4
//   query heads); NDRange local (32 NW, 1), global (32 NW n_tasks, G / GB). Warp w takes tiles w, w + NW, ...
//   of the task's tokens (tt rows, a multiple of 16 that fits its stage), copies their K and V rows into its
//   stage with 4-byte cp.async (a head's rows of one page are contiguous, so a tile is a few contiguous runs;
//   rows are copied unpadded, then 16 bytes of slack), waits for its own copies, meets at bar.warp.sync, and
//   runs every 16-row step itself. With F = 16 + code (a code in the top 4 mantissa bits of an f16 of
//   exponent 2^4) and a row's f16 (min mn, step st):
//     scores  q.k = st sum_c q_c F_c + (mn - 16 st) sum_c q_c: S^T = K Q^T on mma.sync, M = 16 rows (A = key
//             code pairs: lane (g, t) reads code word 4n + t of rows g and g + 8 for 32-channel group n, and
//             its pairs j (channels 8w + j, 8w + j + 4, 16 bits apart) take one rotate and one and-or), N = 8
//             = (hi, lo) f16 parts of q for 4 heads at the same channels, K = 16;
//     values  o_c = sum_t (p_t st_t) F_tc + sum_t p_t (mn_t - 16 st_t): M = 16 channels (row g: channel
//             16m + 2g, row g + 8: 16m + 2g + 1, the low and high nibble of code byte 8m + g), A = two rows'
//             bytes merged by prmt; N = (hi, lo) of p' = p st; the second sum (bias) per lane, added to every
//             channel at the end.
//   Codes read past a row's end (widths that are no multiple of 32 for K, 16 for V) are the next row's or the
//   slack's bytes: as keys they meet q = 0 (F is always finite), as values they reach only channels that are
//   never stored. Rows past the task's tokens read the tile's last row and get score -inf.
//   At the end the warps merge in local memory (kvc_merge_warps) and the task writes its output or partials
//   as attn_decode_ragged.cl.
// Layout and arguments: attn_decode_ragged_q4.cl's (rows 4-byte aligned; the host checks the views).
// Preamble defines: G, GB (divides G, <= 4), MW (<= 128), PAGE_SIZE, NW (warps per work-group), STAGE_B (bytes
//   of one warp's stage: at least 16 rows of the widest K and V heads plus 16), KVC_ASM.

#define NG ((MW + 31) / 32)   // 32-channel groups of the widest K head
#define MV ((MW + 15) / 16)   // 16-channel m-tiles of the widest V head
#define QW (32 * NG)          // staged q row (floats; zeros past the head's width)
#define SLACK 16
#define MERGE_F (NW * 4 * QW + 2 * NW * 4)
#define AREA_B (NW * STAGE_B > 4 * MERGE_F ? NW * STAGE_B : 4 * MERGE_F)  // bytes, a multiple of 16

// 4 bytes from global to local memory without the registers (cp.async.ca), waited for with kvc_cp_async_wait
// (common.cl).
KVC_INLINE void kvc_cp_async4(local uint * dst, global const uint * src) {
    KVC_ASM volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"l"((ulong)dst), "l"((ulong)src) : "memory");
}

// Rows [0, n) of the tile at token tok0 of one head (rb bytes a row; its run in a page at head_b bytes, a page
// page_b bytes) into dst, contiguous: run by run (the rows of one page), word by word across the warp.
KVC_INLINE void kvc_q4_stage_rows(local uint * dst, global const uchar * pages, ulong page_b, ulong head_b, int rb,
                                  global const int * pidx, int tok0, int n, int lane) {
    const int rw = rb / 4;
    for (int s = tok0; s < tok0 + n;) {  // uniform
        const int pg = s / PAGE_SIZE, e = min((pg + 1) * PAGE_SIZE, tok0 + n);
        global const uint * src =
            (global const uint *)(pages + (ulong)pidx[pg] * page_b + head_b + (ulong)(s % PAGE_SIZE) * rb);
        local uint * d = dst + (s - tok0) * rw;
        for (int i = lane; i < (e - s) * rw; i += 32) kvc_cp_async4(d + i, src + i);
        s = e;
    }
}

// A row's f16 (min, step) as floats.
KVC_INLINE float2 kvc_q4_params(local const uchar * row) {
    return (float2)(vload_half(0, (local const half *)row), vload_half(1, (local const half *)row));
}

// Scores of rows r0 .. r0 + 15 of the staged K rows (rb bytes each, ng groups; rows >= hi read row hi - 1):
// head t's of rows r0 + g (.x) and r0 + g + 8 (.y), -inf past hi. qsum: head t's sum of q.
KVC_INLINE float2 kvc_q4_tile_scores(local const uchar * ks, int rb, int ng, int r0, int hi, const uint * bq0,
                                     const uint * bq1, float qsum, int g, int t) {
    local const uchar * ra = ks + min(r0 + g, hi - 1) * rb;
    local const uchar * rc = ks + min(r0 + g + 8, hi - 1) * rb;
    float d0 = 0.0f, d1 = 0.0f, d2 = 0.0f, d3 = 0.0f, e0 = 0.0f, e1 = 0.0f, e2 = 0.0f, e3 = 0.0f;
#pragma unroll
    for (int gr = 0; gr < NG; ++gr) {
        if (gr < ng) {  // uniform
            const uint xa = *(local const uint *)(ra + 4 + 16 * gr + 4 * t);
            const uint xc = *(local const uint *)(rc + 4 + 16 * gr + 4 * t);
            // pair j (channels j, j + 4 of the word) at bits 4j: rotated into bits 6..9
            KVC_MMA_16816(d0, d1, d2, d3, kvc_code_pair(xa, 6, 4), kvc_code_pair(xc, 6, 4), kvc_code_pair(xa, 2, 4),
                          kvc_code_pair(xc, 2, 4), bq0[2 * gr], bq1[2 * gr]);
            KVC_MMA_16816(e0, e1, e2, e3, kvc_code_pair(xa, 30, 4), kvc_code_pair(xc, 30, 4), kvc_code_pair(xa, 26, 4),
                          kvc_code_pair(xc, 26, 4), bq0[2 * gr + 1], bq1[2 * gr + 1]);
        }
    }
    const float2 pa = kvc_q4_params(ra), pc = kvc_q4_params(rc);
    const float fa = (d0 + e0) + (d1 + e1), fc = (d2 + e2) + (d3 + e3);
    return (float2)(r0 + g < hi ? pa.y * fa + (pa.x - 16.0f * pa.y) * qsum : -INFINITY,
                    r0 + g + 8 < hi ? pc.y * fc + (pc.x - 16.0f * pc.y) * qsum : -INFINITY);
}

// Adds rows r0 .. r0 + 15 of the staged V rows (rb bytes each, nv m-tiles) weighted by this lane's p0 (row
// r0 + g) and p1 (row r0 + g + 8) to o (o[4m], o[4m + 1]: channel 16m + 2g, hi and lo columns of head t;
// o[4m + 2], o[4m + 3]: channel 16m + 2g + 1), and their sum_t p_t (mn_t - 16 st_t) to *bias.
KVC_INLINE void kvc_q4_tile_values(float * o, float * bias, local const uchar * vs, int rb, int nv, int r0, int hi,
                                   float p0, float p1, int g, int t) {
    const float2 pa = kvc_q4_params(vs + min(r0 + g, hi - 1) * rb);
    const float2 pc = kvc_q4_params(vs + min(r0 + g + 8, hi - 1) * rb);
    *bias += p0 * (pa.x - 16.0f * pa.y) + p1 * (pc.x - 16.0f * pc.y);
    float w[4];
    kvc_transpose_p(p0 * pa.y, p1 * pc.y, g, t, w);
    uint b0, b1;
    kvc_p_frag(w[0], w[1], w[2], w[3], g & 1, &b0, &b1);
    // Rows 2t, 2t + 1, 2t + 8, 2t + 9 at the code word of byte 8m + g (m = 0); byte g % 4 of two rows goes to
    // bytes 0 and 2 (the low nibbles at bits 0 and 16, the high ones at 4 and 20).
    local const uchar * vr[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) vr[k] = vs + min(r0 + 2 * t + (k & 1) + (k >> 1) * 8, hi - 1) * rb + 4 + 4 * (g >> 2);
    const uint b = (uint)(g & 3), sel = b | b << 4 | (4 + b) << 8 | (4 + b) << 12;
#pragma unroll
    for (int m = 0; m < MV; ++m) {
        if (m < nv) {  // uniform
            const uint x01 = kvc_prmt(*(local const uint *)(vr[0] + 8 * m), *(local const uint *)(vr[1] + 8 * m), sel);
            const uint x89 = kvc_prmt(*(local const uint *)(vr[2] + 8 * m), *(local const uint *)(vr[3] + 8 * m), sel);
            KVC_MMA_16816(o[4 * m], o[4 * m + 1], o[4 * m + 2], o[4 * m + 3], kvc_code_pair(x01, 6, 4),
                          kvc_code_pair(x01, 2, 4), kvc_code_pair(x89, 6, 4), kvc_code_pair(x89, 2, 4), b0, b1);
        }
    }
}

// Bytes of the rows of heads [0, c) in a token's row (which: 0 K, 1 V): core/ragged_q4.h's row_offset.
KVC_INLINE ulong kvc_q4_row_offset(global const int * heads, int c, int which) {
    ulong off = 0;
    for (int i = 0; i < c; ++i) off += 4 + 4 * ((heads[i * 4 + 2 * which] + 7) / 8);
    return off;
}

kernel __attribute__((reqd_work_group_size(32 * NW, 1, 1)))
void kvc_adr_q4_warps(global const float * q, ulong q_off, global const uchar * k_pages, ulong k_off,
                      global const uchar * v_pages, ulong v_off, global const int * indptr, ulong indptr_off,
                      global const int * indices, ulong indices_off, global const int * last_len, ulong last_len_off,
                      global const int * heads, ulong heads_off, global const int * sched, ulong sched_off,
                      global const int * merge, ulong merge_off, global float * out, ulong out_off,
                      global float * part, ulong ml_off, int n_kv_heads, int k_total, int v_total, int k_row_bytes,
                      int v_row_bytes, float qscale) {
    local float q_l[4 * QW];              // q * qscale of the GB heads, zero past the width and for heads >= GB
    local uint4 area4[AREA_B / 16];       // the warps' stages; at the end the merge
    local uchar * area = (local uchar *)area4;

    const int tid = get_local_id(0), lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
    const int task = get_group_id(0), g0 = get_group_id(1) * GB;
    heads += heads_off;
    const kvc_ragged_task T =
        kvc_ragged_task_at(sched + sched_off, heads, merge + merge_off, indptr + indptr_off, task, n_kv_heads);
    const int b = T.b, c = T.c, first = T.first, end = T.end, ko = T.ko, vo = T.vo;
    const int kw = clamp(T.kw, 1, MW), vw = clamp(T.vw, 1, MW);
    global const int * pidx = indices + indices_off + T.p0;
    k_pages += k_off;
    v_pages += v_off;

    global const float * qg = q + q_off + (ulong)b * G * k_total + (ulong)G * ko + (ulong)g0 * kw;
    kvc_stage_q(q_l, qg, kw, QW, GB, qscale, 32 * NW);
    barrier(CLK_LOCAL_MEM_FENCE);

    // q's B fragments for k-steps 2 gr + s: column g = head g / 2, hi (even g) or what f16 missed (odd g), at
    // channels 32 gr + 8t + 2s + {0, 4} (bq0) and + {1, 5} (bq1); head t's sum of q.
    const int ng = (kw + 31) / 32, nv = (vw + 15) / 16;
    uint bq0[2 * NG], bq1[2 * NG];
    {
        local const float * qh = q_l + (g >> 1) * QW;
#pragma unroll
        for (int gr = 0; gr < NG; ++gr)
#pragma unroll
            for (int s = 0; s < 2; ++s) {
                const int ch = 32 * gr + 8 * t + 2 * s;
                bq0[2 * gr + s] = kvc_split_pair(qh[ch], qh[ch + 4], g & 1);
                bq1[2 * gr + s] = kvc_split_pair(qh[ch + 1], qh[ch + 5], g & 1);
            }
    }
    float qsum = 0.0f;
    for (int ch = g; ch < kw; ch += 8) qsum += q_l[t * QW + ch];
    qsum = kvc_head_sum(qsum);

    // Stage geometry: tt rows of K then tt rows of V, unpadded, then SLACK bytes.
    const int kb = 4 + 4 * ((kw + 7) / 8), vb = 4 + 4 * ((vw + 7) / 8);
    const int tt = max(16, (STAGE_B - SLACK) / (kb + vb) / 16 * 16);
    const ulong k_page = (ulong)PAGE_SIZE * k_row_bytes, v_page = (ulong)PAGE_SIZE * v_row_bytes;
    const ulong k_head = (ulong)PAGE_SIZE * kvc_q4_row_offset(heads, c, 0);
    const ulong v_head = (ulong)PAGE_SIZE * kvc_q4_row_offset(heads, c, 1);
    local uchar * ks = area + warp * STAGE_B;
    local uchar * vs = ks + tt * kb;

    float o[4 * MV];
#pragma unroll
    for (int i = 0; i < 4 * MV; ++i) o[i] = 0.0f;
    float m = -INFINITY, l = 0.0f, bias = 0.0f;

    const int n_tiles = end > first ? (end - first + tt - 1) / tt : 0;
    for (int j = warp; j < n_tiles; j += NW) {
        const int tok0 = first + j * tt, hi = min(tt, end - tok0);
        kvc_warp_sync();  // every lane is done with the previous tile
        kvc_q4_stage_rows((local uint *)ks, k_pages, k_page, k_head, kb, pidx, tok0, hi, lane);
        kvc_q4_stage_rows((local uint *)vs, v_pages, v_page, v_head, vb, pidx, tok0, hi, lane);
        kvc_cp_async_wait();
        kvc_warp_sync();  // the tile is in the stage for every lane
        for (int r0 = 0; r0 < hi; r0 += 16) {
            const float2 s = kvc_q4_tile_scores(ks, kb, ng, r0, hi, bq0, bq1, qsum, g, t);
            float p0, p1;
            int moved;
            const float alpha = kvc_softmax_lazy(&m, &l, s.x, s.y, &p0, &p1, &moved);
            if (moved) {  // warp-uniform
#pragma unroll
                for (int i = 0; i < 4 * MV; ++i) o[i] *= alpha;
                bias *= alpha;
            }
            kvc_q4_tile_values(o, &bias, vs, vb, nv, r0, hi, p0, p1, g, t);
        }
    }
    l = kvc_head_sum(l);
    bias = kvc_head_sum(bias);

    // Merge the warps: outputs [NW][4][QW] (the bias joins every channel), maxima and sums [NW][4].
    barrier(CLK_LOCAL_MEM_FENCE);  // every warp is done with its stage
    local float * sm = (local float *)area;
#pragma unroll
    for (int mt = 0; mt < MV; ++mt) {  // the bias joins each of the m-tile's two channels once
        o[4 * mt] += bias;
        o[4 * mt + 2] += bias;
    }
    KVC_STORE_WARP_STATE(sm, o, MV, NW, QW, warp, g, t, m, l);
    barrier(CLK_LOCAL_MEM_FENCE);
    const ulong prow0 = (ulong)task * G + g0;
    global float * out_h0 = out + out_off + (ulong)b * G * v_total + (ulong)G * vo + (ulong)g0 * vw;
    kvc_ragged_warps_output(sm, NW, QW, GB, 32 * NW, vw, T.n_in_list, out_h0, part, prow0, MW, ml_off);
}
