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
//   kvc_gemv_small_m(same arguments)
//     For M <= 16 with TRANS_B (decode-time weight products, memory bound on B). NDRange: 3-D,
//     local = (LANES, COLS, 1), global = (LANES, ceil(N / COLS) * COLS, batch). COLS columns of C
//     per work-group; the LANES work-items of a column stride along K with 4-element vector loads
//     (8 bytes of fp16 B per lane, contiguous across lanes), keep M_ROWS partial sums and reduce
//     them in local memory.
// Layout: A [M, K]; B [K, N], or [N, K] when TRANS_B; C [M, N]; batch item i starts at
// i * stride_x elements (stride 0 broadcasts the operand).
// Preamble defines: A_DT, B_DT, C_DT (KVC_F32 / KVC_F16), TRANS_B (0/1);
//   tiled: TM, TN, TK, WM, WN;  gemv: M_ROWS (= M <= LANES), LANES, COLS (powers of two), VEC_A, VEC_B
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
