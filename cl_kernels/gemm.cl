// gemm.cl: batched row-major matrix products with fp16 operands (f32 x f32 goes to CLBlast, except
// the small-m case), fp32 accumulation, C = alpha * A * op(B) + beta * C (C is not read when beta
// is 0, so garbage or NaN in C never leaks into the result).
//
// Kernels:
//   kvc_gemm_tiled(A, a_off, stride_a, B, b_off, stride_b, C, c_off, stride_c, M, N, K, alpha, beta)
//     NDRange: 3-D, local = (TN / WN, TM / WM, 1), global = (ceil(N / TN) * TN / WN,
//     ceil(M / TM) * TM / WM, batch). Each work-group computes a TM x TN tile of C through TK-deep
//     slices of A and B staged in local memory (as fp32); each work-item owns a WM x WN micro-tile
//     strided by the work-group shape, so stores and local reads are contiguous across work-items.
//   kvc_gemv_mma(same arguments)
//     NVIDIA's driver, 2 <= M <= 16, TRANS_B, f16 B, K % 256 == 0, 16-byte aligned rows: the tensor
//     cores (see the kernel). NDRange: local = (32, 4, 1), global = (32, ceil(N / (8 NT)) * 4, batch).
//   kvc_gemm_mma(same arguments)
//     NVIDIA's driver, M > 16, TRANS_B, f16 B, K % (32 GM_KS) == 0, 16-byte aligned rows: the tensor cores
//     (see the kernel). NDRange: local = (32, GM_WARPS_M * GM_WARPS_N, 1), global = (ceil(N / GM_BN)
//     * 32, ceil(M / GM_BM) * GM_WARPS_M * GM_WARPS_N, batch).
//   kvc_gemv_small_m(same arguments)
//     For M <= 16 with TRANS_B (decode-time weight products, memory bound on B). NDRange: 3-D,
//     local = (LANES, COLS, 1), global = (LANES, ceil(N / COLS) * COLS, batch). COLS columns of C
//     per work-group; the LANES work-items of a column stride along K with 4-element vector loads
//     (8 bytes of fp16 B per lane, contiguous across lanes), keep M_ROWS partial sums and reduce
//     them in local memory.
// Layout: A [M, K]; B [K, N], or [N, K] when TRANS_B; C [M, N]; batch item i starts at
// i * stride_x elements (stride 0 broadcasts the operand).
// Preamble defines: A_DT, B_DT, C_DT (KVC_F32 / KVC_F16), TRANS_B (0/1);
//   tiled: TM, TN, TK, WM, WN;  mma: GEMM_MMA, GM_WARPS_M, GM_WARPS_N, GM_MT, GM_NT, GM_KS, KVC_ASM;
//   gemv: M_ROWS (= M <= LANES), LANES, COLS (powers of two), VEC_A, VEC_B
//   (1 when that operand's rows are 4-element aligned: aligned vector loads).

#if defined(TM)

#define NT_X (TN / WN)
#define NT_Y (TM / WM)
#define NT (NT_X * NT_Y)

