// attn_prefill.cl: causal attention over a ragged batch of prompts (fp16 K/V, fp32 math).
//
// Kernels: kvc_attn_prefill(q, q_off, k, k_off, v, v_off, seq_indptr, si_off, out, out_off,
//                           n_q_heads, n_kv_heads, qscale)
//   One work-group per (query tile of BQ rows, query head, request). Request b owns rows
//   [seq_indptr[b], seq_indptr[b+1]); its token i attends to its tokens 0..i. Work-groups whose tile
//   starts past the request's end exit at once (the grid is sized by max_seq_len). For each key tile
//   of BK tokens (only up to the tile's last query: causal), K and V are staged in local memory as
//   fp32; work-item (row, r) of the BQ x TPR work-group computes the scores of its row for keys
//   r, r+TPR, ..., then every work-item of the row runs the same online-softmax update (running
//   max and sum in registers, exp2 with q pre-scaled by scale * log2(e)) and accumulates
//   p * V for its HEAD_DIM / TPR output features (strided by TPR so local reads are contiguous).
//   NDRange: local (BQ * TPR, 1, 1), global (BQ * TPR * ceil(max_seq_len / BQ), n_q_heads, batch).
// Layout: q, out f32 [n_tokens, n_q_heads, HEAD_DIM]; k, v f16 [n_tokens, n_kv_heads, HEAD_DIM];
//   seq_indptr i32 [batch + 1]; query head h reads KV head h / (n_q_heads / n_kv_heads).
//
// kvc_attn_prefill with PREFILL_MMA (NVIDIA's driver, where lib/opencl/nv_mma_probe.cpp found inline PTX
//   mma.sync working; HEAD_DIM a multiple of 16 up to 128; K/V rows 16-byte aligned): the same
//   arguments and grid shape on the tensor cores, 4 warps of 16 query rows per work-group (see the
//   kernel). NDRange: local (128, 1, 1), global (128 * ceil(max_seq_len / 64), n_q_heads, batch).
// Preamble defines: HEAD_DIM, BQ, BK, TPR (divides HEAD_DIM), or PREFILL_MMA, HEAD_DIM and KVC_ASM;
// WITH_LSE adds the lse output (the natural-log softmax denominator of each row and head).

// Request b's rows [s0, s0 + len) and query head qh's KV head: both kernels' first step.
typedef struct {
    int s0, len, kvh;
} kvc_prefill_request;

inline kvc_prefill_request kvc_prefill_rows(global const int * seq_indptr, ulong si_off, int b, int qh, int n_q_heads,
                                            int n_kv_heads) {
    kvc_prefill_request r;
    r.s0 = seq_indptr[si_off + b];
    r.len = seq_indptr[si_off + b + 1] - r.s0;
    r.kvh = qh / (n_q_heads / n_kv_heads);
    return r;
}

#if defined(PREFILL_MMA)

// The tensor-core kernel (as cuda_backend/attn_prefill.cu's, without ldmatrix and cp.async).
// - Work-group: 64 query rows of one head and request; warp w owns rows 16w..16w+15 and all HEAD_DIM
//   output features. Query tiles run heaviest first (the last tile of the grid first).
// - Q: the warp's A fragments of S = Q K^T in registers, q * qscale rounded to f16 (as on CUDA: the
//   softmax weights p are rounded to f16 for P V as well; max, sum and o stay f32).
// - Keys in tiles of 32, staged in local memory as the stored f16 rows (K and V alike), two stages:
//   the next tile's global loads are issued before this tile's mma and stored at the next
//   iteration's start, one barrier per tile. Rows are padded by 4 words, so the rows g of a fragment
//   load fall 4 banks apart.
// - S: 16 rows x 32 keys per warp, 4 n-tiles; B = K^T is one 32-bit load per register (row key g,
//   features 2t.. of the k16 step). Causal mask on the diagonal tiles only; a warp whose rows all
//   precede a tile skips its math (it still joins the barriers).
// - P V: P from the score accumulators (the A fragment of k16 step j is n-tiles 2j and 2j + 1), V as B
//   without a transposed copy: lane (g, t) reads the word of features (2g, 2g + 1) of a 16-feature
//   block from key rows 2t, 2t + 1 (and + 8, + 9) and byte-permutes them into the B fragments of two
//   n-tiles, one of the block's even features and one of its odd ones. So the lane's accumulators of
//   block m hold features 16m + 4t .. 16m + 4t + 3 of rows g and g + 8 (one float4 store each).
#define PM_BQ 64
#define PM_BK 32
#define PM_LD (HEAD_DIM / 2 + 4)                               // staged row, in f16 words
#define PM_KS (HEAD_DIM / 16)                                   // k16 steps over the head
#define PM_CH (HEAD_DIM / 8)                                    // 16-byte chunks per row
#define PM_LI ((PM_BK * PM_CH + 127) / 128)                     // chunks of K (and of V) per work-item
#define PM_NEG_INF (-INFINITY)

