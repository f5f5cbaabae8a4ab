// common.cl: helpers included before every kvcomp kernel file (after the #define preamble).
//
// Kernels: none. Provides
//   - dtype codes KVC_F32 / KVC_F16 / KVC_BF16 (= kvcomp::dtype values 0, 1, 2);
//   - KVC_TYPE(dt): the pointer element type of a buffer of that dtype (float, half, ushort);
//   - KVC_LOAD(dt, p, i) -> float and KVC_STORE(dt, p, i, v): element access with conversion.
//     fp16 is storage only (vload_half / vstore_half_rte: no cl_khr_fp16 needed, so NVIDIA's OpenCL
//     works); stores round to nearest even, matching the CPU reference bit for bit. bf16 is a ushort
//     holding the top half of an fp32, rounded to nearest even, NaN kept quiet (as core/dtype.h).
//   - kvc_merge_splits(): the split-KV merge of decode attention (attn_decode, attn_decode_quant);
//   - KVC_QDECODE_PARAMS and kvc_qdecode_work_of(): the quantized decodes' parameters and what one of their
//     work-groups computes;
//   - kvc_ragged_task_output(): the end of a ragged decode task (attn_decode_ragged, its q4 pages);
//   - kvc_clear_max() / kvc_propose_max() / kvc_take_max(): the decode kernels' lazily moved running
//     maximum of the online softmax, proposed through local atomics;
//   - KVC_LOAD4(dt, p, i) / KVC_LOADA4(dt, p, i): 4 consecutive elements p[4i..4i+3] as float4; the
//     "A" form requires the address to be aligned to 4 elements and lets the compiler emit one
//     vector load (8 or 16 bytes) instead of four scalar ones;
//   - with KVC_ASM (NVIDIA's driver only, where lib/opencl/nv_mma_probe.cpp found that inline PTX
//     works): KVC_MMA_16816, kvc_round_half(), kvc_pack_half2(), kvc_split_pair(), kvc_shfl_xor() / kvc_shfl_idx(), kvc_any(),
//     kvc_warp_sync(), the per-warp decodes' softmax and P' operand (kvc_head_sum(), kvc_softmax_lazy(),
//     kvc_transpose_p(), kvc_p_frag()) and their end (KVC_STORE_WARP_STATE, kvc_merge_warps()), and the code
//     operands kvc_qk_pair() / kvc_f_pair() / kvc_code_pair() / kvc_prmt().
//     The probe kernel runs the same KVC_MMA_16816 that the kernels use.
// Layout: all buffers are flat arrays; kernels receive (pointer, element offset) pairs.
// Preamble defines used here: KVC_ASM (the inline-assembly keyword, `__asm__` or `asm`), optional.

#define KVC_F32 0
#define KVC_F16 1
#define KVC_BF16 2

#define KVC_CAT_(a, b) a##b
#define KVC_CAT(a, b) KVC_CAT_(a, b)

inline float kvc_bf16_to_f32(ushort h) { return as_float((uint)h << 16); }