kernel __attribute__((reqd_work_group_size(NT_X, NT_Y, 1)))
void kvc_gemm_tiled(global const KVC_TYPE(A_DT) * A, ulong a_off, ulong stride_a,
                    global const KVC_TYPE(B_DT) * B, ulong b_off, ulong stride_b,
                    global KVC_TYPE(C_DT) * C, ulong c_off, ulong stride_c,
                    int M, int N, int K, float alpha, float beta) {
    // +1 column of padding: work-items store along k, which would otherwise hit one bank.
    local float As[TK][TM + 1];
    local float Bs[TK][TN + 1];
    const int tx = get_local_id(0), ty = get_local_id(1);
    const int tid = ty * NT_X + tx;
    const int n0 = get_group_id(0) * TN, m0 = get_group_id(1) * TM;
    const ulong item = get_global_id(2);
    A += a_off + item * stride_a;
    B += b_off + item * stride_b;
    C += c_off + item * stride_c;

    float acc[WM][WN];
    for (int i = 0; i < WM; ++i)
        for (int j = 0; j < WN; ++j) acc[i][j] = 0.0f;

    for (int k0 = 0; k0 < K; k0 += TK) {
        for (int e = tid; e < TM * TK; e += NT) {
            const int r = e / TK, c = e % TK;
            const int gm = m0 + r, gk = k0 + c;
            As[c][r] = (gm < M && gk < K) ? KVC_LOAD(A_DT, A, (ulong)gm * K + gk) : 0.0f;
        }
#if TRANS_B
        for (int e = tid; e < TN * TK; e += NT) {
            const int r = e / TK, c = e % TK;
            const int gn = n0 + r, gk = k0 + c;
            Bs[c][r] = (gn < N && gk < K) ? KVC_LOAD(B_DT, B, (ulong)gn * K + gk) : 0.0f;
        }
#else
        for (int e = tid; e < TN * TK; e += NT) {
            const int r = e / TN, c = e % TN;
            const int gk = k0 + r, gn = n0 + c;
            Bs[r][c] = (gn < N && gk < K) ? KVC_LOAD(B_DT, B, (ulong)gk * N + gn) : 0.0f;
        }
#endif
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int kk = 0; kk < TK; ++kk) {
            float a[WM], b[WN];
            for (int i = 0; i < WM; ++i) a[i] = As[kk][ty + i * NT_Y];
            for (int j = 0; j < WN; ++j) b[j] = Bs[kk][tx + j * NT_X];
            for (int i = 0; i < WM; ++i)
                for (int j = 0; j < WN; ++j) acc[i][j] = fma(a[i], b[j], acc[i][j]);
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }

    for (int i = 0; i < WM; ++i) {
        const int m = m0 + ty + i * NT_Y;
        if (m >= M) continue;
        for (int j = 0; j < WN; ++j) {
            const int n = n0 + tx + j * NT_X;
            if (n >= N) continue;
            const ulong o = (ulong)m * N + n;
            float v = alpha * acc[i][j];
            if (beta != 0.0f) v += beta * KVC_LOAD(C_DT, C, o);
            KVC_STORE(C_DT, C, o, v);
        }
    }
}

#endif  // TM

// The tensor-core kernels split an f32 A into hi + 2^-11 lo f16 parts; an f16 A needs no lo part.
#if A_DT == KVC_F16
#define KVC_SPLIT_A 0
#else
#define KVC_SPLIT_A 1
#endif

#if defined(GEMV_MMA)

