// attn_decode_palu.cl: Palu's decode (lib/core/op.h): keys are rebuilt from pre-RoPE latents and
// rotated at every step, attention runs at the full head_dim, values stay latents.
//
// Kernels:
//   kvc_attn_decode_palu: work-group i runs schedule row i = (request b, KV head c, tokens
//     [first, end)) for the G query heads of c. Tokens go in tiles of TT:
//       1. the tile's latents (k_width halves per token, contiguous within a page) are copied to
//          local memory with coalesced reads, transposed (latent-major) so that 8 tokens' values of
//          one latent are one 16-byte read;
//          keys = latent . B_c are built in blocks of 8 tokens x 4 dims per work-item: per latent
//          row one 16-byte local read of the 8 latents, 4 floats of B_c (global, through L1:
//          consecutive work-items read consecutive dims) and 32 FMAs. Reading B_c from local
//          memory instead would cost the same bandwidth class, and all of it (up to 64 KiB) does
//          not fit next to the tile;
//          keys are rotated at their positions (token index in the request) with the rope op's
//          pairing (neox halves or interleaved pairs). The angle of position t0 + t is split: the
//          tile's base t0 * f once per frequency (fp64 where the device has it, as rope.cl), the
//          offset t * f (t < TT) in fp32, joined by the angle-sum formulas: one fp32 sincos per
//          pair instead of an fp64 one, whose cost rivalled the key build's;
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
// Preamble defines: G, NT (work-group size), TT (tile tokens, a multiple of 8), MW (bound on every
//   latent width), HD (head_dim, a multiple of 4), ROT (rotary dims), STYLE (0 neox, 1 interleaved),
//   PAGE_SIZE.

#ifdef cl_khr_fp64
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#endif

#define VPT ((MW + NT - 1) / NT)
#define HALF_ROT (ROT / 2)
#define OCTS (TT / 8)    // token octets of a tile
#define DQUADS (HD / 4)  // dim quads of a key

kernel __attribute__((reqd_work_group_size(NT, 1, 1)))
void kvc_attn_decode_palu(global const float * q, ulong q_off, global const ushort * k_pages, ulong k_off,
                          global const half * v_pages, ulong v_off, global const int * indptr, ulong indptr_off,
                          global const int * indices, ulong indices_off, global const int * last_len,
                          ulong last_len_off, global const int * heads, ulong heads_off, global const int * sched,
                          ulong sched_off, global const int * merge, ulong merge_off, global const float * aux,
                          ulong aux_off, global float * out, ulong out_off, global float * part, ulong ml_off,
                          int n_kv_heads, int k_total, int v_total, float qscale) {
    local float q_l[G * HD];
    local ushort8 z_l8[MW * OCTS];  // fp16 bits of the tile's latents, latent-major: [r][t]
    local float key_l[TT * HD];
    local float s_l[TT * G];
    local float p_l[TT * G];
    local ulong krow_l[TT], vrow_l[TT];
    local float base_l[2 * HALF_ROT];  // cos, sin of t0 * f per frequency
    local ushort * z_w = (local ushort *)z_l8;
    local const half * z_l = (local const half *)z_l8;

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
        for (int i = tid; i < HALF_ROT; i += NT) {
#ifdef cl_khr_fp64
            const double ang = (double)t0 * (double)inv_freq[i];
            base_l[2 * i] = (float)cos(ang);
            base_l[2 * i + 1] = (float)sin(ang);
#else
            float cb;
            base_l[2 * i + 1] = sincos((float)t0 * inv_freq[i], &cb);
            base_l[2 * i] = cb;
#endif
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        // 1. latents -> keys -> RoPE
        // (token, element) walked with a carried pair instead of a division per element
        {
            int t = tid / kw, r = tid % kw;
            const int dt = NT / kw, dr = NT % kw;
            for (int e = tid; e < tn * kw; e += NT) {
                z_w[r * TT + t] = k_pages[krow_l[t] + r];
                t += dt;
                r += dr;
                if (r >= kw) {
                    r -= kw;
                    ++t;
                }
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int blk = tid; blk < OCTS * DQUADS; blk += NT) {
            const int to = blk / DQUADS, dq = blk % DQUADS;
            if (8 * to >= tn) break;  // blk only grows; octets past the tile's end score nothing
            float4 k0 = 0.0f, k1 = 0.0f, k2 = 0.0f, k3 = 0.0f, k4 = 0.0f, k5 = 0.0f, k6 = 0.0f, k7 = 0.0f;
            global const float * bcol = basis + 4 * dq;
            for (int r = 0; r < kw; ++r) {
                const float8 z = vloada_half8(r * OCTS + to, z_l);
                const float4 bv = vload4(0, bcol + (ulong)r * HD);
                k0 = fma((float4)(z.s0), bv, k0);
                k1 = fma((float4)(z.s1), bv, k1);
                k2 = fma((float4)(z.s2), bv, k2);
                k3 = fma((float4)(z.s3), bv, k3);
                k4 = fma((float4)(z.s4), bv, k4);
                k5 = fma((float4)(z.s5), bv, k5);
                k6 = fma((float4)(z.s6), bv, k6);
                k7 = fma((float4)(z.s7), bv, k7);
            }
            local float * kr = key_l + 8 * to * HD + 4 * dq;
            vstore4(k0, 0, kr);
            vstore4(k1, 0, kr + HD);
            vstore4(k2, 0, kr + 2 * HD);
            vstore4(k3, 0, kr + 3 * HD);
            vstore4(k4, 0, kr + 4 * HD);
            vstore4(k5, 0, kr + 5 * HD);
            vstore4(k6, 0, kr + 6 * HD);
            vstore4(k7, 0, kr + 7 * HD);
        }
        barrier(CLK_LOCAL_MEM_FENCE);  // keys done
        for (int e = tid; e < tn * HALF_ROT; e += NT) {
            const int t = e / HALF_ROT, i = e % HALF_ROT;
#if STYLE == 0
            const int a = i, bb = i + HALF_ROT;
#else
            const int a = 2 * i, bb = 2 * i + 1;
#endif
            float c1;
            const float s1 = sincos((float)t * inv_freq[i], &c1);
            const float cb = base_l[2 * i], sb = base_l[2 * i + 1];
            const float cs = cb * c1 - sb * s1, sn = sb * c1 + cb * s1;
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
