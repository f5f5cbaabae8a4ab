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
//     NVIDIA's driver, M <= 16, TRANS_B, f16 B, K % 16 == 0: the tensor cores (see the kernel).
//     NDRange: local = (32, WARPS, 1), global = (32, ceil(N / (8 * NT * WARPS)) * WARPS, batch).
//   kvc_gemv_staged(same arguments)
//     For 4 <= M <= 16 with TRANS_B (decode at batch 4..16). NDRange: 3-D, local = (LANES, COLS, 1),
//     global = (LANES, ceil(N / (COLS * NC)) * COLS, batch). Each work-item owns NC columns; per
//     chunk of 4 * LANES channels the work-group stages the M rows of A in local memory once, so a
//     value of A read from memory serves COLS * NC columns (kvc_gemv_small_m reads all of A for
//     every column: at M = 16, f32 A and f16 B, 32 bytes of A per byte of B, from the caches).
//   kvc_gemv_small_m(same arguments)
//     For M <= 16 with TRANS_B (decode-time weight products, memory bound on B). NDRange: 3-D,
//     local = (LANES, COLS, 1), global = (LANES, ceil(N / COLS) * COLS, batch). COLS columns of C
//     per work-group; the LANES work-items of a column stride along K with 4-element vector loads
//     (8 bytes of fp16 B per lane, contiguous across lanes), keep M_ROWS partial sums and reduce
//     them in local memory.
// Layout: A [M, K]; B [K, N], or [N, K] when TRANS_B; C [M, N]; batch item i starts at
// i * stride_x elements (stride 0 broadcasts the operand).
// Preamble defines: A_DT, B_DT, C_DT (KVC_F32 / KVC_F16), TRANS_B (0/1);
//   tiled: TM, TN, TK, WM, WN;  gemv: M_ROWS (= M <= LANES), LANES, COLS (powers of two), VEC_A, VEC_B,
//   and NC for kvc_gemv_staged
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

#if defined(GEMV_MMA)