// kvc_gemv_mma: C (M <= 16 rows) = alpha * A * B^T + beta * C on the tensor cores (NVIDIA's driver,
// inline PTX mma.sync m16n8k16, common.cl) for f16 weights B [N, K].
// - An f32 A is split as the CUDA backend's mixed gemm does (cuda_backend/gemm.cu): hi = f16(a)
//   (saturated: |A| must stay below 65504), lo = f16((a - hi) * 2^11), C = hi B + 2^-11 lo B, two
//   accumulators, fp32 accumulation: about fp32 precision against exact f16 weights. An f16 A (the
//   engine's matmul inputs with f16 weights) is its own hi: no split, half the mma (KVC_SPLIT_A 0).
// - The k order inside a 32-channel chunk is permuted so that every operand is a contiguous load:
//   lane (g, t) reads channels k + 8t .. k + 8t + 7 of weight row n + g as one 16-byte load (a warp
//   reads 64 contiguous bytes of each of 8 rows), and of A rows g and g + 8 as two float4 each. Its
//   first mma of the chunk takes channel pairs (0, 1) as the k16 step's slots 2t, 2t+1 and (2, 3) as
//   slots 2t+8, 2t+9; the second mma pairs (4, 5) and (6, 7). A and B use the same map, and the sum
//   over k does not care about its order.
// - Work-group: 4 warps over the same NT tiles of 8 columns, each over a quarter of K in steps of U
//   chunks (K % (128 U) == 0), their sums added in local memory. A's fragments serve the NT tiles.
kernel __attribute__((reqd_work_group_size(32, 4, 1)))
void kvc_gemv_mma(global const KVC_TYPE(A_DT) * A, ulong a_off, ulong stride_a,
                  global const KVC_TYPE(B_DT) * B, ulong b_off, ulong stride_b,
                  global KVC_TYPE(C_DT) * C, ulong c_off, ulong stride_c,
                  int M, int N, int K, float alpha, float beta) {
    local float red[4][NT][32][4];
    const int lane = get_local_id(0), w = get_local_id(1), g = lane / 4, t = lane % 4;
    const int n0 = get_group_id(1) * (8 * NT);
    const ulong item = get_global_id(2);
    A += a_off + item * stride_a;
    B += b_off + item * stride_b;
    C += c_off + item * stride_c;
    const int kq = K / 4, kbeg = w * kq;
    global const KVC_TYPE(A_DT) * arow0 = A + (ulong)min(g, M - 1) * K + 8 * t;
    global const KVC_TYPE(A_DT) * arow1 = A + (ulong)min(g + 8, M - 1) * K + 8 * t;
    const bool in0 = g < M, in1 = g + 8 < M;  // rows past M (read clamped to row M - 1) count as zero
    global const uint4 * brow[NT];
#pragma unroll
    for (int j = 0; j < NT; ++j)
        brow[j] = (global const uint4 *)(B + (ulong)min(n0 + 8 * j + g, N - 1) * K + 8 * t);

    float acc[NT][4], accl[NT][4];
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
        for (int r = 0; r < 4; ++r) acc[j][r] = accl[j][r] = 0.0f;
    // U chunks per iteration: their loads are issued before any is used, so a warp has U * NT 16-byte
    // weight loads per lane in flight (one chunk at a time read the weights at 1.1 TB/s, visit 98).
    for (int k = kbeg; k < kbeg + kq; k += 32 * U) {
#if KVC_SPLIT_A
        float4 av[U][4];  // per chunk: row g channels 0..3, 4..7; row g + 8 the same
#else
        uint4 av[U][2];  // per chunk: rows g and g + 8, channels 0..7 as f16 pairs
#endif
        uint4 bv[U][NT];
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const int ku = k + 32 * u;
#if KVC_SPLIT_A
            av[u][0] = KVC_LOADA4(A_DT, arow0 + ku, 0), av[u][1] = KVC_LOADA4(A_DT, arow0 + ku, 1);
            av[u][2] = KVC_LOADA4(A_DT, arow1 + ku, 0), av[u][3] = KVC_LOADA4(A_DT, arow1 + ku, 1);
#else
            av[u][0] = *(global const uint4 *)(arow0 + ku), av[u][1] = *(global const uint4 *)(arow1 + ku);
#endif
#pragma unroll
            for (int j = 0; j < NT; ++j) bv[u][j] = brow[j][ku / 8];
        }
#pragma unroll
        for (int u = 0; u < U; ++u) {
            uint hi[8];  // pairs: row g 0..3, row g + 8 4..7
#if KVC_SPLIT_A
            float x[16];  // row g: x[0..7], row g + 8: x[8..15]
#pragma unroll
            for (int q = 0; q < 4; ++q)
                x[4 * q] = av[u][q].x, x[4 * q + 1] = av[u][q].y, x[4 * q + 2] = av[u][q].z, x[4 * q + 3] = av[u][q].w;
            uint lo[8];
#pragma unroll
            for (int p = 0; p < 8; ++p) {
                const bool in = p < 4 ? in0 : in1;
                const float v0 = in ? x[2 * p] : 0.0f, v1 = in ? x[2 * p + 1] : 0.0f;
                const float h0 = kvc_round_half(clamp(v0, -65504.0f, 65504.0f));
                const float h1 = kvc_round_half(clamp(v1, -65504.0f, 65504.0f));
                hi[p] = kvc_pack_half2(h0, h1);
                lo[p] = kvc_pack_half2((v0 - h0) * 2048.0f, (v1 - h1) * 2048.0f);
            }
#else
            const uint4 r0 = in0 ? av[u][0] : (uint4)(0), r1 = in1 ? av[u][1] : (uint4)(0);
            hi[0] = r0.x, hi[1] = r0.y, hi[2] = r0.z, hi[3] = r0.w;
            hi[4] = r1.x, hi[5] = r1.y, hi[6] = r1.z, hi[7] = r1.w;
#endif
#pragma unroll
            for (int j = 0; j < NT; ++j) {
                const uint4 b = bv[u][j];
                KVC_MMA_16816(acc[j][0], acc[j][1], acc[j][2], acc[j][3], hi[0], hi[4], hi[1], hi[5], b.x, b.y);
                KVC_MMA_16816(acc[j][0], acc[j][1], acc[j][2], acc[j][3], hi[2], hi[6], hi[3], hi[7], b.z, b.w);
#if KVC_SPLIT_A
                KVC_MMA_16816(accl[j][0], accl[j][1], accl[j][2], accl[j][3], lo[0], lo[4], lo[1], lo[5], b.x, b.y);
                KVC_MMA_16816(accl[j][0], accl[j][1], accl[j][2], accl[j][3], lo[2], lo[6], lo[3], lo[7], b.z, b.w);
#endif
            }
        }
    }
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
        for (int r = 0; r < 4; ++r) red[w][j][lane][r] = acc[j][r] + accl[j][r] * (1.0f / 2048.0f);
    barrier(CLK_LOCAL_MEM_FENCE);
    if (w != 0) return;
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
        for (int r = 0; r < 4; ++r) {
            const int m = g + 8 * (r >> 1), n = n0 + 8 * j + 2 * t + (r & 1);
            if (m >= M || n >= N) continue;
            const float sum = (red[0][j][lane][r] + red[1][j][lane][r]) + (red[2][j][lane][r] + red[3][j][lane][r]);
            const ulong o = (ulong)m * N + n;
            float v = alpha * sum;
            if (beta != 0.0f) v += beta * KVC_LOAD(C_DT, C, o);
            KVC_STORE(C_DT, C, o, v);
        }
}

