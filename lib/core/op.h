// Op descriptors: what a backend can be asked to run.
//
// An op is an op_type, a plain parameter struct (one per type, held in op_desc::params) and
// tensor views for its sources and destinations. Backends answer supports(op) and run(op);
// tests, benchmarks and `kvcomp info` iterate ops generically through this one shape.
// The comment on each parameter struct is the contract every backend implements: it names each
// source (src[i]) and destination (dst[i]), their dtypes and shapes, and the layout.
//
// Paged KV cache layout (FlashInfer-style page tables, HND pages):
//   k_pages, v_pages: f16 [n_pages, n_kv_heads, page_size, head_dim]
//   indptr  i32 [batch + 1]  : pages of request b are indices[indptr[b] .. indptr[b+1])
//   indices i32 [nnz_pages]  : page numbers into the pool
//   last_page_len i32 [batch]: tokens in the last page of request b (1..page_size)
//   sequence length of b = (indptr[b+1] - indptr[b] - 1) * page_size + last_page_len[b]
// Page tables are built on the host (host/paged) and uploaded as small i32 arrays.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <variant>

#include "core/qblock.h"
#include "core/tensor.h"

namespace kvcomp {

enum class op_type : int32_t {
    copy,          // copy / convert between f32, f16 and bf16
    add,           // elementwise sum
    gemm,          // (batched) matrix product
    rms_norm,      // RMS normalization with a weight
    rope,          // rotary position embedding
    silu_mul,      // silu(gate) * up
    softmax,       // row softmax with a scale
    get_rows,      // embedding lookup
    argmax,        // row argmax
    kv_append,     // write new K/V tokens into paged fp16 pages
    attn_decode,   // one query token per request against its paged KV
    attn_prefill,  // causal attention over a ragged batch of prompts
    kv_quantize,        // quantize tokens into quantized KV blocks (core/qblock.h)
    attn_decode_quant,  // decode attention over quantized blocks plus an fp16 window
    probe_scores,       // attention column sums of probe queries (ZipCache saliency)
    head_project,        // per-head product with a per-head basis (low-rank Q/K projection, weight folding)
    kv_append_ragged,    // write new K/V tokens into ragged pages (each KV head its own width)
    attn_decode_ragged,  // decode attention over ragged pages, scheduled by a host task list
    attn_prefill_ragged, // causal prefill attention with per-head Q/K and V widths
    attn_decode_palu,    // decode attention over latent pre-RoPE K (reconstructed + RoPE per step)
    kv_dequantize,       // quantized KV blocks back to K/V rows (ZipCache's re-quantize-everything mode)
    select_salient,      // ZipCache's per-head top-n_hi token split into kv_quantize's rows table
    count
};

const char * op_name(op_type t);

// src0 -> dst0, n elements; dtypes f32/f16/bf16 in any combination (conversion rounds to nearest
// even). src0 and dst0 must not overlap.
struct copy_params {
    int64_t n = 0;
};

// dst0 = src0 + src1, all f32 [n]. dst0 may alias src0 or src1.
struct add_params {
    int64_t n = 0;
};

// Row-major batched product, for each batch index i:
//   C_i[m,n] = alpha * A_i[m,k] * op(B_i) + beta * C_i
//   op(B) = B [k,n] when !trans_b; B stored as [n,k] (a weight matrix [out,in]) when trans_b.
// src0 A, src1 B, dst0 C. Element strides between batch items: stride_a/b/c (0 = broadcast).
// dtypes (A, B -> C): f32,f32->f32 | f16,f16->f32 | f16,f16->f16 | f32,f16->f32 (weights in
// fp16, activations in fp32). Accumulation is fp32 on every backend (fp64 on the CPU oracle).
// beta != 0 reads C.
struct gemm_params {
    int64_t m = 0, n = 0, k = 0;
    bool trans_b = true;
    int64_t batch = 1;
    int64_t stride_a = 0, stride_b = 0, stride_c = 0;
    float alpha = 1.0f, beta = 0.0f;
};

// dst0[r,:] = src0[r,:] / sqrt(mean(src0[r,:]^2) + eps) * src1[:]
// src0 f32 [rows,n], src1 weight f32|f16 [n], dst0 f32 [rows,n] (may alias src0).
struct rms_norm_params {
    int64_t rows = 0, n = 0;
    float eps = 1e-6f;
};

enum class rope_style : int32_t {
    neox = 0,        // rotate halves: pairs (i, i + rot_dim/2)   (Hugging Face Llama, Qwen2, Mistral)
    interleaved = 1  // rotate adjacent pairs (2i, 2i+1)           (original Llama / GPT-J)
};

// In-place-capable rotary embedding of the first rot_dim features of every head.
// src0 x f32 [n_tokens, n_heads, head_dim], src1 positions i32 [n_tokens],
// src2 (optional, may be invalid) freq_factors f32 [rot_dim/2]: inv_freq[i] is divided by it
// (Llama 3 rope_scaling); dst0 f32 like src0 (may alias src0).
// angle(pos, i) = pos * theta^(-2i/rot_dim) / freq_factors[i], i in [0, rot_dim/2).
struct rope_params {
    int64_t n_tokens = 0, n_heads = 0, head_dim = 0, rot_dim = 0;
    float theta = 10000.0f;
    rope_style style = rope_style::neox;
};

// dst0 = silu(src0) * src1, all f32 [rows, n]; silu(x) = x / (1 + exp(-x)). dst0 may alias.
struct silu_mul_params {
    int64_t rows = 0, n = 0;
};

// dst0[r,:] = softmax(scale * src0[r,:]), f32 [rows, n]. dst0 may alias src0.
struct softmax_params {
    int64_t rows = 0, n = 0;
    float scale = 1.0f;
};

// dst0[i,:] = src0[src1[i], :]; src0 table f32|f16|bf16 [n_table_rows, row_len],
// src1 ids i32 [n_ids], dst0 f32 [n_ids, row_len]. An id outside [0, n_table_rows) gives a
// row of zeros (the engine validates token ids on the host before upload).
struct get_rows_params {
    int64_t n_ids = 0, row_len = 0, n_table_rows = 0;
};

// dst0[r] = index of the largest src0[r,:] (lowest index on ties; NaN never wins).
// src0 f32 [rows, n], dst0 i32 [rows].
struct argmax_params {
    int64_t rows = 0, n = 0;
};

// Shape of a paged fp16 KV pool (see the top of this file).
struct kv_layout {
    int64_t n_pages = 0, n_kv_heads = 0, page_size = 0, head_dim = 0;
};

// Writes n_tokens new tokens into the pages. Token t belongs to request src2[t] at position
// src3[t] (0-based, within that request's sequence); its page is
//   indices[indptr[b] + pos / page_size], slot pos % page_size.
// src0 k_new, src1 v_new: f32|f16 [n_tokens, n_kv_heads, head_dim]; src2 batch_idx i32 [n_tokens];
// src3 positions i32 [n_tokens]; src4 indptr i32 [batch+1]; src5 indices i32 [nnz];
// dst0 k_pages, dst1 v_pages (f16, layout above). Positions must be covered by the page table
// (checked on the host when the table is built).
struct kv_append_params {
    kv_layout kv;
    int64_t n_tokens = 0, batch = 0, nnz_pages = 0;
};

// Decode attention: one query token per request against all of its cached tokens.
// src0 q f32 [batch, n_q_heads, head_dim]; src1 k_pages, src2 v_pages (f16, layout above);
// src3 indptr, src4 indices, src5 last_page_len (i32); dst0 out f32 [batch, n_q_heads, head_dim].
// Query head h reads KV head h / (n_q_heads / n_kv_heads) (GQA). A request with 0 tokens
// gives zeros. max_seq_len bounds every request's length (the host knows it from the page
// table); backends use it to split long contexts across work-groups (split-KV) and merge.
// n_splits: 0 = backend's choice, else the number of KV chunks per (request, KV head).
struct attn_decode_params {
    kv_layout kv;
    int64_t batch = 0, n_q_heads = 0, nnz_pages = 0, max_seq_len = 0;
    float scale = 1.0f;
    int32_t n_splits = 0;
};

// Causal prefill attention over a ragged batch: request b owns rows
// [seq_indptr[b], seq_indptr[b+1]) of q, k and v, and its token j attends to its tokens 0..j.
// src0 q f32 [n_tokens, n_q_heads, head_dim]; src1 k, src2 v: f16 [n_tokens, n_kv_heads, head_dim];
// src3 seq_indptr i32 [batch+1]; dst0 out f32 [n_tokens, n_q_heads, head_dim];
// dst1 (optional: absent or an empty tensor) lse f32 [n_tokens, n_q_heads]: each row's natural-log
// softmax denominator, log sum_j exp(scale * q.k_j) over the keys it sees (ZipCache's probe rows
// reuse it instead of recomputing it).
struct attn_prefill_params {
    int64_t batch = 0, n_tokens = 0, n_q_heads = 0, n_kv_heads = 0, head_dim = 0, max_seq_len = 0;
    float scale = 1.0f;
};

// Token addressing of the K/V sources of kv_quantize and probe_scores:
//   row_tokens == 0: token-major [n_tokens, n_kv_heads, head_dim] (a step's new k/v);
//   row_tokens == T: head-major rows [n_rows, n_kv_heads, T, head_dim] (fp16 pages or windows),
//                    token t is row t / T, slot t % T.
// Element (t, h, c) is at ((t * n_kv_heads + h) * head_dim + c), respectively
// (((t / T) * n_kv_heads + h) * T + t % T) * head_dim + c.

// Quantizes blocks of tokens into slots of a quantized block pool (format and quantizer in
// core/qblock.h). Block i goes to slot plan[i,0] and stores plan[i,1] hi and plan[i,2] lo tokens;
// for KV head h its hi tokens are rows[i,h,0 .. n_hi) and its lo tokens rows[i,h,n_hi .. n_hi+n_lo)
// (token numbers of the sources; each head may pick different tokens). The whole slot is written.
// src0 k, src1 v: f32|f16, n_src_tokens tokens addressed by row_tokens (above);
// src2 plan i32 [n_blocks, 3]; src3 rows i32 [n_blocks, n_kv_heads, block_tokens];
// dst0 pool u8 [n_slots * slot_bytes]. Slots of one call must differ.
struct kv_quantize_params {
    qblock_layout q;
    int64_t n_blocks = 0, n_src_tokens = 0, row_tokens = 0, n_slots = 0;
};

// Dequantizes whole blocks of a quantized block pool back to K/V rows (format and formulas in
// core/qblock.h: k^ = code * kstep + kmin, v^ = (code * vstep + vmin) * vscale, fp32, no FMA).
// Block i is slot src1[i]; its tokens become token numbers i * block_tokens + j, j < n_hi + n_lo
// (from the slot's header; the hi segment's tokens first, then the lo segment's, each in stored
// order), for every KV head. Tokens n_hi + n_lo .. block_tokens - 1 of a block are written as
// zeros, so the whole destination is written. Token numbers are addressed by row_tokens as the
// sources of kv_quantize (above), so the result feeds kv_quantize and probe_scores directly;
// row_tokens == block_tokens gives head-major rows [n_blocks, n_kv_heads, block_tokens, head_dim].
// src0 pool u8 [n_slots * slot_bytes]; src1 slots i32 [n_blocks];
// dst0 k, dst1 v: f32|f16 (same dtype), n_blocks * block_tokens tokens (row_tokens 0 or a divisor
// of that count). f16 stores round to nearest even and saturate at +-65504 (qblock.h's f16()).
struct kv_dequantize_params {
    qblock_layout q;
    int64_t n_blocks = 0, row_tokens = 0, n_slots = 0;
};

// Decode attention over quantized blocks and a paged fp16 window: request b attends to the tokens
// of its blocks (slots block_indices[block_indptr[b] .. block_indptr[b+1]), each with the n_hi + n_lo
// tokens its header names, dequantized as in core/qblock.h) and to its window tokens: win[b] =
// (row, start, len) names len tokens at ring slots s = (start + j) % win_tokens, j < len, of window
// row `row`; slot s lives in page win_pages[row, s / win_page_tokens], token s % win_page_tokens.
// The pages are taken as the window fills, so a request holds only the pages its tokens need.
// Exact softmax over all of them with logits scale * q.k.
// src0 q f32 [batch, n_q_heads, head_dim]; src1 pool u8 [n_slots * slot_bytes];
// src2 block_indptr i32 [batch+1]; src3 block_indices i32 [nnz_blocks];
// src4 win_k, src5 win_v: f16 [n_win_pages, n_kv_heads, win_page_tokens, head_dim];
// src6 win i32 [batch, 3]; src7 win_pages i32 [n_win_rows, win_pages_per_row()] (entries of slots
// past a window's length are not read);
// dst0 out f32 [batch, n_q_heads, head_dim]; dst1 lse f32 [batch, n_q_heads] = log of the softmax
// denominator sum_j exp(logit_j) (-inf, with out = 0, for a request without tokens).
// max_tokens bounds every request's token count (for split-KV); n_splits 0 = backend's choice.
struct attn_decode_quant_params {
    qblock_layout q;
    int64_t batch = 0, n_q_heads = 0, n_slots = 0, nnz_blocks = 0, n_win_rows = 0, win_tokens = 0;
    int64_t n_win_pages = 0, win_page_tokens = 0;
    int64_t max_tokens = 0;
    float scale = 1.0f;
    int32_t n_splits = 0;

