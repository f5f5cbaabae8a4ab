// attn_decode_quant_mma.cl: decode attention over quantized KV blocks (lib/core/qblock.h) plus the fp16
// window, for NVIDIA's driver: every warp streams its own blocks and computes both the scores and the
// values on the tensor cores, with the codes themselves as mma operands. It is the OpenCL form of
// cuda_backend/attn_decode_quant_mma.cu (the algebra, fragment layouts and per-item accumulation are
// that kernel's; see its banner). attn_decode_quant.cl is the portable kernel, whose work-group shares
// every tile through local memory with three barriers per tile.
//
// Kernel kvc_adq_warps: one work-group of NW warps per (split, KV head x chunk of GB query heads,
//   request); NDRange local (32 NW, 1, 1), global (32 NW n_splits, n_kv_heads group / GB, batch).
//   Split s takes the request's blocks [s chunk, (s + 1) chunk) (the last split also any beyond, and
//   the window). Warp w takes the split's blocks w, w + NW, ...: it brings a block into its own local
//   stage, with KVC_BULK by two bulk copies that its lane 0 starts (the slot's header, the KV-head
//   region) awaited on the warp's mbarrier, else by 16-byte loads of every lane (the other warps' work
//   hides the wait; rings of 2-3 stages filled ahead, by cp.async or bulk copies, and loading the next
//   block into registers were slower, docs/kernel_notes.md). It synchronizes with bar.warp.sync only,
//   and runs every 16-token tile of the block's segments itself:
//     scores  S^T = K Q'^T: M = 16 tokens (A = the key codes as F = 2^b + code, row-major), N = 8
//             columns = (hi, lo) f16 parts of q' = q kstep for 4 heads, K = 16 channels; the bias
//             sum_c q_c (kmin_c - 2^b kstep_c) per segment and head. Lane (g, t) = (lane / 4, lane % 4)
//             holds head t's scores of tile tokens g and g + 8.
//     softmax per lane, the running max moved lazily (past KVC_LAZY_MAX, decided by a warp vote) and
//             shared by the 8 lanes of a head.
//     values  O^T = V^T P'^T: M = 16 channels (row g: channel 16 m + 2 g, row g + 8: the next one;
//             A = the value codes of two tokens per register), N = 8 = (hi, lo) of p' = p vstep for 4
//             heads, K = 16 tokens. P' comes from the score layout with four shuffles per tile (lane
//             (g, t) needs head g / 2's weights of tokens 2t, 2t + 1, 2t + 8, 2t + 9), times vstep of
//             each token and value group. sum_t p_t (vmin_t - 2^b vstep_t) is kept per lane and group.
//   Channel scales (QB_CS): a block's part is accumulated apart and added times vscale at its end.
//   The window (f16 rows, read from global memory) is cut into 16-token tiles, dealt to the warps
//   after the blocks; its K and V rows are mma operands as they are.
//   At the end the warps' states are merged in local memory; with n_splits == 1 the result and lse go
//   to out / lse, else the unnormalized o, the running max (log2 units) and the sum go to the scratch
//   buffer for kvc_adq_merge (attn_decode_quant_merge.cl).
// Header counts are clamped to the capacities, slots and window rows, pages and lengths checked as in
// attn_decode_quant.cl, so corrupt metadata cannot make a warp read outside its buffers.
// Layout: as attn_decode_quant.cl. The window buffers' element offsets are even (32-bit row reads).
// Preamble defines: lib/opencl/qblock_defines.h (QB_HD a multiple of 16 from 32 to 128, QB_VG a multiple
//   of 16), GB (query heads per work-group, <= 4, divides the GQA group), NW (warps per work-group),
//   KVC_ASM; KVC_BULK where the launcher takes bulk copies (Hopper, block regions of 4 KiB and more).