inline ushort kvc_f32_to_bf16(float f) {
    uint x = as_uint(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (ushort)((x >> 16) | 0x40u);  // NaN stays quiet
    x += 0x7fffu + ((x >> 16) & 1u);                                          // round to nearest even
    return (ushort)(x >> 16);
}

#define KVC_T_0 float
#define KVC_T_1 half
#define KVC_T_2 ushort
#define KVC_TYPE(dt) KVC_CAT(KVC_T_, dt)

#define KVC_LD_0(p, i) ((p)[i])
#define KVC_LD_1(p, i) vload_half((i), (p))
#define KVC_LD_2(p, i) kvc_bf16_to_f32((p)[i])
#define KVC_LOAD(dt, p, i) KVC_CAT(KVC_LD_, dt)(p, i)

#define KVC_ST_0(p, i, v) ((p)[i] = (v))
#define KVC_ST_1(p, i, v) vstore_half_rte((v), (i), (p))
#define KVC_ST_2(p, i, v) ((p)[i] = kvc_f32_to_bf16(v))
#define KVC_STORE(dt, p, i, v) KVC_CAT(KVC_ST_, dt)(p, i, v)

#define KVC_LD4_0(p, i) vload4((i), (p))
#define KVC_LD4_1(p, i) vload_half4((i), (p))
#define KVC_LOAD4(dt, p, i) KVC_CAT(KVC_LD4_, dt)(p, i)

#define KVC_LDA4_0(p, i) (((const global float4 *)(p))[i])
#define KVC_LDA4_1(p, i) vloada_half4((i), (p))
#define KVC_LOADA4(dt, p, i) KVC_CAT(KVC_LDA4_, dt)(p, i)

// The running maximum of the decode kernels' online softmax (attn_decode, attn_decode_quant,
// attn_decode_ragged and its q4 pages), moved lazily. Each head's running max m (log2 units, the same
// in every work-item) moves only when a score of the tile exceeds it by more than KVC_LAZY_MAX; then
// it becomes the tile's maximum. So weights exp2(s - m) stay below 2^KVC_LAZY_MAX, which fp32 sums
// hold at full relative precision; the kernels divide by l at the end and the merges take (m, l)
// pairs with any m, so results do not depend on which m was used.
//   Why: phase 2 used to scan the whole tile in every work-item (tn local loads and GBP * tn fmax
//   each, for NT = 64 more instructions than a 64-wide head's scores). Now a work-item whose score
//   exceeds the bound proposes it with a local atomic max into its head's slot (kvc_propose_max,
//   before the barrier that ends phase 1); after that barrier every work-item reads the GB slots
//   (kvc_take_max). The first tile proposes every token, later ones rarely any.
//   Slots: `local int slots[2 * GB]`, one set per tile parity. kvc_take_max of tile i resets the set
//   tile i + 1 proposes into; it was last read in tile i - 1's phase 2, before a barrier of that tile,
//   and is next written after tile i's last barrier. Both sets start empty (kvc_clear_max before the
//   first barrier).
#define KVC_LAZY_MAX 8.0f
#define KVC_NO_MAX INT_MIN  // a slot without a proposal

// Order-preserving map of floats to ints (negative floats have their magnitude bits flipped), so
// that atomic_max on the keys is a max on the scores.
inline int kvc_max_key(float x) {
    const int i = as_int(x);
    return i >= 0 ? i : i ^ 0x7fffffff;
}
inline float kvc_max_of_key(int k) { return as_float(k >= 0 ? k : k ^ 0x7fffffff); }

// Empties both slot sets: work-items 0 .. 2 * gb - 1, before a barrier that precedes the first tile.
inline void kvc_clear_max(local int * slots, int gb) {
    const int tid = get_local_id(0);
    if (tid < 2 * gb) slots[tid] = KVC_NO_MAX;
}

// The three helpers below take one head g (of gb per work-group) at a time: the kernels call them
// in loops over their literal GB under #pragma unroll, so that the running max and the scores stay
// in registers. (While they took arrays and looped over a run-time gb, NVIDIA's OpenCL compiler kept
// the quantized decode's whole softmax state in off-chip private memory: 55 ld.local and 67 st.local
// in its PTX, against 4 and 18 before the lazy max. A run-time head index at the kernel's end had
// the same effect, so the fp16, quantized and ragged decodes read their private per-head arrays with
// literal indices only; tools/report/cl_cache_dump.py --no-private checks their PTX on the GPU host.)
// Phase 1's end: this work-item's score s of head g into the slot set of tile `it` if it exceeds the
// running max m by more than KVC_LAZY_MAX.
inline void kvc_propose_max(local int * slots, int it, int gb, int g, float s, float m) {
    if (s > m + KVC_LAZY_MAX) atomic_max(slots + (it & 1) * gb + g, kvc_max_key(s));
}

// Phase 2's start (after the barrier), head g: moves the running max *m to the tile's proposal, if
// any, and returns the factor that rescales what was summed with the old one (1 where m stays; 0 on
// the first tile, m = -inf).
inline float kvc_take_max(local const int * slots, int it, int gb, int g, float * m) {
    const int k = slots[(it & 1) * gb + g];
    const float mn = k == KVC_NO_MAX ? *m : kvc_max_of_key(k);
    const float alpha = k == KVC_NO_MAX ? 1.0f : exp2(*m - mn);
    *m = mn;
    return alpha;
}

// Phase 2, after every kvc_take_max of tile `it`: empties the slot set tile it + 1 proposes into.
inline void kvc_reset_next_max(local int * slots, int it, int gb) {
    const int tid = get_local_id(0);
    if (tid < gb) slots[((it & 1) ^ 1) * gb + tid] = KVC_NO_MAX;
}

// The decode task a ragged work-group runs (host/lowrank/decode_schedule.h): its schedule row
// (request b, KV head c, tokens [first, end)), c's K / V widths and offsets from the heads table, how
// many tasks share the (b, c) row (n_in_list; 1: the task writes the output itself) and b's first entry
// in the page indices. sched, heads, merge and indptr point at their arrays' first elements.
typedef struct {
    int b, c, first, end, kw, ko, vw, vo, n_in_list, p0;
} kvc_ragged_task;

inline kvc_ragged_task kvc_ragged_task_at(global const int * sched, global const int * heads,
                                          global const int * merge, global const int * indptr, int task,
                                          int n_kv_heads) {
    global const int * row = sched + (ulong)task * 4;
    kvc_ragged_task t;
    t.b = row[0], t.c = row[1], t.first = row[2], t.end = row[3];
    t.kw = heads[t.c * 4], t.ko = heads[t.c * 4 + 1], t.vw = heads[t.c * 4 + 2], t.vo = heads[t.c * 4 + 3];
    t.n_in_list = merge[t.b * n_kv_heads + t.c + 1] - merge[t.b * n_kv_heads + t.c];
    t.p0 = indptr[t.b];
    return t;
}

// The end of a ragged decode task (attn_decode_ragged.cl, attn_decode_ragged_q4.cl), after a barrier
// that published the slots' results: o_l holds gb heads of head_floats floats, each nt-slot partial
// output slot_floats apart, and lsum_l gb x nt slot sums. Each head's slots are summed; the only task of
// its (request, KV head) row (n_in_list == 1) writes the normalized output at out_h0 + g * vw,
// otherwise the task writes its unnormalized output to part + (prow0 + g) * mw and (m, l) to
// part + ml_off + (prow0 + g) * 2, m from m_l (gb running maxima in local memory: a private array
// read here with a run-time g would be kept in private memory for the whole kernel).
inline void kvc_ragged_task_output(local const float * o_l, local const float * lsum_l, int gb, int nt,
                                   int head_floats, int slot_floats, int vslots, int vw, int n_in_list,
                                   local const float * m_l, global float * out_h0, global float * part, ulong prow0,
                                   int mw, ulong ml_off) {
    const int tid = get_local_id(0);
    for (int i = tid; i < gb * vw; i += nt) {
        const int g = i / vw, d = i % vw;
        float l = 0.0f, o = 0.0f;
        for (int sl = 0; sl < vslots; ++sl) {
            l += lsum_l[g * nt + sl];
            o += o_l[g * head_floats + sl * slot_floats + d];
        }
        if (n_in_list == 1)
            out_h0[g * vw + d] = l > 0.0f ? o / l : 0.0f;
        else
            part[(prow0 + g) * mw + d] = o;
    }
    if (n_in_list != 1 && tid == 0) {
        for (int g = 0; g < gb; ++g) {
            float l = 0.0f;
            for (int sl = 0; sl < vslots; ++sl) l += lsum_l[g * nt + sl];
            part[ml_off + (prow0 + g) * 2] = m_l[g];
            part[ml_off + (prow0 + g) * 2 + 1] = l;
        }
    }
}

// The parameters of both quantized-decode kernels (kvc_adq_split, kvc_adq_warps): the launcher
// (lib/opencl/attn_decode_quant.cpp) sets them with one argument list whichever kernel it runs.
#define KVC_QDECODE_PARAMS                                                                                          \
    global const float *q, ulong q_off, global const uchar *pool, ulong pool_off, global const int *indptr,        \
        ulong indptr_off, global const int *indices, ulong indices_off, global const half *win_k, ulong wk_off,    \
        global const half *win_v, ulong wv_off, global const int *win, ulong win_off, global const int *win_pages, \
        ulong wp_off, global float *out, ulong out_off, global float *lse, ulong lse_off, global float *part,      \
        ulong ml_off, int n_kv_heads, int n_q_heads, int n_slots, int n_win_rows, int win_tokens, int n_win_pages, \
        int win_page_tokens, int n_splits, int chunk, float qscale

// The work of a quantized-decode work-group (attn_decode_quant.cl, attn_decode_quant_mma.cl): its group ids
// (split, KV head x sub-group of gb query heads, request b) give its KV head, the row of its first query
// head in q / out, and the request's blocks [b_begin, b_end) of its index-array entries from p0 (split s:
// [s chunk, (s + 1) chunk), the last split also any beyond). indptr points at the array's first element.
typedef struct {
    int b, split, kvh, p0, b_begin, b_end;
    ulong head_row;
} kvc_qdecode_work;
inline kvc_qdecode_work kvc_qdecode_work_of(global const int * indptr, int n_q_heads, int n_kv_heads, int gb,
                                            int n_splits, int chunk) {
    kvc_qdecode_work w;
    w.split = get_group_id(0);
    w.b = get_group_id(2);
    const int hg = get_group_id(1), group = n_q_heads / n_kv_heads, subs = group / gb;
    w.kvh = hg / subs;
    const int qh0 = w.kvh * group + (hg % subs) * gb;
    w.head_row = (ulong)w.b * n_q_heads + qh0;
    w.p0 = indptr[w.b];
    const int nb = max(indptr[w.b + 1] - w.p0, 0);
    w.b_begin = min(w.split * chunk, nb);
    w.b_end = w.split == n_splits - 1 ? nb : min(nb, w.b_begin + chunk);
    return w;
}

// Split-KV merge of element d of one (request, query head) row hr: part holds, per split, the row's
// partial output [n_splits, head_dim] and, from ml_off on, the splits' (running max, sum) pairs in
// log2 units. Returns the merged output (0 for a row without tokens) and sets *log2_den to log2 of
// the combined softmax denominator (-INFINITY for a row without tokens).
inline float kvc_merge_splits(global const float * part, ulong ml_off, ulong hr, int n_splits, int head_dim, int d,
                              float * log2_den) {
    global const float * ml = part + ml_off + hr * n_splits * 2;
    float mx = -INFINITY;
    for (int s = 0; s < n_splits; ++s) mx = fmax(mx, ml[2 * s]);
    float l = 0.0f, o = 0.0f;
    if (mx != -INFINITY) {
        for (int s = 0; s < n_splits; ++s) {
            const float w = exp2(ml[2 * s] - mx);
            l += w * ml[2 * s + 1];
            o += w * part[(hr * n_splits + s) * head_dim + d];
        }
    }
    *log2_den = l > 0.0f ? mx + log2(l) : -INFINITY;
    return l > 0.0f ? o / l : 0.0f;
}

#ifdef KVC_ASM
// d (16 x 8, f32) += a (16 x 16 f16, row-major) * b (16 x 8 f16, by column): fragments of the PTX ISA
// (as cuda_backend/common.cuh, mma_16816). With g = lane / 4, t = lane % 4:
//   a0: row g, k 2t..2t+1   a1: row g+8, k 2t..2t+1   a2: row g, k 2t+8..2t+9   a3: row g+8, k 2t+8..2t+9
//   b0: k 2t..2t+1, column g   b1: k 2t+8..2t+9, column g
//   d0, d1: row g, columns 2t, 2t+1   d2, d3: row g+8, columns 2t, 2t+1
#define KVC_MMA_16816(d0, d1, d2, d3, a0, a1, a2, a3, b0, b1)                                              \
    KVC_ASM("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, " \
            "{%0,%1,%2,%3};"                                                                            \
            : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3)                                                    \
            : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1))

