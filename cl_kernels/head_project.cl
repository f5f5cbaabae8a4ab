// head_project.cl: per-head product of a row slice with that head's basis (lib/core/op.h),
//   y[t, out_offset(h) + j] = sum_i x[t, in_offset(h) + i] * basis_h[i, j],  j < out_width(h),
// for the low-rank Q/K projections at every step (prefill: thousands of tokens x 32 heads; decode:
// one token per request, twice per layer) and to fold bases into weights at load. fp32 throughout.
// Columns no head names are never written. Widths come from the table and are clamped to
// [0, MAX_W]; ranges are trusted (the host checks them). The design is cuda_backend/head_project.cu's.
//
// Kernels (same arguments: x, x_off, bases, b_off, table, t_off, y, y_off, in_total, out_total, n_tokens):
//   kvc_head_project_tiled: a tiled SGEMM per head. Work-group (128-token tile, head) of 128
//     work-items, each computing 8 tokens x 4 columns in registers; the work-group loops over the
//     head's output columns in tiles of 32 (so no work-group of a narrow head exists only to exit).
//     Per k-step of 16 input dims it stages x [128 x 16] (transposed: a work-item's 8 tokens are two
//     float4 loads) and basis [16 x 32] in local memory, double-buffered with the next k-step's
//     global loads held in registers: 32 FMAs per 3 local loads, one barrier per k-step.
//     NDRange: local (128, 1, 1), global (128 * ceil(n_tokens / 128), n_heads, 1).
//   kvc_head_project_small (few tokens: decode steps): the tiled kernel would walk every column tile
//     and k-step of a mostly empty token tile, and one work-item per output column (the first
//     version) ran a chain of in_width dependent global loads: 36 us per decode call on an H200.
//     Here a work-group takes one head, a chunk of 64 columns and up to 8 tokens; HS_SLICES slices
//     of 64 work-items split the input dims and add their partial sums in local memory, so a
//     work-item issues in_width / HS_SLICES independent coalesced basis loads.
//     NDRange: local (64 * HS_SLICES, 1, 1), global (64 * HS_SLICES * ceil(n_tokens / 8), n_heads,
//     ceil(MAX_W / 64)).
// Layout: x f32 [n_tokens, in_total]; bases f32 flat; table i32 [n_heads, 5] = (in_offset,
//   in_width, basis_offset, out_offset, out_width); y f32 [n_tokens, out_total].
// Preamble defines: MAX_W (the widest head), HS_SLICES (kvc_head_project_small's slices).

typedef struct {
    int in_o, in_w, out_o, out_w;
    ulong basis_o;
} kvc_proj_head;

inline kvc_proj_head kvc_proj_head_at(global const int * table, int h) {
    global const int * row = table + 5 * h;
    kvc_proj_head r;
    r.in_o = row[0];
    r.in_w = clamp(row[1], 0, MAX_W);
    r.basis_o = (ulong)row[2];
    r.out_o = row[3];
    r.out_w = clamp(row[4], 0, MAX_W);
    return r;
}

#define HP_BM 128                        // tokens per tile
#define HP_BN 32                         // columns per tile
#define HP_BK 16                         // input dims per k-step
#define HP_TM 8                          // tokens per work-item
#define HP_TN 4                          // columns per work-item
#define HP_PADM (HP_BM + 4)              // staged x row (a k index): float4-aligned, 2-way store conflicts at most
#define HP_LA (HP_BM * HP_BK / 128)      // x values per work-item per k-step
#define HP_LB (HP_BK * HP_BN / 128)      // basis values per work-item per k-step

