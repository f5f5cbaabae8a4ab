// attn_decode_palu_mma.cl: Palu's decode (keys rebuilt from pre-RoPE latents and rotated at every step,
// values as latents) on the tensor cores, for NVIDIA's driver: every warp runs its own 16-row steps of the
// task, the key reconstruction latent . B_c, the scores and the values on mma.sync. It is the OpenCL form of
// cuda_backend/attn_decode_palu_mma.cu (its fragment layouts, rotation on the accumulators, angle table and
// pass structure; see its banner) over the per-warp task of attn_decode_ragged_mma.cl (softmax per lane,
// V'^T P'^T values, the warps' merge). attn_decode_palu.cl is the portable kernel, whose work-group builds
// each tile's keys on the CUDA cores (k_width * head_dim FMAs per key).
//
// Why: on an H200 through NVIDIA's driver the portable kernel took 9.4 ms at 16 x 32K p50 (Llama-3-8B
// shapes, 50 % profile), ~12x CUDA's tensor-core kernel, so OpenCL's FDC-vs-Palu comparison measured a
// CUDA-core Palu. Here the rebuild is k_width / 16 mma per 16 tokens and 8 channels.
//
// Kernel kvc_adp_warps: one work-group of NW warps per (row of the host's task list, sub-group of GB <= 4
//   query heads); NDRange local (32 NW, 1), global (32 NW n_tasks, G / GB). The task is (request b, KV head c,
//   tokens [first, end)); warp w takes its 16-row steps w, w + NW, ... At the start the work-group writes to
//   local memory the f16 B fragments of B_c (as CUDA's setup_block), q's (hi, lo) B fragments and the angle
//   table cos / sin (j theta_i), j < 16; then every step of a warp (lane (g, t) = (lane / 4, lane % 4)):
//     1. A fragments of the 16 latent rows, read by each lane from the pages (rows g and g + 8, channel pairs
//        16 kk + 2t, + 8: 32-bit loads where the head's rows are 4-byte aligned, else 16-bit ones; zeros past
//        the width). Not staged: CUDA's per-warp rings do not fit the driver's 48 KiB of local memory next to
//        B_c's fragments (32 KiB at head_dim 128 and latents of 128) and the angle table (9 KiB), so the
//        fragments come straight through L1 (a step's 16 rows are one or two pages' runs, so the four
//        32-bit loads of a latent step fall into the same 32-byte sectors);
//     2. per pass of two channel blocks (ca, cb): K[16 x 16] = L B_c[:, block] on mma.m16n8k16 (M = rows, N = 8
//        channels, K = 16 latents; one 16-byte local load per lane gives both n-tiles' B registers of one
//        latent step). The accumulators hold rows g and g + 8 at channels 16 cb + 8 n + 2t, + 1. A pass is a
//        neox rotary pair of blocks (ca, ca + rot / 32; hence rot_dim % 32 == 0 for neox), else neighbours
//        (interleaved pairs (2i, 2i + 1) are one register pair of one n-tile; neox blocks past rot_dim);
//     3. RoPE on the accumulators in fp32: the angle of row j is (tok0 + j) theta_i = base (+) offset, base =
//        cos / sin (tok0 theta_i) per step in the warp's slot (the angle formed and reduced to [-pi, pi] in
//        fp64 where the device has it, then native cos / sin), offset from the table row j, joined by the
//        angle-sum formulas (CUDA rotates neox pairs in f16x2; this kernel keeps both styles in fp32);
//     4. the rotated block is the A operand of the score mma (the C layout of two n-tiles is one k16 A
//        fragment), rounded to f16 as CUDA's; N = 8 = (hi, lo) f16 parts of q for 4 heads;
//     5. softmax per lane (kvc_softmax_lazy) and values O^T = V'^T P'^T as attn_decode_ragged_mma.cl, the V'
//        rows 2t, 2t + 1, 2t + 8, 2t + 9 read from the pages (channel pairs merged by prmt; zeros past the
//        width, so nothing is read past a row).
//   Rows past the task's tokens read the step's last row and get score -inf. B_c and the keys are f16
//   operands (keys with f16 relative error, as CUDA's kernel; the op tests' budget is 1e-6 NMSE), the
//   products and every sum fp32. At the end the warps' states merge in local memory (over B_c's fragments);
//   the only task of its (b, c) writes the normalized output, otherwise the task writes its unnormalized
//   output and (m, l) for kvc_attn_decode_ragged_merge, as attn_decode_palu.cl.
// Layout and arguments: attn_decode_palu.cl's (q f32 [batch, n_kv_heads * G, HD]; aux: B_c [k_width(c), HD]
//   at HD * k_offset(c), inv_freq [ROT / 2] at HD * k_total; partials (task * G + g) * MW).
// Local memory: B_c fragments [HD / 16][nk][32 lanes] uint4 (room for MK latent steps), q fragments
//   [HD / 16][32] uint2, angle table [16][TSTRIDE] floats, per-warp slots [NW][ROT / 2] float2.
// Preamble defines: G, GB (divides G, <= 4), MW (<= 128: bound on every width), HD (64 or 128), ROT (even,
//   <= HD; a multiple of 32 for neox), STYLE (0 neox, 1 interleaved), PAGE_SIZE, NW (warps per work-group),
//   KVC_ASM.