// x rounded to f16 (nearest even) and back; two floats as one f16x2 register, x0 in the low half; a
// butterfly sum over the lanes `mask` apart. In PTX: OpenCL C without cl_khr_fp16 has no half
// variables, and OpenCL 1.2 no sub-group shuffles.
inline float kvc_round_half(float x) {
    float r;
    KVC_ASM("{ .reg .b16 t; cvt.rn.f16.f32 t, %1; cvt.f32.f16 %0, t; }" : "=f"(r) : "f"(x));
    return r;
}
inline uint kvc_pack_half2(float x0, float x1) {
    uint r;
    KVC_ASM("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(x1), "f"(x0));
    return r;
}
// x0, x1 as one f16x2 register: as f16 (lo = 0) or what f16 missed of them (lo = 1). An fp32 operand goes
// into the f16 mma as such a (hi, lo) pair of columns, which keeps its products at fp32 precision.
inline uint kvc_split_pair(float x0, float x1, int lo) {
    if (lo) {
        x0 -= kvc_round_half(x0);
        x1 -= kvc_round_half(x1);
    }
    return kvc_pack_half2(x0, x1);
}
inline float kvc_shfl_xor(float x, int mask) {
    float r;
    KVC_ASM volatile("shfl.sync.bfly.b32 %0, %1, %2, 0x1f, 0xffffffff;" : "=f"(r) : "f"(x), "r"(mask));
    return r;
}
// Lane src's x (shfl.sync.idx); whether p holds in any lane of the warp (vote.sync.any); a barrier
// for the warp alone that also orders its local-memory accesses (bar.warp.sync, with the "memory"
// clobber so that the compiler keeps loads and stores on their side of it). Every lane must call them.
inline float kvc_shfl_idx(float x, int src) {
    float r;
    KVC_ASM volatile("shfl.sync.idx.b32 %0, %1, %2, 0x1f, 0xffffffff;" : "=f"(r) : "f"(x), "r"(src));
    return r;
}
inline int kvc_any(int p) {
    int r;
    KVC_ASM volatile("{ .reg .pred a; setp.ne.s32 a, %1, 0; vote.sync.any.pred a, a, 0xffffffff; selp.s32 %0, 1, 0, a; }"
                     : "=r"(r)
                     : "r"(p));
    return r;
}
inline void kvc_warp_sync(void) {
    KVC_ASM volatile("bar.warp.sync 0xffffffff;" ::: "memory");
}

#define KVC_INLINE __attribute__((always_inline)) inline

// 16 bytes from global to local memory without the registers (cp.async.cg). kvc_cp_async16_fill copies the
// first src_bytes of them (0 or 16) and zeroes the rest, so a masked slot costs no read. kvc_cp_async_wait
// waits for all of this lane's copies; in a ring, kvc_cp_async_commit closes a group of them and
// KVC_CP_ASYNC_WAIT_GROUP(n) (n a literal or a macro of one) waits until at most n groups are in flight. A
// lane sees its own copies after the wait, other lanes' after a warp sync as well.
KVC_INLINE void kvc_cp_async16(local void * dst, global const void * src) {
    KVC_ASM volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"l"((ulong)dst), "l"((ulong)src) : "memory");
}
KVC_INLINE void kvc_cp_async16_fill(local void * dst, global const void * src, int src_bytes) {
    KVC_ASM volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"l"((ulong)dst), "l"((ulong)src), "r"(src_bytes)
                     : "memory");
}
KVC_INLINE void kvc_cp_async_wait(void) {
    KVC_ASM volatile("cp.async.wait_all;" ::: "memory");
}
KVC_INLINE void kvc_cp_async_commit(void) {
    KVC_ASM volatile("cp.async.commit_group;" ::: "memory");
}
#define KVC_CP_ASYNC_WAIT_GROUP(n) KVC_CP_ASYNC_WAIT_GROUP_(n)
#define KVC_CP_ASYNC_WAIT_GROUP_(n) KVC_ASM volatile("cp.async.wait_group " #n ";" ::: "memory")