#endif  // GEMV_MMA

#if defined(GEMM_MMA)

// kvc_gemm_mma: C (M > 16 rows: the prefill's weight products) = alpha * A * B^T + beta * C on the
// tensor cores (NVIDIA's driver, inline PTX mma.sync m16n8k16, common.cl) for f16 weights B [N, K],
// K % (32 GM_KS) == 0, 16-byte aligned rows of A and B.
// - Precision as kvc_gemv_mma: an f32 A split into hi = f16(a) and lo = f16((a - hi) * 2^11), two
//   accumulators, fp32 accumulation; an f16 A staged as it is, one accumulator.
// - Work-group: GM_WARPS_M x GM_WARPS_N warps, a GM_BM x GM_BN tile of C; each warp GM_MT x GM_NT
//   mma tiles (16 x 8). K in stages of 32 GM_KS channels, staged in local memory as f16 words: A's hi
//   and lo (each element converted once per work-group, not once per warp), B as stored. Two stages:
//   the next stage's global loads are issued before the current stage's mma and stored at the next
//   iteration's start, one barrier per stage.
// - Fragments in kvc_gemv_mma's permuted k order: for the 32 channels 32j..32j+31 of a stage, lane
//   (g, t) reads 16-byte chunk 4j + t (channels 32j + 8t .. + 7) of a staged row with one local load,
//   which serves both k16 steps. The 8 lanes of a 16-byte load phase read rows g and g + 1 (t = 0..3):
//   at GM_KS = 1 a row is 64 bytes, so the two rows' chunks are 128 contiguous bytes; from GM_KS = 2
//   odd rows store chunk c at c ^ 4 (gm_chunk), which keeps the two rows in different bank halves.
// - Rows of A past M and of B past N are read clamped to the last row; their results are not stored.
#define GM_THREADS (32 * GM_WARPS_M * GM_WARPS_N)
#define GM_BM (16 * GM_MT * GM_WARPS_M)
#define GM_BN (8 * GM_NT * GM_WARPS_N)
#define GM_CPR (4 * GM_KS)                           // 16-byte chunks per staged row
#if KVC_SPLIT_A
#define GM_LA (GM_BM * 2 * GM_CPR / GM_THREADS)      // float4 of A per work-item and stage
#else
#define GM_LA (GM_BM * GM_CPR / GM_THREADS)          // 16-byte chunks of an f16 A per work-item and stage
#endif
#define GM_LB (GM_BN * GM_CPR / GM_THREADS)          // 16-byte chunks of B per work-item and stage

