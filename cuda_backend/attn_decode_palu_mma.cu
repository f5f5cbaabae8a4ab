// attn_decode_palu on tensor cores: Palu's decode as Palu's own kernel does it, the key
// reconstruction latent . B_c as a matrix product on the tensor cores, fused with the rotation and
// the attention (no materialized key cache). attn_decode_palu.cu picks it for head_dim 64 or 128,
// latent widths <= 128 and a rotary pairing that stays inside a lane (below), and keeps its
// CUDA-core kernel otherwise.
//
// Why: the CUDA-core kernel spends k_width * head_dim FMAs on every cached key at every step; at
// Llama-3-8B shapes (16 x 32K, latent ranks of the 50 % profile) it took 13.7 ms against 0.50 ms for
// the fp16 decode of the same run, so the baseline FDC is compared with was a kernel nobody would
// ship. On the tensor cores the reconstruction is k_width / 16 mma per 16 tokens and 8 channels.
//
// Kernel attn_decode_palu_mma_kernel<HD>: one block of 4 warps per (schedule row, chunk of 4
//   query heads), as attn_decode_ragged_mma (ragged_mma.cuh: the same stream of staged latent K and
//   V rows, online softmax and V'^T P'^T product). Only the 16-row score step differs:
//   1. A fragments of the 16 latent rows (ldmatrix, as attn_decode_ragged_mma's K' rows).
//   2. Per 16-channel block cb of the key: K[16 x 16] = L B_c[:, cb] with mma.m16n8k16 (M = rows,
//      N = 8 channels, K = 16 latent dims; B_c as f16 B fragments built once per block in shared
//      memory, one 16-byte load per lane for two n-tiles and one latent step). The accumulator
//      holds lane (g, t)'s rows g and g + 8 at channels 16cb + 8n + 2t, + 1 (n = 0, 1).
//   3. RoPE on those accumulators. The interleaved pairs (2i, 2i + 1) are (c0, c1) and (c2, c3) of
//      one n-tile; the neox pairs (i, i + rot/2) are the same registers of blocks cb and
//      cb + rot/32, which the step rebuilds together (hence rot_dim % 32 == 0 for neox). The angle of
//      row r0 + j is base + j * theta: cos / sin of (pos0 + r0) theta_i per step (the warp's lanes,
//      two pairs each, angle reduced in double as the CUDA-core kernel does, into a per-warp slot)
//      combined by the angle-sum formulas with a per-block table of cos / sin (j theta_i), j < 16.
//      The table's rows are padded so that a warp's reads hit every bank once (table_stride).
//      Neox pairs are rotated after the rounding to f16 below, two pairs per f16x2 operation (the
//      angle sums stay fp32); interleaved ones in fp32.
//   4. The rotated block as the A operand of the score mma: the C layout of two n-tiles is the A
//      layout of one k16 step, rounded to f16 (q keeps its (hi, lo) columns). B_c is rounded to f16
//      too: keys with f16 relative error, as the fp16 cache stores them. The oracle's budget is
//      1e-6 NMSE (tests/backend_ops_lowrank_cases.cpp); the first version, which split the keys into
//      hi + lo f16 for a second score mma, measured 2.5e-10 on the op tests.
//   The q fragments live in shared memory (the neox pairing picks blocks at run time, and a
//   register array indexed at run time would go to local memory).
// Per 16 tokens and KV head: (k_width / 16) * (head_dim / 8) mma for the keys, head_dim / 8 for
// the scores, v_width / 16 for the values; on the CUDA cores the rotation's angle sums are 4 fp32
// operations per element pair, then 4 fp32 (interleaved) or 2 f16x2 per two pairs (neox).
//
// Invalid inputs a kernel cannot refuse: as attn_decode_ragged_mma (ragged_stream.cuh).
#include <algorithm>
#include <cmath>

#include "ragged_mma.cuh"