// The per-warp tensor-core decodes (attn_decode_quant_mma.cl, attn_decode_ragged_mma.cl) keep the mma
// layout of cuda_backend's kernels: lane (g, t) = (lane / 4, lane % 4) holds query head t's scores of two
// tile rows, g and g + 8, and the 8 lanes of a head share its running max.
//   kvc_head_sum: the sum over the 8 lanes of a head (lane bits 2..4);
//   kvc_softmax_lazy: the online softmax of the lane's two scores (log2 units, -inf when masked): their
//     weights p0, p1 and the sum l; the running max m moves only when some score of the warp exceeds it
//     by more than KVC_LAZY_MAX (a vote, so *moved is warp-uniform), and then the caller rescales its
//     accumulators by the returned factor;
//   kvc_transpose_p: the weights lane (g, t) needs for the values' B operand, head g / 2's of tile rows
//     2t (w[0]), 2t + 1 (w[1]), 2t + 8 (w[2]), 2t + 9 (w[3]), from the lanes that hold them;
//   kvc_p_frag: the B registers of P' for column g (head g / 2, hi for even g, what f16 missed for odd)
//     from those weights: rows 2t, 2t + 1 (b0) and 2t + 8, 2t + 9 (b1).
inline float kvc_head_sum(float v) {
    v += kvc_shfl_xor(v, 4);
    v += kvc_shfl_xor(v, 8);
    return v + kvc_shfl_xor(v, 16);
}
inline float kvc_softmax_lazy(float * m, float * l, float s0, float s1, float * p0, float * p1, int * moved) {
    float mt = fmax(s0, s1);
    float alpha = 1.0f;
    *moved = kvc_any(mt > *m + KVC_LAZY_MAX);  // -inf + 8: the first finite score moves it
    if (*moved) {
        mt = fmax(mt, kvc_shfl_xor(mt, 4));
        mt = fmax(mt, kvc_shfl_xor(mt, 8));
        mt = fmax(mt, kvc_shfl_xor(mt, 16));
        const float mn = fmax(*m, mt);
        alpha = native_exp2(*m - (mn == -INFINITY ? 0.0f : mn));  // nothing seen yet: 0
        *m = mn;
    }
    const float mu = *m == -INFINITY ? 0.0f : *m;
    *p0 = native_exp2(s0 - mu);
    *p1 = native_exp2(s1 - mu);
    *l = *l * alpha + (*p0 + *p1);
    return alpha;
}
inline void kvc_transpose_p(float p0, float p1, int g, int t, float * w) {
    const int src = 8 * t + (g >> 1);
    w[0] = kvc_shfl_idx(p0, src);
    w[2] = kvc_shfl_idx(p1, src);
    w[1] = kvc_shfl_idx(p0, src + 4);
    w[3] = kvc_shfl_idx(p1, src + 4);
}
inline void kvc_p_frag(float x0, float x1, float x2, float x3, int lo, uint * b0, uint * b1) {
    *b0 = kvc_split_pair(x0, x1, lo);
    *b1 = kvc_split_pair(x2, x3, lo);
}

