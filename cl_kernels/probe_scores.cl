// probe_scores.cl: ZipCache saliency, the column sums of the probe queries' causal attention rows.
// Deterministic: two passes, every sum in a fixed order, no atomics.
//
//   kvc_probe_lse (skipped when the caller supplies lse): one work-group per (query head, probe),
//     NDRange local (NT, 1, 1), global (NT, n_q_heads, n_probes). Work-item i takes keys i, i + NT,
//     ... that the probe sees (key_pos <= probe_pos), keeps an online (max, sum) in the log2 domain,
//     and a fixed tree in local memory merges the NT pairs; the result is written as a natural log
//     (-inf when the probe sees no key), the same unit as a caller-supplied lse.
//   kvc_probe_scores: one work-item per key, work-groups of keys of one KV head; NDRange
//     global (>= n_keys, n_kv_heads), any local size. For each query head of the KV head's group and
//     each probe (in that order), the work-group loads the probe's query row into local memory once
//     and every work-item adds exp(scale q.k - lse) for its key when the probe sees it. A key's
//     sum therefore has one fixed order whatever the device.
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

kernel void kvc_probe_lse(global const float * q, ulong q_off, global const int * probe_pos, ulong pp_off,
                          global const k_t * k, ulong k_off, global const int * key_pos, ulong kp_off,
                          global float * lse, int n_keys, int n_q_heads, int n_kv_heads, int row_tokens,
                          float qscale) {
    local float q_l[HEAD_DIM];
    local float m_l[NT], l_l[NT];
    const int tid = get_local_id(0), h = get_group_id(1), p = get_group_id(2);
    const int kvh = h / (n_q_heads / n_kv_heads);
    q += q_off + ((ulong)p * n_q_heads + h) * HEAD_DIM;
    k += k_off;
    key_pos += kp_off;
    for (int c = tid; c < HEAD_DIM; c += NT) q_l[c] = q[c] * qscale;
    const int pos = probe_pos[pp_off + p];
    barrier(CLK_LOCAL_MEM_FENCE);

    float m = -INFINITY, l = 0.0f;
    for (int i = tid; i < n_keys; i += NT) {
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
                             global const float * lse, ulong lse_off, global float * scores, ulong scores_off,
                             int n_probes, int n_keys, int n_q_heads, int n_kv_heads, int row_tokens, float qscale) {
    local float q_l[HEAD_DIM];
    const int tid = get_local_id(0), nt = get_local_size(0);
    const int i = get_global_id(0), kvh = get_group_id(1);
    const int group = n_q_heads / n_kv_heads;
    q += q_off;
    probe_pos += pp_off;
    k += k_off;
    lse += lse_off;
    const int kp = i < n_keys ? key_pos[kp_off + i] : 0;
    float acc = 0.0f;
    for (int g = 0; g < group; ++g) {
        const int h = kvh * group + g;
        for (int p = 0; p < n_probes; ++p) {
            barrier(CLK_LOCAL_MEM_FENCE);  // the previous row is no longer read
            global const float * qr = q + ((ulong)p * n_q_heads + h) * HEAD_DIM;
            for (int c = tid; c < HEAD_DIM; c += nt) q_l[c] = qr[c] * qscale;
            barrier(CLK_LOCAL_MEM_FENCE);
            if (i < n_keys && kp <= probe_pos[p]) {
                const float s = kvc_key_dot(q_l, k, i, kvh, row_tokens, n_kv_heads);
                acc += exp2(s - lse[(ulong)p * n_q_heads + h] * KVC_LOG2E);
            }
        }
    }
    if (i < n_keys) scores[scores_off + (ulong)kvh * n_keys + i] = acc;
}
