#include "engine/llama_forward.h"

#include <algorithm>
#include <cmath>

namespace kvcomp::engine {

namespace {
enum act_id : size_t { X, H, Q, K, V, ATT, GATE, UP, LAST, LOGITS, IN16, N_ACT };
}

llama_forward::llama_forward(backend & be, const host::model_config & cfg, const model_weights & w,
                             bool f16_activations)
    : be_(be), cfg_(cfg), w_(w), f16_inputs_(f16_activations && w.matrix_type == dtype::f16), act_(N_ACT) {}

void llama_forward::reserve(const kv_method & method, int64_t n, int64_t r) {
    if (n <= cap_tokens_ && r <= cap_rows_) return;
    cap_tokens_ = std::max(n, cap_tokens_);
    cap_rows_ = std::max(r, cap_rows_);
    // Q, K, V and the attention output take the widest of the model's and the method's widths.
    int64_t q_width = cfg_.q_dim(), k_width = cfg_.kv_dim(), v_width = cfg_.kv_dim(), o_width = cfg_.q_dim();
    for (int64_t l = 0; l < cfg_.num_hidden_layers; ++l)
        if (const layer_projection * p = method.projection(l)) {
            if (p->w_q) q_width = std::max(q_width, p->q_width);
            if (p->w_k) k_width = std::max(k_width, p->k_width);
            if (p->w_v) v_width = std::max(v_width, p->v_width);
            if (p->w_o) o_width = std::max(o_width, p->o_width);
        }
    const int64_t widest = std::max({cfg_.hidden_size, o_width, cfg_.intermediate_size});
    const int64_t sizes[N_ACT] = {
        cfg_.hidden_size,       cfg_.hidden_size,       q_width, k_width, v_width, o_width,
        cfg_.intermediate_size, cfg_.intermediate_size, 0,       0,       widest};
    for (size_t i = 0; i < N_ACT; ++i) {
        const int64_t elems = i == LAST ? cap_rows_ * cfg_.hidden_size
                              : i == LOGITS ? cap_rows_ * cfg_.vocab_size
                              : i == IN16 ? (f16_inputs_ ? (std::max(cap_tokens_, cap_rows_) * widest + 1) / 2 : 0)
                                          : cap_tokens_ * sizes[i];
        act_[i] = be_.alloc(size_t(std::max<int64_t>(elems, 1)) * 4);
    }
}

tensor llama_forward::act(size_t which, std::initializer_list<int64_t> shape) const {
    return make_tensor(act_[which].get(), dtype::f32, shape);
}

tensor llama_forward::matmul_input(const tensor & x) {
    if (!f16_inputs_) return x;
    const tensor x16 = make_tensor(act_[IN16].get(), dtype::f16, {x.numel()});
    be_.run(make_op(copy_params{x.numel()}, {x}, {x16}));
    return x16;
}

void llama_forward::linear(const tensor & x, buffer & w, buffer * bias, int64_t out, int64_t in, const tensor & y,
                           int64_t n, bool accumulate) {
    gemm_params g;
    g.m = n, g.n = out, g.k = in, g.trans_b = true;
    g.beta = accumulate ? 1.0f : 0.0f;
    if (bias) {
        // y = broadcast bias (get_rows of row 0 for every token: the ids array is all zeros), then
        // the product accumulates onto it.
        const tensor zeros = make_tensor(inputs_.get(), dtype::i32, {n}, 0);
        be_.run(make_op(get_rows_params{n, out, 1}, {make_tensor(bias, dtype::f32, {1, out}), zeros}, {y}));
        g.beta = 1.0f;
    }
    be_.run(make_op(g, {x, make_tensor(&w, w_.matrix_type, {out, in})}, {y}));
}

tensor llama_forward::run(kv_method & method, const step_inputs & s) {
    const int64_t n = int64_t(s.tokens.size()), r = int64_t(s.logit_rows.size());
    KVCOMP_CHECK_ARG(n > 0 && r > 0, "forward: a step needs tokens and logit rows (", n, ", ", r, ")");
    reserve(method, n, r);

    // One upload for every i32 array of the step; a leading block of zeros serves as the ids
    // that broadcast biases.
    std::vector<int32_t> packed(size_t(n), 0);
    auto place = [&](const std::vector<int32_t> & v) {
        const size_t off = packed.size();
        packed.insert(packed.end(), v.begin(), v.end());
        return std::make_pair(off, int64_t(v.size()));
    };
    const auto tok = place(s.tokens), pos = place(s.positions), bidx = place(s.batch_idx), ip = place(s.indptr),
               ind = place(s.indices), last = place(s.last_page_len), sip = place(s.seq_indptr),
               rows = place(s.logit_rows);
    if (!inputs_ || inputs_cap_ < packed.size() * 4) {
        inputs_cap_ = packed.size() * 4 * 2;
        inputs_ = be_.alloc(inputs_cap_);
    }
    be_.upload(*inputs_, 0, packed.data(), packed.size() * 4);
    auto view = [&](std::pair<size_t, int64_t> p) {
        return make_tensor(inputs_.get(), dtype::i32, {std::max<int64_t>(p.second, 1)}, p.first * 4);
    };

    kv_step ks;
    ks.prefill = s.prefill, ks.batch = s.batch, ks.n_tokens = n, ks.nnz_pages = int64_t(s.indices.size());
    ks.max_seq_len = s.max_seq_len;
    ks.indptr = view(ip), ks.indices = view(ind), ks.last_page_len = view(last);
    ks.batch_idx = view(bidx), ks.positions = view(pos);
    if (s.prefill) ks.seq_indptr = view(sip);
    ks.seq_ids = s.seq_ids, ks.host_positions = s.positions, ks.host_batch_idx = s.batch_idx;
    if (s.prefill) ks.host_seq_indptr = s.seq_indptr;

    const int64_t Hd = cfg_.hidden_size, hd = cfg_.head_dim, nq = cfg_.num_attention_heads,
                  nkv = cfg_.num_key_value_heads, I = cfg_.intermediate_size;
    const tensor x = act(X, {n, Hd}), h = act(H, {n, Hd});
    const tensor gate = act(GATE, {n, I}), up = act(UP, {n, I});
    const float scale = float(1.0 / std::sqrt(double(hd)));

    be_.run(make_op(get_rows_params{n, Hd, cfg_.vocab_size},
                    {make_tensor(w_.embed.get(), w_.matrix_type, {cfg_.vocab_size, Hd}), view(tok)}, {x}));
    rope_params rp;
    rp.n_tokens = n, rp.head_dim = hd, rp.rot_dim = hd, rp.theta = float(cfg_.rope.theta);
    rp.style = rope_style::neox;
    const tensor ff = w_.freq_factors ? make_tensor(w_.freq_factors.get(), dtype::f32, {hd / 2}) : tensor{};

    for (int64_t l = 0; l < cfg_.num_hidden_layers; ++l) {
        const layer_weights & L = w_.layers[size_t(l)];
        be_.run(make_op(rms_norm_params{n, Hd, float(cfg_.rms_norm_eps)},
                        {x, make_tensor(L.attn_norm.get(), dtype::f32, {Hd})}, {h}));
        const layer_projection * proj = method.projection(l);
        const bool own_q = proj && proj->w_q, own_k = proj && proj->w_k;
        const bool own_v = proj && proj->w_v, own_o = proj && proj->w_o;
        const bool rope = cfg_.layer_uses_rope(l);
        // A replaced q or k projection (a basis folded into W_Q / W_K) is exact only where no RoPE
        // sits between the projection and attention: RoPE rotates by position, the basis does not
        // commute with it (kv_method.h, layer_projection).
        KVCOMP_CHECK_ARG(!rope || !(own_q || own_k), "forward: method ", method.name(),
                         " replaced the q/k projection of layer ", l, ", which applies RoPE");
        const int64_t q_width = own_q ? proj->q_width : nq * hd, k_width = own_k ? proj->k_width : nkv * hd;
        const int64_t v_width = own_v ? proj->v_width : nkv * hd, o_width = own_o ? proj->o_width : nq * hd;
        const tensor q = own_q ? act(Q, {n, q_width}) : act(Q, {n, nq, hd});
        const tensor k = own_k ? act(K, {n, k_width}) : act(K, {n, nkv, hd});
        const tensor v = own_v ? act(V, {n, v_width}) : act(V, {n, nkv, hd});
        const tensor att = own_o ? act(ATT, {n, o_width}) : act(ATT, {n, nq, hd});
        const tensor hin = matmul_input(h);
        if (own_q)
            linear(hin, *proj->w_q, nullptr, q_width, Hd, q, n, false);
        else
            linear(hin, *L.wq, L.bq.get(), q_width, Hd, q, n, false);
        if (own_k)
            linear(hin, *proj->w_k, nullptr, k_width, Hd, k, n, false);
        else
            linear(hin, *L.wk, L.bk.get(), k_width, Hd, k, n, false);
        if (own_v)
            linear(hin, *proj->w_v, proj->b_v, v_width, Hd, v, n, false);
        else
            linear(hin, *L.wv, L.bv.get(), v_width, Hd, v, n, false);
        if (rope) {
            rp.n_heads = nq;
            be_.run(make_op(rp, {q, view(pos), ff}, {q}));
            if (!(proj && proj->k_pre_rope)) {
                rp.n_heads = nkv;
                be_.run(make_op(rp, {k, view(pos), ff}, {k}));
            }
        }
        method.attend(be_, l, ks, q, k, v, att, scale);
        linear(matmul_input(att), own_o ? *proj->w_o : *L.wo, nullptr, Hd, o_width, x, n, true);
        be_.run(make_op(rms_norm_params{n, Hd, float(cfg_.rms_norm_eps)},
                        {x, make_tensor(L.mlp_norm.get(), dtype::f32, {Hd})}, {h}));
        const tensor hin2 = matmul_input(h);
        linear(hin2, *L.w_gate, nullptr, I, Hd, gate, n, false);
        linear(hin2, *L.w_up, nullptr, I, Hd, up, n, false);
        be_.run(make_op(silu_mul_params{n, I}, {gate, up}, {gate}));
        linear(matmul_input(gate), *L.w_down, nullptr, Hd, I, x, n, true);
    }
    method.maintain(be_, ks);

    const tensor last_h = act(LAST, {r, Hd});
    const tensor logits = act(LOGITS, {r, cfg_.vocab_size});
    be_.run(make_op(get_rows_params{r, Hd, n}, {x, view(rows)}, {last_h}));
    be_.run(make_op(rms_norm_params{r, Hd, float(cfg_.rms_norm_eps)},
                    {last_h, make_tensor(w_.final_norm.get(), dtype::f32, {Hd})}, {last_h}));
    linear(matmul_input(last_h), w_.lm_head_or_embed(), nullptr, cfg_.vocab_size, Hd, logits, r, false);
    return logits;
}

}  // namespace kvcomp::engine