typedef struct {
    uint4 k[PM_LI], v[PM_LI];
} pm_tile;

inline pm_tile pm_load(global const half * k, global const half * v, int s0, int len, int kvh, int n_kv_heads,
                       int k0, int tid) {
    pm_tile r;
#pragma unroll
    for (int i = 0; i < PM_LI; ++i) {
        const int idx = min(tid + 128 * i, PM_BK * PM_CH - 1);  // a repeated chunk is stored twice, harmlessly
        const int kj = min(k0 + idx / PM_CH, len - 1);          // keys past len are masked (causal)
        const ulong at = ((ulong)(s0 + kj) * n_kv_heads + kvh) * HEAD_DIM + 8 * (idx % PM_CH);
        r.k[i] = *(global const uint4 *)(k + at);
        r.v[i] = *(global const uint4 *)(v + at);
    }
    return r;
}

inline void pm_store(const pm_tile x, local uint * kl, local uint * vl, int tid) {
#pragma unroll
    for (int i = 0; i < PM_LI; ++i) {
        const int idx = min(tid + 128 * i, PM_BK * PM_CH - 1);
        const int o = (idx / PM_CH) * PM_LD + 4 * (idx % PM_CH);
        *(local uint4 *)(kl + o) = x.k[i];
        *(local uint4 *)(vl + o) = x.v[i];
    }
}

