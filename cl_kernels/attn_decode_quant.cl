// attn_decode_quant.cl: decode attention over quantized KV blocks (lib/core/qblock.h) plus an fp16
// ring window, split-KV, dequantizing in registers (no fp16 copy of the cache is ever made).
//
// Kernels:
//   kvc_adq_split: one work-group per (split, KV head x query sub-group, request); the GB query heads
//     of one KV head share every K/V read. NDRange local (NT, 1, 1), global (NT * n_splits,
//     n_kv_heads * group / GB, batch). Split s takes the request's blocks [s * chunk, (s + 1) * chunk)
//     (the last split also any beyond, and the window). Per block:
//       0. the KV head's part of the slot (QB_HEAD_BYTES, one contiguous range) is copied to local
//          memory with coalesced 16-byte loads: codes, f16 parameters and vscale are then read
//          from local memory by every phase;
//     then per segment (hi, lo) in tiles of up to NT tokens, and likewise for the window tiles:
//       1. work-item i dequantizes the key row of token i (a 32-bit word of codes at a time, 4
//          channels per float4: code * kstep + kmin) and computes its GB scores against q in local
//          memory (pre-scaled by scale * log2(e), so the softmax uses exp2);
//       2. the online-softmax update with the lazily moved running max m of common.cl (work-items
//          whose score exceeds m by more than KVC_LAZY_MAX propose it with a local atomic max;
//          rescale alpha, probabilities p to local memory);
//       3. work-items become (token slot, lane): lane l owns channels [4l, 4l + 4), whose codes
//          sit in one 32-bit word of the value row; it dequantizes them
//          ((code * vstep + vmin) * vscale) and accumulates p * v for the GB heads over its slot's
//          tokens.
//     At the end the slot accumulators of every head are summed at once, in the staged block's local
//     array (no longer read by then). With n_splits == 1 the result
//     and lse go straight to out/lse; otherwise the unnormalized o, the running max m (log2 domain)
//     and the sum l go to the scratch buffer, for kvc_adq_merge (attn_decode_quant_merge.cl).
//   On NVIDIA's driver lib/opencl/attn_decode_quant.cpp runs attn_decode_quant_mma.cl's kernel instead
//   wherever that one applies; this one is the portable kernel.
// Header counts are clamped to the capacities, and slots, window rows, pages and lengths to their ranges,
// so corrupt metadata cannot make a work-group read outside its buffers (the CPU reference throws).
// Layout (lib/core/op.h): q, out f32 [batch, n_q_heads, QB_HD]; pool u8 (16-byte aligned view);
//   block_indptr, block_indices i32; win_k, win_v f16 [n_win_pages, n_kv_heads, win_page_tokens,
//   QB_HD]; win i32 [batch, 3]; win_pages i32 [n_win_rows, win_ppr] (ring slot s: page
//   win_pages[row, s / win_page_tokens], token s % win_page_tokens); lse f32 [batch, n_q_heads]; scratch `part` (f32) holds part_o
//   [batch, n_q_heads, n_splits, QB_HD] at element 0 and part_ml [batch, n_q_heads, n_splits, 2] at
//   element ml_off.
// Preamble defines: lib/opencl/qblock_defines.h, plus GB (query heads per work-group, divides the GQA
//   group) and NT (work-group size, >= QB_HD / 4).
//   KVC_NV_MMA (with KVC_ASM, the inline-assembly keyword): phase 1 of the blocks' segments on the tensor
//   cores, for NVIDIA's driver only, where lib/opencl/nv_mma_probe.cpp found that inline PTX mma.sync
//   works (GB <= 4, NT a multiple of 32). The CUDA kernel's algebra (cuda_backend/attn_decode_quant_mma.cu):
//   with F = 2^b + code, exact in f16 (the code in the top b mantissa bits), a key is
//   (kmin - 2^b kstep) + kstep F, so q . k = sum_c (q_c kstep_c) F_c + bias. Per segment each warp builds
//   the B fragments of q' = q kstep as hi/lo f16 (columns 2h, 2h + 1 of head h; ~fp32 precision) and
//   head t's bias; per 16-token block of a tile, A = the codes turned into F (row = token, natural
//   channel order), N = 8, K = 16 channels per mma, fp32 accumulation. Lane (g, t) then holds head t's
//   scores of rows g and g + 8: it writes them to s_l and proposes their max against m_l (the running
//   maxima in local memory: m[t] by a run-time index would put the state in private memory), and each
//   work-item reads its token's scores after the barrier. The window and the value phase stay SIMT.