// The end of a per-warp decode work-group, its warps' states in local memory from sm on: outputs
// [nw][4][stride] floats, then maxima [nw][4] (KVC_WARP_M), then sums [nw][4] (KVC_WARP_L).
// KVC_STORE_WARP_STATE: lane (g, t)'s output accumulators o[4m .. 4m + 3] (m-tile m < n_mt: channel 16m + 2g from
// the hi and lo columns, then channel 16m + 2g + 1) of head t go to row warp * 4 + t, and (lanes g == 0) the
// head's running max and sum to its maxima and sums. (A macro: as a function taking the accumulator array, clang
// kept the quantized kernel's whole state in private memory.) kvc_merge_warps, after a barrier: head h's channel
// d over the nw warps (with_o == 0: the max and sum alone); returns the combined unnormalized output, *mx the
// combined max (log2 units) and *l the sum.
#define KVC_WARP_M(sm, nw, stride) ((sm) + (nw) * 4 * (stride))
#define KVC_WARP_L(sm, nw, stride) (KVC_WARP_M(sm, nw, stride) + (nw) * 4)
#define KVC_STORE_WARP_STATE(sm, o, n_mt, nw, stride, warp, g, t, m, l)                                  \
    do {                                                                                              \
        _Pragma("unroll") for (int mt_ = 0; mt_ < (n_mt); ++mt_) {                                   \
            (sm)[((warp) * 4 + (t)) * (stride) + 16 * mt_ + 2 * (g)] = (o)[4 * mt_] + (o)[4 * mt_ + 1];   \
            (sm)[((warp) * 4 + (t)) * (stride) + 16 * mt_ + 2 * (g) + 1] = (o)[4 * mt_ + 2] + (o)[4 * mt_ + 3]; \
        }                                                                                             \
        if ((g) == 0) {                                                                               \
            KVC_WARP_M(sm, nw, stride)[(warp) * 4 + (t)] = (m);                                       \
            KVC_WARP_L(sm, nw, stride)[(warp) * 4 + (t)] = (l);                                       \
        }                                                                                             \
    } while (0)
