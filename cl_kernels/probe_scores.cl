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
// Preamble defines: HEAD_DIM, K_DT, NT (kvc_probe_lse's work-group size, a power of two), RT (rows
//   per tile).

#define KVC_LN2 0.69314718055994530942f
#define KVC_LOG2E 1.44269504088896340736f

typedef KVC_TYPE(K_DT) k_t;

// Key `key` of KV head h into private memory (zeros when `valid` is false).
inline void kvc_load_key(float * kr, global const k_t * k, int key, int h, int row_tokens, int n_kv_heads,
                         bool valid) {
    ulong base = 0;
    if (row_tokens == 0)
        base = ((ulong)key * n_kv_heads + h) * HEAD_DIM;
    else
        base = (((ulong)(key / row_tokens) * n_kv_heads + h) * row_tokens + key % row_tokens) * HEAD_DIM;
    for (int c = 0; c < HEAD_DIM; ++c) kr[c] = valid ? KVC_LOAD(K_DT, k, base + c) : 0.0f;
}

inline float kvc_row_dot(local const float * q_l, const float * kr) {
    float s = 0.0f;
    for (int c = 0; c < HEAD_DIM; ++c) s += q_l[c] * kr[c];
    return s;
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
    int p_lo = 0, p_hi = n_probes, g_lo = 0, g_hi = n_probes;
    if (batch > 0) {
        const int first = (int)get_group_id(0) * nt;
        const int last = min(first + nt, n_keys) - 1;
        g_lo = probe_indptr[kvc_owner(key_indptr, batch, first)];
        g_hi = probe_indptr[kvc_owner(key_indptr, batch, last) + 1];
        const int b = kvc_owner(key_indptr, batch, min(i, n_keys - 1));
        p_lo = probe_indptr[b];
        p_hi = probe_indptr[b + 1];
    }
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
