// probe_scores.cl: ZipCache saliency, the column sums of the probe queries' causal attention rows.
// Deterministic: two passes, every sum in a fixed order, no atomics on floats.
//
//   kvc_probe_lse (skipped when the caller supplies lse): one work-group per (query head, probe),
//     NDRange local (NT, 1, 1), global (NT, n_q_heads, n_probes). Work-item i takes keys i, i + NT,
//     ... of the probe's request that the probe sees (key_pos <= probe_pos), keeps an online
//     (max, sum) in the log2 domain, and a fixed tree in local memory merges the NT pairs; the
//     result is written as a natural log (-inf when the probe sees no key), the same unit as a
//     caller-supplied lse.
//   kvc_probe_scores: one work-item per key, work-groups of keys of one KV head; NDRange
//     global (>= n_keys, n_kv_heads), any local size. For each query head of the KV head's group and
//     each probe of the requests the work-group's keys belong to (in that order), the work-group
//     loads the probe's query row into local memory once and every work-item adds
//     exp(scale q.k - lse) for its key when the probe sees it. Probes of other requests are not
//     visited; a probe before all the work-group's keys is not loaded; masked pairs are not
//     scored. A key's sum therefore has one fixed order whatever the device.
// Ragged batch (batch > 0): probe_indptr / key_indptr [batch + 1] give each request's probes and
//   keys; a probe sees only its own request's keys. batch == 0: one request owning everything (the
//   indptr arguments are then not read).
// Layout (lib/core/op.h): q f32 [n_probes, n_q_heads, HEAD_DIM]; k (K_DT) under the row_tokens
//   addressing; probe_pos, key_pos i32; lse f32 [n_probes, n_q_heads]; scores f32 [n_kv_heads, n_keys].
// Preamble defines: HEAD_DIM, K_DT, NT (kvc_probe_lse's work-group size, a power of two).

#define KVC_LN2 0.69314718055994530942f
#define KVC_LOG2E 1.44269504088896340736f

typedef KVC_TYPE(K_DT) k_t;

// q_l . k[key] for KV head h (q_l pre-scaled by scale * log2(e)).
inline float kvc_key_dot(local const float * q_l, global const k_t * k, int key, int h, int row_tokens,
                         int n_kv_heads) {
    ulong base;
    if (row_tokens == 0)
        base = ((ulong)key * n_kv_heads + h) * HEAD_DIM;
    else
        base = (((ulong)(key / row_tokens) * n_kv_heads + h) * row_tokens + key % row_tokens) * HEAD_DIM;
    float s = 0.0f;
    for (int c = 0; c < HEAD_DIM; ++c) s += q_l[c] * KVC_LOAD(K_DT, k, base + c);
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

kernel void kvc_probe_lse(global const float * q, ulong q_off, global const int * probe_pos, ulong pp_off,
                          global const k_t * k, ulong k_off, global const int * key_pos, ulong kp_off,
                          global const int * probe_indptr, ulong pi_off, global const int * key_indptr,
                          ulong ki_off, global float * lse, int n_keys, int n_q_heads, int n_kv_heads,
                          int row_tokens, int batch, float qscale) {
    local float q_l[HEAD_DIM];
    local float m_l[NT], l_l[NT];
    const int tid = get_local_id(0), h = get_group_id(1), p = get_group_id(2);
    const int kvh = h / (n_q_heads / n_kv_heads);
    q += q_off + ((ulong)p * n_q_heads + h) * HEAD_DIM;
    k += k_off;
    key_pos += kp_off;
    for (int c = tid; c < HEAD_DIM; c += NT) q_l[c] = q[c] * qscale;
    const int pos = probe_pos[pp_off + p];
    int k0 = 0, k1 = n_keys;
    if (batch > 0) {
        const int b = kvc_owner(probe_indptr + pi_off, batch, p);
        k0 = key_indptr[ki_off + b];
        k1 = key_indptr[ki_off + b + 1];
    }
    barrier(CLK_LOCAL_MEM_FENCE);

    float m = -INFINITY, l = 0.0f;
    for (int i = k0 + tid; i < k1; i += NT) {
        if (key_pos[i] > pos) continue;
        const float s = kvc_key_dot(q_l, k, i, kvh, row_tokens, n_kv_heads);
        if (s > m) {
            l = l * exp2(m - s) + 1.0f;
            m = s;
        } else {
            l += exp2(s - m);
        }
    }
    m_l[tid] = m;
    l_l[tid] = l;
    for (int stride = NT / 2; stride > 0; stride /= 2) {
        barrier(CLK_LOCAL_MEM_FENCE);
        if (tid < stride) {
            const float m2 = m_l[tid + stride], mx = fmax(m, m2);
            if (mx != -INFINITY) {
                l = l * exp2(m - mx) + l_l[tid + stride] * exp2(m2 - mx);
                m = mx;
            }
            m_l[tid] = m;
            l_l[tid] = l;
        }
    }
    if (tid == 0) lse[(ulong)p * n_q_heads + h] = m == -INFINITY ? -INFINITY : (m + log2(l)) * KVC_LN2;
}

kernel void kvc_probe_scores(global const float * q, ulong q_off, global const int * probe_pos, ulong pp_off,
                             global const k_t * k, ulong k_off, global const int * key_pos, ulong kp_off,
                             global const float * lse, ulong lse_off, global const int * probe_indptr, ulong pi_off,
                             global const int * key_indptr, ulong ki_off, global float * scores, ulong scores_off,
                             int n_probes, int n_keys, int n_q_heads, int n_kv_heads, int row_tokens, int batch,
                             float qscale) {
    local float q_l[HEAD_DIM];
    local int min_pos_l;
    const int tid = get_local_id(0), nt = get_local_size(0);
    const int i = get_global_id(0), kvh = get_group_id(1);
    const int group = n_q_heads / n_kv_heads;
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
    // The work-group's earliest key position: a probe before it sees none of these keys. (An
    // integer minimum is exact in any order, so the local atomic keeps results deterministic.)
    if (tid == 0) min_pos_l = INT_MAX;
    barrier(CLK_LOCAL_MEM_FENCE);
    if (i < n_keys) atomic_min(&min_pos_l, kp);
    barrier(CLK_LOCAL_MEM_FENCE);
    const int min_pos = min_pos_l;
    float acc = 0.0f;
    for (int g = 0; g < group; ++g) {
        const int h = kvh * group + g;
        for (int p = g_lo; p < g_hi; ++p) {
            const int ppos = probe_pos[p];
            // A row masked for the whole work-group is neither loaded nor scored. (The barriers
            // stay unconditional: PoCL 3.1 gave wrong sums with a uniform branch around them.)
            const bool row_seen = ppos >= min_pos;
            barrier(CLK_LOCAL_MEM_FENCE);  // the previous row is no longer read
            global const float * qr = q + ((ulong)p * n_q_heads + h) * HEAD_DIM;
            if (row_seen)
                for (int c = tid; c < HEAD_DIM; c += nt) q_l[c] = qr[c] * qscale;
            barrier(CLK_LOCAL_MEM_FENCE);
            if (row_seen && i < n_keys && p >= p_lo && p < p_hi && kp <= ppos) {
                const float s = kvc_key_dot(q_l, k, i, kvh, row_tokens, n_kv_heads);
                acc += exp2(s - lse[(ulong)p * n_q_heads + h] * KVC_LOG2E);
            }
        }
    }
    if (i < n_keys) scores[scores_off + (ulong)kvh * n_keys + i] = acc;
}