inline float kvc_merge_warps(local const float * sm, int nw, int stride, int h, int d, int with_o, float * mx,
                             float * l) {
    local const float * sm_m = KVC_WARP_M(sm, nw, stride);
    local const float * sm_l = KVC_WARP_L(sm, nw, stride);
    float m = -INFINITY;
#pragma unroll
    for (int w = 0; w < nw; ++w) m = fmax(m, sm_m[w * 4 + h]);
    float lt = 0.0f, ot = 0.0f;
#pragma unroll
    for (int w = 0; w < nw; ++w) {
        const float mw = sm_m[w * 4 + h];
        const float f = mw == -INFINITY ? 0.0f : native_exp2(mw - m);
        lt += f * sm_l[w * 4 + h];
        if (with_o) ot += f * sm[(w * 4 + h) * stride + d];
    }
    *mx = m;
    *l = lt;
    return ot;
}

// The start of a per-warp ragged decode task (kvc_adr_warps, kvc_adr_q4_warps): q_l[h * qw + d] = q of head
// h < gb (qg + h * kw, kw wide) times qscale, zero past the width and for heads gb .. 3, written by the
// work-group's nt work-items (a barrier must follow).
inline void kvc_stage_q(local float * q_l, global const float * qg, int kw, int qw, int gb, float qscale, int nt) {
    for (int i = get_local_id(0); i < 4 * qw; i += nt) {
        const int h = i / qw, d = i % qw;
        q_l[i] = h < gb && d < kw ? qg[h * kw + d] * qscale : 0.0f;
    }
}

