// probe_scores.cl: ZipCache saliency, the column sums of the probe queries' causal attention rows.
// Deterministic: two passes, every sum in a fixed order, no atomics on floats.
//
// Rows: for KV head h the rows are r = p * group + j (probe p, query head h * group + j), so a KV
// head's rows share its keys; a row tile is RT consecutive rows. Both kernels keep one key per
// work-item in private memory (HEAD_DIM floats, read from global once) and stage a tile of RT query
// rows in local memory, so a key row is read once per RT rows instead of once per row.
//
//   kvc_probe_lse (skipped when the caller supplies lse): one work-group per (row tile, KV head),
//     NDRange local (NT, 1, 1), global (NT, n_row_tiles, n_kv_heads). Work-item i takes keys
//     kbeg + i, + NT, ... of the tile's requests, and for each of the tile's rows that sees the key
//     (same request, key_pos <= probe_pos) updates that row's online (max, sum) in the log2
//     domain; a fixed tree in local memory then merges the NT pairs of every row. The result is
//     written as a natural log (-inf when the probe sees no key), the unit of a caller's lse.
//   kvc_probe_scores: one work-item per key, work-groups of keys of one KV head; NDRange global
//     (>= n_keys, n_kv_heads), any local size. The work-group walks the row tiles of the requests
//     its keys belong to, in row order, staging each tile's query rows and their lse; every
//     work-item adds exp(scale q.k - lse) for its key and each row that sees it. A tile no row of
//     which sees any of the work-group's keys is not loaded nor scored. A key's sum therefore has
//     one fixed order whatever the device.
// Ragged batch (batch > 0): probe_indptr / key_indptr [batch + 1] give each request's probes and
//   keys; a probe sees only its own request's keys. batch == 0: one request owning everything (the
//   indptr arguments are then not read).
// Layout (lib/core/op.h): q f32 [n_probes, n_q_heads, HEAD_DIM]; k (K_DT) under the row_tokens
//   addressing; probe_pos, key_pos i32; lse f32 [n_probes, n_q_heads]; scores f32 [n_kv_heads, n_keys].
// kvc_probe_scores with PROBE_MMA (NVIDIA's driver, where lib/opencl/nv_mma_probe.cpp found inline PTX
//   mma.sync working; HEAD_DIM a multiple of 16 up to 128): the same arguments and sums on the tensor
//   cores, 128 keys per work-group of 128 work-items (see the kernel); kvc_probe_lse is not built then.
//   NDRange: local (128, 1, 1), global (128 * ceil(n_keys / 128), n_kv_heads).
// Preamble defines: HEAD_DIM, K_DT, NT (kvc_probe_lse's work-group size, a power of two), RT (rows
//   per tile); or HEAD_DIM, K_DT, PROBE_MMA and KVC_ASM.

#define KVC_LN2 0.69314718055994530942f
#define KVC_LOG2E 1.44269504088896340736f

typedef KVC_TYPE(K_DT) k_t;

// Element index of channel 0 of key `key` of KV head h under the row_tokens addressing.
inline ulong kvc_key_base(int key, int h, int row_tokens, int n_kv_heads) {
    if (row_tokens == 0) return ((ulong)key * n_kv_heads + h) * HEAD_DIM;
    return (((ulong)(key / row_tokens) * n_kv_heads + h) * row_tokens + key % row_tokens) * HEAD_DIM;
}