#define KVC_LN2 0.69314718055994530942f
#define HD16 (QB_HD / 16)                  // m-tiles (values) and k16 steps (scores)
#define MPG (QB_VG / 16)                   // m-tiles per value group
#define BLK_V4 (QB_HEAD_BYTES / 16)        // a block's KV-head region in 16-byte chunks
// Local memory: the warps' stages, reused at the end by the merge ([NW][4][QB_HD] outputs, then the
// maxima and sums [NW][4] each).
#if KVC_BULK
#define STAGE_V4 (1 + BLK_V4)  // the slot's 16-byte header, then the region
#else
#define STAGE_V4 BLK_V4
#endif
#define MERGE_V4 ((NW * 4 * QB_HD + 2 * NW * 4) / 4)
#define AREA_V4 (NW * STAGE_V4 > MERGE_V4 ? NW * STAGE_V4 : MERGE_V4)

// Per-lane state: lane (g, t) keeps head t. o[4m + k]: mma accumulator of m-tile m (k = 0, 1: channel
// 16m + 2g, hi and lo columns; 2, 3: channel 16m + 2g + 1). ob: the current block's part (QB_CS).
// vb[gi]: sum p_t d_t of value group gi over this lane's tokens. m: running max (log2), l: this
// lane's part of the sum, m_item: m when the current block began (QB_CS).
typedef struct {
    float o[4 * HD16];
#if QB_CS
    float ob[4 * HD16];
#endif
    float vb[QB_NG];
    float m, l, m_item;
} kvc_wstate;

#if QB_CS
#define KVC_ACC(st) ((st)->ob)
#else
#define KVC_ACC(st) ((st)->o)
#endif

// Online softmax of this lane's two scores (log2 units, -inf when masked): their weights p0, p1, and the
// accumulators rescaled where the running max moved (kvc_softmax_lazy, common.cl).
KVC_INLINE void kvc_softmax2(kvc_wstate * st, float s0, float s1, float * p0, float * p1) {
    int moved;
    const float alpha = kvc_softmax_lazy(&st->m, &st->l, s0, s1, p0, p1, &moved);
    if (moved) {  // warp-uniform
#pragma unroll
        for (int i = 0; i < 4 * HD16; ++i) KVC_ACC(st)[i] *= alpha;
#pragma unroll
        for (int i = 0; i < QB_NG; ++i) st->vb[i] *= alpha;
    }
}

// Channel pairs (the K order of a segment's score mma, as CUDA's kernel): pair p (0..7) of a k16 step
// is the two channels one B register of lane p % 4 holds (register p / 4): channels j and j + P of the
// step's code word p / P, j = p % P, P = 16 / bits pairs per 32-bit word. Their codes lie 16 bits
// apart, so one kvc_code_pair makes the A register. The first channel of pair p of step kk:
KVC_INLINE int kvc_pair_channel(int kk, int p, int bits) {
    const int P = 16 / bits;
    return 16 * kk + (p / P) * (32 / bits) + p % P;
}

// Word w (a literal after unrolling) of a code row: from the row's words loaded whole (rw) when the
// row is read whole, else from local memory.
#define KVC_ROW_WORD(whole, rw, row, w) ((whole) ? (rw)[w] : (row)[w])

// The words of a code row of rb bytes (a multiple of 16) into rw, 16 bytes at a time.
KVC_INLINE void kvc_load_row(local const uint * row, int rb, uint * rw) {
#pragma unroll
    for (int i = 0; i < QB_HD / 16; ++i)  // QB_HD / 16 >= rb / 16 at 2 and 4 bits
        if (16 * i < rb) {
            const uint4 v = ((local const uint4 *)row)[i];
            rw[4 * i] = v.x, rw[4 * i + 1] = v.y, rw[4 * i + 2] = v.z, rw[4 * i + 3] = v.w;
        }
}