#define KVC_LN2 0.69314718055994530942f
#define HD4 (QB_HD / 4)
#define LV HD4                     // lanes per value row in phase 3 (4 channels each)
#define TPV (NT / LV)              // token slots in phase 3
#define GBP (((GB + 3) / 4) * 4)   // heads padded to whole float4s in the score arrays
#define BLK_V4 (QB_HEAD_BYTES / 16)
// The end's slot sums, slot weights and running maxima of every head (floats, in whole uint4s), which
// reuse the staged block's array.
#define OUT_V4 ((GB * TPV * QB_HD + GB * TPV + GB + 3) / 4)
#define BLK_LOCAL_V4 (BLK_V4 > OUT_V4 ? BLK_V4 : OUT_V4)

// Softmax state of the work-item: per head running max (log2 domain), sum and value accumulator;
// the tile count picks the running max's slot set (common.cl, kvc_propose_max).
typedef struct {
    float m[GB], l[GB];
    float4 acc[GB];
    int tile;
} kvc_state;

// Phase 2 after the barrier that ended phase 1 (proposals made), given this work-item's scores s (-inf
// past the tile's tokens); ends with the probabilities in p_l and the state rescaled to the new
// running max. mx_l: the max slots; m_l: the running maxima for the next tile's tensor-core proposals.
inline void kvc_softmax_take(const float * s, local int * mx_l, local float * p_l, local float * m_l, kvc_state * st) {
    const int tid = get_local_id(0);
    float alpha[GB];
#pragma unroll
    for (int g = 0; g < GB; ++g) {
        // alpha from the moved max rather than kvc_take_max's value: the same number, but NVIDIA's
        // compiler made KIVI-2 at batch 1 6-10 % faster this way (docs/RESULTS.md, visit 67).
        const float m_old = st->m[g];
        kvc_take_max(mx_l, st->tile, GB, g, &st->m[g]);
        alpha[g] = st->m[g] == m_old ? 1.0f : exp2(m_old - st->m[g]);
    }
    kvc_reset_next_max(mx_l, st->tile, GB);
#pragma unroll
    for (int g = 0; g < GB; ++g) {
        st->l[g] *= alpha[g];
        st->acc[g] *= alpha[g];
        p_l[tid * GBP + g] = exp2(s[g] - st->m[g]);
    }
#ifdef KVC_NV_MMA
    if (tid == 0) {  // read by the next tile's phase 1, after this function's barrier
#pragma unroll
        for (int g = 0; g < GB; ++g) m_l[g] = st->m[g];
    }
#endif
    ++st->tile;
    barrier(CLK_LOCAL_MEM_FENCE);
}

// Phase 2 for a tile whose scores s each work-item computed itself: its proposals, the barrier, the rest.
inline void kvc_softmax_tile(const float * s, local int * mx_l, local float * p_l, local float * m_l, kvc_state * st) {
#pragma unroll
    for (int g = 0; g < GB; ++g) kvc_propose_max(mx_l, st->tile, GB, g, s[g], st->m[g]);
    barrier(CLK_LOCAL_MEM_FENCE);
    kvc_softmax_take(s, mx_l, p_l, m_l, st);
}

#ifdef KVC_NV_MMA
#define HD16 (QB_HD / 16)
#endif

inline void kvc_accumulate(kvc_state * st, local const float * p_l, int j, float4 v) {
#pragma unroll
    for (int g = 0; g < GB; ++g) {
        const float p = p_l[j * GBP + g];
        st->acc[g] += p * v;
        st->l[g] += p;
    }
}

