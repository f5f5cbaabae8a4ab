#include "engine/lowrank_device.h"

#include <algorithm>

namespace kvcomp::engine {

lowrank_device upload_lowrank_plan(backend & be, const lowrank_plan & plan) {
    std::vector<int32_t> ints;
    std::vector<float> floats;
    struct at {
        size_t off, n;
    };
    auto put_i = [&](const std::vector<int32_t> & v) {
        const at a{ints.size(), v.size()};
        ints.insert(ints.end(), v.begin(), v.end());
        return a;
    };
    auto put_f = [&](const std::vector<float> & v) {
        const at a{floats.size(), v.size()};
        floats.insert(floats.end(), v.begin(), v.end());
        return a;
    };
    struct placed {
        at heads, heads_full, q, k, bv, o, rec, bases, aux;
        at pad_bases, q_pad, k_pad, v_pad, unpad, qk_fold;
    };
    std::vector<placed> where;
    for (const lowrank_layer & L : plan.layers)
        where.push_back({put_i(L.heads), put_i(L.heads_full), put_i(L.q_table), put_i(L.k_table),
                         put_i(L.bv_table), put_i(L.o_table), put_i(L.rec_table), put_f(L.bases),
                         put_f(L.aux), put_f(L.pad_bases), put_i(L.q_pad_table), put_i(L.k_pad_table),
                         put_i(L.v_pad_table), put_i(L.unpad_table), put_f(L.qk_fold)});
    lowrank_device dev;
    dev.ints = upload_vector(be, ints);
    dev.floats = upload_vector(be, floats);
    auto view = [](buffer * b, dtype t, at a) {
        return a.n == 0 ? tensor{} : make_tensor(b, t, {int64_t(a.n)}, a.off * 4);
    };
    for (const placed & p : where) {
        lowrank_device_layer d;
        buffer * bi = dev.ints.get();
        d.heads = view(bi, dtype::i32, p.heads), d.heads_full = view(bi, dtype::i32, p.heads_full);
        d.q_table = view(bi, dtype::i32, p.q), d.k_table = view(bi, dtype::i32, p.k);
        d.bv_table = view(bi, dtype::i32, p.bv), d.o_table = view(bi, dtype::i32, p.o);
        d.rec_table = view(bi, dtype::i32, p.rec);
        d.bases = view(dev.floats.get(), dtype::f32, p.bases);
        d.aux = view(dev.floats.get(), dtype::f32, p.aux);
        d.pad_bases = view(dev.floats.get(), dtype::f32, p.pad_bases);
        d.q_pad_table = view(bi, dtype::i32, p.q_pad), d.k_pad_table = view(bi, dtype::i32, p.k_pad);
        d.v_pad_table = view(bi, dtype::i32, p.v_pad), d.unpad_table = view(bi, dtype::i32, p.unpad);
        d.qk_fold = view(dev.floats.get(), dtype::f32, p.qk_fold);
        dev.layers.push_back(d);
    }
    return dev;
}

namespace {

// rows x H f32 products in `prod` rounded once into a new buffer of the weights' type.
buffer_ptr store_matrix(backend & be, const tensor & prod, dtype mt, int64_t elems) {
    buffer_ptr out = be.alloc(size_t(elems) * dtype_size(mt));
    be.run(make_op(copy_params{elems}, {make_tensor(prod.buf, dtype::f32, {elems}, prod.offset)},
                   {make_tensor(out.get(), mt, {elems})}));
    return out;
}

// Lemma 1 on a layer without RoPE: W_K' and W_Q' (lowrank_device.h). The A operands are R^T blocks of
// qk_fold; each product is [k_c, d] x [d, H], one per KV head (keys) or per query head (queries).
void fold_qk(backend & be, const host::model_config & cfg, const layer_weights & L, dtype mt,
             const lowrank_layer & plan, const lowrank_device_layer & dev, const tensor & prod,
             folded_layer & f) {
    const size_t es = dtype_size(mt);
    const int64_t H = cfg.hidden_size, d = cfg.head_dim, nq = cfg.num_attention_heads,
                  nkv = cfg.num_key_value_heads, g = nq / nkv, kt = plan.k_total;
    // No architecture kvcomp reads has both q/k biases (Qwen2) and layers without RoPE (SmolLM3),
    // so a bias here would be folded by code no model exercises: refuse it instead.
    KVCOMP_CHECK_ARG(!L.bq && !L.bk,
                     "fold_qk: q/k projection biases on a layer without RoPE are not supported");
    auto product = [&](buffer & w, int64_t w_row, int64_t a_at, int64_t rows, int64_t out_row) {
        gemm_params gp;
        gp.m = rows, gp.n = H, gp.k = d, gp.trans_b = false;
        const tensor a =
            make_tensor(dev.qk_fold.buf, dtype::f32, {rows, d}, dev.qk_fold.offset + size_t(a_at) * 4);
        const tensor b = make_tensor(&w, mt, {d, H}, size_t(w_row * H) * es);
        const tensor out =
            make_tensor(prod.buf, dtype::f32, {rows, H}, prod.offset + size_t(out_row * H) * 4);
        be.run(make_op(gp, {a, b}, {out}));
    };
    for (int64_t c = 0; c < nkv; ++c)
        product(*L.wk, c * d, d * plan.k_off(c), plan.k[size_t(c)], plan.k_off(c));
    f.w_k = store_matrix(be, prod, mt, kt * H);
    for (int64_t c = 0; c < nkv; ++c)
        for (int64_t h = c * g; h < (c + 1) * g; ++h) {
            const int64_t kc = plan.k[size_t(c)];
            product(*L.wq, h * d, d * (kt + plan.k_off(c)), kc, g * plan.k_off(c) + (h - c * g) * kc);
        }
    f.w_q = store_matrix(be, prod, mt, g * kt * H);
    f.bytes += f.w_k->size() + f.w_q->size();
}

}  // namespace

folded_layer fold_layer(backend & be, const host::model_config & cfg, const model_weights & w, int64_t l,
                        const lowrank_layer & plan, const lowrank_device_layer & dev, buffer_ptr & scratch) {
    const layer_weights & L = w.layers[size_t(l)];
    const dtype mt = w.matrix_type;
    const size_t es = dtype_size(mt);
    const int64_t H = cfg.hidden_size, d = cfg.head_dim, nq = cfg.num_attention_heads,
                  nkv = cfg.num_key_value_heads;
    const int64_t g = nq / nkv, vt = plan.v_total, o_in = g * vt;
    // Scratch: the f32 products (W_V', W_O', and W_K', W_Q' on a fold_qk layer) and, for f16
    // weights, W_O converted to f32.
    const int64_t wo_f32 = mt == dtype::f32 ? 0 : H * nq * d;
    const int64_t widest = std::max({vt, o_in, plan.fold_qk ? g * plan.k_total : 0});
    const size_t need = size_t(widest * H + wo_f32) * 4;
    if (!scratch || scratch->size() < need) scratch = be.alloc(need);
    const int64_t n_basis = dev.bases.numel();

    folded_layer f;
    if (plan.fold_qk)
        fold_qk(be, cfg, L, mt, plan, dev, make_tensor(scratch.get(), dtype::f32, {widest * H}), f);
    // W_V'^c = R_v^cT W_V^c: one gemm per KV head into the rows of its packed block.
    for (int64_t c = 0; c < nkv; ++c) {
        gemm_params gp;
        gp.m = plan.v[size_t(c)], gp.n = H, gp.k = d, gp.trans_b = false;
        const tensor a =
            make_tensor(dev.bases.buf, dtype::f32, {gp.m, d}, dev.bases.offset + size_t(plan.rvt_at(c)) * 4);
        const tensor b = make_tensor(L.wv.get(), mt, {d, H}, size_t(c * d * H) * es);
        const tensor out = make_tensor(scratch.get(), dtype::f32, {gp.m, H}, size_t(plan.v_off(c) * H) * 4);
        be.run(make_op(gp, {a, b}, {out}));
    }
    f.w_v = be.alloc(size_t(vt * H) * es);
    be.run(make_op(copy_params{vt * H}, {make_tensor(scratch.get(), dtype::f32, {vt * H})},
                   {make_tensor(f.w_v.get(), mt, {vt * H})}));
    f.bytes += f.w_v->size();
    if (L.bv) {
        f.b_v = be.alloc(size_t(vt) * 4);
        be.run(make_op(head_project_params{1, nkv, nkv * d, vt, n_basis},
                       {make_tensor(L.bv.get(), dtype::f32, {nkv * d}), dev.bases, dev.bv_table},
                       {make_tensor(f.b_v.get(), dtype::f32, {vt})}));
        f.bytes += f.b_v->size();
    }
    // W_O' rows: head_project of every row of W_O (f32) with query head h's R_v.
    tensor wo = make_tensor(L.wo.get(), mt, {H, nq * d});
    if (mt != dtype::f32) {
        const tensor wo32 = make_tensor(scratch.get(), dtype::f32, {H, nq * d}, size_t(widest * H) * 4);
        be.run(make_op(copy_params{H * nq * d}, {wo}, {wo32}));
        wo = wo32;
    }
    const tensor prod = make_tensor(scratch.get(), dtype::f32, {H, o_in});
    be.run(make_op(head_project_params{H, nq, nq * d, o_in, n_basis}, {wo, dev.bases, dev.o_table}, {prod}));
    f.w_o = be.alloc(size_t(H * o_in) * es);
    be.run(make_op(copy_params{H * o_in}, {prod}, {make_tensor(f.w_o.get(), mt, {H * o_in})}));
    f.bytes += f.w_o->size();

    return f;
}

void release_replaced_weights(backend & be, model_weights & w, const lowrank_plan & plan) {
    be.synchronize();  // the folds read these buffers
    auto release = [&](buffer_ptr & b) {
        if (!b) return;
        w.bytes -= std::min<uint64_t>(w.bytes, b->size());
        b.reset();
    };
    for (size_t l = 0; l < w.layers.size(); ++l) {
        layer_weights & L = w.layers[l];
        for (buffer_ptr * b : {&L.wv, &L.bv, &L.wo}) release(*b);
        if (plan.layers[l].fold_qk)
            for (buffer_ptr * b : {&L.wq, &L.wk}) release(*b);
    }
}

folded_model fold_model(backend & be, const host::model_config & cfg, model_weights & w, const lowrank_plan & plan,
                        const lowrank_device & dev, bool palu) {
    folded_model out;
    buffer_ptr scratch;
    for (int64_t l = 0; l < cfg.num_hidden_layers; ++l) {
        const lowrank_layer & L = plan.layers[size_t(l)];
        out.layers.push_back(fold_layer(be, cfg, w, l, L, dev.layers[size_t(l)], scratch));
        const folded_layer & f = out.layers.back();
        layer_projection p;
        p.w_v = f.w_v.get(), p.b_v = f.b_v.get(), p.v_width = L.v_total;
        p.w_o = f.w_o.get(), p.o_width = cfg.gqa_group() * L.v_total;
        if (L.fold_qk) {
            // q' and k' straight from the projections (Lemma 1; the layer has no RoPE).
            p.w_q = f.w_q.get(), p.q_width = cfg.gqa_group() * L.k_total;
            p.w_k = f.w_k.get(), p.k_width = L.k_total;
        }
        p.k_pre_rope = palu && !L.fold_qk;
        out.projections.push_back(p);
        out.bytes += f.bytes;
    }
    release_replaced_weights(be, w, plan);
    return out;
}

}  // namespace kvcomp::engine