kernel __attribute__((reqd_work_group_size(128, 1, 1)))
void kvc_head_project_tiled(global const float * x, ulong x_off, global const float * bases, ulong b_off,
                            global const int * table, ulong t_off, global float * y, ulong y_off, int in_total,
                            int out_total, int n_tokens) {
    // float4 arrays: the fragment reads are 16 bytes (a float array may be aligned to 4 bytes only).
    local float4 sa4[2 * HP_BK * HP_PADM / 4];  // x tile, transposed: [buffer][k][token]
    local float4 sb4[2 * HP_BK * HP_BN / 4];    // basis tile: [buffer][k][column]
    local float * sa = (local float *)sa4;
    local float * sb = (local float *)sb4;
    const kvc_proj_head hd = kvc_proj_head_at(table + t_off, get_group_id(1));
    const long m0 = (long)get_group_id(0) * HP_BM;
    const int tid = get_local_id(0);
    const int tx = tid % (HP_BN / HP_TN), ty = tid / (HP_BN / HP_TN);  // column group, token group
    const int n_k = (hd.in_w + HP_BK - 1) / HP_BK;
    global const float * basis = bases + b_off + hd.basis_o;
    // This work-item loads x rows tid / HP_BK + i * (128 / HP_BK) (column tid % HP_BK) and basis rows
    // tid / HP_BN + i * (128 / HP_BN) (column tid % HP_BN).
    global const float * xa = x + x_off + (m0 + tid / HP_BK) * (long)in_total + hd.in_o + tid % HP_BK;
    const long rows_left = n_tokens - m0 - tid / HP_BK;
    const long x_step = (long)(128 / HP_BK) * in_total;
    float ra[HP_LA], rb[HP_LB];

    for (int n0 = 0; n0 < hd.out_w; n0 += HP_BN) {  // uniform across the work-group
        float acc[HP_TM][HP_TN];
        for (int i = 0; i < HP_TM; ++i)
            for (int j = 0; j < HP_TN; ++j) acc[i][j] = 0.0f;
        for (int kt = 0; kt <= n_k; ++kt) {
            // Step kt: store the registers loaded in step kt - 1 (k-step kt - 1's tiles), load k-step kt,
            // compute k-step kt - 1. The buffer written here was last read in step kt - 2, before the
            // previous barrier.
            const int cur = (kt + 1) & 1;
            if (kt > 0) {
                for (int i = 0; i < HP_LA; ++i)
                    sa[(cur * HP_BK + tid % HP_BK) * HP_PADM + tid / HP_BK + i * (128 / HP_BK)] = ra[i];
                for (int i = 0; i < HP_LB; ++i)
                    sb[(cur * HP_BK + tid / HP_BN + i * (128 / HP_BN)) * HP_BN + tid % HP_BN] = rb[i];
            }
            if (kt < n_k) {  // in flight while k-step kt - 1 computes
                const int k0 = kt * HP_BK;
                const bool k_ok = k0 + tid % HP_BK < hd.in_w;
                for (int i = 0; i < HP_LA; ++i)
                    ra[i] = k_ok && i * (128 / HP_BK) < rows_left ? xa[i * x_step + k0] : 0.0f;
                for (int i = 0; i < HP_LB; ++i) {
                    const int kk = k0 + tid / HP_BN + i * (128 / HP_BN), n = n0 + tid % HP_BN;
                    rb[i] = kk < hd.in_w && n < hd.out_w ? basis[(ulong)kk * hd.out_w + n] : 0.0f;
                }
            }
            barrier(CLK_LOCAL_MEM_FENCE);
            if (kt == 0) continue;
            for (int k = 0; k < HP_BK; ++k) {
                const float4 a0 = sa4[((cur * HP_BK + k) * HP_PADM + ty * HP_TM) / 4];
                const float4 a1 = sa4[((cur * HP_BK + k) * HP_PADM + ty * HP_TM) / 4 + 1];
                const float4 bv = sb4[((cur * HP_BK + k) * HP_BN + tx * HP_TN) / 4];
                const float av[HP_TM] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
                const float bw[HP_TN] = {bv.x, bv.y, bv.z, bv.w};
                for (int i = 0; i < HP_TM; ++i)
                    for (int j = 0; j < HP_TN; ++j) acc[i][j] = fma(av[i], bw[j], acc[i][j]);
            }
        }
        for (int i = 0; i < HP_TM; ++i) {
            const long m = m0 + ty * HP_TM + i;
            if (m >= n_tokens) break;
            global float * row = y + y_off + m * out_total + hd.out_o;
            for (int j = 0; j < HP_TN; ++j) {
                const int n = n0 + tx * HP_TN + j;
                if (n < hd.out_w) row[n] = acc[i][j];
            }
        }
        // No barrier here: the next column tile's first stores follow its k-step 0 barrier, which every
        // work-item reaches only after this tile's last compute.
    }
}

#define HS_TOK 8    // tokens per work-group
#define HS_COLS 64  // columns per work-group

kernel __attribute__((reqd_work_group_size(HS_COLS * HS_SLICES, 1, 1)))
void kvc_head_project_small(global const float * x, ulong x_off, global const float * bases, ulong b_off,
                            global const int * table, ulong t_off, global float * y, ulong y_off, int in_total,
                            int out_total, int n_tokens) {
    local float xs[HS_TOK * MAX_W];
    local float part[(HS_SLICES > 1 ? HS_SLICES - 1 : 1) * HS_TOK * HS_COLS];
    const kvc_proj_head hd = kvc_proj_head_at(table + t_off, get_group_id(1));
    const int n0 = get_group_id(2) * HS_COLS;
    if (n0 >= hd.out_w) return;  // uniform across the work-group, before any barrier
    const long t0 = (long)get_group_id(0) * HS_TOK;
    const int nt = (int)min((long)HS_TOK, n_tokens - t0);
    const int tid = get_local_id(0);
    for (int e = tid; e < HS_TOK * hd.in_w; e += HS_COLS * HS_SLICES) {
        const int t = e / hd.in_w, i = e % hd.in_w;
        xs[t * MAX_W + i] = t < nt ? x[x_off + (t0 + t) * in_total + hd.in_o + i] : 0.0f;
    }
    barrier(CLK_LOCAL_MEM_FENCE);

    const int j = tid % HS_COLS, slice = tid / HS_COLS, n = n0 + j;
    const int k_per = (hd.in_w + HS_SLICES - 1) / HS_SLICES;
    const int k_begin = slice * k_per, k_end = min(hd.in_w, k_begin + k_per);
    float acc[HS_TOK];
    for (int t = 0; t < HS_TOK; ++t) acc[t] = 0.0f;
    if (n < hd.out_w) {
        global const float * b = bases + b_off + hd.basis_o + n;
        for (int k = k_begin; k < k_end; ++k) {
            const float bv = b[(ulong)k * hd.out_w];
            for (int t = 0; t < HS_TOK; ++t) acc[t] = fma(xs[t * MAX_W + k], bv, acc[t]);
        }
    }
    if (slice > 0)
        for (int t = 0; t < HS_TOK; ++t) part[((slice - 1) * HS_TOK + t) * HS_COLS + j] = acc[t];
    barrier(CLK_LOCAL_MEM_FENCE);
    // Literal token indices (t < HS_TOK, unrolled): acc indexed by a run-time bound lands in private memory.
    if (slice == 0 && n < hd.out_w)
#pragma unroll
        for (int t = 0; t < HS_TOK; ++t) {
            float sum = acc[t];
            for (int s2 = 0; s2 < HS_SLICES - 1; ++s2) sum += part[(s2 * HS_TOK + t) * HS_COLS + j];
            if (t < nt) y[y_off + (t0 + t) * out_total + hd.out_o + n] = sum;
        }
}