inline uint pm_perm(uint a, uint b, uint sel) {
    uint r;
    KVC_ASM("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(sel));
    return r;
}

kernel __attribute__((reqd_work_group_size(128, 1, 1)))
void kvc_attn_prefill(global const float * q, ulong q_off, global const half * k, ulong k_off,
                      global const half * v, ulong v_off, global const int * seq_indptr, ulong si_off,
                      global float * out, ulong out_off, int n_q_heads, int n_kv_heads, float qscale
#ifdef WITH_LSE
                      , global float * lse, ulong lse_off
#endif
                      ) {
    // uint4 arrays: the stores and the 16-byte chunks need 16-byte alignment (NVIDIA's compiler aligned
    // uint arrays to 4 bytes only, and the first version's 16-byte stores faulted).
    local uint4 k_l[2][PM_BK * PM_LD / 4], v_l[2][PM_BK * PM_LD / 4];
    const int tid = get_local_id(0), lane = tid % 32, w = tid / 32, g = lane / 4, t = lane % 4;
    const int q_begin = (get_num_groups(0) - 1 - get_group_id(0)) * PM_BQ;
    const int qh = get_group_id(1);
    const kvc_prefill_request rq = kvc_prefill_rows(seq_indptr, si_off, get_group_id(2), qh, n_q_heads, n_kv_heads);
    const int s0 = rq.s0, len = rq.len, kvh = rq.kvh;
    if (q_begin >= len) return;  // uniform across the work-group, before any barrier
    q += q_off;
    k += k_off;
    v += v_off;
    out += out_off;

    // This lane's rows: r0 = q_begin + 16 w + g and r0 + 8 (read clamped to the last row).
    const int r0 = q_begin + 16 * w + g;
    uint qa[PM_KS][4];
    {
        global const float * q0 = q + ((ulong)(s0 + min(r0, len - 1)) * n_q_heads + qh) * HEAD_DIM;
        global const float * q1 = q + ((ulong)(s0 + min(r0 + 8, len - 1)) * n_q_heads + qh) * HEAD_DIM;
#pragma unroll
        for (int kk = 0; kk < PM_KS; ++kk) {
            const int c = 16 * kk + 2 * t;
            const float2 x0 = vload2(0, q0 + c), x1 = vload2(0, q1 + c);
            const float2 x2 = vload2(0, q0 + c + 8), x3 = vload2(0, q1 + c + 8);
            qa[kk][0] = kvc_pack_half2(x0.x * qscale, x0.y * qscale);
            qa[kk][1] = kvc_pack_half2(x1.x * qscale, x1.y * qscale);
            qa[kk][2] = kvc_pack_half2(x2.x * qscale, x2.y * qscale);
            qa[kk][3] = kvc_pack_half2(x3.x * qscale, x3.y * qscale);
        }
    }
    float o[PM_KS][2][4];  // [16-feature block][even / odd features][accumulator]
#pragma unroll
    for (int m = 0; m < PM_KS; ++m)
#pragma unroll
        for (int e = 0; e < 2; ++e)
#pragma unroll
            for (int r = 0; r < 4; ++r) o[m][e][r] = 0.0f;
    float mx0 = PM_NEG_INF, mx1 = PM_NEG_INF, l0 = 0.0f, l1 = 0.0f;  // rows r0 and r0 + 8 (l: this lane's part)

    const int k_stop = min(len, q_begin + PM_BQ);
    pm_tile next = pm_load(k, v, s0, len, kvh, n_kv_heads, 0, tid);
    for (int k0 = 0, st = 0; k0 < k_stop; k0 += PM_BK, st ^= 1) {
        // Stage st was last read two tiles ago, before the previous barrier.
        pm_store(next, (local uint *)k_l[st], (local uint *)v_l[st], tid);
        barrier(CLK_LOCAL_MEM_FENCE);
        if (k0 + PM_BK < k_stop) next = pm_load(k, v, s0, len, kvh, n_kv_heads, k0 + PM_BK, tid);
        if (k0 > q_begin + 16 * w + 15) continue;  // every key of the tile follows the warp's rows
        local const uint * kl = (local const uint *)k_l[st];
        local const uint * vl = (local const uint *)v_l[st];
        float s[4][4];
#pragma unroll
        for (int nt = 0; nt < 4; ++nt) {
#pragma unroll
            for (int r = 0; r < 4; ++r) s[nt][r] = 0.0f;
            local const uint * krow = kl + (8 * nt + g) * PM_LD + t;
#pragma unroll
            for (int kk = 0; kk < PM_KS; ++kk)
                KVC_MMA_16816(s[nt][0], s[nt][1], s[nt][2], s[nt][3], qa[kk][0], qa[kk][1], qa[kk][2], qa[kk][3],
                              krow[8 * kk], krow[8 * kk + 4]);
        }
        if (k0 + PM_BK - 1 > q_begin + 16 * w) {  // a diagonal tile: keys past a row are masked
#pragma unroll
            for (int nt = 0; nt < 4; ++nt)
#pragma unroll
                for (int r = 0; r < 4; ++r)
                    if (k0 + 8 * nt + 2 * t + (r & 1) > r0 + 8 * (r >> 1)) s[nt][r] = PM_NEG_INF;
        }
        float t0 = PM_NEG_INF, t1 = PM_NEG_INF;
#pragma unroll
        for (int nt = 0; nt < 4; ++nt) {
            t0 = fmax(t0, fmax(s[nt][0], s[nt][1]));
            t1 = fmax(t1, fmax(s[nt][2], s[nt][3]));
        }
        t0 = fmax(t0, kvc_shfl_xor(t0, 1));
        t0 = fmax(t0, kvc_shfl_xor(t0, 2));
        t1 = fmax(t1, kvc_shfl_xor(t1, 1));
        t1 = fmax(t1, kvc_shfl_xor(t1, 2));
        // Every row sees key 0 in the first tile, so the running max is finite from there on.
        const float n0 = fmax(mx0, t0), n1 = fmax(mx1, t1);
        const float a0 = exp2(mx0 - n0), a1 = exp2(mx1 - n1);
        mx0 = n0, mx1 = n1;
        l0 *= a0, l1 *= a1;
#pragma unroll
        for (int m = 0; m < PM_KS; ++m)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                o[m][e][0] *= a0, o[m][e][1] *= a0;
                o[m][e][2] *= a1, o[m][e][3] *= a1;
            }
        uint pa[2][4];  // A fragments of P for the tile's two k16 steps
#pragma unroll
        for (int nt = 0; nt < 4; ++nt) {
            const float p0 = exp2(s[nt][0] - n0), p1 = exp2(s[nt][1] - n0);
            const float p2 = exp2(s[nt][2] - n1), p3 = exp2(s[nt][3] - n1);
            l0 += p0 + p1, l1 += p2 + p3;
            pa[nt / 2][2 * (nt % 2)] = kvc_pack_half2(p0, p1);
            pa[nt / 2][2 * (nt % 2) + 1] = kvc_pack_half2(p2, p3);
        }
#pragma unroll
        for (int j = 0; j < 2; ++j) {
            local const uint * v0 = vl + (16 * j + 2 * t) * PM_LD + g;  // key rows 2t, 2t+1, 2t+8, 2t+9
#pragma unroll
            for (int m = 0; m < PM_KS; ++m) {
                const uint wa = v0[8 * m], wb = v0[PM_LD + 8 * m];
                const uint wc = v0[8 * PM_LD + 8 * m], wd = v0[9 * PM_LD + 8 * m];
                KVC_MMA_16816(o[m][0][0], o[m][0][1], o[m][0][2], o[m][0][3], pa[j][0], pa[j][1], pa[j][2], pa[j][3],
                              pm_perm(wa, wb, 0x5410), pm_perm(wc, wd, 0x5410));
                KVC_MMA_16816(o[m][1][0], o[m][1][1], o[m][1][2], o[m][1][3], pa[j][0], pa[j][1], pa[j][2], pa[j][3],
                              pm_perm(wa, wb, 0x7632), pm_perm(wc, wd, 0x7632));
            }
        }
    }
    l0 += kvc_shfl_xor(l0, 1);
    l0 += kvc_shfl_xor(l0, 2);
    l1 += kvc_shfl_xor(l1, 1);
    l1 += kvc_shfl_xor(l1, 2);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int qi = r0 + 8 * h;
        if (qi >= len) continue;
        const float l = h ? l1 : l0, inv = 1.0f / l;  // l > 0: every row sees itself
        global float * orow = out + ((ulong)(s0 + qi) * n_q_heads + qh) * HEAD_DIM + 4 * t;
#pragma unroll
        for (int m = 0; m < PM_KS; ++m)
            vstore4((float4)(o[m][0][2 * h] * inv, o[m][1][2 * h] * inv, o[m][0][2 * h + 1] * inv,
                             o[m][1][2 * h + 1] * inv), 0, orow + 16 * m);
#ifdef WITH_LSE
        if (t == 0) lse[lse_off + (ulong)(s0 + qi) * n_q_heads + qh] = (h ? mx1 : mx0) / M_LOG2E_F + log(l);
#endif
    }
}