// Scores of the 16-token tile at tok0 of a segment (n tokens, code rows at kc): head t's of tokens
// g (.x) and g + 8 (.y), -inf past n (those rows read the segment's last row). At 2 and 4 bits the
// lane's pairs t and t + 4 of every k16 step cover each word of the two rows: they are read whole
// where a row is a multiple of 16 bytes; at 8 bits the lane needs half of the words, read one by one.
KVC_INLINE float2 kvc_seg_scores(local const uchar * kc, int bits, int n, int tok0, const uint * bq0,
                                 const uint * bq1, float bias, int g, int t) {
    const int rb = QB_HD * bits / 8, P = 16 / bits, wpk = bits / 2;  // row bytes, pairs per word, words per k16 step
    local const uint * ra = (local const uint *)(kc + min(tok0 + g, n - 1) * rb);
    local const uint * rc = (local const uint *)(kc + min(tok0 + g + 8, n - 1) * rb);
    // Pair t: word w0 of the step, index t % P; pair t + 4: word w1, index (t + 4) % P.
    const int w0 = bits <= 4 ? 0 : t / P, w1 = bits <= 4 ? (bits == 4 ? 1 : 0) : (t + 4) / P;
    const int rot0 = (10 - bits - (t % P) * bits) & 31, rot1 = (10 - bits - ((t + 4) % P) * bits) & 31;
    const bool whole = bits <= 4 && rb % 16 == 0;
    uint wa[QB_HD / 8], wc[QB_HD / 8];
    if (whole) {
        kvc_load_row(ra, rb, wa);
        kvc_load_row(rc, rb, wc);
    }
    float d0 = 0.0f, d1 = 0.0f, d2 = 0.0f, d3 = 0.0f, e0 = 0.0f, e1 = 0.0f, e2 = 0.0f, e3 = 0.0f;
#pragma unroll
    for (int kk = 0; kk < HD16; ++kk) {
        const uint a0 = kvc_code_pair(KVC_ROW_WORD(whole, wa, ra, kk * wpk + w0), rot0, bits);
        const uint a1 = kvc_code_pair(KVC_ROW_WORD(whole, wc, rc, kk * wpk + w0), rot0, bits);
        const uint a2 = kvc_code_pair(KVC_ROW_WORD(whole, wa, ra, kk * wpk + w1), rot1, bits);
        const uint a3 = kvc_code_pair(KVC_ROW_WORD(whole, wc, rc, kk * wpk + w1), rot1, bits);
        if (kk & 1)  // two accumulators halve the chain of dependent mma
            KVC_MMA_16816(e0, e1, e2, e3, a0, a1, a2, a3, bq0[kk], bq1[kk]);
        else
            KVC_MMA_16816(d0, d1, d2, d3, a0, a1, a2, a3, bq0[kk], bq1[kk]);
    }
    return (float2)(tok0 + g < n ? (d0 + e0) + (d1 + e1) + bias : -INFINITY,
                    tok0 + g + 8 < n ? (d2 + e2) + (d3 + e3) + bias : -INFINITY);
}