#ifdef cl_khr_fp64
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#endif

#define MK ((MW + 15) / 16)   // latent steps of the widest K head, m-tiles of the widest V head
#define NCB (HD / 16)         // 16-channel blocks of a key
#define HALF_ROT (ROT / 2)
#define HALF_ROT1 (HALF_ROT > 0 ? HALF_ROT : 1)  // array sizes and divisors
// Table row stride (floats), CUDA's table_stride: neox reads (cos, sin) of pairs i, i + 1 as one 16-byte load,
// rows 16 mod 32 floats apart; interleaved one pair per lane, rows 8 mod 32 apart (no bank met twice).
#define TSTRIDE (2 * HALF_ROT + ((STYLE == 0 ? 16 : 8) - (2 * HALF_ROT) % 32 + 32) % 32)
#define QW (16 * MK)  // merge row (floats)
#define MERGE_F (NW * 4 * QW + 2 * NW * 4)
#define BASIS_Q (NCB * MK * 32)                                             // uint4 fragments
#define AREA_Q (4 * BASIS_Q >= MERGE_F ? BASIS_Q : (MERGE_F + 3) / 4)  // uint4s

// (cos, sin) of pos * theta: the angle formed and reduced to [-pi, pi] in fp64 where the device has it
// (positions up to 2^31 keep ~1e-7 absolute phase error, as attn_decode_palu.cl's fp64 base), then the
// hardware approximation (absolute error ~5e-7 on [-pi, pi]; the full-precision sincos's path for large
// arguments would put an array in private memory).
KVC_INLINE float2 kvc_rope_cs(int pos, float theta) {
#ifdef cl_khr_fp64
    const double ang = (double)pos * (double)theta;
    const float red = (float)(ang - 6.283185307179586476925 * rint(ang * 0.159154943091895335768883763));
#else
    const float ang = (float)pos * theta;  // as attn_decode_palu.cl without fp64
    const float red = ang - 6.28318530718f * rint(ang * 0.159154943092f);
#endif
    return (float2)(native_cos(red), native_sin(red));
}

// Channels c, c + 1 of an f16 row as one register (c in the low half), zeros from the width w on. vec: the
// row and c are 4-byte aligned (even widths and offsets), so one 32-bit load.
KVC_INLINE uint kvc_row_pair(global const ushort * row, int c, int w, int vec) {
    if (vec) return c < w ? *(global const uint *)(row + c) : 0u;
    const uint lo = c < w ? (uint)row[c] : 0u, hi = c + 1 < w ? (uint)row[c + 1] : 0u;
    return lo | hi << 16;
}

// Token tok's row of one head (width w) in the pages: page entry pidx[tok / PAGE_SIZE].
KVC_INLINE global const ushort * kvc_head_row(global const ushort * pages, ulong page_elems, ulong head_elems,
                                              int w, global const int * pidx, int tok) {
    return pages + (ulong)pidx[tok / PAGE_SIZE] * page_elems + head_elems + (ulong)(tok % PAGE_SIZE) * w;
}

// One 16-byte local load (ld.shared.v4: a local pointer's integer value is its shared-window address on
// NVIDIA's compiler, as kvc_cp_async16 relies on). Plain uint4 loads of the B fragments came out of clang as two
// 8-byte loads each (the four words feed two mma).
KVC_INLINE uint4 kvc_lds128(local const uint4 * p) {
    uint4 r;
    KVC_ASM volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];"
                     : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
                     : "l"((ulong)p));
    return r;
}