// The end of a per-warp ragged decode task (kvc_adr_warps, kvc_adr_q4_warps, kvc_adp_warps), after
// KVC_STORE_WARP_STATE and a barrier: each of the gb heads' outputs and (m, l) merged over the nw warps
// (kvc_merge_warps), written by the work-group's nt work-items as kvc_ragged_task_output writes them.
inline void kvc_ragged_warps_output(local const float * sm, int nw, int stride, int gb, int nt, int vw, int n_in_list,
                                    global float * out_h0, global float * part, ulong prow0, int mw, ulong ml_off) {
    for (int i = get_local_id(0); i < gb * vw + gb; i += nt) {
        const int h = i < gb * vw ? i / vw : i - gb * vw, d = i % vw;
        float mx, lt;
        const float ot = kvc_merge_warps(sm, nw, stride, h, d, i < gb * vw, &mx, &lt);
        if (i < gb * vw) {
            if (n_in_list == 1)
                out_h0[h * vw + d] = lt > 0.0f ? ot / lt : 0.0f;
            else
                part[(prow0 + h) * mw + d] = ot;
        } else if (n_in_list != 1) {
            part[ml_off + (prow0 + h) * 2] = mx;
            part[ml_off + (prow0 + h) * 2 + 1] = lt;
        }
    }
}

// The quantized decodes' codes as mma operands (attn_decode_quant.cl, attn_decode_quant_mma.cl; the
// algebra is cuda_backend/attn_decode_quant_mma.cu's). A b-bit code in the top b mantissa bits of an
// f16 with exponent 2^b reads as F = 2^b + code, exact.
//   kvc_qk_pair: q' = q kstep of channels c and c + dc as f16 (lo = 0) or what f16 missed (lo = 1), in
//     one register (c in the low half);
//   kvc_f_pair: the codes in bits [0, b) and [b, 2b) of x as an F pair, one per half;
//   kvc_code_pair: the codes at bits [o, o + b) and [o + 16, o + 16 + b) of x as an F pair, given rot =
//     (10 - b - o) mod 32: one rotate and one and-or (codes 16 bits apart: the kernels order channels,
//     or merge two tokens' bytes with kvc_prmt, so that pairs are);
//   kvc_prmt: bytes of (b:a) picked by the selector's nibbles (PTX prmt.b32).
inline uint kvc_qk_pair(local const float * qh, local const half * kstep, int c, int dc, int lo) {
    return kvc_split_pair(qh[c] * vload_half(c, kstep), qh[c + dc] * vload_half(c + dc, kstep), lo);
}
inline uint kvc_f_pair(uint x, int bits) {
    const uint mask = (1u << bits) - 1u, e = (uint)(bits + 15) << 10;
    return (e | ((x & mask) << (10 - bits))) | ((e | (((x >> bits) & mask) << (10 - bits))) << 16);
}
inline uint kvc_code_pair(uint x, int rot, int bits) {
    const uint m = ((1u << bits) - 1u) << (10 - bits), e = (uint)(bits + 15) << 10;
    return (rotate(x, (uint)rot) & (m | m << 16)) | (e | e << 16);
}
inline uint kvc_prmt(uint a, uint b, uint sel) {
    uint r;
    KVC_ASM("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(sel));
    return r;
}
#endif