// Values of the tile at tok0 of a segment weighted by this lane's weights p0 (token g), p1 (g + 8).
// Lane g's code pair of m-tile m (channels 16m + 2g, + 1) starts at bit o of byte bb of word wv;
// kvc_prmt puts those bytes of two tokens' rows 16 bits apart, and kvc_code_pair makes each channel's
// A register from them. At 2 bits every word of the four rows is needed: read whole.
KVC_INLINE void kvc_seg_values(kvc_wstate * st, local const uchar * vc, local const half * vmin,
                               local const half * vstep, int bits, int n, int tok0, float p0, float p1, int g,
                               int t) {
    const int rb = QB_HD * bits / 8;
    float w[4];
    kvc_transpose_p(p0, p1, g, t, w);
    int r[4];  // rows of tile tokens 2t, 2t + 1, 2t + 8, 2t + 9
    r[0] = min(tok0 + 2 * t, n - 1);
    r[1] = min(tok0 + 2 * t + 1, n - 1);
    r[2] = min(tok0 + 2 * t + 8, n - 1);
    r[3] = min(tok0 + 2 * t + 9, n - 1);
    const int ra = min(tok0 + g, n - 1), rc = min(tok0 + g + 8, n - 1);  // this lane's score tokens
    const int wv = (g * bits) / 16, bb = ((2 * g * bits) % 32) / 8, o = (2 * g * bits) % 8;
    const uint sel = bb | ((bb + 1) & 7) << 4 | (bb + 4) << 8 | ((bb + 5) & 7) << 12;
    const int rot_a = (10 - bits - o) & 31, rot_b = (10 - 2 * bits - o) & 31;
    local const uint * vr[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) vr[k] = (local const uint *)(vc + r[k] * rb);
    const bool whole = bits == 2 && rb % 16 == 0;
    uint vw[4][QB_HD / 16];
    if (whole) {
#pragma unroll
        for (int k = 0; k < 4; ++k) kvc_load_row(vr[k], rb, vw[k]);
    }
    const float two_b = (float)(1 << bits);
    uint b0 = 0u, b1 = 0u;
#pragma unroll
    for (int m = 0; m < HD16; ++m) {
        if (m % MPG == 0) {  // a new value group: its p' operand and offsets
            const int gi = m / MPG;
            kvc_p_frag(w[0] * vload_half(r[0] * QB_NG + gi, vstep), w[1] * vload_half(r[1] * QB_NG + gi, vstep),
                       w[2] * vload_half(r[2] * QB_NG + gi, vstep), w[3] * vload_half(r[3] * QB_NG + gi, vstep), g & 1,
                       &b0, &b1);
            const float sa = vload_half(ra * QB_NG + gi, vstep), sc = vload_half(rc * QB_NG + gi, vstep);
            st->vb[gi] += p0 * (vload_half(ra * QB_NG + gi, vmin) - two_b * sa) +
                          p1 * (vload_half(rc * QB_NG + gi, vmin) - two_b * sc);
        }
        const int wi = m * (bits / 2) + wv;
        const uint x01 = kvc_prmt(whole ? vw[0][m] : vr[0][wi], whole ? vw[1][m] : vr[1][wi], sel);
        const uint x23 = kvc_prmt(whole ? vw[2][m] : vr[2][wi], whole ? vw[3][m] : vr[3][wi], sel);
        KVC_MMA_16816(KVC_ACC(st)[4 * m], KVC_ACC(st)[4 * m + 1], KVC_ACC(st)[4 * m + 2], KVC_ACC(st)[4 * m + 3],
                      kvc_code_pair(x01, rot_a, bits), kvc_code_pair(x01, rot_b, bits), kvc_code_pair(x23, rot_a, bits),
                      kvc_code_pair(x23, rot_b, bits), b0, b1);
    }
}

// Every tile of one segment of the staged block (n > 0 tokens); `bits` is a literal at each call.
// The next tile's scores are computed between a tile's softmax and its values: independent work
// that hides the mma and local-memory latencies of a warp that streams alone.
KVC_INLINE void kvc_segment(kvc_wstate * st, local const uchar * seg, int bits, int kstep_off, int vmin_off,
                            int vstep_off, int kcodes_off, int vcodes_off, int n, local const float * q_l, int g,
                            int t) {
    local const half * kmin = (local const half *)seg;
    local const half * kstep = (local const half *)(seg + kstep_off);
    // B fragments of q' (column g: head g / 2, hi or lo; channel pairs t and t + 4) and head t's bias.
    uint bq0[HD16], bq1[HD16];
    local const float * qh = q_l + (g >> 1) * QB_HD;
#pragma unroll
    for (int kk = 0; kk < HD16; ++kk) {
        bq0[kk] = kvc_qk_pair(qh, kstep, kvc_pair_channel(kk, t, bits), 16 / bits, g & 1);
        bq1[kk] = kvc_qk_pair(qh, kstep, kvc_pair_channel(kk, t + 4, bits), 16 / bits, g & 1);
    }
    float bias = 0.0f;
    {
        local const float * qt = q_l + t * QB_HD;
        const float two_b = (float)(1 << bits);
#pragma unroll
        for (int i = 0; i < HD16 * 2; ++i) {
            const int c = g + 8 * i;
            bias += qt[c] * (vload_half(c, kmin) - two_b * vload_half(c, kstep));
        }
        bias = kvc_head_sum(bias);
    }
    local const uchar * kc = seg + kcodes_off;
    local const uchar * vc = seg + vcodes_off;
    float2 s = kvc_seg_scores(kc, bits, n, 0, bq0, bq1, bias, g, t);
    for (int tok0 = 0; tok0 < n; tok0 += 16) {
        float p0, p1;
        kvc_softmax2(st, s.x, s.y, &p0, &p1);
        if (tok0 + 16 < n) s = kvc_seg_scores(kc, bits, n, tok0 + 16, bq0, bq1, bias, g, t);
        kvc_seg_values(st, vc, (local const half *)(seg + vmin_off), (local const half *)(seg + vstep_off), bits, n,
                       tok0, p0, p1, g, t);
    }
}

