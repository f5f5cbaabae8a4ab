// kivi / zipcache over the reduced cache of zack / fdc: see kv_method_lowrank_quant.h.
#include "engine/kv_method_lowrank_quant.h"

#include "engine/calibrate.h"
#include "engine/lowrank_device.h"

namespace kvcomp::engine {

namespace {

namespace hl = host::lowrank;

class lowrank_quant_method : public kv_method_over {
  public:
    lowrank_quant_method(const lowrank_choice & choice, const quant_method_config & quant)
        : kv_method_over(make_quant_method(quant)), choice_(choice) {
        choice_.equalize = false;  // the quantizer's own per-channel key ranges do that job
        choice_.fold_qk = false;   // one online projection on every layer: the same shapes everywhere
    }

    std::string name() const override { return inner().name() + "+" + hl::lowrank_method_name(choice_.method); }

    void prepare(backend & be, const model_context & m) override {
        plan_ = make_lowrank_plan(choice_, m.config, engine_model_hash(m.model_dir, m.random_weights, m.weight_seed));
        dev_ = upload_lowrank_plan(be, plan_);
        folded_ = fold_model(be, m.config, m.weights, plan_, dev_, false);
        inner().prepare(be, m);
    }

    const layer_projection * projection(int64_t layer) const override {
        return folded_.projections.empty() ? nullptr : &folded_.projections[size_t(layer)];
    }

    uint64_t weight_bytes() const override { return folded_.bytes + dev_.bytes() + inner().weight_bytes(); }

    void allocate(backend & be, const kv_shape & shape) override {
        KVCOMP_CHECK_ARG(!plan_.layers.empty(), "method ", name(), ": allocate() before prepare()");
        KVCOMP_CHECK_ARG(shape.n_layers == int64_t(plan_.layers.size()) && shape.n_kv_heads == plan_.n_kv_heads &&
                             shape.head_dim == plan_.head_dim,
                         "method ", name(), ": cache shape disagrees with the calibration");
        shape_ = shape;
        kv_shape reduced = shape;
        reduced.head_dim = choice_.uniform_rank;
        inner().allocate(be, reduced);
    }

    // q [n, nq * d] and k [n, nkv * d] (post-RoPE) are projected to q' [n, nq, r] and k' [n, nkv, r];
    // v [n, nkv * r] came reduced from the folded W_V, and the output [n, nq, r] goes to the folded W_O.
    void attend(backend & be, int64_t layer, const kv_step & s, const tensor & q, const tensor & k,
                const tensor & v, const tensor & out, float scale) override {
        const lowrank_layer & L = plan_.layers[size_t(layer)];
        const lowrank_device_layer & D = dev_.layers[size_t(layer)];
        const int64_t n = s.n_tokens, nq = shape_.n_q_heads, nkv = shape_.n_kv_heads, d = shape_.head_dim;
        const int64_t r = choice_.uniform_rank;
        const size_t q_bytes = size_t(n * nq * r) * 4, k_bytes = size_t(n * nkv * r) * 4;
        const size_t k_at = (q_bytes + 255) / 256 * 256;
        if (!scratch_ || scratch_->size() < k_at + k_bytes) scratch_ = be.alloc(k_at + k_bytes);
        const tensor qr = make_tensor(scratch_.get(), dtype::f32, {n, nq, r});
        const tensor kr = make_tensor(scratch_.get(), dtype::f32, {n, nkv, r}, k_at);
        be.run(make_op(head_project_params{n, nq, nq * d, nq * r, D.bases.numel()}, {q, D.bases, D.q_table}, {qr}));
        be.run(make_op(head_project_params{n, nkv, nkv * d, L.k_total, D.bases.numel()}, {k, D.bases, D.k_table},
                       {kr}));
        const tensor vr = make_tensor(v.buf, dtype::f32, {n, nkv, r}, v.offset);
        const tensor outr = make_tensor(out.buf, dtype::f32, {n, nq, r}, out.offset);
        inner().attend(be, layer, s, qr, kr, vr, outr, scale);
    }

  private:
    lowrank_choice choice_;
    lowrank_plan plan_;
    lowrank_device dev_;
    folded_model folded_;
    kv_shape shape_;
    buffer_ptr scratch_;
};

}  // namespace

std::unique_ptr<kv_method> make_lowrank_quant_method(const lowrank_choice & choice, const quant_method_config & quant) {
    KVCOMP_CHECK_ARG(choice.method != hl::lowrank_method::palu, "method ", quant.name,
                     ": lowrank=palu is not supported (Palu caches pre-RoPE latents; use zack or fdc)");
    KVCOMP_CHECK_ARG(choice.uniform_rank > 0 && choice.uniform_rank % 16 == 0, "method ", quant.name,
                     ": rank must be a positive multiple of 16 (the quantized blocks' head_dim), got ",
                     choice.uniform_rank);
    return std::make_unique<lowrank_quant_method>(choice, quant);
}

}  // namespace kvcomp::engine