// kvc_gemv_mma: C (M <= 16 rows) = alpha * A * B^T + beta * C on the tensor cores (NVIDIA's driver:
// inline PTX mma.sync m16n8k16, common.cl), for f16 B with K a multiple of 16 and even offsets.
// A's 16 rows (zero past M) are the mma's A operand, split as the CUDA backend's mixed gemm does
// (cuda_backend/gemm.cu): hi = f16(a) (saturated at the f16 range: |A| must stay below 65504),
// lo = f16((a - hi) * 2^11), C = hi B + 2^-11 lo B in two accumulators: about fp32 precision
// against exact f16 weights, with fp32 accumulation. The B fragments are pairs of consecutive k of one weight row: 32-bit loads
// straight from the row-major [N, K] weights. Work-group: WARPS warps; per chunk of 4 k16 steps
// each work-item converts one (step, lane) A fragment into local memory, then each warp runs NT
// n-tiles of 8 columns over the chunk.
kernel __attribute__((reqd_work_group_size(32, WARPS, 1)))
void kvc_gemv_mma(global const KVC_TYPE(A_DT) * A, ulong a_off, ulong stride_a,
                  global const KVC_TYPE(B_DT) * B, ulong b_off, ulong stride_b,
                  global KVC_TYPE(C_DT) * C, ulong c_off, ulong stride_c,
                  int M, int N, int K, float alpha, float beta) {
    local uint4 frag[4][32][2];  // [k16 step of the chunk][lane][hi, lo]: a0..a3 each
    const int lane = get_local_id(0), w = get_local_id(1), g = lane / 4, t = lane % 4;
    const int n_w = (get_group_id(1) * WARPS + w) * (8 * NT);  // this warp's first column
    const ulong item = get_global_id(2);
    A += a_off + item * stride_a;
    B += b_off + item * stride_b;
    C += c_off + item * stride_c;
    global const uint * Bw = (global const uint *)B;  // element pairs (k, k + 1)

    float acc[NT][4], accl[NT][4];  // hi * B, lo * B
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
        for (int r = 0; r < 4; ++r) acc[j][r] = accl[j][r] = 0.0f;
    for (int k0 = 0; k0 < K; k0 += 64) {
        if (w < 4) {  // work-item (lane, w) builds step w's fragment of lane
            const int kb = k0 + 16 * w + 2 * t;
            float x[8];  // a0 (row g, kb, kb+1), a1 (row g+8), a2 (row g, kb+8, +9), a3 (row g+8)
#pragma unroll
            for (int r = 0; r < 4; ++r) {
                const int row = g + 8 * (r & 1), k = kb + 8 * (r >> 1);
                const bool in = row < M && k < K;
                x[2 * r] = in ? KVC_LOAD(A_DT, A, (ulong)row * K + k) : 0.0f;
                x[2 * r + 1] = in ? KVC_LOAD(A_DT, A, (ulong)row * K + k + 1) : 0.0f;
            }
            uint hi[4], lo[4];
#pragma unroll
            for (int r = 0; r < 4; ++r) {
                const float h0 = kvc_round_half(clamp(x[2 * r], -65504.0f, 65504.0f));
                const float h1 = kvc_round_half(clamp(x[2 * r + 1], -65504.0f, 65504.0f));
                hi[r] = kvc_pack_half2(h0, h1);
                lo[r] = kvc_pack_half2((x[2 * r] - h0) * 2048.0f, (x[2 * r + 1] - h1) * 2048.0f);
            }
            frag[w][lane][0] = (uint4)(hi[0], hi[1], hi[2], hi[3]);
            frag[w][lane][1] = (uint4)(lo[0], lo[1], lo[2], lo[3]);
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        const int steps = min(4, (K - k0) / 16);
#pragma unroll
        for (int s = 0; s < 4; ++s) {
            if (s < steps) {
                const uint4 ah = frag[s][lane][0], al = frag[s][lane][1];
                const int k = k0 + 16 * s + 2 * t;
#pragma unroll
                for (int j = 0; j < NT; ++j) {
                    const int n = n_w + 8 * j + g;
                    const ulong row = (ulong)min(n, N - 1) * K;  // columns past N: computed, not stored
                    const uint b0 = Bw[(row + k) / 2], b1 = Bw[(row + k + 8) / 2];
                    KVC_MMA_16816(acc[j][0], acc[j][1], acc[j][2], acc[j][3], ah.x, ah.y, ah.z, ah.w, b0, b1);
                    KVC_MMA_16816(accl[j][0], accl[j][1], accl[j][2], accl[j][3], al.x, al.y, al.z, al.w, b0, b1);
                }
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
        for (int r = 0; r < 4; ++r) {
            const int m = g + 8 * (r >> 1), n = n_w + 8 * j + 2 * t + (r & 1);
            if (m >= M || n >= N) continue;
            const ulong o = (ulong)m * N + n;
            float v = alpha * (acc[j][r] + accl[j][r] * (1.0f / 2048.0f));
            if (beta != 0.0f) v += beta * KVC_LOAD(C_DT, C, o);
            KVC_STORE(C_DT, C, o, v);
        }
}

#endif  // GEMV_MMA

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

#if defined(NC)

// Local floats: the staged A chunk [M_ROWS][LANES] float4, later reused for the reduction
// [COLS][NC * M_ROWS][LANES + 1].
#define KVC_STAGE_FLOATS (M_ROWS * LANES * 4)
#define KVC_RED_FLOATS (COLS * NC * M_ROWS * (LANES + 1))
#define KVC_LOCAL_FLOATS (KVC_STAGE_FLOATS > KVC_RED_FLOATS ? KVC_STAGE_FLOATS : KVC_RED_FLOATS)

kernel __attribute__((reqd_work_group_size(LANES, COLS, 1)))
void kvc_gemv_staged(global const KVC_TYPE(A_DT) * A, ulong a_off, ulong stride_a,
                     global const KVC_TYPE(B_DT) * B, ulong b_off, ulong stride_b,
                     global KVC_TYPE(C_DT) * C, ulong c_off, ulong stride_c,
                     int M, int N, int K, float alpha, float beta) {
    local float buf[KVC_LOCAL_FLOATS];
    const int lane = get_local_id(0), col = get_local_id(1), tid = col * LANES + lane;
    const int n0 = get_group_id(1) * (COLS * NC) + col * NC;  // this work-item's first column
    const ulong item = get_global_id(2);
    A += a_off + item * stride_a;
    B += b_off + item * stride_b;
    C += c_off + item * stride_c;

    // The loops over j and m are unrolled so that acc stays in registers.
    float acc[NC][M_ROWS];
#pragma unroll
    for (int j = 0; j < NC; ++j)
#pragma unroll
        for (int m = 0; m < M_ROWS; ++m) acc[j][m] = 0.0f;
    const int k4 = K / 4;
    for (int c0 = 0; c0 < k4; c0 += LANES) {
        // The chunk's A rows into local memory, once for the work-group's COLS * NC columns.
        for (int e = tid; e < M_ROWS * LANES; e += LANES * COLS) {
            const int m = e / LANES, i = c0 + e % LANES;
            vstore4(i < k4 ? KVC_A4(A + (ulong)m * K, i) : (float4)(0.0f), e, buf);
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        const int i = c0 + lane;
        if (i < k4) {
            float4 b[NC];
#pragma unroll
            for (int j = 0; j < NC; ++j)
                b[j] = n0 + j < N ? KVC_B4(B + (ulong)(n0 + j) * K, i) : (float4)(0.0f);
#pragma unroll
            for (int m = 0; m < M_ROWS; ++m) {
                const float4 a = vload4(m * LANES + lane, buf);
#pragma unroll
                for (int j = 0; j < NC; ++j) acc[j][m] += dot(a, b[j]);
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    for (int k = 4 * k4 + lane; k < K; k += LANES)  // K % 4 trailing elements
#pragma unroll
        for (int j = 0; j < NC; ++j) {
            const float b0 = n0 + j < N ? KVC_LOAD(B_DT, B + (ulong)(n0 + j) * K, k) : 0.0f;
#pragma unroll
            for (int m = 0; m < M_ROWS; ++m) acc[j][m] += KVC_LOAD(A_DT, A + (ulong)m * K, k) * b0;
        }
    // Sum over the lanes: every (column, row) sum is one row of red, summed by one work-item.
    local float * red = buf;
#pragma unroll
    for (int j = 0; j < NC; ++j)
#pragma unroll
        for (int m = 0; m < M_ROWS; ++m) red[((col * NC + j) * M_ROWS + m) * (LANES + 1) + lane] = acc[j][m];
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int r = tid; r < COLS * NC * M_ROWS; r += LANES * COLS) {
        const int cj = r / M_ROWS, m = r % M_ROWS;
        const int n = get_group_id(1) * (COLS * NC) + cj;
        if (n >= N || m >= M) continue;
        float s = 0.0f;
        for (int l = 0; l < LANES; ++l) s += red[r * (LANES + 1) + l];
        const ulong o = (ulong)m * N + n;
        float v = alpha * s;
        if (beta != 0.0f) v += beta * KVC_LOAD(C_DT, C, o);
        KVC_STORE(C_DT, C, o, v);
    }
}

#else  // NC

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

#endif  // NC

#endif  // M_ROWS