    int64_t win_pages_per_row() const {
        return win_page_tokens > 0 ? (win_tokens + win_page_tokens - 1) / win_page_tokens : 0;
    }
};

// Saliency of keys as ZipCache's probe queries see them (paper Eq. 8/9 numerator): for KV head h
// and key i, scores[h,i] = sum over the query heads g of h's GQA group and over the probes p with
// probe_pos[p] >= key_pos[i] of exp(scale * q[p,g].k[i] - lse[p,g]), where lse[p,g] is
// src4 when use_lse (the full row's log-denominator, e.g. from attn_decode_quant) and otherwise
// log sum over keys i' with key_pos[i'] <= probe_pos[p] of exp(scale * q[p,g].k[i']).
// The host divides by the structural count of unmasked probes (not computed here).
// src0 q f32 [n_probes, n_q_heads, head_dim]; src1 probe_pos i32 [n_probes];
// src2 k f32|f16, n_keys tokens addressed by row_tokens; src3 key_pos i32 [n_keys];
// src4 lse f32 [n_probes, n_q_heads] (only when use_lse); dst0 scores f32 [n_kv_heads, n_keys].
// Ragged batch (batch > 0; one call for every request of a step): src5 probe_indptr and src6
// key_indptr i32 [batch+1] (each starts at 0, is non-decreasing and ends at n_probes, n_keys):
// request b owns probes [probe_indptr[b], probe_indptr[b+1]) and keys [key_indptr[b],
// key_indptr[b+1]), and a probe sees only keys of its own request (and, as above, only those with
// key_pos <= probe_pos, and lse is the log-denominator over those); a request may have no probes
// or no keys. batch == 0 is the single-request form (every probe may see every key). Backends trust
// the indptr arrays (the host builds them); masked (probe, key) pairs are skipped, not computed.
struct probe_scores_params {
    int64_t n_probes = 0, n_keys = 0, n_q_heads = 0, n_kv_heads = 0, head_dim = 0, row_tokens = 0;
    float scale = 1.0f;
    bool use_lse = false;
    int64_t batch = 0;  // 0: single request; else src5 probe_indptr, src6 key_indptr [batch+1]
};

// ZipCache's salient-token selection on the device: host/quant/saliency.h's normalized_scores and
// split_by_saliency, laid out as kv_quantize's rows table, so that a prefill layer's ranking needs
// no download of probe_scores' column sums. For each prompt b and KV head h:
//   prompts[b] = (first_row, n, n_hi, first_block): the prompt ranks tokens i = 0 .. n-1, which are
//     columns first_row + i of sums and of count; 0 <= n_hi <= n of them are salient.
//   score(h, i) = (double)sums[h, c] / (double)count[c] when count[c] > 0, else 0 (c = first_row + i),
//     a correctly rounded fp64 quotient on every backend (the host's normalized_scores value).
//   Order: score descending, then i ascending; the first n_hi tokens of it are salient. -0 equals +0
//     and a NaN score ranks below every number (the host never produces one from finite sums).
//     Implementations compare 64-bit keys: key = 0 for NaN, else with bits = the IEEE bits of
//     (score == 0 ? +0.0 : score): bits | 2^63 for a positive sign, ~bits for a negative one; a larger
//     key is a larger score.
//   o = the salient i ascending, then the other i ascending (split_by_saliency's result).
//   Blocks: the prompt owns blocks first_block + bi, bi < nb = max(ceil(n_hi / hi_tokens),
//     ceil((n - n_hi) / lo_tokens)) (a segment with no tokens needs no block); block bi holds
//     hi_b = clamp(n_hi - bi * hi_tokens, 0, hi_tokens) salient and lo_b = clamp(n - n_hi - bi *
//     lo_tokens, 0, lo_tokens) regular tokens (the plan kv_quantize gets), and for x < block_tokens
//       rows[first_block + bi, h, x] = first_row + o[bi * hi_tokens + x]                x < hi_b
//                                    = first_row + o[n_hi + bi * lo_tokens + x - hi_b]  x - hi_b < lo_b
//                                    = 0                                                otherwise.
//   Rows of blocks no prompt owns are not written.
// src0 sums f32 [n_kv_heads, n_tokens] (probe_scores' dst); src1 count i32 [n_tokens] (the number
// of probes that may attend to each token: layer-independent, built on the host); src2 prompts i32
// [n_prompts, 4]; dst0 rows i32 [n_blocks, n_kv_heads, hi_tokens + lo_tokens] (kv_quantize's src3).
// The host builds the prompt table and backends trust it (as page tables): [first_row, first_row + n)
// inside [0, n_tokens), 0 <= n_hi <= n, a segment of capacity 0 only when it gets no tokens, the
// prompts' blocks inside [0, n_blocks) and disjoint. The CPU reference throws on a violation; the
// device kernels leave that prompt's rows unwritten. Selection is exact, so every backend gives the
// same integers as the CPU reference (tests compare them bit for bit).
struct select_salient_params {
    int64_t n_kv_heads = 0, n_tokens = 0, n_prompts = 0, n_blocks = 0;
    int32_t hi_tokens = 0, lo_tokens = 0;  // block geometry (qblock_layout's)
};

// ---- Low-rank KV (ZACK, FDC, Palu): per-head widths ----------------------------------------------
//
// Ragged heads: each KV head c keeps its own number of K dims and V dims. The table
//   heads i32 [n_kv_heads, 4] = (k_width, k_offset, v_width, v_offset) per KV head,
// widths in [1, max_width], offsets the prefix sums of the widths (k_total = sum of k_width,
// v_total = sum of v_width). Query head h (g = n_q_heads / n_kv_heads, c = h / g, i = h % g)
// takes its KV head's widths: a packed q row has g * k_total values, head h's at
//   [g * k_offset[c] + i * k_width[c], + k_width[c]);
// a packed output row has g * v_total values, head h's at [g * v_offset[c] + i * v_width[c], + v_width[c]).
// Ragged pages (one pool per layer; the page table is the FlashInfer one at the top of this file):
//   k_pages f16 [n_pages, page_size * k_total]: head c's part of page p starts at element
//   p * page_size * k_total + page_size * k_offset[c], token slot s at + s * k_width[c]
//   (each head's tokens contiguous in the page); v_pages alike with the v widths.
// bits == 4 (zack/fdc kv_bits=4): the pages are u8 [n_pages, page_size * k_row_bytes] (v alike) of
//   4-bit rows with f16 min/step per token and head (format and quantizer in core/ragged_q4.h);
//   k_row_bytes / v_row_bytes = ragged_q4_row_total of the K / V widths (0 when bits == 16).
//   kv_append_ragged quantizes, attn_decode_ragged dequantizes in registers; the other ops take
//   bits == 16 only.
// The host builds and checks the table (backends trust it, as they trust page tables).
struct ragged_layout {
    int64_t n_pages = 0, n_kv_heads = 0, page_size = 0, k_total = 0, v_total = 0, max_width = 0;
    int32_t bits = 16;                         // 16: f16 elements; 4: core/ragged_q4.h rows
    int64_t k_row_bytes = 0, v_row_bytes = 0;  // bits == 4: bytes of one token over all heads
    // The widest K head and the widest V head (0: not given, max_width). A hint for a backend's
    // kernel choice (CUDA: the decode's stage size, hence its blocks per SM); results never depend on
    // it, and a wrong value costs only speed.
    int64_t max_k_width = 0, max_v_width = 0;
};
constexpr int64_t max_ragged_width = 256;  // widest head a kernel must handle (registers / local memory)

// Decode task list of the ragged decode ops (built on the host, e.g. host/lowrank/decode_schedule.h):
//   schedule i32 [n_tasks, 4]: (request b, KV head c, first token, end token) in execution order:
//     work-group i runs row i (all g query heads of c over tokens [first, end) of request b);
//   merge i32 [batch * n_kv_heads + 1 + n_tasks]: ptr[0 .. batch*n_kv_heads] then task numbers: the
//     tasks of (b, c) are merge[ptr + merge[b*n_kv+c] .. ptr + merge[b*n_kv+c+1]) (ptr = batch*n_kv+1),
//     in token order, and together cover [0, seq_len(b)) exactly once. A (b, c) without tasks
//     (empty request) gives zeros. The output does not depend on the schedule (up to rounding).

// dst0[t, out_offset(h) + j] = sum_i src0[t, in_offset(h) + i] * basis_h[i, j], j < out_width(h),
// for every head h. src0 x f32 [n_tokens, in_total]; src1 bases f32 [n_basis]: basis_h is
// in_width(h) x out_width(h), row-major, at basis_offset(h) (heads may share a basis);
// src2 table i32 [n_heads, 5] = (in_offset, in_width, basis_offset, out_offset, out_width);
// dst0 f32 [n_tokens, out_total] (columns no head names are left as they are). fp32 accumulation.
// Widths in [1, max_ragged_width]; the host checks that every range lies inside its row.
struct head_project_params {
    int64_t n_tokens = 0, n_heads = 0, in_total = 0, out_total = 0, n_basis = 0;
};

// Writes n_tokens new tokens into ragged pages (as kv_append, widths per head).
// src0 k_new f32 [n_tokens, k_total], src1 v_new f32 [n_tokens, v_total] (packed by head: head c's
// values at its offset); src2 batch_idx, src3 positions i32 [n_tokens]; src4 indptr i32 [batch+1];
// src5 indices i32 [nnz_pages]; src6 heads i32 [n_kv_heads, 4]; dst0 k_pages, dst1 v_pages (f16,
// or u8 q4 rows when kv.bits == 4: each (token, head) row quantized as in core/ragged_q4.h).
struct kv_append_ragged_params {
    ragged_layout kv;
    int64_t n_tokens = 0, batch = 0, nnz_pages = 0;
};

// Decode attention in the reduced dims: logits scale * q'.k', softmax over each request's tokens,
// output sum p v' (v_width(c) values per query head, no decompression). scale is the model's
// 1/sqrt(original head_dim). src0 q f32 [batch, g * k_total]; src1 k_pages, src2 v_pages (ragged);
// src3 indptr, src4 indices, src5 last_page_len; src6 heads i32 [n_kv_heads, 4];
// src7 schedule i32 [n_tasks, 4]; src8 merge i32 [batch * n_kv_heads + 1 + n_tasks];
// dst0 out f32 [batch, g * v_total].
struct attn_decode_ragged_params {
    ragged_layout kv;
    int64_t batch = 0, n_q_heads = 0, nnz_pages = 0, max_seq_len = 0, n_tasks = 0;
    float scale = 1.0f;
};

// Causal prefill attention with per-head widths (ragged heads, as attn_prefill otherwise).
// src0 q f32 [n_tokens, g * k_total]; src1 k f16 [n_tokens, k_total]; src2 v f16 [n_tokens, v_total];
// src3 seq_indptr i32 [batch+1]; src4 heads i32 [n_kv_heads, 4]; dst0 out f32 [n_tokens, g * v_total].
// balanced: row blocks of query head h scaled by d_sum^max / d_sum^h, d_sum = k_width + v_width + 1
// (ZACK/FDC §5.3), so every work-group does about the same work; false: one row-block size for all
// heads (the plain kernel). Results do not depend on it (up to rounding).
struct attn_prefill_ragged_params {
    int64_t batch = 0, n_tokens = 0, n_q_heads = 0, n_kv_heads = 0, k_total = 0, v_total = 0, max_width = 0;
    int64_t max_seq_len = 0;
    float scale = 1.0f;
    bool balanced = true;
};

// Palu's decode: K is cached as a pre-RoPE latent of k_width(c) dims per KV head and reconstructed
// for every cached token at every step: key = RoPE_pos(latent . B_c) with B_c [k_width(c), head_dim]
// and pos = the token's index in its request; attention at the full head_dim with the post-RoPE q;
// V is a latent (its up-projection lives in W_O), output v_width(c) values per query head.
// src0 q f32 [batch, n_q_heads * head_dim]; src1 k_pages, src2 v_pages (ragged, latents);
// src3 indptr, src4 indices, src5 last_page_len; src6 heads i32 [n_kv_heads, 4];
// src7 schedule, src8 merge (as attn_decode_ragged); src9 aux f32: B_c at head_dim * k_offset[c]
// (row-major), then inv_freq [rot_dim / 2] at head_dim * k_total (angle = pos * inv_freq[i], the
// rope op's angle with theta and freq_factors folded in); dst0 out f32 [batch, g * v_total].
struct attn_decode_palu_params {
    ragged_layout kv;
    int64_t batch = 0, n_q_heads = 0, head_dim = 0, rot_dim = 0, nnz_pages = 0, max_seq_len = 0, n_tasks = 0;
    rope_style style = rope_style::neox;
    float scale = 1.0f;
};

using op_params = std::variant<copy_params, add_params, gemm_params, rms_norm_params, rope_params,
                               silu_mul_params, softmax_params, get_rows_params, argmax_params,
                               kv_append_params, attn_decode_params, attn_prefill_params, kv_quantize_params,
                               attn_decode_quant_params, probe_scores_params, head_project_params,
                               kv_append_ragged_params, attn_decode_ragged_params, attn_prefill_ragged_params,
                               attn_decode_palu_params, kv_dequantize_params, select_salient_params>;

constexpr int max_op_src = 10;
constexpr int max_op_dst = 2;

struct op_desc {
    op_type type = op_type::copy;
    op_params params;
    std::array<tensor, max_op_src> src{};
    std::array<tensor, max_op_dst> dst{};

    template <typename P>
    const P & get() const {
        return std::get<P>(params);
    }
};

// Builds a descriptor; the op_type follows from the parameter struct.
template <typename P>
op_desc make_op(const P & params, std::initializer_list<tensor> src, std::initializer_list<tensor> dst);

// "gemm(m=3,n=5,k=7,trans_b=1,batch=1,A=f32[3,7],B=f16[5,7],C=f32[3,5])" for messages and test names.
std::string describe(const op_desc & op);

// Checks that the views agree with the parameters (dtypes, element counts, GQA divisibility,
// ranges). Throws kvcomp::error(invalid_argument) naming the op, its parameters and the value.
// Every backend calls it before dispatch (backend::run), so errors are the same everywhere.
void check_op(const op_desc & op);

}  // namespace kvcomp