// Four codes of `bits` bits starting at bit `shift` of w.
inline float4 kvc_codes4(uint w, int shift, int bits) {
    const uint mask = (1u << bits) - 1u;
    return convert_float4((uint4)(w >> shift, w >> (shift + bits), w >> (shift + 2 * bits), w >> (shift + 3 * bits)) &
                          (uint4)(mask));
}

// One segment of a staged block: n tokens, tiles of NT. Inlined into both of its calls: as a real
// function it takes the softmax state by pointer, which puts the state in private memory (clang's
// NVPTX output left the second call out of line once the tensor-core path made the body larger).
#ifdef KVC_NV_MMA
__attribute__((always_inline))
#endif
inline void kvc_quant_segment(local const uchar * seg, int bits, int kstep_off, int vmin_off, int vstep_off,
                              int kcodes_off, int vcodes_off, int n, float4 vsc, local const float4 * q4,
                              local int * mx_l, local float * p_l, local float * m_l, local float * s_l,
                              kvc_state * st) {
    const int tid = get_local_id(0), lane = tid % LV, slot = tid / LV;
    const int rb = QB_HD * bits / 8, cpw = 32 / bits;  // code row bytes, codes per 32-bit word
    local const half * kmin = (local const half *)seg;
    local const half * kstep = (local const half *)(seg + kstep_off);
    local const half * vmin = (local const half *)(seg + vmin_off);
    local const half * vstep = (local const half *)(seg + vstep_off);
#ifdef KVC_NV_MMA
    // The segment's B fragments (lane (g, t): column g = head g / 2, hi for even g, lo for odd;
    // channels 16 kk + 2t, + 1 in bq0, + 8, + 9 in bq1; zeros past GB) and head t's bias.
    const int ln = tid & 31, warp = tid >> 5, mg = ln >> 2, mt = ln & 3;
    uint bq0[HD16], bq1[HD16];
    {
        const int h = mg >> 1;
        local const float * qh = (local const float *)q4 + min(h, GB - 1) * QB_HD;
#pragma unroll
        for (int kk = 0; kk < HD16; ++kk) {
            bq0[kk] = h < GB ? kvc_qk_pair(qh, kstep, 16 * kk + 2 * mt, 1, mg & 1) : 0u;
            bq1[kk] = h < GB ? kvc_qk_pair(qh, kstep, 16 * kk + 2 * mt + 8, 1, mg & 1) : 0u;
        }
    }
    float bias = 0.0f;
    {
        local const float * qt = (local const float *)q4 + min(mt, GB - 1) * QB_HD;
        const float two_b = (float)(1 << bits);
        for (int c = mg; c < QB_HD; c += 8) bias += qt[c] * (vload_half(c, kmin) - two_b * vload_half(c, kstep));
        bias += kvc_shfl_xor(bias, 4);
        bias += kvc_shfl_xor(bias, 8);
        bias += kvc_shfl_xor(bias, 16);
    }
#endif
    for (int t0 = 0; t0 < n; t0 += NT) {
        const int tn = min(NT, n - t0);
        // 1. scores of token t0 + tid
        float s[GB];
#ifdef KVC_NV_MMA
        // Warps take 16-row blocks (see the banner); rows past the segment read its last row (their
        // scores are masked).
        for (int r0 = warp * 16; r0 < tn; r0 += NT / 2) {  // uniform per warp
            float d0 = 0.0f, d1 = 0.0f, d2 = 0.0f, d3 = 0.0f;
            local const uint * ra = (local const uint *)(seg + kcodes_off + min(t0 + r0 + mg, n - 1) * rb);
            local const uint * rc = (local const uint *)(seg + kcodes_off + min(t0 + r0 + mg + 8, n - 1) * rb);
#pragma unroll
            for (int kk = 0; kk < HD16; ++kk) {
                const int b0 = (16 * kk + 2 * mt) * bits, b8 = b0 + 8 * bits;  // bit positions in the row
                const uint a0 = kvc_f_pair(ra[b0 >> 5] >> (b0 & 31), bits);
                const uint a1 = kvc_f_pair(rc[b0 >> 5] >> (b0 & 31), bits);
                const uint a2 = kvc_f_pair(ra[b8 >> 5] >> (b8 & 31), bits);
                const uint a3 = kvc_f_pair(rc[b8 >> 5] >> (b8 & 31), bits);
                KVC_MMA_16816(d0, d1, d2, d3, a0, a1, a2, a3, bq0[kk], bq1[kk]);
            }
            const float sa = r0 + mg < tn ? d0 + d1 + bias : -INFINITY;
            const float sb = r0 + mg + 8 < tn ? d2 + d3 + bias : -INFINITY;
            if (mt < GB) {
                s_l[(r0 + mg) * GBP + mt] = sa;
                s_l[(r0 + mg + 8) * GBP + mt] = sb;
                kvc_propose_max(mx_l, st->tile, GB, mt, fmax(sa, sb), m_l[mt]);
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE);
#pragma unroll
        for (int g = 0; g < GB; ++g) s[g] = tid < tn ? s_l[tid * GBP + g] : -INFINITY;
        kvc_softmax_take(s, mx_l, p_l, m_l, st);
#else
#pragma unroll
        for (int g = 0; g < GB; ++g) s[g] = tid < tn ? 0.0f : -INFINITY;
        if (tid < tn) {
            local const uint * row = (local const uint *)(seg + kcodes_off + (t0 + tid) * rb);
            for (int w = 0; w < rb / 4; ++w) {
                const uint word = row[w];
                for (int i = 0; i < cpw / 4; ++i) {
                    const int c4 = w * (cpw / 4) + i;
                    const float4 kd = kvc_codes4(word, 4 * i * bits, bits) * vload_half4(c4, kstep) + vload_half4(c4, kmin);
#pragma unroll
                    for (int g = 0; g < GB; ++g) s[g] += dot(kd, q4[g * HD4 + c4]);
                }
            }
        }
        kvc_softmax_tile(s, mx_l, p_l, m_l, st);
#endif
        // 3. values: lane's 4 channels of the slot's tokens
        if (slot < TPV) {
            const int bit = lane * 4 * bits;
            for (int j = slot; j < tn; j += TPV) {
                const int t = t0 + j;
                const uint word = ((local const uint *)(seg + vcodes_off + t * rb))[bit / 32];
                const float4 cd = kvc_codes4(word, bit % 32, bits);
#if QB_VG % 4 == 0
                const int gi = t * QB_NG + (lane * 4) / QB_VG;
                const float4 w = cd * vload_half(gi, vstep) + vload_half(gi, vmin);
#else
                const int g0 = t * QB_NG, c0 = lane * 4;
                const float4 w = cd * (float4)(vload_half(g0 + c0 / QB_VG, vstep), vload_half(g0 + (c0 + 1) / QB_VG, vstep),
                                               vload_half(g0 + (c0 + 2) / QB_VG, vstep), vload_half(g0 + (c0 + 3) / QB_VG, vstep)) +
                                 (float4)(vload_half(g0 + c0 / QB_VG, vmin), vload_half(g0 + (c0 + 1) / QB_VG, vmin),
                                          vload_half(g0 + (c0 + 2) / QB_VG, vmin), vload_half(g0 + (c0 + 3) / QB_VG, vmin));
#endif
                kvc_accumulate(st, p_l, j, w * vsc);
            }
        }
    }
}

// Element offset of the K/V row of ring slot s of a window (this head) in its page (see the banner).
inline ulong kvc_window_row(global const int * pages, int s, int page_tokens, int n_pages, int n_kv_heads,
                            int kvh) {
    const int page = clamp(pages[s / page_tokens], 0, n_pages - 1);
    return (((ulong)page * n_kv_heads + kvh) * page_tokens + s % page_tokens) * QB_HD;
}

// The fp16 window: len tokens at ring slots (start + j) % win_tokens, paged by `pages` (the row's
// page table), of wk / wv.
inline void kvc_window(global const half * wk, global const half * wv, global const int * pages,
                       int page_tokens, int n_pages, int n_kv_heads, int kvh, int start, int len, int win_tokens,
                       local const float4 * q4, local int * mx_l, local float * p_l, local float * m_l,
                       kvc_state * st) {
    const int tid = get_local_id(0), lane = tid % LV, slot = tid / LV;
    // Publishes q4 and the max slots where no block came first (a split of the window alone would
    // read q before every work-item wrote it); costs one barrier per request and KV head.
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int t0 = 0; t0 < len; t0 += NT) {
        const int tn = min(NT, len - t0);
        float s[GB];
#pragma unroll
        for (int g = 0; g < GB; ++g) s[g] = tid < tn ? 0.0f : -INFINITY;
        if (tid < tn) {
            const int s_k = (start + t0 + tid) % win_tokens;
            global const half * krow = wk + kvc_window_row(pages, s_k, page_tokens, n_pages, n_kv_heads, kvh);
            for (int c4 = 0; c4 < HD4; ++c4) {
                const float4 kd = vload_half4(c4, krow);
#pragma unroll
                for (int g = 0; g < GB; ++g) s[g] += dot(kd, q4[g * HD4 + c4]);
            }
        }
        kvc_softmax_tile(s, mx_l, p_l, m_l, st);
        if (slot < TPV)
            for (int j = slot; j < tn; j += TPV) {
                const int s_v = (start + t0 + j) % win_tokens;
                const ulong vrow = kvc_window_row(pages, s_v, page_tokens, n_pages, n_kv_heads, kvh);
                kvc_accumulate(st, p_l, j, vload_half4(lane, wv + vrow));
            }
    }
}