inline int gm_chunk(int row, int c) { return GM_KS == 1 ? c : c ^ ((row & 1) << 2); }

// One stage of this work-item's share: an f32 A's rows tid / (2 CPR) + i * (threads / (2 CPR)), float4
// column tid % (2 CPR); B's (and an f16 A's) rows tid / CPR + i * (threads / CPR), chunk tid % CPR (rows
// clamped to the last).
typedef struct {
#if KVC_SPLIT_A
    float4 a[GM_LA];
#else
    uint4 a[GM_LA];
#endif
    uint4 b[GM_LB];
} gm_slice;

inline gm_slice gm_load(global const KVC_TYPE(A_DT) * A, global const KVC_TYPE(B_DT) * B, int m0, int n0,
                        int M, int N, int K, int k0, int tid) {
    gm_slice r;
#pragma unroll
    for (int i = 0; i < GM_LA; ++i) {
#if KVC_SPLIT_A
        const int m = min(m0 + tid / (2 * GM_CPR) + i * (GM_THREADS / (2 * GM_CPR)), M - 1);
        r.a[i] = KVC_LOADA4(A_DT, A + (ulong)m * K + k0 + 4 * (tid % (2 * GM_CPR)), 0);
#else
        const int m = min(m0 + tid / GM_CPR + i * (GM_THREADS / GM_CPR), M - 1);
        r.a[i] = *(global const uint4 *)(A + (ulong)m * K + k0 + 8 * (tid % GM_CPR));
#endif
    }
#pragma unroll
    for (int i = 0; i < GM_LB; ++i) {
        const int n = min(n0 + tid / GM_CPR + i * (GM_THREADS / GM_CPR), N - 1);
        r.b[i] = *(global const uint4 *)(B + (ulong)n * K + k0 + 8 * (tid % GM_CPR));
    }
    return r;
}

// The stage's data into local memory: an f32 A as hi / lo f16 words, B and an f16 A as loaded.
inline void gm_store(const gm_slice x, local uint4 (*ah)[GM_CPR], local uint4 (*al)[GM_CPR],
                     local uint4 (*bs)[GM_CPR], int tid) {
#if !KVC_SPLIT_A
#pragma unroll
    for (int i = 0; i < GM_LA; ++i) {
        const int r = tid / GM_CPR + i * (GM_THREADS / GM_CPR);
        ah[r][gm_chunk(r, tid % GM_CPR)] = x.a[i];
    }
#else
#pragma unroll
    for (int i = 0; i < GM_LA; ++i) {
        const int r = tid / (2 * GM_CPR) + i * (GM_THREADS / (2 * GM_CPR)), c = tid % (2 * GM_CPR);
        const int w = 2 * gm_chunk(r, c / 2) + c % 2;  // 8-byte word of the row
        const float4 v = x.a[i];
        const float h0 = kvc_round_half(clamp(v.x, -65504.0f, 65504.0f));
        const float h1 = kvc_round_half(clamp(v.y, -65504.0f, 65504.0f));
        const float h2 = kvc_round_half(clamp(v.z, -65504.0f, 65504.0f));
        const float h3 = kvc_round_half(clamp(v.w, -65504.0f, 65504.0f));
        ((local uint2 *)ah[r])[w] = (uint2)(kvc_pack_half2(h0, h1), kvc_pack_half2(h2, h3));
        ((local uint2 *)al[r])[w] = (uint2)(kvc_pack_half2((v.x - h0) * 2048.0f, (v.y - h1) * 2048.0f),
                                            kvc_pack_half2((v.z - h2) * 2048.0f, (v.w - h3) * 2048.0f));
    }
#endif
#pragma unroll
    for (int i = 0; i < GM_LB; ++i) {
        const int r = tid / GM_CPR + i * (GM_THREADS / GM_CPR);
        bs[r][gm_chunk(r, tid % GM_CPR)] = x.b[i];
    }
}

