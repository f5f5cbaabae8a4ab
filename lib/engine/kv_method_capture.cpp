// The calibration capture method: "none" plus host-side Gram accumulation (kv_method_capture.h).
#include "engine/kv_method_capture.h"

#include <algorithm>
#include <utility>

namespace kvcomp::engine {

std::unique_ptr<kv_method> make_kv_method_none(const method_options & options);

namespace {

using host::lowrank::gram_accumulator;
using host::lowrank::mat_view;

class kv_method_capture : public kv_method_over {
public:
    explicit kv_method_capture(std::shared_ptr<capture_grams> g)
        : kv_method_over(make_kv_method_none({})), g_(std::move(g)) {
        KVCOMP_CHECK_ARG(g_ != nullptr, "capture method: no Gram sink given");
    }

    std::string name() const override { return "capture"; }

    void allocate(backend & be, const kv_shape & shape) override {
        KVCOMP_CHECK_ARG(shape.n_kv_heads > 0 && shape.n_q_heads % shape.n_kv_heads == 0, "capture method: ",
                         shape.n_q_heads, " query heads are not a multiple of ", shape.n_kv_heads, " KV heads");
        inner().allocate(be, shape);
        capture_grams & g = *g_;
        g.n_layers = shape.n_layers, g.n_q_heads = shape.n_q_heads;
        g.n_kv_heads = shape.n_kv_heads, g.head_dim = shape.head_dim;
        g.qk.clear(), g.v.clear(), g.tokens = 0;
        for (int64_t i = 0; i < shape.n_layers * shape.n_kv_heads; ++i) {
            g.qk.emplace_back(shape.head_dim);
            if (g.with_v) g.v.emplace_back(shape.head_dim);
        }
    }

    void attend(backend & be, int64_t layer, const kv_step & s, const tensor & q, const tensor & k, const tensor & v,
                const tensor & out, float scale) override {
        capture(be, layer, s.n_tokens, q, k, v);
        inner().attend(be, layer, s, q, k, v, out, scale);
    }

private:
    static std::vector<float> download(backend & be, const tensor & t, int64_t expect) {
        KVCOMP_CHECK_ARG(t.type == dtype::f32 && t.numel() == expect, "capture method: expected f32 with ", expect,
                         " elements, got ", describe(t));
        std::vector<float> h(static_cast<size_t>(expect));
        be.download(*t.buf, t.offset, h.data(), h.size() * sizeof(float));
        return h;
    }

    void capture(backend & be, int64_t layer, int64_t n, const tensor & q, const tensor & k, const tensor & v) {
        capture_grams & g = *g_;
        const int64_t nq = g.n_q_heads, nkv = g.n_kv_heads, d = g.head_dim, grp = nq / nkv;
        const auto hq = download(be, q, n * nq * d), hk = download(be, k, n * nkv * d);
        std::vector<float> hv;
        if (g.with_v) hv = download(be, v, n * nkv * d);
        // Rows of one KV head gathered contiguously: the g query rows of each token, then its key row.
        std::vector<float> rows(static_cast<size_t>(n * (grp + 1) * d));
        std::vector<float> vrows(static_cast<size_t>(n * d));
        for (int64_t c = 0; c < nkv; ++c) {
            float * dst = rows.data();
            for (int64_t t = 0; t < n; ++t) {
                const float * qs = hq.data() + (t * nq + c * grp) * d;
                dst = std::copy(qs, qs + grp * d, dst);
                const float * ks = hk.data() + (t * nkv + c) * d;
                dst = std::copy(ks, ks + d, dst);
            }
            g.qk[size_t(layer * nkv + c)].add(mat_view(rows.data(), n * (grp + 1), d));
            if (!g.with_v) continue;
            for (int64_t t = 0; t < n; ++t) {
                const float * vs = hv.data() + (t * nkv + c) * d;
                std::copy(vs, vs + d, vrows.data() + t * d);
            }
            g.v[size_t(layer * nkv + c)].add(mat_view(vrows.data(), n, d));
        }
        if (layer == 0) g.tokens += n;
    }

    std::shared_ptr<capture_grams> g_;
};

}  // namespace

std::unique_ptr<kv_method> make_kv_method_capture(std::shared_ptr<capture_grams> grams) {
    return std::make_unique<kv_method_capture>(std::move(grams));
}

}  // namespace kvcomp::engine