namespace kvcomp::cuda {

namespace {

constexpr int QH = kRaggedMmaHeads;
constexpr int kRopeRows = 16;  // rows of the per-block angle table: offsets within a 16-row step
// A ring stage: 7 KiB, attn_decode_ragged_mma's small stage, holds 16 rows of K and V latents up to
// 128 + 80 wide (the 50 % profile's widest); wider pairs get 8-row tiles (tile_stream's minimum),
// correct at half the mma use. Two blocks (rings, B_c fragments, tables: ~101 KiB each at head_dim
// 128) share an SM's 228 KiB.
constexpr int kStage = 7 * 1024;
constexpr int kMaxWidth = 128;

struct palu_mma_args {
    rdecode_args r;     // q [batch, n_q_heads * head_dim]; pages, tables, partials as attn_decode_ragged
    const float * aux;  // B_c at head_dim * k_offset[c] [k_width, head_dim], then inv_freq [rot_dim / 2]
    int n_q_heads, rot_dim;
    int nk_max;  // latent steps of the widest K head: the B_c fragments' shared memory
    bool neox;
};

// Row stride (floats) of the angle table for `half` rotary pairs. Neox steps read (cos, sin) of
// pairs i, i + 1 as one 16-byte load; 8 lanes at a time (rows g, g + 1, 4 lanes each, 16 floats
// apart) meet no bank twice when rows lie 16 mod 32 floats apart. Interleaved steps read one pair
// per lane; 16 lanes at a time (rows g .. g + 3) need rows 8 mod 32 floats apart. (Unpadded rows of
// 64 pairs, 0 mod 32, put a warp's 8 rows in the same banks.)
__host__ __device__ constexpr int table_stride(int half, bool neox) {
    return 2 * half + ((neox ? 16 : 8) - 2 * half % 32 + 32) % 32;
}

// Shared memory, in this order: the warps' rings | B_c fragments [HD / 16][nk][32 lanes]
// uint4 (nk: the task's latent steps; room for nk_max) | q fragments [HD / 16][32 lanes] uint2 |
// angle table [16][table_stride] f32 | per-warp angle slots [warps][HD / 2] float2. inv_freq is read
// from global memory (two cached loads per lane and step).
struct palu_smem {
    size_t basis = 0, qf = 0, table = 0, slots = 0, total = 0;
    __host__ __device__ constexpr palu_smem(int hd, int mk) {
        basis = size_t(kRaggedWarps) * kRaggedMmaStages * kStage;
        qf = basis + size_t(hd / 16) * mk * 32 * 16;
        table = qf + size_t(hd / 16) * 32 * 8;
        slots = table + size_t(kRopeRows) * (2 * (hd / 2) + 16) * 4;  // >= table_stride(half <= hd / 2)
        total = slots + size_t(kRaggedWarps) * (hd / 2) * 8;
    }
};
static_assert(palu_smem(128, kMaxWidth / 16).total <= 113 * 1024,
              "two blocks per SM on sm_90 (228 KiB, 1 KiB reserved per block)");
static_assert(warp_merge_floats<kRaggedWarps, QH, kMaxWidth>() * sizeof(float) <=
                  size_t(kRaggedWarps) * kRaggedMmaStages * kStage,
              "the warps' merge area must fit in the rings it reuses");

// (cos, sin) of pos * theta, the angle formed and reduced to [-pi, pi] in double (positions up to
// 2^31 keep ~1e-7 absolute phase error, as attn_decode_palu's CUDA-core kernel); then the hardware
// approximation (absolute error ~4e-7 on [-pi, pi]; sincosf's slow path for large arguments would
// put a local array on the kernel's stack).
__device__ __forceinline__ float2 rope_cos_sin(int pos, float theta) {
    const double ang = double(pos) * double(theta);
    constexpr double two_pi = 6.283185307179586476925286766559;
    constexpr double inv_two_pi = 0.15915494309189533576888376337251;
    const float red = float(ang - two_pi * rint(ang * inv_two_pi));
    float s, c;
    __sincosf(red, &s, &c);
    return make_float2(c, s);
}

// Rotates (x0, x1) by the angle whose cos / sin are base (+) off (angle-sum formulas).
__device__ __forceinline__ void rotate_pair(float & x0, float & x1, float2 base, float2 off) {
    const float c = base.x * off.x - base.y * off.y;
    const float s = base.y * off.x + base.x * off.y;
    const float y0 = x0 * c - x1 * s;
    x1 = x1 * c + x0 * s;
    x0 = y0;
}

// Keys of one channel block (16 channels) for the step's 16 rows: acc[n] = the n-tile of channels
// 8n .. + 7 of the block (C layout). bf: this lane's B_c fragments of the block, one uint4 per
// latent step kk < MK (the head's steps), 32 lanes apart.
template <int MK>
__device__ __forceinline__ void rebuild_block(const uint32_t (&la)[MK][4], const uint4 * bf, float (&acc)[2][4]) {
#pragma unroll
    for (int n = 0; n < 2; ++n)
#pragma unroll
        for (int k = 0; k < 4; ++k) acc[n][k] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < MK; ++kk) {
        const uint4 b = bf[32 * kk];
        mma_16816(acc[0], la[kk], b.x, b.y);
        mma_16816(acc[1], la[kk], b.z, b.w);
    }
}

// A rebuilt block as the f16 A operand of the score mma: the C layout of two n-tiles is one k16 A
// fragment (a0 = n-tile 0 row g, a1 = its row g + 8, a2 / a3 = n-tile 1); the low half of each pair
// is the lower channel.
__device__ __forceinline__ void pack_block(const float (&acc)[2][4], uint32_t (&a)[4]) {
    a[0] = pack_half2(acc[0][0], acc[0][1]);
    a[1] = pack_half2(acc[0][2], acc[0][3]);
    a[2] = pack_half2(acc[1][0], acc[1][1]);
    a[3] = pack_half2(acc[1][2], acc[1][3]);
}

// cos and sin of the angle sums base (+) off for two neighbouring rotary pairs (base, off: cos / sin
// of pair i in .x / .y, of pair i + 1 in .z / .w), as f16 pairs (pair i in the low half).
__device__ __forceinline__ void angle_pairs(float4 base, float4 off, __half2 & c, __half2 & s) {
    c = __floats2half2_rn(base.x * off.x - base.y * off.y, base.z * off.z - base.w * off.w);
    s = __floats2half2_rn(base.y * off.x + base.x * off.y, base.w * off.z + base.z * off.w);
}

// Neox rotation of two pairs in f16: x0 holds the pairs' first elements, x1 their second ones.
// The keys are f16 operands anyway; f16 products add about 2^-11 relative error (op tests: NMSE).
__device__ __forceinline__ void rotate_half2(uint32_t & x0, uint32_t & x1, __half2 c, __half2 s) {
    const __half2 a = *reinterpret_cast<const __half2 *>(&x0), b = *reinterpret_cast<const __half2 *>(&x1);
    const __half2 ra = __hfma2(a, c, __hneg2(__hmul2(b, s)));
    const __half2 rb = __hfma2(b, c, __hmul2(a, s));
    x0 = *reinterpret_cast<const uint32_t *>(&ra);
    x1 = *reinterpret_cast<const uint32_t *>(&rb);
}

// What a block's score steps read, set up once per block.
struct palu_block {
    const uint4 * basis;  // B_c fragments
    const uint2 * qf;     // q fragments
    const float * table;  // cos / sin (j theta_i) at [j * stride + 2 i], j < 16
    float2 * slot;         // this warp's cos / sin (pos theta_i) of the step's first row, [half]
    const float * freq;   // inv_freq (global)
    int nk, half, rot16, stride;  // latent steps of the head; rot_dim / 2; rot_dim / 16; table_stride
    bool neox;
};

// Fills the block's basis and q fragments and the angle table (every thread; the caller
// synchronizes the block before they are read).
template <int HD>
__device__ __forceinline__ void setup_block(const palu_mma_args & a, const rtask & t, uint8_t * smem, palu_block & pb) {
    const palu_smem L(HD, a.nk_max);
    const int tid = int(threadIdx.x), lane = tid & 31, kw = t.hd.k_width;
    uint4 * basis = reinterpret_cast<uint4 *>(smem + L.basis);
    uint2 * qf = reinterpret_cast<uint2 *>(smem + L.qf);
    float * table = reinterpret_cast<float *>(smem + L.table);
    pb.nk = (kw + 15) / 16;
    pb.half = a.rot_dim / 2;
    pb.rot16 = a.rot_dim / 16;
    pb.neox = a.neox;
    pb.stride = table_stride(pb.half, pb.neox);

    // B fragment of n-tile (channels 8 nt .. + 7) and latent step kk for lane (g, t): b0 = rows
    // 16kk + 2t, + 1 of column 8nt + g, b1 = rows + 8, + 9; rows past the width are zeros.
    const float * B = a.aux + int64_t(HD) * t.hd.k_offset;
    auto bval = [&](int r, int ch) { return r < kw ? B[r * HD + ch] : 0.0f; };
    for (int idx = tid; idx < (HD / 16) * pb.nk * 32; idx += kRaggedThreads) {
        const int ln = idx & 31, kk = (idx >> 5) % pb.nk, cb = (idx >> 5) / pb.nk;
        const int r = 16 * kk + 2 * (ln & 3), ch = 16 * cb + (ln >> 2);
        basis[idx] = make_uint4(pack_half2(bval(r, ch), bval(r + 1, ch)), pack_half2(bval(r + 8, ch), bval(r + 9, ch)),
                                pack_half2(bval(r, ch + 8), bval(r + 1, ch + 8)),
                                pack_half2(bval(r + 8, ch + 8), bval(r + 9, ch + 8)));
    }
    const float * inv_freq = a.aux + int64_t(HD) * a.r.k_total;
    for (int idx = tid; idx < kRopeRows * pb.half; idx += kRaggedThreads) {
        const int j = idx / pb.half, i = idx % pb.half;
        *reinterpret_cast<float2 *>(table + j * pb.stride + 2 * i) = rope_cos_sin(j, inv_freq[i]);
    }
    if (tid < 32) {  // warp 0: q of the chunk's heads at the full head_dim
        uint32_t bq[HD / 16][2];
        const float * q0 = a.r.q + (int64_t(t.b) * a.n_q_heads + int64_t(t.c) * a.r.group + t.h0) * HD;
        load_q_frags<HD / 16>([&](int h) { return q0 + int64_t(h) * HD; }, t.nh, HD, a.r.qscale, lane, bq);
#pragma unroll
        for (int cb = 0; cb < HD / 16; ++cb) qf[cb * 32 + lane] = make_uint2(bq[cb][0], bq[cb][1]);
    }
    pb.basis = basis + lane;
    pb.qf = qf + lane;
    pb.table = table;
    pb.slot = reinterpret_cast<float2 *>(smem + L.slots) + (tid >> 5) * (HD / 2);
    pb.freq = inv_freq;
}

// Scores of rows r0 .. r0 + 15 of the staged tile whose row 0 is token pos0 (see the banner).
template <int HD, int MK>
__device__ __forceinline__ float2 palu_scores(const palu_block & pb, const tile_view & tv, int r0, int hi, int pos0,
                                              int lane) {
    uint32_t la[MK][4];
    load_k_frags<MK>(tv, r0, hi, lane, la);
    __syncwarp();  // the previous step's reads of the slot are done
    for (int i = lane; i < pb.half; i += 32) pb.slot[i] = rope_cos_sin(pos0 + r0, pb.freq[i]);
    __syncwarp();

    const int g = lane >> 2, t4 = lane & 3;
    const float * off_g = pb.table + g * pb.stride;  // rows g and g + 8 of the angle table
    const float * off_g8 = off_g + 8 * pb.stride;
    float s[4] = {0.0f, 0.0f, 0.0f, 0.0f}, s2[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll 1  // unrolled, ptxas spills at 255 registers
    for (int pr = 0; pr < HD / 32; ++pr) {
        // The two blocks of this pass: a neox rotary pair (ca, ca + rot/32), else neighbours (the
        // interleaved blocks, and neox's unrotated ones past rot_dim).
        const bool neox_pair = pb.neox && 2 * pr < pb.rot16;
        const int ca = neox_pair ? pr : 2 * pr;
        const int cb = neox_pair ? pr + pb.rot16 / 2 : 2 * pr + 1;
        float ka[2][4], kb[2][4];
        rebuild_block<MK>(la, pb.basis + ca * MK * 32, ka);
        rebuild_block<MK>(la, pb.basis + cb * MK * 32, kb);
        uint32_t ha[4], hb[4];
        if (neox_pair) {  // rotated after packing: two pairs per f16x2 operation
            pack_block(ka, ha);
            pack_block(kb, hb);
#pragma unroll
            for (int n = 0; n < 2; ++n) {
                const int i = 16 * ca + 8 * n + 2 * t4;  // pairs i (low halves) and i + 1 (high halves)
                const float4 base = *reinterpret_cast<const float4 *>(pb.slot + i);
                __half2 c, sn;
                angle_pairs(base, *reinterpret_cast<const float4 *>(off_g + 2 * i), c, sn);
                rotate_half2(ha[2 * n], hb[2 * n], c, sn);  // row g
                angle_pairs(base, *reinterpret_cast<const float4 *>(off_g8 + 2 * i), c, sn);
                rotate_half2(ha[2 * n + 1], hb[2 * n + 1], c, sn);  // row g + 8
            }
        } else {
            if (!pb.neox) {  // interleaved: each pair is one register pair of one n-tile, rotated in fp32
#pragma unroll
                for (int n = 0; n < 2; ++n) {
                    const int i = 8 * ca + 4 * n + t4, j = i + 8;  // the lane's pairs in blocks ca and cb
                    if (i < pb.half) {
                        const float2 base = pb.slot[i];
                        rotate_pair(ka[n][0], ka[n][1], base, *reinterpret_cast<const float2 *>(off_g + 2 * i));
                        rotate_pair(ka[n][2], ka[n][3], base, *reinterpret_cast<const float2 *>(off_g8 + 2 * i));
                    }
                    if (j < pb.half) {
                        const float2 base = pb.slot[j];
                        rotate_pair(kb[n][0], kb[n][1], base, *reinterpret_cast<const float2 *>(off_g + 2 * j));
                        rotate_pair(kb[n][2], kb[n][3], base, *reinterpret_cast<const float2 *>(off_g8 + 2 * j));
                    }
                }
            }
            pack_block(ka, ha);
            pack_block(kb, hb);
        }
        const uint2 qa = pb.qf[32 * ca];
        mma_16816(s, ha, qa.x, qa.y);  // two accumulators: two chains of dependent mma
        const uint2 qb = pb.qf[32 * cb];
        mma_16816(s2, hb, qb.x, qb.y);
    }
    return make_float2(r0 + g < hi ? (s[0] + s2[0]) + (s[1] + s2[1]) : -INFINITY,
                       r0 + g + 8 < hi ? (s[2] + s2[2]) + (s[3] + s2[3]) : -INFINITY);
}

template <int HD, int MK, int MV>
__device__ __forceinline__ void run_palu_task(const palu_mma_args & a, const rtask & t, uint8_t * smem) {
    const int lane = int(threadIdx.x) & 31;
    palu_block pb;
    setup_block<HD>(a, t, smem, pb);
    __syncthreads();  // fragments and tables are written

    const int kw = t.hd.k_width, vw = t.hd.v_width;
    const int rs_k = stage_row_halves<true>(kw), rs_v = stage_row_halves<true>(vw);
    tile_view tv;
    tv.k_row = 2 * rs_k, tv.v_row = 2 * rs_v;
    tv.nk = (kw + 15) / 16, tv.nv = (vw + 15) / 16;
    tv.k_tail = (kw & 15) != 0 && (kw & 15) <= 8;
    rstate<MV> st;
    stream_tiles<kStage>(a.r, t, smem, (kStage / (2 * (rs_k + rs_v))) & ~15, st, tv,
                         [&](const tile_view & v, int r0, int hi, int pos0) {
                             return palu_scores<HD, MK>(pb, v, r0, hi, pos0, lane);
                         });
    finish_ragged_mma_task<kMaxWidth>(a.r, t, st, tv.nv, smem);
}

// HD: head_dim (64 or 128). The rebuild is compiled for the task's exact latent steps (MK = 1..8):
// with a bound instead, every skipped step was a predicated mma behind a WARPSYNC and a compare,
// and the loop's register copies grew (Nsight Compute, c36d8df). The V' steps keep one bound (8,
// guarded; they are one mma per 16 channels).
template <int HD>
__global__ void __launch_bounds__(kRaggedThreads, 2) attn_decode_palu_mma_kernel(const palu_mma_args a) {
    extern __shared__ uint4 smem_raw[];
    uint8_t * smem = reinterpret_cast<uint8_t *>(smem_raw);
    rtask t;
    if (!load_mma_task<kMaxWidth>(a.r, QH, t)) return;  // uniform
    t.hd.k_width = min(t.hd.k_width, 16 * a.nk_max);     // the B_c fragments' room
    switch ((t.hd.k_width + 15) / 16) {
        case 1: return run_palu_task<HD, 1, 8>(a, t, smem);
        case 2: return run_palu_task<HD, 2, 8>(a, t, smem);
        case 3: return run_palu_task<HD, 3, 8>(a, t, smem);
        case 4: return run_palu_task<HD, 4, 8>(a, t, smem);
        case 5: return run_palu_task<HD, 5, 8>(a, t, smem);
        case 6: return run_palu_task<HD, 6, 8>(a, t, smem);
        case 7: return run_palu_task<HD, 7, 8>(a, t, smem);
        default: return run_palu_task<HD, 8, 8>(a, t, smem);
    }
}

}  // namespace

bool palu_mma_handles(const attn_decode_palu_params & p) {
    const ragged_layout & l = p.kv;
    if (!(ragged_mma_requested() && (p.head_dim == 64 || p.head_dim == 128) && l.bits == 16 && l.max_width >= 1 &&
          l.max_width <= kMaxWidth && p.rot_dim >= 0 && p.rot_dim <= p.head_dim && p.rot_dim % 2 == 0 &&
          (p.style != rope_style::neox || p.rot_dim % 32 == 0)))
        return false;
    // ~101 KiB at head_dim 128: more than sm_86 / sm_89 allow a block (99 KiB); the CUDA-core kernel
    // runs there.
    return palu_smem(int(p.head_dim), int((l.max_width + 15) / 16)).total <= size_t(smem_optin_limit());
}

namespace {

task_kernel<palu_mma_args> palu_mma_kernel_for(const attn_decode_palu_params & p) {
    const int64_t group = p.n_q_heads / std::max<int64_t>(1, p.kv.n_kv_heads);
    const size_t smem = palu_smem(int(p.head_dim), int((p.kv.max_width + 15) / 16)).total;
    return {p.head_dim == 64 ? attn_decode_palu_mma_kernel<64> : attn_decode_palu_mma_kernel<128>, kRaggedThreads,
            smem, unsigned((group + QH - 1) / QH)};
}

}  // namespace

int64_t concurrent_rows_attn_decode_palu_mma(const attn_decode_palu_params & p) {
    return concurrent_task_rows(palu_mma_kernel_for(p));
}

void run_attn_decode_palu_mma(context & ctx, const op_desc & op) {
    const auto & p = op.get<attn_decode_palu_params>();
    palu_mma_args a{};
    a.r = ragged_task_args(op, p.kv, p.batch, p.n_q_heads, p.n_tasks, p.scale);
    a.aux = dev_ptr<const float>(op.src[9]);
    a.n_q_heads = int(p.n_q_heads);
    a.rot_dim = int(p.rot_dim);
    a.nk_max = int((p.kv.max_width + 15) / 16);
    a.neox = p.style == rope_style::neox;
    if (p.n_tasks > 0) {
        take_ragged_partials(ctx, a.r, p.n_tasks, a.r.group);
        launch_task_kernel(ctx, palu_mma_kernel_for(p), p.n_tasks, a);
    }
    merge_ragged_rows(ctx, a.r, a.r.batch, a.r.group, a.r.n_tasks);
}

}  // namespace kvcomp::cuda
