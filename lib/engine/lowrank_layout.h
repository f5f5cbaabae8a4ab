// Host-side plan of the low-rank KV methods (ZACK, FDC, Palu): the calibration file read for the
// loaded model, the per-head ranks chosen from it, and for every layer the ragged-head tables and
// the basis arrays the device ops take (core/op.h, "Low-rank KV"). Built once at load; no device work.
//
// Basis conventions (host/lowrank/calibration_file.h): a head's basis R is head_dim x head_dim,
// row-major, column j the j-th direction; compressing a row x to rank r is x R[:, :r].
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "host/lowrank/calibration_file.h"
#include "host/model/model_config.h"

namespace kvcomp::engine {

// What the user chose (kv_method_lowrank_options.cpp).
struct lowrank_choice {
    host::lowrank::lowrank_method method = host::lowrank::lowrank_method::fdc;
    std::string calib_path;
    // At most one: re-choose the ranks from the file's singular values at this removal rate r in
    // [0, 1), or at the smallest r reaching this overall compression p in (0, 1). Neither: the
    // file's ranks.
    std::optional<double> removal_rate, compression;
    // Or every K and V head of every layer at this one rank (> 0; at most head_dim): the uniform
    // widths the quantized blocks of kivi / zipcache take when they store the reduced cache
    // (kv_method_lowrank_quant.h). Exclusive with removal_rate and compression.
    int64_t uniform_rank = 0;
    int64_t rank_multiple = 16;  // rounding of re-chosen ranks
    // kv_bits=4: fold the per-channel equalization D (core/ragged_q4.h) into the bases (zack/fdc).
    bool equalize = false;
    // On layers without RoPE (model_config::uses_rope), fold the K basis into W_Q and W_K at load
    // (ZACK's Lemma 1; for palu, Palu's B_K into W_Q): lowrank_layer::fold_qk. false keeps the
    // online projection there (zack/fdc only; an ablation and the tests' reference).
    bool fold_qk = true;
};

// The equalization scale of each basis column from its singular values (core/ragged_q4.h):
// D_j = max(sigma_j / sigma_0, 1/64) (all 1 when sigma_0 is 0). The floor keeps the tail channels,
// whose sigma may be ~0, from being amplified past the range of the others and of f16.
std::vector<double> equalization_scales(const std::vector<double> & sigma, int64_t cols);

// One layer: widths per KV head, the tables of the ops and the f32 arrays they read.
struct lowrank_layer {
    std::vector<int64_t> k, v;  // K (latent for Palu) and V width of each KV head
    int64_t k_total = 0, v_total = 0, max_width = 0;
    // Fully folded Q/K (a layer without RoPE and lowrank_choice::fold_qk; ZACK Lemma 1, digest
    // zack_fdc.md §1.4): W_Q'^h = W_Q^h R_k^c(h) and W_K'^c = W_K^c R_k^c are made at load
    // (lowrank_device.h), so q' and k' come out of the projection GEMMs in q_table's / k_table's
    // output layout and no head_project runs on them. Exact because nothing sits between the
    // projection and attention: q' k'^T = (q R_k)(k R_k)^T = q R_k R_k^T k^T (Lemma 2), the same
    // product the online projection forms, only without its per-token GEMM. Palu on such a layer
    // caches the same latent k R_k and attends like zack/fdc: its reconstruction R_k^T would only
    // be multiplied back into q (Palu's own fold when there is no RoPE).
    bool fold_qk = false;
    // fold_qk only, f32 [2 * d * k_total]: the A operands of those GEMMs (W' = R^T W, weights being
    // [out, in]): (R_k^c D_k^-1)^T [k_c, d] at d*k_offset[c] (keys, as k_table's basis) and
    // (R_k^c D_k)^T [k_c, d] at d*(k_total + k_offset[c]) (queries, as q_table's); D = 1 unless
    // equalized.
    std::vector<float> qk_fold;
    std::vector<int32_t> heads;  // [n_kv_heads, 4] (k_width, k_offset, v_width, v_offset)
    // head_project tables [n_heads, 5] = (in_offset, in_width, basis_offset, out_offset, out_width):
    std::vector<int32_t> q_table;   // zack/fdc: post-RoPE q [nq*d] -> q' [g*k_total] (bases: R_k)
    std::vector<int32_t> k_table;   // k [nkv*d] -> k' (post-RoPE) or the latent (Palu, pre-RoPE) [k_total]
    std::vector<int32_t> bv_table;  // b_V [nkv*d] -> b_V' [v_total] (bases: R_v)
    std::vector<int32_t> o_table;   // rows of W_O [nq*d] -> rows of W_O' [g*v_total] (bases: R_v)
    // Bases, f32: R_k^c [d, k_c] at d*k_offset[c]; R_v^c [d, v_c] at d*(k_total + v_offset[c]);
    // R_v^cT [v_c, d] at d*(k_total + v_total + v_offset[c]) (the A of W_V' = R_v^T W_V^c).
    // equalized (lowrank_choice::equalize): the K-side columns are R_k D_k^-1 (k'' = k R_k D_k^-1) and
    // the V-side ones R_v D_v^-1 (R_v and R_v^T: v'' and b_V''), and two more blocks follow:
    // R_k^c D_k [d, k_c] at d*(k_total + 2 v_total + k_offset[c]) (queries: q'' = q R_k D_k) and
    // R_v^c D_v [d, v_c] at d*(2 k_total + 2 v_total + v_offset[c]) (rows of W_O'' = W_O R_v D_v).
    // Without equalization rq_at / ro_at are the R_k / R_v blocks.
    std::vector<float> bases;
    bool equalized = false;
    int64_t rv_at(int64_t c) const { return d * (k_total + v_off(c)); }
    int64_t rvt_at(int64_t c) const { return d * (k_total + v_total + v_off(c)); }
    int64_t rq_at(int64_t c) const {
        return equalized ? d * (k_total + 2 * v_total + k_off(c)) : d * k_off(c);
    }
    int64_t ro_at(int64_t c) const {
        return equalized ? d * (2 * k_total + 2 * v_total + v_off(c)) : rv_at(c);
    }
    int64_t v_off(int64_t c) const { return heads[size_t(c * 4 + 3)]; }
    int64_t k_off(int64_t c) const { return heads[size_t(c * 4 + 1)]; }
    // Palu only: aux of attn_decode_palu = R_k^cT [k_c, d] at d*k_offset[c], then inv_freq [d/2];
    // rec_table: latent [k_total] -> reconstructed k [nkv*d] (bases: aux); heads_full: the heads
    // table with every K width d (prefill attention on the reconstructed keys).
    std::vector<float> aux;
    std::vector<int32_t> rec_table, heads_full;
    // Padded prefill only (add_padded_prefill; empty otherwise): every head zero-padded to d so the
    // prompt runs through the standard attn_prefill. pad_bases f32:
    //   I_d [d, d] at 0: its first w rows are [I_w | 0] (w x d), the pad basis of any width w;
    //   zack/fdc: R_k^c with zero columns past k_c [d, d] at d*d*(1 + c) (q -> padded q' in one op);
    //   then I_w [w, w] for every distinct V width w of the layer (the unpad basis).
    std::vector<float> pad_bases;
    std::vector<int32_t> q_pad_table;  // zack/fdc: post-RoPE q [nq*d] -> padded q' [nq*d];
                                       // fold_qk (any method): q' [g*k_total] -> padded q' [nq*d]
    std::vector<int32_t> k_pad_table;  // zack/fdc: k' [k_total] -> padded k' [nkv*d]
    std::vector<int32_t> v_pad_table;  // v' [v_total] -> padded v' [nkv*d]
    std::vector<int32_t> unpad_table;  // attention output [nq*d] -> packed output [g*v_total]
    int64_t d = 0;
};

struct lowrank_plan {
    host::lowrank::calibration calib;
    host::lowrank::kv_ranks ranks;
    std::vector<lowrank_layer> layers;
    int64_t n_q_heads = 0, n_kv_heads = 0, head_dim = 0;
};

// Reads the calibration (checked against the method, the model's shape and model_hash: a file
// made for another model or method is invalid_argument naming the file), chooses the ranks and
// builds every layer (fold_qk on the layers without RoPE when choice.fold_qk). Throws
// invalid_argument for a rank_multiple outside [1, head_dim], a head wider than max_ragged_width, a
// rank above the columns a truncated file stores, or palu with fold_qk off on a model with a layer
// without RoPE (attn_decode_palu rotates every key it rebuilds).
lowrank_plan make_lowrank_plan(const lowrank_choice & choice, const host::model_config & cfg,
                               const std::string & model_hash);

// Builds every layer's padded-prefill tables and bases (lowrank_layer::pad_bases and the *_pad
// tables): zack/fdc pad q', k' and v', palu (full-width q and keys) only v'; a fold_qk layer of any
// method pads q' (already projected), k' and v' with identities. Their f32 bases take
// d * d * (1 + n_kv_heads) + sum of (distinct v_c)^2 floats per layer for zack/fdc, d * d + sum of
// (distinct v_c)^2 for palu and for fold_qk layers; built only when the method serves prefill=padded.
void add_padded_prefill(lowrank_plan & plan, bool palu);

// Per-pair RoPE frequencies exactly as the rope op computes them (lib/cpu/rope.cpp): theta taken as
// float (rope_params::theta), theta^(-2i/rot_dim) in double, divided by freq_factors[i] when given.
std::vector<float> rope_inv_freq(float theta, int64_t rot_dim, const std::vector<float> & freq_factors);

}  // namespace kvcomp::engine