// (x0, x1) rotated by the angle whose cos / sin are c, s.
#define KVC_ROTATE(x0, x1, c, s)                     \
    do {                                             \
        const float y0_ = (x0) * (c) - (x1) * (s);   \
        (x1) = (x1) * (c) + (x0) * (s);              \
        (x0) = y0_;                                  \
    } while (0)

// Interleaved pair i (channels 2i, 2i + 1) of n-tile n of one block's keys k: (c0, c1) of row g and (c2, c3) of
// row g + 8, rotated by the step's base angle (slot) joined with rows g and g + 8's offsets (off_g, off_g8). A
// macro: the key arrays passed to a function went to private memory.
#define KVC_ROTATE_INTERLEAVED(k, n, i)                                                              \
    do {                                                                                             \
        if ((i) < HALF_ROT) {                                                                        \
            const float2 bs_ = *(local const float2 *)(slot + 2 * (i));                              \
            const float2 f0_ = *(local const float2 *)(off_g + 2 * (i));                             \
            const float2 f8_ = *(local const float2 *)(off_g8 + 2 * (i));                            \
            float cs_ = bs_.x * f0_.x - bs_.y * f0_.y, sn_ = bs_.y * f0_.x + bs_.x * f0_.y;          \
            KVC_ROTATE((k)[4 * (n)], (k)[4 * (n) + 1], cs_, sn_);                                    \
            cs_ = bs_.x * f8_.x - bs_.y * f8_.y, sn_ = bs_.y * f8_.x + bs_.x * f8_.y;                \
            KVC_ROTATE((k)[4 * (n) + 2], (k)[4 * (n) + 3], cs_, sn_);                                \
        }                                                                                            \
    } while (0)

// k[0..7] (n-tile 0: c0..c3, n-tile 1: c0..c3) = the keys of one 16-channel block for the step's rows: the
// latent A fragments la[4 kk .. 4 kk + 3] times the block's B fragments bf[32 kk] (kk < nk).
#define KVC_REBUILD(k, la, bf, nk)                                                                            \
    do {                                                                                                      \
        _Pragma("unroll") for (int i_ = 0; i_ < 8; ++i_)(k)[i_] = 0.0f;                                        \
        _Pragma("unroll") for (int kk_ = 0; kk_ < MK; ++kk_) {                                               \
            if (kk_ < (nk)) { /* uniform */                                                                   \
                const uint4 b_ = kvc_lds128((bf) + 32 * kk_);                                                 \
                KVC_MMA_16816((k)[0], (k)[1], (k)[2], (k)[3], (la)[4 * kk_], (la)[4 * kk_ + 1],               \
                              (la)[4 * kk_ + 2], (la)[4 * kk_ + 3], b_.x, b_.y);                              \
                KVC_MMA_16816((k)[4], (k)[5], (k)[6], (k)[7], (la)[4 * kk_], (la)[4 * kk_ + 1],               \
                              (la)[4 * kk_ + 2], (la)[4 * kk_ + 3], b_.z, b_.w);                              \
            }                                                                                                 \
        }                                                                                                     \
    } while (0)