#if QB_CS
// A block's separate accumulation (channel scales): start, and the end that adds it times vscale (1
// for a window tile: vscale null) to o with the running max it was computed with.
KVC_INLINE void kvc_item_begin(kvc_wstate * st) {
    st->m_item = st->m;
#pragma unroll
    for (int i = 0; i < 4 * HD16; ++i) st->ob[i] = 0.0f;
#pragma unroll
    for (int i = 0; i < QB_NG; ++i) st->vb[i] = 0.0f;
}
KVC_INLINE void kvc_item_end(kvc_wstate * st, local const half * vscale, int g) {
    const float fa = native_exp2(st->m_item - (st->m == -INFINITY ? 0.0f : st->m));
    float vbg = 0.0f;
#pragma unroll
    for (int m = 0; m < HD16; ++m) {
        if (m % MPG == 0) vbg = kvc_head_sum(st->vb[m / MPG]);
        const float vs0 = vscale ? vload_half(16 * m + 2 * g, vscale) : 1.0f;
        const float vs1 = vscale ? vload_half(16 * m + 2 * g + 1, vscale) : 1.0f;
        st->o[4 * m] = st->o[4 * m] * fa + vs0 * (st->ob[4 * m] + vbg);
        st->o[4 * m + 1] = st->o[4 * m + 1] * fa + vs0 * st->ob[4 * m + 1];
        st->o[4 * m + 2] = st->o[4 * m + 2] * fa + vs1 * (st->ob[4 * m + 2] + vbg);
        st->o[4 * m + 3] = st->o[4 * m + 3] * fa + vs1 * st->ob[4 * m + 3];
    }
}
#endif

// Element offset of the K/V row of window token j (ring slot (start + j) % win_tokens) in its page.
KVC_INLINE ulong kvc_win_row(global const int * pages, int start, int j, int win_tokens, int page_tokens,
                             int n_pages, int n_kv_heads, int kvh) {
    const int s = (start + j) % win_tokens;
    const int page = clamp(pages[s / page_tokens], 0, n_pages - 1);
    return (((ulong)page * n_kv_heads + kvh) * page_tokens + s % page_tokens) * QB_HD;
}