kernel __attribute__((reqd_work_group_size(32, GM_WARPS_M * GM_WARPS_N, 1)))
void kvc_gemm_mma(global const KVC_TYPE(A_DT) * A, ulong a_off, ulong stride_a,
                  global const KVC_TYPE(B_DT) * B, ulong b_off, ulong stride_b,
                  global KVC_TYPE(C_DT) * C, ulong c_off, ulong stride_c,
                  int M, int N, int K, float alpha, float beta) {
#if KVC_SPLIT_A
    local uint4 ahs[2][GM_BM][GM_CPR], als[2][GM_BM][GM_CPR], bs[2][GM_BN][GM_CPR];
#else
    local uint4 ahs[2][GM_BM][GM_CPR], bs[2][GM_BN][GM_CPR];
    local uint4 (*als)[GM_BM][GM_CPR] = ahs;  // not used: an f16 A has no lo part
#endif
    const int lane = get_local_id(0), w = get_local_id(1), tid = 32 * w + lane, g = lane / 4, t = lane % 4;
    const int wm = w / GM_WARPS_N, wn = w % GM_WARPS_N;
    const int m0 = get_group_id(1) * GM_BM, n0 = get_group_id(0) * GM_BN;
    const ulong item = get_group_id(2);
    A += a_off + item * stride_a;
    B += b_off + item * stride_b;
    C += c_off + item * stride_c;

    float acc[GM_MT][GM_NT][4], accl[GM_MT][GM_NT][4];
#pragma unroll
    for (int mt = 0; mt < GM_MT; ++mt)
#pragma unroll
        for (int nt = 0; nt < GM_NT; ++nt)
#pragma unroll
            for (int r = 0; r < 4; ++r) acc[mt][nt][r] = accl[mt][nt][r] = 0.0f;

    // The warp's first fragment rows (even, so row ra + 16 mt and ra + 16 mt + 8 have g's parity).
    const int ra = wm * 16 * GM_MT + g, rb = wn * 8 * GM_NT + g;
    gm_slice next = gm_load(A, B, m0, n0, M, N, K, 0, tid);
    for (int k0 = 0, s = 0; k0 < K; k0 += 32 * GM_KS, s ^= 1) {
        // Stage s was last read two stages ago, before the previous barrier.
        gm_store(next, ahs[s], als[s], bs[s], tid);
        barrier(CLK_LOCAL_MEM_FENCE);
        if (k0 + 32 * GM_KS < K) next = gm_load(A, B, m0, n0, M, N, K, k0 + 32 * GM_KS, tid);  // in flight
#pragma unroll
        for (int j = 0; j < GM_KS; ++j) {
            const int cj = gm_chunk(g, 4 * j + t);  // every fragment row has g's parity
            uint4 b[GM_NT];
#pragma unroll
            for (int nt = 0; nt < GM_NT; ++nt) b[nt] = bs[s][rb + 8 * nt][cj];
#pragma unroll
            for (int mt = 0; mt < GM_MT; ++mt) {
                const uint4 h0 = ahs[s][ra + 16 * mt][cj], h1 = ahs[s][ra + 16 * mt + 8][cj];
#if KVC_SPLIT_A
                const uint4 l0 = als[s][ra + 16 * mt][cj], l1 = als[s][ra + 16 * mt + 8][cj];
#endif
#pragma unroll
                for (int nt = 0; nt < GM_NT; ++nt) {
                    KVC_MMA_16816(acc[mt][nt][0], acc[mt][nt][1], acc[mt][nt][2], acc[mt][nt][3], h0.x, h1.x,
                                  h0.y, h1.y, b[nt].x, b[nt].y);
                    KVC_MMA_16816(acc[mt][nt][0], acc[mt][nt][1], acc[mt][nt][2], acc[mt][nt][3], h0.z, h1.z,
                                  h0.w, h1.w, b[nt].z, b[nt].w);
#if KVC_SPLIT_A
                    KVC_MMA_16816(accl[mt][nt][0], accl[mt][nt][1], accl[mt][nt][2], accl[mt][nt][3], l0.x,
                                  l1.x, l0.y, l1.y, b[nt].x, b[nt].y);
                    KVC_MMA_16816(accl[mt][nt][0], accl[mt][nt][1], accl[mt][nt][2], accl[mt][nt][3], l0.z,
                                  l1.z, l0.w, l1.w, b[nt].z, b[nt].w);
#endif
                }
            }
        }
    }

#pragma unroll
    for (int mt = 0; mt < GM_MT; ++mt)
#pragma unroll
        for (int nt = 0; nt < GM_NT; ++nt)
#pragma unroll
            for (int r = 0; r < 4; ++r) {
                const int m = m0 + ra + 16 * mt + 8 * (r >> 1), n = n0 + rb - g + 8 * nt + 2 * t + (r & 1);
                if (m >= M || n >= N) continue;
                const ulong o = (ulong)m * N + n;
                float v = alpha * (acc[mt][nt][r] + accl[mt][nt][r] * (1.0f / 2048.0f));
                if (beta != 0.0f) v += beta * KVC_LOAD(C_DT, C, o);
                KVC_STORE(C_DT, C, o, v);
            }
}

