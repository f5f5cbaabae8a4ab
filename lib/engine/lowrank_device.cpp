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
        at pad_bases, q_pad, k_pad, v_pad, unpad;
    };
    std::vector<placed> where;
    for (const lowrank_layer & L : plan.layers)
        where.push_back({put_i(L.heads), put_i(L.heads_full), put_i(L.q_table), put_i(L.k_table),
                         put_i(L.bv_table), put_i(L.o_table), put_i(L.rec_table), put_f(L.bases),
                         put_f(L.aux), put_f(L.pad_bases), put_i(L.q_pad_table), put_i(L.k_pad_table),
                         put_i(L.v_pad_table), put_i(L.unpad_table)});
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
        dev.layers.push_back(d);
    }
    return dev;
}

folded_layer fold_layer(backend & be, const host::model_config & cfg, const model_weights & w, int64_t l,
                        const lowrank_layer & plan, const lowrank_device_layer & dev, buffer_ptr & scratch) {
    const layer_weights & L = w.layers[size_t(l)];
    const dtype mt = w.matrix_type;
    const size_t es = dtype_size(mt);
    const int64_t H = cfg.hidden_size, d = cfg.head_dim, nq = cfg.num_attention_heads,
                  nkv = cfg.num_key_value_heads;
    const int64_t g = nq / nkv, vt = plan.v_total, o_in = g * vt;
    // Scratch: the f32 products (W_V' then W_O') and, for f16 weights, W_O converted to f32.
    const int64_t wo_f32 = mt == dtype::f32 ? 0 : H * nq * d;
    const size_t need = size_t(std::max(vt * H, o_in * H) + wo_f32) * 4;
    if (!scratch || scratch->size() < need) scratch = be.alloc(need);
    const int64_t n_basis = dev.bases.numel();

    folded_layer f;
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
        const tensor wo32 = make_tensor(scratch.get(), dtype::f32, {H, nq * d}, size_t(o_in * H) * 4);
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

void release_replaced_weights(backend & be, model_weights & w) {
    be.synchronize();  // the folds read these buffers
    for (layer_weights & L : w.layers)
        for (buffer_ptr * b : {&L.wv, &L.bv, &L.wo})
            if (*b) {
                w.bytes -= std::min<uint64_t>(w.bytes, (*b)->size());
                b->reset();
            }
}

}  // namespace kvcomp::engine
