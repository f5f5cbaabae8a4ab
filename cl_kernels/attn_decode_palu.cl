// attn_decode_palu.cl: Palu's decode (lib/core/op.h): keys are rebuilt from pre-RoPE latents and
// rotated at every step, attention runs at the full head_dim, values stay latents.
//
// Kernels:
//   kvc_attn_decode_palu: work-group i runs schedule row i = (request b, KV head c, tokens
//     [first, end)) for the G query heads of c. Tokens go in tiles of TT:
//       0. B_c (k_width x HD fp32) goes to local memory RB rows at a time, once per work-group
//          when RB >= MW, else per tile (the keys then build up over the row chunks): every key
//          element reads a column of B_c, and local reads by consecutive work-items of
//          consecutive columns are conflict-free, where global reads would go through L1/L2;
//       1. the tile's latents (k_width halves per token, contiguous within a page) are copied to
//          local memory with coalesced reads; keys = latent . B_c are built in local memory (fp32,
//          consecutive work-items on consecutive columns of B_c), then
//          rotated at their positions (token index in the request) with the rope op's pairing
//          (neox halves or interleaved pairs; fp64 angles where the device has them, as rope.cl);
//       2. scores of (token, head) pairs against q in local memory (pre-scaled by scale * log2 e),
//          online-softmax update as attn_decode_ragged.cl;
//       3. work-item i accumulates p * v for latent features i, i + NT, ... (coalesced rows).
//     Outputs and partials as attn_decode_ragged.cl. NDRange: local (NT), global (NT * n_tasks).
//   the merge: kvc_attn_decode_ragged_merge (attn_decode_ragged_merge.cl).
//     NDRange: local (WG), global (WG, n_kv_heads * G, batch): one work-group per (request, query head).
// Layout: q f32 [batch, n_kv_heads * G, HD] (post-RoPE); k_pages, v_pages f16 ragged (latents);
//   heads, schedule, merge as attn_decode_ragged; aux f32: B_c [k_width(c), HD] row-major at
//   HD * k_offset(c), inv_freq [ROT / 2] at HD * k_total; out f32 [batch, G * v_total]; scratch
//   part: task i's output for head g at (i * G + g) * MW, its (m, l) at ml_off + (i * G + g) * 2.
// Preamble defines: G, NT (work-group size), TT (tile tokens), MW (bound on every latent width),
//   HD (head_dim), ROT (rotary dims), STYLE (0 neox, 1 interleaved), PAGE_SIZE, RB (rows of B_c in
//   local memory, >= 1).

#ifdef cl_khr_fp64
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#endif

#define VPT ((MW + NT - 1) / NT)
#define HALF_ROT (ROT / 2)

