// Method "none": the uncompressed fp16 paged KV cache (the baseline every method is measured
// against). Per layer one K and one V pool, f16 [n_pages, n_kv_heads, page_size, head_dim].
#include "engine/kv_method.h"
#include "engine/prompt_attention.h"

namespace kvcomp::engine {

namespace {

class kv_method_none : public kv_method {
public:
    std::string name() const override { return "none"; }

    void allocate(backend & be, const kv_shape & shape) override {
        shape_ = shape;
        const size_t pool = size_t(page_elems() * shape.n_pages) * 2;
        for (int64_t l = 0; l < shape.n_layers; ++l) {
            k_.push_back(be.alloc(pool));
            v_.push_back(be.alloc(pool));
        }
        bytes_ = uint64_t(pool) * 2 * uint64_t(shape.n_layers);
    }

    uint64_t bytes_allocated() const override { return bytes_; }

    uint64_t bytes_for_tokens(int64_t tokens) const override {
        const int64_t pages = (tokens + shape_.page_size - 1) / shape_.page_size;
        return uint64_t(pages * page_elems()) * 2 /*bytes*/ * 2 /*K and V*/ * uint64_t(shape_.n_layers);
    }

    void attend(backend & be, int64_t layer, const kv_step & s, const tensor & q, const tensor & k, const tensor & v,
                const tensor & out, float scale) override {
        const kv_layout kv{shape_.n_pages, shape_.n_kv_heads, shape_.page_size, shape_.head_dim};
        const tensor kp = pool(*k_[size_t(layer)]), vp = pool(*v_[size_t(layer)]);
        be.run(make_op(kv_append_params{kv, s.n_tokens, s.batch, s.nnz_pages},
                       {k, v, s.batch_idx, s.positions, s.indptr, s.indices}, {kp, vp}));
        if (s.prefill) {
            attend_prompt(be, scratch_, shape_, s, q, k, v, out, scale);
        } else {
            attn_decode_params p;
            p.kv = kv, p.batch = s.batch, p.n_q_heads = shape_.n_q_heads, p.nnz_pages = s.nnz_pages;
            p.max_seq_len = s.max_seq_len, p.scale = scale;
            be.run(make_op(p, {q, kp, vp, s.indptr, s.indices, s.last_page_len}, {out}));
        }
    }

private:
    int64_t page_elems() const { return shape_.n_kv_heads * shape_.page_size * shape_.head_dim; }
    tensor pool(buffer & b) const {
        return make_tensor(&b, dtype::f16, {shape_.n_pages, shape_.n_kv_heads, shape_.page_size, shape_.head_dim});
    }

    kv_shape shape_;
    std::vector<buffer_ptr> k_, v_;
    buffer_ptr scratch_;
    uint64_t bytes_ = 0;
};

}  // namespace

std::unique_ptr<kv_method> make_kv_method_none(const method_options & options) {
    for (const auto & kv : options)
        KVCOMP_THROW(status::invalid_argument, "method none: unknown option '", kv.first, "' (it takes none)");
    return std::make_unique<kv_method_none>();
}

}  // namespace kvcomp::engine