// One 16-token window tile at tok0 of len tokens: K rows as A for the scores (wq0 / wq1: q in hi / lo
// f16, natural channel order), V rows (two tokens of one channel per register) for the values.
KVC_INLINE void kvc_window_tile(kvc_wstate * st, global const half * wk, global const half * wv,
                                global const int * pages, int start, int len, int win_tokens, int page_tokens,
                                int n_pages, int n_kv_heads, int kvh, int tok0, const uint * wq0, const uint * wq1,
                                int g, int t) {
    global const half * ka = wk + kvc_win_row(pages, start, min(tok0 + g, len - 1), win_tokens, page_tokens, n_pages,
                                             n_kv_heads, kvh);
    global const half * kb = wk + kvc_win_row(pages, start, min(tok0 + g + 8, len - 1), win_tokens, page_tokens,
                                             n_pages, n_kv_heads, kvh);
    float d0 = 0.0f, d1 = 0.0f, d2 = 0.0f, d3 = 0.0f;
#pragma unroll
    for (int kk = 0; kk < HD16; ++kk) {
        const int c = 16 * kk + 2 * t;
        const uint a0 = *(global const uint *)(ka + c), a1 = *(global const uint *)(kb + c);
        const uint a2 = *(global const uint *)(ka + c + 8), a3 = *(global const uint *)(kb + c + 8);
        KVC_MMA_16816(d0, d1, d2, d3, a0, a1, a2, a3, wq0[kk], wq1[kk]);
    }
    float p0, p1;
    kvc_softmax2(st, tok0 + g < len ? d0 + d1 : -INFINITY, tok0 + g + 8 < len ? d2 + d3 : -INFINITY, &p0, &p1);
    float w[4];
    kvc_transpose_p(p0, p1, g, t, w);
    uint b0, b1;
    kvc_p_frag(w[0], w[1], w[2], w[3], g & 1, &b0, &b1);
    global const half * vr[4];
#pragma unroll
    for (int k = 0; k < 4; ++k)
        vr[k] = wv + kvc_win_row(pages, start, min(tok0 + 2 * t + (k & 1) + (k >> 1) * 8, len - 1), win_tokens,
                                 page_tokens, n_pages, n_kv_heads, kvh) +
                2 * g;
#pragma unroll
    for (int m = 0; m < HD16; ++m) {
        const uint x0 = *(global const uint *)(vr[0] + 16 * m), x1 = *(global const uint *)(vr[1] + 16 * m);
        const uint x2 = *(global const uint *)(vr[2] + 16 * m), x3 = *(global const uint *)(vr[3] + 16 * m);
        KVC_MMA_16816(KVC_ACC(st)[4 * m], KVC_ACC(st)[4 * m + 1], KVC_ACC(st)[4 * m + 2], KVC_ACC(st)[4 * m + 3],
                      (x0 & 0xffffu) | (x1 << 16), (x0 >> 16) | (x1 & 0xffff0000u), (x2 & 0xffffu) | (x3 << 16),
                      (x2 >> 16) | (x3 & 0xffff0000u), b0, b1);
    }
}

// One block staged at hb (its KV-head region; counts n_hi, n_lo): both segments, and with channel
// scales its separate accumulation.
KVC_INLINE void kvc_block(kvc_wstate * st, local const uchar * hb, int n_hi, int n_lo, local const float * q_l, int g,
                          int t) {
#if QB_CS
    kvc_item_begin(st);
#endif
#if QB_HI_BYTES > 0
    if (n_hi > 0)
        kvc_segment(st, hb + QB_HI_OFF, QB_HI_BITS, QB_HI_KSTEP, QB_HI_VMIN, QB_HI_VSTEP, QB_HI_KCODES, QB_HI_VCODES,
                    n_hi, q_l, g, t);
#endif
#if QB_LO_BYTES > 0
    if (n_lo > 0)
        kvc_segment(st, hb + QB_LO_OFF, QB_LO_BITS, QB_LO_KSTEP, QB_LO_VMIN, QB_LO_VSTEP, QB_LO_KCODES, QB_LO_VCODES,
                    n_lo, q_l, g, t);
#endif
#if QB_CS
    kvc_item_end(st, (local const half *)hb, g);
#endif
}

#if KVC_BULK
// Bulk copies completing on an mbarrier (sm_90 on; as cuda_backend/common.cuh). One instruction of one
// lane moves a contiguous global range into local memory; the mbarrier's phase completes when its one
// arrival (kvc_mbar_expect, which also announces the bytes) and every announced byte have landed. A
// local pointer's integer value is its address in the shared window (NVIDIA's compiler emits 64-bit
// shared addresses), which PTX's shared::cta and shared::cluster operands take.
KVC_INLINE void kvc_mbar_init(local ulong * bar) {
    KVC_ASM volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"l"((ulong)bar) : "memory");
}
// Makes the initialized mbarriers visible to the copy engine (before the barrier that follows).
KVC_INLINE void kvc_mbar_fence_init(void) {
    KVC_ASM volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}