// The request that owns element x of a ragged range: the last b with indptr[b] <= x (requests
// without elements share their indptr value with the next one, so they are never chosen).
inline int kvc_owner(global const int * indptr, int batch, int x) {
    int lo = 0, hi = batch - 1;
    while (lo < hi) {
        const int mid = (lo + hi + 1) / 2;
        if (indptr[mid] <= x)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

// Keys [*k0, *k1) of probe p's request.
inline void kvc_probe_keys(global const int * probe_indptr, global const int * key_indptr, int batch, int n_keys,
                           int p, int * k0, int * k1) {
    *k0 = 0;
    *k1 = n_keys;
    if (batch > 0) {
        const int b = kvc_owner(probe_indptr, batch, p);
        *k0 = key_indptr[b];
        *k1 = key_indptr[b + 1];
    }
}

// The probes [*lo, *hi) of the requests that keys [first, last] belong to (keys are contiguous, so
// their requests are too); every probe when batch == 0.
inline void kvc_probe_range(global const int * probe_indptr, global const int * key_indptr, int batch, int n_probes,
                            int first, int last, int * lo, int * hi) {
    *lo = 0;
    *hi = n_probes;
    if (batch > 0) {
        *lo = probe_indptr[kvc_owner(key_indptr, batch, first)];
        *hi = probe_indptr[kvc_owner(key_indptr, batch, last) + 1];
    }
}

#if defined(PROBE_MMA)
// The tensor-core column sums (kvc_probe_scores with PROBE_MMA; as cuda_backend/probe_scores_mma.cu's
// scores kernel, without cp.async and precomputed fragments).
// - Work-group: 128 keys of one KV head; warp w owns keys 32w .. 32w + 31 as two 16-key A operands of
//   S^T = K Q^T, kept in registers (k rounded to f16) for the whole walk.
// - Probe rows (q * qscale rounded to f16, the rows' probe, position and log2-denominator) are staged
//   in local memory 64 at a time (8 row tiles of 8: the 8 columns of a B operand); rows are padded by 4
//   words, so the rows g of a fragment load fall 4 banks apart. A stage none of whose rows sees a key
//   of the work-group is not staged; a row tile none of whose rows sees a key of the warp is skipped.
// - Lane (g, t) adds exp2(s - lse2) of keys g and g + 8 against rows 2t and 2t + 1 of every tile (the
//   accumulator layout), and the 4 lanes of a key are summed by a fixed butterfly at the end, so every
//   sum has one order: results are identical run to run.
// Precision: f16 operands with f32 accumulation (logits off by ~2^-12 relative per product), as CUDA's.
#define PS_KEYS 128                  // keys per work-group
#define PS_ROWS 64                   // probe rows per stage
#define PS_TILES (PS_ROWS / 8)       // row tiles per stage
#define PS_KS (HEAD_DIM / 16)        // k16 steps over the head
#define PS_LD (HEAD_DIM / 2 + 4)     // staged row, in f16 words

// Keys i and i + 8's channels c, c + 1 and c + 8, c + 9 as an A fragment's registers (zeros past n_keys).
inline float2 kvc_key_pair(global const k_t * k, int i, int c, int h, int row_tokens, int n_kv_heads, int n_keys) {
    if (i >= n_keys) return (float2)(0.0f, 0.0f);
    const ulong e = kvc_key_base(i, h, row_tokens, n_kv_heads) + c;
    return (float2)(KVC_LOAD(K_DT, k, e), KVC_LOAD(K_DT, k, e + 1));
}

inline int kvc_shfl_xor_int(int x, int mask) { return as_int(kvc_shfl_xor(as_float(x), mask)); }

kernel __attribute__((reqd_work_group_size(128, 1, 1)))
void kvc_probe_scores(global const float * q, ulong q_off, global const int * probe_pos, ulong pp_off,
                      global const k_t * k, ulong k_off, global const int * key_pos, ulong kp_off,
                      global const float * lse, ulong lse_off, global const int * probe_indptr, ulong pi_off,
                      global const int * key_indptr, ulong ki_off, global float * scores, ulong scores_off,
                      int n_probes, int n_keys, int n_q_heads, int n_kv_heads, int row_tokens, int batch,
                      float qscale) {
    // uint4: the staging stores are 8 bytes (NVIDIA's compiler aligns a uint array to 4 bytes only).
    local uint4 q_l[PS_ROWS * PS_LD / 4];
    local float lse_l[PS_ROWS];
    local int p_l[PS_ROWS], pos_l[PS_ROWS], tmax_l[PS_TILES];
    local int min_pos_l;
    const int tid = get_local_id(0), lane = tid % 32, w = tid / 32, g = lane / 4, t = lane % 4;
    const int kvh = get_group_id(1), group = n_q_heads / n_kv_heads;
    q += q_off;
    probe_pos += pp_off;
    k += k_off;
    key_pos += kp_off;
    lse += lse_off;
    probe_indptr += pi_off;
    key_indptr += ki_off;

    const int first = (int)get_group_id(0) * PS_KEYS;
    int g_lo, g_hi;
    kvc_probe_range(probe_indptr, key_indptr, batch, n_probes, first, min(first + PS_KEYS, n_keys) - 1, &g_lo, &g_hi);

    // This lane's keys: i = first + 32 w + 16 j + g + 8 e (j: A operand, e: its row half). Their
    // positions and probe ranges; a key past n_keys sees no probe (p_lo = p_hi).
    uint ka[2][PS_KS][4];
    int kpos[2][2], plo[2][2], phi[2][2];
    int my_min = INT_MAX;
#pragma unroll
    for (int j = 0; j < 2; ++j) {
        const int i0 = first + 32 * w + 16 * j + g;
#pragma unroll
        for (int e = 0; e < 2; ++e) {
            const int i = i0 + 8 * e;
            kpos[j][e] = i < n_keys ? key_pos[i] : INT_MAX;
            plo[j][e] = 0, phi[j][e] = 0;
            if (i < n_keys) kvc_probe_range(probe_indptr, key_indptr, batch, n_probes, i, i, &plo[j][e], &phi[j][e]);
            my_min = min(my_min, kpos[j][e]);
        }
#pragma unroll
        for (int kk = 0; kk < PS_KS; ++kk) {
            const int c = 16 * kk + 2 * t;
            const float2 x0 = kvc_key_pair(k, i0, c, kvh, row_tokens, n_kv_heads, n_keys);
            const float2 x1 = kvc_key_pair(k, i0 + 8, c, kvh, row_tokens, n_kv_heads, n_keys);
            const float2 x2 = kvc_key_pair(k, i0, c + 8, kvh, row_tokens, n_kv_heads, n_keys);
            const float2 x3 = kvc_key_pair(k, i0 + 8, c + 8, kvh, row_tokens, n_kv_heads, n_keys);
            ka[j][kk][0] = kvc_pack_half2(x0.x, x0.y);
            ka[j][kk][1] = kvc_pack_half2(x1.x, x1.y);
            ka[j][kk][2] = kvc_pack_half2(x2.x, x2.y);
            ka[j][kk][3] = kvc_pack_half2(x3.x, x3.y);
        }
    }
    // The warp's and the work-group's earliest key positions (integer minima: exact in any order).
#pragma unroll
    for (int m = 1; m < 32; m *= 2) my_min = min(my_min, kvc_shfl_xor_int(my_min, m));
    if (tid == 0) min_pos_l = INT_MAX;
    barrier(CLK_LOCAL_MEM_FENCE);
    if (lane == 0) atomic_min(&min_pos_l, my_min);

    float sum[2][2] = {{0.0f, 0.0f}, {0.0f, 0.0f}};
    const int r_end = g_hi * group;
    for (int r0 = g_lo * group; r0 < r_end; r0 += PS_ROWS) {
        barrier(CLK_LOCAL_MEM_FENCE);  // the previous stage is no longer read (and min_pos_l is set)
        if (tid < PS_TILES) {  // each row tile's latest probe position (-1: no row)
            int mx = -1;
            for (int x = 0; x < 8; ++x) {
                const int r = r0 + 8 * tid + x;
                if (r < r_end) mx = max(mx, probe_pos[r / group]);
            }
            tmax_l[tid] = mx;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        int stage_max = -1;
        for (int x = 0; x < PS_TILES; ++x) stage_max = max(stage_max, tmax_l[x]);
        if (stage_max < min_pos_l) continue;  // uniform: no row of the stage sees a key of the work-group
        for (int e = tid; e < PS_ROWS * HEAD_DIM / 4; e += 128) {
            const int rr = e / (HEAD_DIM / 4), c4 = e % (HEAD_DIM / 4), r = r0 + rr;
            float4 x = (float4)(0.0f);
            if (r < r_end)
                x = vload4(0, q + ((ulong)(r / group) * n_q_heads + kvh * group + r % group) * HEAD_DIM + 4 * c4) * qscale;
            *(local uint2 *)((local uint *)q_l + rr * PS_LD + 2 * c4) =
                (uint2)(kvc_pack_half2(x.x, x.y), kvc_pack_half2(x.z, x.w));
        }
        if (tid < PS_ROWS) {
            const int r = r0 + tid;
            const bool ok = r < r_end;
            const int p = ok ? r / group : -1;
            p_l[tid] = p;
            pos_l[tid] = ok ? probe_pos[p] : -1;
            lse_l[tid] = ok ? lse[(ulong)p * n_q_heads + kvh * group + r % group] * KVC_LOG2E : 0.0f;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int rt = 0; rt < PS_TILES; ++rt) {
            if (tmax_l[rt] < my_min) continue;  // uniform across the warp
            float s[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
            local const uint * qrow = (local const uint *)q_l + (8 * rt + g) * PS_LD + t;
#pragma unroll
            for (int kk = 0; kk < PS_KS; ++kk) {
                const uint b0 = qrow[8 * kk], b1 = qrow[8 * kk + 4];
#pragma unroll
                for (int j = 0; j < 2; ++j)
                    KVC_MMA_16816(s[j][0], s[j][1], s[j][2], s[j][3], ka[j][kk][0], ka[j][kk][1], ka[j][kk][2],
                                  ka[j][kk][3], b0, b1);
            }
            // Rows 2t and 2t + 1 of the tile: columns 2t, 2t + 1 of the accumulators.
            const int ra = 8 * rt + 2 * t;
            const int pa = p_l[ra], pb = p_l[ra + 1], qa = pos_l[ra], qb = pos_l[ra + 1];
            const float la = lse_l[ra], lb = lse_l[ra + 1];
#pragma unroll
            for (int j = 0; j < 2; ++j)
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    const bool va = pa >= plo[j][e] && pa < phi[j][e] && kpos[j][e] <= qa;
                    const bool vb = pb >= plo[j][e] && pb < phi[j][e] && kpos[j][e] <= qb;
                    sum[j][e] += (va ? exp2(s[j][2 * e] - la) : 0.0f) + (vb ? exp2(s[j][2 * e + 1] - lb) : 0.0f);
                }
        }
    }
#pragma unroll
    for (int j = 0; j < 2; ++j)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
            float x = sum[j][e];
            x += kvc_shfl_xor(x, 1);
            x += kvc_shfl_xor(x, 2);
            const int i = first + 32 * w + 16 * j + g + 8 * e;
            if (t == 0 && i < n_keys) scores[scores_off + (ulong)kvh * n_keys + i] = x;
        }
}
#else  // the CUDA-core kernels

// Key `key` of KV head h into private memory (zeros when `valid` is false).
inline void kvc_load_key(float * kr, global const k_t * k, int key, int h, int row_tokens, int n_kv_heads,
                         bool valid) {
    const ulong base = kvc_key_base(key, h, row_tokens, n_kv_heads);
    for (int c = 0; c < HEAD_DIM; ++c) kr[c] = valid ? KVC_LOAD(K_DT, k, base + c) : 0.0f;
}

inline float kvc_row_dot(local const float * q_l, const float * kr) {
    float s = 0.0f;
    for (int c = 0; c < HEAD_DIM; ++c) s += q_l[c] * kr[c];
    return s;
}

// Stages rows [r0, r0 + RT) of KV head kvh (q pre-scaled by qscale; zeros past the last row).
inline void kvc_stage_rows(local float * q_l, global const float * q, int r0, int n_rows, int group, int kvh,
                           int n_q_heads, float qscale, int tid, int nt) {
    for (int e = tid; e < RT * HEAD_DIM; e += nt) {
        const int r = r0 + e / HEAD_DIM, c = e % HEAD_DIM;
        float x = 0.0f;
        if (r < n_rows) x = q[((ulong)(r / group) * n_q_heads + kvh * group + r % group) * HEAD_DIM + c] * qscale;
        q_l[e] = x;
    }
}

kernel void kvc_probe_lse(global const float * q, ulong q_off, global const int * probe_pos, ulong pp_off,
                          global const k_t * k, ulong k_off, global const int * key_pos, ulong kp_off,
                          global const int * probe_indptr, ulong pi_off, global const int * key_indptr,
                          ulong ki_off, global float * lse, int n_probes, int n_keys, int n_q_heads, int n_kv_heads,
                          int row_tokens, int batch, float qscale) {
    local float q_l[RT * HEAD_DIM];
    local float m_l[RT * NT], l_l[RT * NT];
    const int tid = get_local_id(0), rt = get_group_id(1), kvh = get_group_id(2);
    const int group = n_q_heads / n_kv_heads, n_rows = n_probes * group, r0 = rt * RT;
    q += q_off;
    probe_pos += pp_off;
    k += k_off;
    key_pos += kp_off;
    probe_indptr += pi_off;
    key_indptr += ki_off;
    kvc_stage_rows(q_l, q, r0, n_rows, group, kvh, n_q_heads, qscale, tid, NT);
    // Each row's position and request keys; the tile's keys span its first to its last row's
    // request (rows are in probe order).
    int pos[RT], rk0[RT], rk1[RT];
    for (int j = 0; j < RT; ++j) {
        pos[j] = -1, rk0[j] = 0, rk1[j] = 0;
        if (r0 + j < n_rows) {
            const int p = (r0 + j) / group;
            pos[j] = probe_pos[p];
            kvc_probe_keys(probe_indptr, key_indptr, batch, n_keys, p, &rk0[j], &rk1[j]);
        }
    }
    const int kbeg = rk0[0], kend = rk1[min(RT, n_rows - r0) - 1];
    barrier(CLK_LOCAL_MEM_FENCE);

    float m[RT], l[RT], kr[HEAD_DIM];
    for (int j = 0; j < RT; ++j) m[j] = -INFINITY, l[j] = 0.0f;
    for (int i = kbeg + tid; i < kend; i += NT) {
        const int kp = key_pos[i];
        bool any = false;
        for (int j = 0; j < RT; ++j) any |= i >= rk0[j] && i < rk1[j] && kp <= pos[j];
        if (!any) continue;
        kvc_load_key(kr, k, i, kvh, row_tokens, n_kv_heads, true);
        for (int j = 0; j < RT; ++j) {
            if (!(i >= rk0[j] && i < rk1[j] && kp <= pos[j])) continue;
            const float s = kvc_row_dot(q_l + j * HEAD_DIM, kr);
            if (s > m[j]) {
                l[j] = l[j] * exp2(m[j] - s) + 1.0f;
                m[j] = s;
            } else {
                l[j] += exp2(s - m[j]);
            }
        }
    }
    for (int j = 0; j < RT; ++j) m_l[j * NT + tid] = m[j], l_l[j * NT + tid] = l[j];
    for (int stride = NT / 2; stride > 0; stride /= 2) {
        barrier(CLK_LOCAL_MEM_FENCE);
        if (tid < stride)
            for (int j = 0; j < RT; ++j) {
                const float m1 = m_l[j * NT + tid], m2 = m_l[j * NT + tid + stride], mx = fmax(m1, m2);
                if (mx == -INFINITY) continue;
                l_l[j * NT + tid] = l_l[j * NT + tid] * exp2(m1 - mx) + l_l[j * NT + tid + stride] * exp2(m2 - mx);
                m_l[j * NT + tid] = mx;
            }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    if (tid < RT && r0 + tid < n_rows) {
        const int r = r0 + tid, p = r / group, h = kvh * group + r % group;
        const float mx = m_l[tid * NT], sum = l_l[tid * NT];
        lse[(ulong)p * n_q_heads + h] = mx == -INFINITY ? -INFINITY : (mx + log2(sum)) * KVC_LN2;
    }
}

kernel void kvc_probe_scores(global const float * q, ulong q_off, global const int * probe_pos, ulong pp_off,
                             global const k_t * k, ulong k_off, global const int * key_pos, ulong kp_off,
                             global const float * lse, ulong lse_off, global const int * probe_indptr, ulong pi_off,
                             global const int * key_indptr, ulong ki_off, global float * scores, ulong scores_off,
                             int n_probes, int n_keys, int n_q_heads, int n_kv_heads, int row_tokens, int batch,
                             float qscale) {
    local float q_l[RT * HEAD_DIM];
    local float lse_l[RT];
    local int p_l[RT], pos_l[RT];
    local int min_pos_l;
    const int tid = get_local_id(0), nt = get_local_size(0);
    const int i = get_global_id(0), kvh = get_group_id(1);
    const int group = n_q_heads / n_kv_heads, n_rows = n_probes * group;
    q += q_off;
    probe_pos += pp_off;
    k += k_off;
    lse += lse_off;
    probe_indptr += pi_off;
    key_indptr += ki_off;
    const int kp = i < n_keys ? key_pos[kp_off + i] : 0;
    // This key's probes [p_lo, p_hi) and the work-group's [g_lo, g_hi) (its keys are contiguous, so
    // their requests are too). Every work-item computes g_lo, g_hi alike: the loop bounds are uniform.
    int p_lo, p_hi, g_lo, g_hi;
    const int first = (int)get_group_id(0) * nt;
    kvc_probe_range(probe_indptr, key_indptr, batch, n_probes, first, min(first + nt, n_keys) - 1, &g_lo, &g_hi);
    kvc_probe_range(probe_indptr, key_indptr, batch, n_probes, min(i, n_keys - 1), min(i, n_keys - 1), &p_lo, &p_hi);
    float kr[HEAD_DIM];
    kvc_load_key(kr, k, min(i, n_keys - 1), kvh, row_tokens, n_kv_heads, i < n_keys);
    // The work-group's earliest key position: a row before it sees none of these keys. (An integer
    // minimum is exact in any order, so the local atomic keeps results deterministic.)
    if (tid == 0) min_pos_l = INT_MAX;
    barrier(CLK_LOCAL_MEM_FENCE);
    if (i < n_keys) atomic_min(&min_pos_l, kp);
    barrier(CLK_LOCAL_MEM_FENCE);
    const int min_pos = min_pos_l;
    float acc = 0.0f;
    for (int r0 = g_lo * group; r0 < g_hi * group; r0 += RT) {
        // The tile's rows: probes at or after min_pos (the latest row decides: probes are not
        // sorted by position in general, so every row is checked).
        bool tile_seen = false;
        for (int j = 0; j < RT; ++j)
            if (r0 + j < g_hi * group) tile_seen |= probe_pos[(r0 + j) / group] >= min_pos;
        // The barriers stay unconditional (PoCL 3.1 gave wrong sums with a uniform branch around them).
        barrier(CLK_LOCAL_MEM_FENCE);  // the previous tile is no longer read
        if (tile_seen) {
            kvc_stage_rows(q_l, q, r0, g_hi * group, group, kvh, n_q_heads, qscale, tid, nt);
            for (int j = tid; j < RT; j += nt) {
                const int r = r0 + j;
                const bool ok = r < g_hi * group;
                const int p = ok ? r / group : -1;
                p_l[j] = p;
                pos_l[j] = ok ? probe_pos[p] : -1;
                lse_l[j] = ok ? lse[(ulong)p * n_q_heads + kvh * group + r % group] * KVC_LOG2E : 0.0f;
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        if (tile_seen && i < n_keys)
            for (int j = 0; j < RT; ++j) {
                const int p = p_l[j];
                if (p < p_lo || p >= p_hi || kp > pos_l[j]) continue;
                acc += exp2(kvc_row_dot(q_l + j * HEAD_DIM, kr) - lse_l[j]);
            }
    }
    if (i < n_keys) scores[scores_off + (ulong)kvh * n_keys + i] = acc;
}

#endif  // PROBE_MMA