#else  // the CUDA-core kernel

#define NT (BQ * TPR)
#define DPT (HEAD_DIM / TPR)  // output features per work-item
#define LDK (HEAD_DIM + 1)     // padded row: the TPR work-items of a row read different K rows

kernel __attribute__((reqd_work_group_size(NT, 1, 1)))
void kvc_attn_prefill(global const float * q, ulong q_off, global const half * k, ulong k_off,
                      global const half * v, ulong v_off, global const int * seq_indptr, ulong si_off,
                      global float * out, ulong out_off, int n_q_heads, int n_kv_heads, float qscale
#ifdef WITH_LSE
                      , global float * lse, ulong lse_off
#endif
                      ) {
    local float q_l[BQ * LDK];
    local float k_l[BK * LDK];
    local float v_l[BK * HEAD_DIM];
    local float s_l[BQ * BK];

    const int tid = get_local_id(0);
    const int q_begin = get_group_id(0) * BQ;
    const int qh = get_group_id(1);
    const kvc_prefill_request rq = kvc_prefill_rows(seq_indptr, si_off, get_group_id(2), qh, n_q_heads, n_kv_heads);
    const int s0 = rq.s0, len = rq.len, kvh = rq.kvh;
    if (q_begin >= len) return;  // uniform across the work-group, before any barrier
    q += q_off;
    k += k_off;
    v += v_off;
    out += out_off;

    for (int i = tid; i < BQ * HEAD_DIM; i += NT) {
        const int r = i / HEAD_DIM, d = i % HEAD_DIM;
        const int qi = q_begin + r;
        q_l[r * LDK + d] = qi < len ? q[((ulong)(s0 + qi) * n_q_heads + qh) * HEAD_DIM + d] * qscale : 0.0f;
    }

    const int row = tid / TPR, r = tid % TPR;
    const int qi = q_begin + row;  // this work-item's query (may be >= len in the last tile)
    float acc[DPT];
    for (int c = 0; c < DPT; ++c) acc[c] = 0.0f;
    float m = -INFINITY, l = 0.0f;

    const int k_stop = min(len, q_begin + BQ);
    for (int k0 = 0; k0 < k_stop; k0 += BK) {
        barrier(CLK_LOCAL_MEM_FENCE);  // previous tile fully consumed (and q_l written)
        for (int i = tid; i < BK * HEAD_DIM; i += NT) {
            const int j = i / HEAD_DIM, d = i % HEAD_DIM;
            const int kj = k0 + j;
            float kv = 0.0f, vv = 0.0f;
            if (kj < len) {
                const ulong src = ((ulong)(s0 + kj) * n_kv_heads + kvh) * HEAD_DIM + d;
                kv = vload_half(src, k);
                vv = vload_half(src, v);
            }
            k_l[j * LDK + d] = kv;
            v_l[j * HEAD_DIM + d] = vv;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int j = r; j < BK; j += TPR) {
            const int kj = k0 + j;
            float s = -INFINITY;
            if (kj <= qi && kj < len) {
                s = 0.0f;
                for (int d = 0; d < HEAD_DIM; ++d) s = fma(q_l[row * LDK + d], k_l[j * LDK + d], s);
            }
            s_l[row * BK + j] = s;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        float mt = -INFINITY;
        for (int j = 0; j < BK; ++j) mt = fmax(mt, s_l[row * BK + j]);
        const float mn = fmax(m, mt);
        if (mn == -INFINITY) continue;  // nothing visible yet for this row (only rows past len)
        const float alpha = exp2(m - mn);
        l *= alpha;
        for (int c = 0; c < DPT; ++c) acc[c] *= alpha;
        for (int j = 0; j < BK; ++j) {
            const float p = exp2(s_l[row * BK + j] - mn);
            l += p;
            for (int c = 0; c < DPT; ++c) acc[c] = fma(p, v_l[j * HEAD_DIM + r + c * TPR], acc[c]);
        }
        m = mn;
    }
    if (qi < len) {
        global float * o = out + ((ulong)(s0 + qi) * n_q_heads + qh) * HEAD_DIM;
        const float inv = l > 0.0f ? 1.0f / l : 0.0f;
        for (int c = 0; c < DPT; ++c) o[r + c * TPR] = acc[c] * inv;
#ifdef WITH_LSE
        // m is in log2 units (qscale holds log2 e); every row sees at least itself, so l > 0.
        if (r == 0) lse[lse_off + (ulong)(s0 + qi) * n_q_heads + qh] = m / M_LOG2E_F + log(l);
#endif
    }
}

#endif  // PREFILL_MMA