#endif  // GEMM_MMA

#if defined(M_ROWS)

#if VEC_A
#define KVC_A4(p, i) KVC_LOADA4(A_DT, p, i)
#else
#define KVC_A4(p, i) KVC_LOAD4(A_DT, p, i)
#endif
#if VEC_B
#define KVC_B4(p, i) KVC_LOADA4(B_DT, p, i)
#else
#define KVC_B4(p, i) KVC_LOAD4(B_DT, p, i)
#endif

kernel __attribute__((reqd_work_group_size(LANES, COLS, 1)))
void kvc_gemv_small_m(global const KVC_TYPE(A_DT) * A, ulong a_off, ulong stride_a,
                      global const KVC_TYPE(B_DT) * B, ulong b_off, ulong stride_b,
                      global KVC_TYPE(C_DT) * C, ulong c_off, ulong stride_c,
                      int M, int N, int K, float alpha, float beta) {
    local float red[COLS][M_ROWS][LANES];
    const int lane = get_local_id(0), col = get_local_id(1);
    const int n = get_global_id(1);
    const ulong item = get_global_id(2);
    A += a_off + item * stride_a;
    B += b_off + item * stride_b;
    C += c_off + item * stride_c;

    float acc[M_ROWS];
    for (int m = 0; m < M_ROWS; ++m) acc[m] = 0.0f;
    if (n < N) {
        global const KVC_TYPE(B_DT) * brow = B + (ulong)n * K;
        const int k4 = K / 4;
        // Two B vectors per iteration keep two independent loads in flight per work-item.
        int i = lane;
        for (; i + LANES < k4; i += 2 * LANES) {
            const float4 b0 = KVC_B4(brow, i);
            const float4 b1 = KVC_B4(brow, i + LANES);
            for (int m = 0; m < M_ROWS; ++m) {
                global const KVC_TYPE(A_DT) * arow = A + (ulong)m * K;
                acc[m] += dot(KVC_A4(arow, i), b0) + dot(KVC_A4(arow, i + LANES), b1);
            }
        }
        for (; i < k4; i += LANES) {
            const float4 b0 = KVC_B4(brow, i);
            for (int m = 0; m < M_ROWS; ++m) acc[m] += dot(KVC_A4(A + (ulong)m * K, i), b0);
        }
        for (int k = 4 * k4 + lane; k < K; k += LANES) {
            const float b0 = KVC_LOAD(B_DT, brow, k);
            for (int m = 0; m < M_ROWS; ++m) acc[m] += KVC_LOAD(A_DT, A + (ulong)m * K, k) * b0;
        }
    }
    for (int m = 0; m < M_ROWS; ++m) red[col][m][lane] = acc[m];
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int stride = LANES / 2; stride > 0; stride >>= 1) {
        if (lane < stride)
            for (int m = 0; m < M_ROWS; ++m) red[col][m][lane] += red[col][m][lane + stride];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (n < N && lane < M_ROWS) {
        const ulong o = (ulong)lane * N + n;
        float v = alpha * red[col][lane][0];
        if (beta != 0.0f) v += beta * KVC_LOAD(C_DT, C, o);
        KVC_STORE(C_DT, C, o, v);
    }
}

#endif  // M_ROWS