kernel __attribute__((reqd_work_group_size(32 * NW, 1, 1)))
void kvc_adp_warps(global const float * q, ulong q_off, global const ushort * k_pages, ulong k_off,
                   global const ushort * v_pages, ulong v_off, global const int * indptr, ulong indptr_off,
                   global const int * indices, ulong indices_off, global const int * last_len, ulong last_len_off,
                   global const int * heads, ulong heads_off, global const int * sched, ulong sched_off,
                   global const int * merge, ulong merge_off, global const float * aux, ulong aux_off,
                   global float * out, ulong out_off, global float * part, ulong ml_off, int n_kv_heads,
                   int k_total, int v_total, float qscale) {
    local uint4 area[AREA_Q];                       // B_c fragments; at the end the warps' merge
    local uint2 qf[NCB * 32];                       // q fragments [block][lane]
    local float4 table4[(16 * TSTRIDE + 3) / 4];    // cos, sin (j theta_i) at [j * TSTRIDE + 2 i]
    local float4 slots4[(NW * 2 * HALF_ROT1 + 3) / 4];  // per warp: cos, sin (tok0 theta_i) at [2 i]
    local float * table = (local float *)table4;

    const int tid = get_local_id(0), lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
    const int task = get_group_id(0), g0 = get_group_id(1) * GB;
    heads += heads_off;
    const kvc_ragged_task T =
        kvc_ragged_task_at(sched + sched_off, heads, merge + merge_off, indptr + indptr_off, task, n_kv_heads);
    const int b = T.b, c = T.c, first = T.first, end = T.end, ko = T.ko, vo = T.vo;
    const int kw = clamp(T.kw, 1, MW), vw = clamp(T.vw, 1, MW);
    const int nk = (kw + 15) / 16, nv = (vw + 15) / 16;
    global const int * pidx = indices + indices_off + T.p0;
    k_pages += k_off;
    v_pages += v_off;
    global const float * basis = aux + aux_off + (ulong)HD * ko;
    global const float * inv_freq = aux + aux_off + (ulong)HD * k_total;

    // B fragment of n-tile (channels 8 n .. + 7 of block cb) and latent step kk for lane (g, t): b0 = rows
    // 16 kk + 2t, + 1 of column 8 n + g, b1 = rows + 8, + 9; .xy n-tile 0, .zw n-tile 1; zeros past the width.
    for (int idx = tid; idx < NCB * nk * 32; idx += 32 * NW) {
        const int ln = idx & 31, kk = (idx >> 5) % nk, cb = (idx >> 5) / nk;
        const int r = 16 * kk + 2 * (ln & 3), ch = 16 * cb + (ln >> 2);
        float x[8];
#pragma unroll
        for (int e = 0; e < 8; ++e) {  // rows r, r + 1, r + 8, r + 9 at ch, then at ch + 8
            const int re = r + (e & 1) + ((e >> 1) & 1) * 8, ce = ch + (e >> 2) * 8;
            x[e] = re < kw ? basis[(ulong)re * HD + ce] : 0.0f;
        }
        area[idx] = (uint4)(kvc_pack_half2(x[0], x[1]), kvc_pack_half2(x[2], x[3]), kvc_pack_half2(x[4], x[5]),
                            kvc_pack_half2(x[6], x[7]));
    }
    for (int idx = tid; idx < 16 * HALF_ROT; idx += 32 * NW) {
        const int j = idx / HALF_ROT1, i = idx % HALF_ROT1;
        vstore2(kvc_rope_cs(j, inv_freq[i]), 0, table + j * TSTRIDE + 2 * i);
    }
    if (warp == 0) {
        // q's B fragments: column g = head g / 2 of the sub-group, hi (even g) or what f16 missed (odd g);
        // channels 16 cb + 2t, + 1 (.x) and + 8, + 9 (.y); zero for heads >= GB.
        const int h = g >> 1;
        global const float * qh =
            q + q_off + ((ulong)b * n_kv_heads + c) * G * HD + (ulong)(g0 + min(h, GB - 1)) * HD;
        for (int cb = 0; cb < NCB; ++cb) {
            const int ch = 16 * cb + 2 * t;
            float x0 = 0.0f, x1 = 0.0f, x8 = 0.0f, x9 = 0.0f;
            if (h < GB) {
                x0 = qh[ch] * qscale, x1 = qh[ch + 1] * qscale, x8 = qh[ch + 8] * qscale, x9 = qh[ch + 9] * qscale;
            }
            qf[cb * 32 + lane] = (uint2)(kvc_split_pair(x0, x1, g & 1), kvc_split_pair(x8, x9, g & 1));
        }
    }
    barrier(CLK_LOCAL_MEM_FENCE);  // fragments and table are written

    const int k_vec = ((k_off | (ulong)ko | (ulong)kw | (ulong)k_total) & 1) == 0;
    const int v_vec = ((v_off | (ulong)vo | (ulong)vw | (ulong)v_total) & 1) == 0;
    const ulong k_page = (ulong)PAGE_SIZE * k_total, v_page = (ulong)PAGE_SIZE * v_total;
    const ulong k_head = (ulong)PAGE_SIZE * ko, v_head = (ulong)PAGE_SIZE * vo;
    local const uint4 * bf = area + lane;
    local const uint2 * qfl = qf + lane;
    local float * slot = (local float *)slots4 + warp * 2 * HALF_ROT1;
    local const float * off_g = table + g * TSTRIDE;  // table rows g and g + 8
    local const float * off_g8 = off_g + 8 * TSTRIDE;

    float o[4 * MK];
#pragma unroll
    for (int i = 0; i < 4 * MK; ++i) o[i] = 0.0f;
    float m = -INFINITY, l = 0.0f;

    const int n_steps = end > first ? (end - first + 15) / 16 : 0;
    for (int st = warp; st < n_steps; st += NW) {  // uniform per warp
        const int tok0 = first + 16 * st, hi = min(16, end - tok0);
        // 1. latent A fragments: a0 / a2 row g at channels 16 kk + 2t (+ 8), a1 / a3 row g + 8
        uint la[4 * MK];
        {
            global const ushort * ra = kvc_head_row(k_pages, k_page, k_head, kw, pidx, tok0 + min(g, hi - 1));
            global const ushort * rb = kvc_head_row(k_pages, k_page, k_head, kw, pidx, tok0 + min(g + 8, hi - 1));
#pragma unroll
            for (int kk = 0; kk < MK; ++kk) {
                if (kk < nk) {  // uniform
                    const int ch = 16 * kk + 2 * t;
                    la[4 * kk] = kvc_row_pair(ra, ch, kw, k_vec);
                    la[4 * kk + 1] = kvc_row_pair(rb, ch, kw, k_vec);
                    la[4 * kk + 2] = kvc_row_pair(ra, ch + 8, kw, k_vec);
                    la[4 * kk + 3] = kvc_row_pair(rb, ch + 8, kw, k_vec);
                }
            }
        }
        // the step's base angles
        kvc_warp_sync();  // every lane is done with the previous step's slot
        for (int i = lane; i < HALF_ROT; i += 32) vstore2(kvc_rope_cs(tok0, inv_freq[i]), i, slot);
        kvc_warp_sync();

        // 2-4. keys, rotation, scores: two accumulators (blocks ca and cb), two chains of dependent mma
        float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, s3 = 0.0f, e0 = 0.0f, e1 = 0.0f, e2 = 0.0f, e3 = 0.0f;
#pragma unroll 1
        for (int pr = 0; pr < HD / 32; ++pr) {
            const int neox_pair = STYLE == 0 && 2 * pr < ROT / 16;
            const int ca = neox_pair ? pr : 2 * pr;
            const int cb = neox_pair ? pr + ROT / 32 : 2 * pr + 1;
            float ka[8], kb[8];
            KVC_REBUILD(ka, la, bf + ca * nk * 32, nk);
            KVC_REBUILD(kb, la, bf + cb * nk * 32, nk);
#if STYLE == 0
            if (neox_pair) {  // pairs (i, i + ROT / 2): the same registers of blocks ca and cb
#pragma unroll
                for (int n = 0; n < 2; ++n) {
                    const int i = 16 * ca + 8 * n + 2 * t;  // pairs i (c0, c2) and i + 1 (c1, c3)
                    const float4 bs = *(local const float4 *)(slot + 2 * i);
                    const float4 f0 = *(local const float4 *)(off_g + 2 * i);   // row g
                    const float4 f8 = *(local const float4 *)(off_g8 + 2 * i);  // row g + 8
                    float cs = bs.x * f0.x - bs.y * f0.y, sn = bs.y * f0.x + bs.x * f0.y;
                    KVC_ROTATE(ka[4 * n], kb[4 * n], cs, sn);
                    cs = bs.z * f0.z - bs.w * f0.w, sn = bs.w * f0.z + bs.z * f0.w;
                    KVC_ROTATE(ka[4 * n + 1], kb[4 * n + 1], cs, sn);
                    cs = bs.x * f8.x - bs.y * f8.y, sn = bs.y * f8.x + bs.x * f8.y;
                    KVC_ROTATE(ka[4 * n + 2], kb[4 * n + 2], cs, sn);
                    cs = bs.z * f8.z - bs.w * f8.w, sn = bs.w * f8.z + bs.z * f8.w;
                    KVC_ROTATE(ka[4 * n + 3], kb[4 * n + 3], cs, sn);
                }
            }
#else
#pragma unroll
            for (int n = 0; n < 2; ++n) {  // pairs (2i, 2i + 1): (c0, c1) and (c2, c3) of one n-tile
                const int i = 8 * ca + 4 * n + t, j = i + 8;  // the lane's pairs in blocks ca and cb = ca + 1
                KVC_ROTATE_INTERLEAVED(ka, n, i);
                KVC_ROTATE_INTERLEAVED(kb, n, j);
            }
#endif
            // the C layout of two n-tiles is one k16 A fragment: a0 row g / a1 row g + 8 of n-tile 0, a2 / a3
            // of n-tile 1
            const uint2 qa = qfl[32 * ca], qb = qfl[32 * cb];
            KVC_MMA_16816(s0, s1, s2, s3, kvc_pack_half2(ka[0], ka[1]), kvc_pack_half2(ka[2], ka[3]),
                          kvc_pack_half2(ka[4], ka[5]), kvc_pack_half2(ka[6], ka[7]), qa.x, qa.y);
            KVC_MMA_16816(e0, e1, e2, e3, kvc_pack_half2(kb[0], kb[1]), kvc_pack_half2(kb[2], kb[3]),
                          kvc_pack_half2(kb[4], kb[5]), kvc_pack_half2(kb[6], kb[7]), qb.x, qb.y);
        }
        // head t's scores of rows g and g + 8 (hi + lo columns)
        const float sx = g < hi ? (s0 + e0) + (s1 + e1) : -INFINITY;
        const float sy = g + 8 < hi ? (s2 + e2) + (s3 + e3) : -INFINITY;

        // 5. softmax and values
        float p0, p1;
        int moved;
        const float alpha = kvc_softmax_lazy(&m, &l, sx, sy, &p0, &p1, &moved);
        if (moved) {  // warp-uniform
#pragma unroll
            for (int i = 0; i < 4 * MK; ++i) o[i] *= alpha;
        }
        {
            float w[4];
            kvc_transpose_p(p0, p1, g, t, w);
            uint b0, b1;
            kvc_p_frag(w[0], w[1], w[2], w[3], g & 1, &b0, &b1);
            // rows 2t, 2t + 1, 2t + 8, 2t + 9 at channel pairs 16 m + 2g
            global const ushort * v0 = kvc_head_row(v_pages, v_page, v_head, vw, pidx, tok0 + min(2 * t, hi - 1));
            global const ushort * v1 = kvc_head_row(v_pages, v_page, v_head, vw, pidx, tok0 + min(2 * t + 1, hi - 1));
            global const ushort * v2 = kvc_head_row(v_pages, v_page, v_head, vw, pidx, tok0 + min(2 * t + 8, hi - 1));
            global const ushort * v3 = kvc_head_row(v_pages, v_page, v_head, vw, pidx, tok0 + min(2 * t + 9, hi - 1));
#pragma unroll
            for (int mt = 0; mt < MK; ++mt) {
                if (mt < nv) {  // uniform
                    const int ch = 16 * mt + 2 * g;
                    const uint x0 = kvc_row_pair(v0, ch, vw, v_vec), x1 = kvc_row_pair(v1, ch, vw, v_vec);
                    const uint x2 = kvc_row_pair(v2, ch, vw, v_vec), x3 = kvc_row_pair(v3, ch, vw, v_vec);
                    KVC_MMA_16816(o[4 * mt], o[4 * mt + 1], o[4 * mt + 2], o[4 * mt + 3], kvc_prmt(x0, x1, 0x5410u),
                                  kvc_prmt(x0, x1, 0x7632u), kvc_prmt(x2, x3, 0x5410u), kvc_prmt(x2, x3, 0x7632u),
                                  b0, b1);
                }
            }
        }
    }
    l = kvc_head_sum(l);

    // Merge the warps: outputs [NW][4][QW], maxima and sums [NW][4], over the B_c fragments.
    barrier(CLK_LOCAL_MEM_FENCE);  // every warp is done with the fragments
    local float * sm = (local float *)area;
    KVC_STORE_WARP_STATE(sm, o, MK, NW, QW, warp, g, t, m, l);
    barrier(CLK_LOCAL_MEM_FENCE);
    const ulong prow0 = (ulong)task * G + g0;
    global float * out_h0 = out + out_off + (ulong)b * G * v_total + (ulong)G * vo + (ulong)g0 * vw;
    kvc_ragged_warps_output(sm, NW, QW, GB, 32 * NW, vw, T.n_in_list, out_h0, part, prow0, MW, ml_off);
}