KVC_INLINE void kvc_mbar_expect(local ulong * bar, uint bytes) {
    KVC_ASM volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"l"((ulong)bar), "r"(bytes) : "memory");
}
// Waits until bar's phase of the given parity has completed (a loop in C: no labels in the PTX).
KVC_INLINE void kvc_mbar_wait(local ulong * bar, uint parity) {
    uint done;
    do {
        KVC_ASM volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                         : "=r"(done)
                         : "l"((ulong)bar), "r"(parity)
                         : "memory");
    } while (!done);
}
// bytes (a multiple of 16; both addresses 16-byte aligned) from src to dst, counted on bar.
KVC_INLINE void kvc_bulk_copy(local void * dst, global const void * src, uint bytes, local ulong * bar) {
    KVC_ASM volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"l"(
                         (ulong)dst),
                     "l"((ulong)src), "r"(bytes), "l"((ulong)bar)
                     : "memory");
}

#endif

kernel void kvc_adq_warps(KVC_QDECODE_PARAMS) {
    local float q_l[4 * QB_HD];  // q * qscale of the GB heads, zero rows up to 4 (the mma's columns)
    local uint4 area[AREA_V4];   // the warps' stages; at the end the merge
#if KVC_BULK
    local ulong bars[NW];  // an mbarrier per warp
#endif

    const int tid = get_local_id(0), lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
    local uint4 * stage = area + warp * STAGE_V4;
    const kvc_qdecode_work wk = kvc_qdecode_work_of(indptr + indptr_off, n_q_heads, n_kv_heads, GB, n_splits, chunk);
    const int split = wk.split, b = wk.b, kvh = wk.kvh, p0 = wk.p0, b_begin = wk.b_begin, b_end = wk.b_end;
    const ulong head_row = wk.head_row;  // row of the work-group's first query head in q / out
    indices += indices_off;
    pool += pool_off;
    global const float * qg = q + q_off + head_row * QB_HD;
    for (int i = tid; i < 4 * QB_HD; i += 32 * NW) q_l[i] = i < GB * QB_HD ? qg[i] * qscale : 0.0f;
#if KVC_BULK
    if (lane == 0) {
        kvc_mbar_init(bars + warp);
        kvc_mbar_fence_init();
    }
#endif
    barrier(CLK_LOCAL_MEM_FENCE);  // q_l and the mbarriers are ready for every warp

    kvc_wstate st;
#pragma unroll
    for (int i = 0; i < 4 * HD16; ++i) st.o[i] = 0.0f;
#pragma unroll
    for (int i = 0; i < QB_NG; ++i) st.vb[i] = 0.0f;
    st.m = -INFINITY;
    st.l = 0.0f;
    st.m_item = -INFINITY;

    // This warp's blocks: b_begin + warp + k NW, k < n_mine.
    const int n_split = b_end - b_begin;
    const int n_mine = n_split > warp ? (n_split - warp + NW - 1) / NW : 0;
    global const int * mine = indices + p0 + b_begin + warp;  // block k's slot: mine[k NW]
#if KVC_BULK
    uint parity = 0u;  // of the mbarrier's next phase
#endif
    for (int k = 0; k < n_mine; ++k) {
        const int sl = mine[k * NW];
        if (sl < 0 || sl >= n_slots) continue;  // warp-uniform
        global const uchar * sp = pool + (ulong)sl * QB_SLOT_BYTES;
        global const uchar * src = sp + QB_HEADER + (ulong)kvh * QB_HEAD_BYTES;
        kvc_warp_sync();  // every lane is done with the previous block
#if KVC_BULK
        if (lane == 0) {
            kvc_mbar_expect(bars + warp, 16 + QB_HEAD_BYTES);
            kvc_bulk_copy(stage, sp, 16, bars + warp);
            kvc_bulk_copy(stage + 1, src, QB_HEAD_BYTES, bars + warp);
        }
        kvc_mbar_wait(bars + warp, parity);  // the block is in the stage for every lane
        parity ^= 1u;
        local const int * hdr = (local const int *)stage;
        kvc_block(&st, (local const uchar *)(stage + 1), clamp(hdr[0], 0, QB_HI_CAP), clamp(hdr[1], 0, QB_LO_CAP), q_l,
                  g, t);
#else
        const int n_hi = clamp(((global const int *)sp)[0], 0, QB_HI_CAP);
        const int n_lo = clamp(((global const int *)sp)[1], 0, QB_LO_CAP);
#pragma unroll 8
        for (int e = lane; e < BLK_V4; e += 32) stage[e] = ((global const uint4 *)src)[e];
        kvc_warp_sync();  // the block is in the stage for every lane
        kvc_block(&st, (local const uchar *)stage, n_hi, n_lo, q_l, g, t);
#endif
    }

    // The window's 16-token tiles, dealt to the warps after the blocks (the last split only).
    if (split == n_splits - 1) {
        win += win_off + (ulong)b * 3;
        const int row = win[0], start = win[1], len = clamp(win[2], 0, win_tokens);
        if (len > 0 && row >= 0 && row < n_win_rows && start >= 0 && start < win_tokens) {
            const int ppr = (win_tokens + win_page_tokens - 1) / win_page_tokens;
            global const int * pages = win_pages + wp_off + (ulong)row * ppr;
            uint wq0[HD16], wq1[HD16];
            local const float * qh = q_l + (g >> 1) * QB_HD;
#pragma unroll
            for (int kk = 0; kk < HD16; ++kk) {
                const int c = 16 * kk + 2 * t;
                wq0[kk] = kvc_split_pair(qh[c], qh[c + 1], g & 1);
                wq1[kk] = kvc_split_pair(qh[c + 8], qh[c + 9], g & 1);
            }
            const int n_tiles = (len + 15) / 16;
            for (int j = (warp - n_split % NW + NW) % NW; j < n_tiles; j += NW) {
#if QB_CS
                kvc_item_begin(&st);
#endif
                kvc_window_tile(&st, win_k + wk_off, win_v + wv_off, pages, start, len, win_tokens, win_page_tokens,
                                n_win_pages, n_kv_heads, kvh, 16 * j, wq0, wq1, g, t);
#if QB_CS
                kvc_item_end(&st, 0, g);
#endif
            }
        }
    }

#if !QB_CS
    {  // the value groups' offsets, summed over the head's lanes, join the hi columns
        float vbg = 0.0f;
#pragma unroll
        for (int m = 0; m < HD16; ++m) {
            if (m % MPG == 0) vbg = kvc_head_sum(st.vb[m / MPG]);
            st.o[4 * m] += vbg;
            st.o[4 * m + 2] += vbg;
        }
    }
#endif
    st.l = kvc_head_sum(st.l);

    // Merge the warps: outputs [NW][4][QB_HD], maxima and sums [NW][4], in the stages' memory.
    barrier(CLK_LOCAL_MEM_FENCE);  // every warp is done with its stage
    local float * sm = (local float *)area;
    KVC_STORE_WARP_STATE(sm, st.o, HD16, NW, QB_HD, warp, g, t, st.m, st.l);
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int i = tid; i < GB * QB_HD + GB; i += 32 * NW) {
        const int h = i < GB * QB_HD ? i / QB_HD : i - GB * QB_HD, d = i % QB_HD;
        float mx, l;
        const float o = kvc_merge_warps(sm, NW, QB_HD, h, d, i < GB * QB_HD, &mx, &l);
        const ulong hr = head_row + h;
        if (i < GB * QB_HD) {
            if (n_splits == 1)
                out[out_off + hr * QB_HD + d] = l > 0.0f ? o / l : 0.0f;
            else
                part[(hr * n_splits + split) * QB_HD + d] = o;
        } else if (n_splits == 1) {
            lse[lse_off + hr] = l > 0.0f ? (mx + log2(l)) * KVC_LN2 : -INFINITY;
        } else {
            part[ml_off + (hr * n_splits + split) * 2] = mx;
            part[ml_off + (hr * n_splits + split) * 2 + 1] = l;
        }
    }
}