kernel void kvc_adq_split(KVC_QDECODE_PARAMS) {
    local float4 q4[GB * HD4];
    local float p_l[NT * GBP];      // probabilities of the tile, [token][head]
    local int mx_l[2 * GB];         // the running max's proposals (kvc_propose_max)
    local float mrun_l[GB];         // the running maxima (KVC_NV_MMA: for the proposals of phase 1)
#ifdef KVC_NV_MMA
    local float s_l[NT * GBP];      // the tile's scores from the tensor cores, [token][head]
#else
    local float * s_l = 0;
#endif
    local uint4 blk[BLK_LOCAL_V4];  // the staged head of the current block; at the end the heads' sums

    const int tid = get_local_id(0);
    const int lane = tid % LV, slot = tid / LV;
    const kvc_qdecode_work wk = kvc_qdecode_work_of(indptr + indptr_off, n_q_heads, n_kv_heads, GB, n_splits, chunk);
    const int split = wk.split, b = wk.b, kvh = wk.kvh, p0 = wk.p0, b_begin = wk.b_begin, b_end = wk.b_end;
    const ulong head_row = wk.head_row;  // row of the work-group's first query head in q / out
    indices += indices_off;
    pool += pool_off;
    global const float * qg = q + q_off + head_row * QB_HD;
    for (int i = tid; i < GB * HD4; i += NT) q4[i] = vload4(i, qg) * qscale;
    kvc_clear_max(mx_l, GB);
    if (tid < GB) mrun_l[tid] = -INFINITY;
    // (q4, the empty max slots and mrun_l are published by a block's first barrier, or kvc_window's.)

    kvc_state st;
#pragma unroll
    for (int g = 0; g < GB; ++g) {
        st.m[g] = -INFINITY;
        st.l[g] = 0.0f;
        st.acc[g] = (float4)(0.0f);
    }
    st.tile = 0;

    for (int bi = b_begin; bi < b_end; ++bi) {
        const int sl = indices[p0 + bi];
        if (sl < 0 || sl >= n_slots) continue;  // uniform over the work-group
        global const uchar * sp = pool + (ulong)sl * QB_SLOT_BYTES;
        const int n_hi = clamp(((global const int *)sp)[0], 0, QB_HI_CAP);
        const int n_lo = clamp(((global const int *)sp)[1], 0, QB_LO_CAP);
        global const uint4 * src = (global const uint4 *)(sp + QB_HEADER + (ulong)kvh * QB_HEAD_BYTES);
        barrier(CLK_LOCAL_MEM_FENCE);  // the previous block is no longer read
        for (int e = tid; e < BLK_V4; e += NT) blk[e] = src[e];
        barrier(CLK_LOCAL_MEM_FENCE);
        local const uchar * hb = (local const uchar *)blk;
#if QB_CS
        const float4 vsc = vload_half4(lane, (local const half *)hb);
#else
        const float4 vsc = (float4)(1.0f);
#endif
#if QB_HI_BYTES > 0
        kvc_quant_segment(hb + QB_HI_OFF, QB_HI_BITS, QB_HI_KSTEP, QB_HI_VMIN, QB_HI_VSTEP, QB_HI_KCODES, QB_HI_VCODES,
                          n_hi, vsc, q4, mx_l, p_l, mrun_l, s_l, &st);
#endif
#if QB_LO_BYTES > 0
        kvc_quant_segment(hb + QB_LO_OFF, QB_LO_BITS, QB_LO_KSTEP, QB_LO_VMIN, QB_LO_VSTEP, QB_LO_KCODES, QB_LO_VCODES,
                          n_lo, vsc, q4, mx_l, p_l, mrun_l, s_l, &st);
#endif
    }
    if (split == n_splits - 1) {
        win += win_off + (ulong)b * 3;
        const int row = win[0], start = win[1], len = clamp(win[2], 0, win_tokens);
        if (len > 0 && row >= 0 && row < n_win_rows && start >= 0 && start < win_tokens) {
            const int ppr = (win_tokens + win_page_tokens - 1) / win_page_tokens;
            kvc_window(win_k + wk_off, win_v + wv_off, win_pages + wp_off + (ulong)row * ppr, win_page_tokens,
                       n_win_pages, n_kv_heads, kvh, start, len, win_tokens, q4, mx_l, p_l, mrun_l, &st);
        }
    }

    // Sum the slot accumulators of every head at once, in the staged block's local memory. (A loop
    // over heads with a barrier inside could not be unrolled, and its run-time index into st kept the
    // whole softmax state in off-chip private memory.)
    barrier(CLK_LOCAL_MEM_FENCE);  // the last block's codes are no longer read
    local float * o_l = (local float *)blk;         // [head][slot][QB_HD]
    local float * lsum_l = o_l + GB * TPV * QB_HD;  // [head][slot]
    local float * m_l = lsum_l + GB * TPV;          // [head]
    if (slot < TPV) {
#pragma unroll
        for (int g = 0; g < GB; ++g) {
            vstore4(st.acc[g], 0, o_l + (g * TPV + slot) * QB_HD + lane * 4);
            if (lane == 0) lsum_l[g * TPV + slot] = st.l[g];
        }
    }
    if (tid == 0) {
#pragma unroll
        for (int g = 0; g < GB; ++g) m_l[g] = st.m[g];
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int i = tid; i < GB * QB_HD; i += NT) {
        const int g = i / QB_HD, d = i % QB_HD;
        float l = 0.0f, o = 0.0f;
        for (int k = 0; k < TPV; ++k) {
            l += lsum_l[g * TPV + k];
            o += o_l[(g * TPV + k) * QB_HD + d];
        }
        if (n_splits == 1)
            out[out_off + (head_row + g) * QB_HD + d] = l > 0.0f ? o / l : 0.0f;
        else
            part[((head_row + g) * n_splits + split) * QB_HD + d] = o;
    }
    if (tid < GB) {
        const int g = tid;
        float l = 0.0f;
        for (int k = 0; k < TPV; ++k) l += lsum_l[g * TPV + k];
        if (n_splits == 1) {
            lse[lse_off + head_row + g] = l > 0.0f ? (m_l[g] + log2(l)) * KVC_LN2 : -INFINITY;
        } else {
            part[ml_off + ((head_row + g) * n_splits + split) * 2] = m_l[g];
            part[ml_off + ((head_row + g) * n_splits + split) * 2 + 1] = l;
        }
    }
}
