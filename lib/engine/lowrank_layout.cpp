#include "engine/lowrank_layout.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "core/error.h"
#include "core/op.h"
#include "host/lowrank/decode_schedule.h"
#include "host/lowrank/rate_search.h"

namespace kvcomp::engine {

namespace hl = host::lowrank;

std::vector<float> rope_inv_freq(float theta, int64_t rot_dim, const std::vector<float> & freq_factors) {
    std::vector<float> out(static_cast<size_t>(rot_dim / 2));
    for (int64_t i = 0; i < rot_dim / 2; ++i) {
        double f = std::pow(double(theta), -2.0 * double(i) / double(rot_dim));
        if (!freq_factors.empty()) f /= double(freq_factors[size_t(i)]);
        out[size_t(i)] = float(f);
    }
    return out;
}

std::vector<double> equalization_scales(const std::vector<double> & sigma, int64_t cols) {
    std::vector<double> dsc(static_cast<size_t>(cols), 1.0);
    if (sigma.empty() || !(sigma[0] > 0.0)) return dsc;
    for (int64_t j = 0; j < cols && j < int64_t(sigma.size()); ++j)
        dsc[size_t(j)] = std::max(sigma[size_t(j)] / sigma[0], 1.0 / 64.0);
    return dsc;
}

namespace {

const char * method_name(hl::lowrank_method m) {
    return hl::lowrank_method_name(m);
}

hl::kv_ranks choose_ranks(const lowrank_choice & ch, const hl::calibration & c) {
    const char * m = method_name(ch.method);
    const int64_t d = c.ranks.head_dim;
    if (ch.uniform_rank > 0) {
        KVCOMP_CHECK_ARG(!ch.removal_rate && !ch.compression, "method ", m,
                         ": a uniform rank excludes removal_rate and compression");
        KVCOMP_CHECK_ARG(ch.uniform_rank <= d, "method ", m, ": rank=", ch.uniform_rank,
                         " is larger than head_dim = ", d);
        hl::kv_ranks r = c.ranks;
        std::fill(r.k.begin(), r.k.end(), ch.uniform_rank);
        std::fill(r.v.begin(), r.v.end(), ch.uniform_rank);
        return r;
    }
    if (!ch.removal_rate && !ch.compression) return c.ranks;
    // rank_selection rejects it too; this names the option the user set.
    KVCOMP_CHECK_ARG(ch.rank_multiple >= 1 && ch.rank_multiple <= d, "method ", m,
                     ": rank_multiple=", ch.rank_multiple, " must be in [1, head_dim = ", d,
                     "] (a rank cannot exceed head_dim)");
    if (ch.removal_rate) return hl::ranks_for_removal_rate(c.spectra(), *ch.removal_rate, ch.rank_multiple);
    return hl::removal_rate_for_compression(c.spectra(), *ch.compression, ch.rank_multiple).ranks;
}

// One head_project table row.
void add_row(std::vector<int32_t> & t, int64_t in_off, int64_t in_w, int64_t basis_off, int64_t out_off,
             int64_t out_w) {
    for (int64_t x : {in_off, in_w, basis_off, out_off, out_w}) t.push_back(int32_t(x));
}

lowrank_layer make_layer(const hl::calibration & cal, const hl::kv_ranks & r, int64_t l, int64_t nq,
                         bool palu, bool equalize, bool fold_qk, const std::vector<float> & inv_freq) {
    const int64_t nkv = r.num_kv_heads, d = r.head_dim, g = nq / nkv;
    lowrank_layer L;
    L.d = d;
    L.equalized = equalize;
    L.fold_qk = fold_qk;
    for (int64_t c = 0; c < nkv; ++c) {
        const size_t i = size_t(l * nkv + c);
        L.k.push_back(r.k[i]), L.v.push_back(r.v[i]);
        L.k_total += r.k[i], L.v_total += r.v[i];
        L.max_width = std::max({L.max_width, r.k[i], r.v[i]});
    }
    L.heads = hl::ragged_heads_table(L.k, L.v, max_ragged_width);
    L.heads_full = hl::ragged_heads_table(std::vector<int64_t>(L.k.size(), d), L.v, max_ragged_width);
    L.bases.assign(size_t(d * (L.k_total + 2 * L.v_total + (equalize ? L.k_total + L.v_total : 0))), 0.0f);
    if (palu) L.aux.assign(size_t(d * L.k_total), 0.0f);
    if (fold_qk) L.qk_fold.assign(size_t(2 * d * L.k_total), 0.0f);
    for (int64_t c = 0; c < nkv; ++c) {
        const size_t i = size_t(l * nkv + c);
        const hl::head_basis & kb = cal.k[i];
        const hl::head_basis & vb = cal.v[i];
        const int64_t kc = L.k[size_t(c)], vc = L.v[size_t(c)], ko = L.k_off(c);
        const std::vector<double> dk =
            equalize ? equalization_scales(kb.sigma, kc) : std::vector<double>(size_t(kc), 1.0);
        const std::vector<double> dv =
            equalize ? equalization_scales(vb.sigma, vc) : std::vector<double>(size_t(vc), 1.0);
        for (int64_t row = 0; row < d; ++row) {
            for (int64_t j = 0; j < kc; ++j) {
                const double x = kb.basis[size_t(row * kb.cols + j)];
                L.bases[size_t(d * ko + row * kc + j)] = float(x / dk[size_t(j)]);  // R_k D^-1 [d, k_c]
                L.bases[size_t(L.rq_at(c) + row * kc + j)] =
                    float(x * dk[size_t(j)]);                              // R_k D (aliases without D)
                if (palu) L.aux[size_t(d * ko + j * d + row)] = float(x);  // R_k^T [k_c, d]
                if (fold_qk) {
                    L.qk_fold[size_t(d * ko + j * d + row)] = float(x / dk[size_t(j)]);  // (R_k D^-1)^T
                    L.qk_fold[size_t(d * (L.k_total + ko) + j * d + row)] =
                        float(x * dk[size_t(j)]);  // (R_k D)^T
                }
            }
            for (int64_t j = 0; j < vc; ++j) {
                const double x = vb.basis[size_t(row * vb.cols + j)];
                L.bases[size_t(L.rv_at(c) + row * vc + j)] = float(x / dv[size_t(j)]);  // R_v D^-1 [d, v_c]
                L.bases[size_t(L.rvt_at(c) + j * d + row)] =
                    float(x / dv[size_t(j)]);  // (R_v D^-1)^T [v_c, d]
                if (equalize) L.bases[size_t(L.ro_at(c) + row * vc + j)] = float(x * dv[size_t(j)]);  // R_v D
            }
        }
        add_row(L.k_table, c * d, d, d * ko, ko, kc);
        add_row(L.bv_table, c * d, d, L.rv_at(c), L.v_off(c), vc);
        if (palu) add_row(L.rec_table, ko, kc, d * ko, c * d, d);
        for (int64_t h = c * g; h < (c + 1) * g; ++h) {
            const int64_t in_group = h - c * g;
            add_row(L.q_table, h * d, d, L.rq_at(c), g * ko + in_group * kc, kc);
            add_row(L.o_table, h * d, d, L.ro_at(c), g * L.v_off(c) + in_group * vc, vc);
        }
    }
    if (palu) L.aux.insert(L.aux.end(), inv_freq.begin(), inv_freq.end());
    return L;
}

// Appends n zeros to `b` and returns their offset.
int64_t append_zeros(std::vector<float> & b, int64_t n) {
    const int64_t at = int64_t(b.size());
    b.resize(size_t(at + n), 0.0f);
    return at;
}

// The padded-prefill tables of one layer (lowrank_layer::pad_bases). Every basis writes all the
// columns of its output head, so no scratch needs clearing: zero columns are written as zeros.
void add_padded_layer(lowrank_layer & L, int64_t nq, int64_t nkv, bool palu) {
    const int64_t d = L.d, g = nq / nkv;
    std::vector<float> & b = L.pad_bases;
    b.clear();
    append_zeros(b, d * d);
    for (int64_t i = 0; i < d; ++i) b[size_t(i * d + i)] = 1.0f;  // I_d; rows [0, w) are [I_w | 0]
    if (L.fold_qk) {
        // q' comes from the folded W_Q (packed as q_table's output): pad it like k', with [I_k | 0].
        for (int64_t c = 0; c < nkv; ++c) {
            const int64_t kc = L.k[size_t(c)];
            for (int64_t h = c * g; h < (c + 1) * g; ++h)
                add_row(L.q_pad_table, g * L.k_off(c) + (h - c * g) * kc, kc, 0, h * d, d);
            add_row(L.k_pad_table, L.k_off(c), kc, 0, c * d, d);
        }
    } else if (!palu) {
        for (int64_t c = 0; c < nkv; ++c) {
            // q' = q R_k^c folded with its padding: R_k^c in the first k_c columns of a d x d block.
            const int64_t kc = L.k[size_t(c)], at = append_zeros(b, d * d);
            for (int64_t row = 0; row < d; ++row)
                for (int64_t j = 0; j < kc; ++j)
                    b[size_t(at + row * d + j)] = L.bases[size_t(L.rq_at(c) + row * kc + j)];
            for (int64_t h = c * g; h < (c + 1) * g; ++h) add_row(L.q_pad_table, h * d, d, at, h * d, d);
            add_row(L.k_pad_table, L.k_off(c), kc, 0, c * d, d);
        }
    }
    std::map<int64_t, int64_t> identity_at;  // V width w -> offset of I_w
    for (int64_t c = 0; c < nkv; ++c) {
        const int64_t vc = L.v[size_t(c)];
        if (!identity_at.count(vc)) {
            const int64_t at = append_zeros(b, vc * vc);
            for (int64_t i = 0; i < vc; ++i) b[size_t(at + i * vc + i)] = 1.0f;
            identity_at[vc] = at;
        }
        add_row(L.v_pad_table, L.v_off(c), vc, 0, c * d, d);
        for (int64_t h = c * g; h < (c + 1) * g; ++h)
            add_row(L.unpad_table, h * d, vc, identity_at[vc], g * L.v_off(c) + (h - c * g) * vc, vc);
    }
}

}  // namespace

void add_padded_prefill(lowrank_plan & plan, bool palu) {
    for (lowrank_layer & L : plan.layers) add_padded_layer(L, plan.n_q_heads, plan.n_kv_heads, palu);
}

lowrank_plan make_lowrank_plan(const lowrank_choice & ch, const host::model_config & cfg,
                               const std::string & model_hash) {
    const char * m = method_name(ch.method);
    const int64_t d = cfg.head_dim, nkv = cfg.num_key_value_heads, nq = cfg.num_attention_heads;
    KVCOMP_CHECK_ARG(d <= max_ragged_width, "method ", m, ": head_dim ", d,
                     " is wider than the low-rank kernels take (", max_ragged_width, ")");
    hl::calibration_expectation ex;
    ex.method = ch.method, ex.model_hash = model_hash;
    ex.num_layers = cfg.num_hidden_layers, ex.num_kv_heads = nkv, ex.head_dim = d;
    lowrank_plan p;
    p.calib = hl::read_calibration(ch.calib_path, ex);
    p.ranks = choose_ranks(ch, p.calib);
    p.n_q_heads = nq, p.n_kv_heads = nkv, p.head_dim = d;
    for (size_t i = 0; i < p.ranks.k.size(); ++i) {
        const int64_t rk = p.ranks.k[i], rv = p.ranks.v[i];
        // Impossible for ranks from rank_selection or a validated file; checked because a wrong
        // width here would index outside the bases.
        KVCOMP_CHECK_ARG(rk >= 1 && rk <= d && rv >= 1 && rv <= d, "method ", m, ": ranks (", rk, ", ", rv,
                         ") of layer ", int64_t(i) / nkv, " KV head ", int64_t(i) % nkv,
                         " are outside [1, head_dim = ", d, "]");
        KVCOMP_CHECK_ARG(rk <= p.calib.k[i].cols && rv <= p.calib.v[i].cols, "method ", m, ": ",
                         ch.calib_path, " stores ", p.calib.k[i].cols, " K / ", p.calib.v[i].cols,
                         " V basis columns for layer ", int64_t(i) / nkv, " KV head ", int64_t(i) % nkv,
                         ", fewer than the ranks (", rk, ", ", rv,
                         "); re-choose ranks only from a full (untruncated) file");
    }
    const bool palu = ch.method == hl::lowrank_method::palu;
    KVCOMP_CHECK_ARG(!(palu && ch.equalize), "method ", m,
                     ": the equalization of kv_bits=4 is for zack/fdc only");
    for (int64_t l = 0; l < cfg.num_hidden_layers && palu && !ch.fold_qk; ++l)
        KVCOMP_CHECK_ARG(cfg.layer_uses_rope(l), "method ", m,
                         ": fold_qk=0 is not supported on a model with layers without RoPE (layer ", l,
                         "): attn_decode_palu rotates every key it rebuilds; there Palu folds its "
                         "reconstruction into W_Q (fold_qk=1, the default)");
    const std::vector<float> inv_freq =
        palu ? rope_inv_freq(float(cfg.rope.theta), d, cfg.rope.freq_factors) : std::vector<float>{};
    for (int64_t l = 0; l < cfg.num_hidden_layers; ++l)
        p.layers.push_back(make_layer(p.calib, p.ranks, l, nq, palu, ch.equalize,
                                      ch.fold_qk && !cfg.layer_uses_rope(l), inv_freq));
    return p;
}

}  // namespace kvcomp::engine
