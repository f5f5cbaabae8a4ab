// Low-rank test support: see lowrank_projected.h.
#include "support/lowrank_projected.h"

#include "support/lowrank_engine.h"

namespace kvcomp::test::lowrank {

namespace hl = host::lowrank;

projected_none::projected_none(std::vector<std::vector<double>> pk, std::vector<std::vector<double>> pv,
                               bool k_pre_rope, float theta, std::vector<bool> rope_layers)
    : forwarding_kv_method(engine::create_kv_method("none", {})),
      pk_(std::move(pk)),
      pv_(std::move(pv)),
      theta_(theta),
      rope_layers_(std::move(rope_layers)) {
    proj_.k_pre_rope = k_pre_rope;
}

void projected_none::allocate(backend & be, const engine::kv_shape & shape) {
    shape_ = shape;
    forwarding_kv_method::allocate(be, shape);
}

void projected_none::attend(backend & be, int64_t layer, const engine::kv_step & s, const tensor & q,
                            const tensor & k, const tensor & v, const tensor & out, float scale) {
    const int64_t n = s.n_tokens, nkv = shape_.n_kv_heads, d = shape_.head_dim;
    const size_t bytes = size_t(n * nkv * d) * 4;
    if (!buf_ || buf_->size() < 2 * bytes) buf_ = be.alloc(2 * bytes);
    const tensor kt = make_tensor(buf_.get(), dtype::f32, {n, nkv, d});
    const tensor vt = make_tensor(buf_.get(), dtype::f32, {n, nkv, d}, bytes);
    project(be, k, kt, pk_, layer);
    project(be, v, vt, pv_, layer);
    const bool rope_here = rope_layers_.empty() || rope_layers_[size_t(layer)];
    if (proj_.k_pre_rope && rope_here) {
        rope_params rp;
        rp.n_tokens = n, rp.n_heads = nkv, rp.head_dim = d, rp.rot_dim = d, rp.theta = theta_;
        be.run(make_op(rp, {kt, s.positions, tensor{}}, {kt}));
    }
    inner().attend(be, layer, s, q, kt, vt, out, scale);
}

void projected_none::project(backend & be, const tensor & x, const tensor & y,
                             const std::vector<std::vector<double>> & p, int64_t layer) {
    const int64_t nkv = shape_.n_kv_heads, d = shape_.head_dim, rows = x.numel() / d;
    std::vector<float> in(static_cast<size_t>(x.numel())), res(in.size());
    be.download(*x.buf, x.offset, in.data(), in.size() * 4);
    for (int64_t r = 0; r < rows; ++r) {
        const auto & P = p[size_t(layer * nkv + r % nkv)];
        for (int64_t i = 0; i < d; ++i) {
            double acc = 0;
            for (int64_t j = 0; j < d; ++j) acc += P[size_t(i * d + j)] * double(in[size_t(r * d + j)]);
            res[size_t(r * d + i)] = float(acc);
        }
    }
    be.upload(*y.buf, y.offset, res.data(), res.size() * 4);
}

std::vector<double> projector(const hl::head_basis & b, int64_t rank) {
    const int64_t d = int64_t(b.sigma.size());
    std::vector<double> p(static_cast<size_t>(d * d), 0.0);
    for (int64_t i = 0; i < d; ++i)
        for (int64_t j = 0; j < d; ++j)
            for (int64_t c = 0; c < rank; ++c)
                p[size_t(i * d + j)] += b.basis[size_t(i * b.cols + c)] * b.basis[size_t(j * b.cols + c)];
    return p;
}

std::string uneven_calib_file(const std::string & method, const std::string & dir, hl::calibration * out) {
    hl::calibration c = hl::read_calibration(calib_file(method, dir));
    const std::vector<int64_t> ks = {16, 41, 7, 64}, vs = {33, 8, 64, 20};
    for (size_t i = 0; i < c.ranks.k.size(); ++i) c.ranks.k[i] = ks[i % 4], c.ranks.v[i] = vs[i % 4];
    const std::string file = calib_file(method, dir) + ".uneven.safetensors";
    hl::write_calibration(file, c);
    if (out) *out = std::move(c);
    return file;
}

std::unique_ptr<projected_none> projected_reference(const hl::calibration & c, bool palu, float theta,
                                                    std::vector<bool> rope_layers) {
    std::vector<std::vector<double>> pk, pv;
    for (size_t i = 0; i < c.ranks.k.size(); ++i) {
        pk.push_back(projector(c.k[i], c.ranks.k[i]));
        pv.push_back(projector(c.v[i], c.ranks.v[i]));
    }
    return std::make_unique<projected_none>(std::move(pk), std::move(pv), palu, theta,
                                            std::move(rope_layers));
}

}  // namespace kvcomp::test::lowrank