kernel __attribute__((reqd_work_group_size(NT, 1, 1)))
void kvc_attn_decode_palu(global const float * q, ulong q_off, global const ushort * k_pages, ulong k_off,
                          global const half * v_pages, ulong v_off, global const int * indptr, ulong indptr_off,
                          global const int * indices, ulong indices_off, global const int * last_len,
                          ulong last_len_off, global const int * heads, ulong heads_off, global const int * sched,
                          ulong sched_off, global const int * merge, ulong merge_off, global const float * aux,
                          ulong aux_off, global float * out, ulong out_off, global float * part, ulong ml_off,
                          int n_kv_heads, int k_total, int v_total, float qscale) {
    local float q_l[G * HD];
    local ushort z_l[TT * MW];  // fp16 bits of the tile's latents
    local float key_l[TT * HD];
    local float s_l[TT * G];
    local float p_l[TT * G];
    local ulong krow_l[TT], vrow_l[TT];
    local float basis_l[RB * HD];

    const int tid = get_local_id(0);
    const int task = get_group_id(0);
    heads += heads_off;
    const kvc_ragged_task T =
        kvc_ragged_task_at(sched + sched_off, heads, merge + merge_off, indptr + indptr_off, task, n_kv_heads);
    const int b = T.b, c = T.c, first = T.first, end = T.end, kw = T.kw, ko = T.ko, vw = T.vw, vo = T.vo;
    const int n_in_list = T.n_in_list, p0 = T.p0;
    indices += indices_off;
    k_pages += k_off;
    v_pages += v_off;
    global const float * basis = aux + aux_off + (ulong)HD * ko;
    global const float * inv_freq = aux + aux_off + (ulong)HD * k_total;

    global const float * qg = q + q_off + ((ulong)b * n_kv_heads + c) * G * HD;
    for (int i = tid; i < G * HD; i += NT) q_l[i] = qg[i] * qscale;
#if RB >= MW
    for (int i = tid; i < kw * HD; i += NT) basis_l[i] = basis[i];  // all of B_c, once
#endif

    float m_run[G], lsum[G], acc[G][VPT];
    for (int g = 0; g < G; ++g) {
        m_run[g] = -INFINITY;
        lsum[g] = 0.0f;
        for (int v = 0; v < VPT; ++v) acc[g][v] = 0.0f;
    }
    for (int t0 = first; t0 < end; t0 += TT) {
        const int tn = min(TT, end - t0);
        barrier(CLK_LOCAL_MEM_FENCE);  // the previous tile is consumed (and q_l is written)
        for (int t = tid; t < tn; t += NT) {
            const int j = t0 + t;
            const ulong page = (ulong)indices[p0 + j / PAGE_SIZE];
            const ulong slot = (ulong)(j % PAGE_SIZE);
            krow_l[t] = page * PAGE_SIZE * k_total + (ulong)PAGE_SIZE * ko + slot * kw;
            vrow_l[t] = page * PAGE_SIZE * v_total + (ulong)PAGE_SIZE * vo + slot * vw;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        // 1. latents -> keys -> RoPE
        // (token, element) walked with a carried pair instead of a division per element
        {
            int t = tid / kw, r = tid % kw;
            const int dt = NT / kw, dr = NT % kw;
            for (int e = tid; e < tn * kw; e += NT) {
                z_l[e] = k_pages[krow_l[t] + r];
                t += dt;
                r += dr;
                if (r >= kw) {
                    r -= kw;
                    ++t;
                }
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int r0 = 0; r0 < kw; r0 += RB) {
            const int rn = min(RB, kw - r0);
#if RB < MW
            for (int i = tid; i < rn * HD; i += NT) basis_l[i] = basis[(ulong)r0 * HD + i];
            barrier(CLK_LOCAL_MEM_FENCE);
#endif
            for (int e = tid; e < tn * HD; e += NT) {
                const int t = e / HD, d = e % HD;
                float k = r0 == 0 ? 0.0f : key_l[e];
                for (int r = 0; r < rn; ++r)
                    k = fma(vload_half(t * kw + r0 + r, (local const half *)z_l), basis_l[r * HD + d], k);
                key_l[e] = k;
            }
            barrier(CLK_LOCAL_MEM_FENCE);  // keys done (and this chunk of B_c consumed)
        }
        for (int e = tid; e < tn * HALF_ROT; e += NT) {
            const int t = e / HALF_ROT, i = e % HALF_ROT;
#if STYLE == 0
            const int a = i, bb = i + HALF_ROT;
#else
            const int a = 2 * i, bb = 2 * i + 1;
#endif
#ifdef cl_khr_fp64
            const double ang = (double)(t0 + t) * (double)inv_freq[i];
            const float cs = (float)cos(ang), sn = (float)sin(ang);
#else
            const float ang = (float)(t0 + t) * inv_freq[i];
            const float cs = cos(ang), sn = sin(ang);
#endif
            const float x0 = key_l[t * HD + a], x1 = key_l[t * HD + bb];
            key_l[t * HD + a] = x0 * cs - x1 * sn;
            key_l[t * HD + bb] = x1 * cs + x0 * sn;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        // 2. scores and online softmax
        for (int e = tid; e < TT * G; e += NT) {
            const int t = e / G, g = e % G;
            float s = -INFINITY;
            if (t < tn) {
                s = 0.0f;
                for (int d = 0; d < HD; ++d) s = fma(q_l[g * HD + d], key_l[t * HD + d], s);
            }
            s_l[e] = s;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        float mn[G];
        for (int g = 0; g < G; ++g) mn[g] = m_run[g];
        for (int j = 0; j < tn; ++j)
            for (int g = 0; g < G; ++g) mn[g] = fmax(mn[g], s_l[j * G + g]);
        for (int g = 0; g < G; ++g) {
            const float alpha = exp2(m_run[g] - mn[g]);
            m_run[g] = mn[g];
            lsum[g] *= alpha;
            for (int v = 0; v < VPT; ++v) acc[g][v] *= alpha;
        }
        for (int e = tid; e < tn * G; e += NT) p_l[e] = exp2(s_l[e] - mn[e % G]);
        barrier(CLK_LOCAL_MEM_FENCE);
        // 3. values
        for (int j = 0; j < tn; ++j) {
            global const half * vr = v_pages + vrow_l[j];
            for (int g = 0; g < G; ++g) lsum[g] += p_l[j * G + g];
            for (int v = 0; v < VPT; ++v) {
                const int d = tid + v * NT;
                if (d < vw) {
                    const float vv = vload_half(d, vr);
                    for (int g = 0; g < G; ++g) acc[g][v] = fma(p_l[j * G + g], vv, acc[g][v]);
                }
            }
        }
    }
    for (int g = 0; g < G; ++g) {
        for (int v = 0; v < VPT; ++v) {
            const int d = tid + v * NT;
            if (d >= vw) continue;
            if (n_in_list == 1)
                out[out_off + (ulong)b * G * v_total + (ulong)G * vo + g * vw + d] = acc[g][v] / lsum[g];
            else
                part[((ulong)task * G + g) * MW + d] = acc[g][v];
        }
        if (n_in_list != 1 && tid == 0) {
            part[ml_off + ((ulong)task * G + g) * 2] = m_run[g];
            part[ml_off + ((ulong)task * G + g) * 2 + 1] = lsum[g];
        }
    }
}
