// Invariants of the low-rank ops (core/op.h "Low-rank KV"), on every backend that supports them:
//   - full rank with the identity basis: ragged pages of uniform width head_dim are the HND pages
//     of attn_decode / attn_prefill, so the ragged ops must equal those ops on the same buffers;
//   - a random orthogonal R applied to q and k by head_project (widths = head_dim, V identity)
//     leaves the logits, hence the decode output, unchanged;
//   - with K and V of decaying spectra, the error against exact attention falls monotonically as
//     the width grows along the principal directions;
//   - the output does not depend on the decode schedule (plain, balanced, a random one);
//   - the scale is the passed one (1/sqrt(original head_dim)), not 1/sqrt(width);
//   - Palu with identity B is RoPE'd keys: equals the rope op followed by attn_decode;
//   - the CPU oracle rejects schedules that do not cover a request's tokens exactly once.
#include <gtest/gtest.h>

#include <Eigen/Dense>
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <variant>
#include <vector>

#include "core/registry.h"
#include "engine/kv_method_lowrank.h"
#include "host/lowrank/decode_schedule.h"
#include "support/backends.h"
#include "support/expect_error.h"

using namespace kvcomp;
namespace lr = kvcomp::host::lowrank;

namespace {

// A device array and its view.
struct dev {
    buffer_ptr buf;
    tensor t;
};
template <typename T>
dev put(backend & be, const std::vector<T> & v, dtype type) {
    dev d;
    d.buf = upload_vector(be, v);
    d.t = make_tensor(d.buf.get(), type, {std::max<int64_t>(1, int64_t(v.size()))});
    return d;
}
dev put_f32(backend & be, const std::vector<float> & v) {
    return put(be, v, dtype::f32);
}
dev put_i32(backend & be, const std::vector<int32_t> & v) {
    return put(be, v, dtype::i32);
}
dev zeros_f32(backend & be, int64_t n) {
    return put_f32(be, std::vector<float>(static_cast<size_t>(std::max<int64_t>(n, 1)), 0.0f));
}
dev zeros_f16(backend & be, int64_t n) {
    return put(be, std::vector<uint16_t>(static_cast<size_t>(n), 0), dtype::f16);
}
std::vector<float> get_f32(backend & be, const dev & d, int64_t n) {
    std::vector<float> v(static_cast<size_t>(n));
    be.synchronize();
    be.download(*d.buf, 0, v.data(), v.size() * sizeof(float));
    return v;
}

double nmse(const std::vector<float> & got, const std::vector<double> & want) {
    double num = 0, den = 0;
    for (size_t i = 0; i < got.size(); ++i) {
        num += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
        den += want[i] * want[i];
    }
    return num / std::max(den, 1e-30);
}
double nmse(const std::vector<float> & got, const std::vector<float> & want) {
    return nmse(got, std::vector<double>(want.begin(), want.end()));
}

float round_f16(float x) {
    return half_to_float(float_to_half(x));
}

std::vector<float> normal(std::mt19937 & rng, size_t n, float scale = 1.0f) {
    std::normal_distribution<float> d(0.0f, scale);
    std::vector<float> v(n);
    for (auto & x : v) x = d(rng);
    return v;
}

Eigen::MatrixXd random_orthogonal(std::mt19937 & rng, int64_t n) {
    std::normal_distribution<double> d;
    Eigen::MatrixXd a(n, n);
    for (int64_t i = 0; i < n * n; ++i) a.data()[i] = d(rng);
    return Eigen::HouseholderQR<Eigen::MatrixXd>(a).householderQ();
}

// Page table of `lens` tokens in pages of page_size, pages numbered backwards so that no request's
// pages are contiguous or start at 0.
struct page_table {
    int64_t page_size = 16, n_pages = 0, nnz = 0, max_len = 0;
    std::vector<int32_t> indptr{0}, indices, last;
    std::vector<int64_t> lens;
    page_table(const std::vector<int64_t> & l, int64_t ps) : page_size(ps), lens(l) {
        for (int64_t n : lens) {
            const int64_t pages = (n + ps - 1) / ps;
            for (int64_t i = 0; i < pages; ++i) indices.push_back(int32_t(nnz + i));
            nnz += pages;
            indptr.push_back(int32_t(nnz));
            last.push_back(int32_t(n == 0 ? 0 : n - (pages - 1) * ps));
            max_len = std::max(max_len, n);
        }
        n_pages = nnz + 2;
        for (auto & p : indices) p = int32_t(n_pages - 1 - p);
        if (indices.empty()) indices.push_back(0);
        nnz = std::max<int64_t>(nnz, 1);
    }
    // Flat token number (request-major) of token j of request b.
    int64_t flat(int64_t b, int64_t j) const {
        return std::accumulate(lens.begin(), lens.begin() + b, int64_t(0)) + j;
    }
    int64_t tokens() const { return std::accumulate(lens.begin(), lens.end(), int64_t(0)); }
};

// Ragged pages written on the host: head c's token j of request b is k[flat * k_total + k_off + d].
std::vector<uint16_t> ragged_pages(const page_table & pt, const std::vector<int32_t> & heads, int64_t total,
                                   const std::vector<float> & x, bool keys) {
    const int64_t n_kv = int64_t(heads.size() / 4);
    std::vector<uint16_t> pages(static_cast<size_t>(pt.n_pages * pt.page_size * total), 0);
    for (size_t b = 0; b < pt.lens.size(); ++b)
        for (int64_t j = 0; j < pt.lens[b]; ++j) {
            const int64_t page = pt.indices[size_t(pt.indptr[b] + j / pt.page_size)], slot = j % pt.page_size;
            for (int64_t c = 0; c < n_kv; ++c) {
                const int64_t w = heads[size_t(c * 4 + (keys ? 0 : 2))],
                              off = heads[size_t(c * 4 + (keys ? 1 : 3))];
                for (int64_t d = 0; d < w; ++d)
                    pages[size_t(page * pt.page_size * total + pt.page_size * off + slot * w + d)] =
                        float_to_half(x[size_t(pt.flat(int64_t(b), j) * total + off + d)]);
            }
        }
    return pages;
}

// Runs attn_decode_ragged with the given schedule; returns out [batch, g * v_total].
std::vector<float> decode_ragged(backend & be, const page_table & pt, const std::vector<int32_t> & heads,
                                 int64_t n_q_heads, const std::vector<float> & q,
                                 const std::vector<uint16_t> & kp, const std::vector<uint16_t> & vp,
                                 const lr::decode_schedule & s, float scale) {
    attn_decode_ragged_params p;
    const int64_t n_kv = int64_t(heads.size() / 4);
    p.kv.n_pages = pt.n_pages, p.kv.n_kv_heads = n_kv, p.kv.page_size = pt.page_size;
    for (int64_t c = 0; c < n_kv; ++c) {
        p.kv.k_total += heads[size_t(c * 4)];
        p.kv.v_total += heads[size_t(c * 4 + 2)];
        p.kv.max_width = std::max<int64_t>({p.kv.max_width, heads[size_t(c * 4)], heads[size_t(c * 4 + 2)]});
    }
    p.batch = int64_t(pt.lens.size()), p.n_q_heads = n_q_heads, p.nnz_pages = pt.nnz,
    p.max_seq_len = pt.max_len;
    p.n_tasks = s.n_tasks, p.scale = scale;
    const int64_t n_out = p.batch * (n_q_heads / n_kv) * p.kv.v_total;
    dev dq = put_f32(be, q), dk = put(be, kp, dtype::f16), dv = put(be, vp, dtype::f16);
    dev di = put_i32(be, pt.indptr), dx = put_i32(be, pt.indices), dl = put_i32(be, pt.last),
        dh = put_i32(be, heads), ds = put_i32(be, s.schedule), dm = put_i32(be, s.merge),
        out = zeros_f32(be, n_out);
    const op_desc op = make_op(p, {dq.t, dk.t, dv.t, di.t, dx.t, dl.t, dh.t, ds.t, dm.t}, {out.t});
    if (!be.supports(op).ok) return {};
    be.run(op);
    return get_f32(be, out, n_out);
}

lr::decode_schedule schedule(const page_table & pt, const std::vector<int64_t> & kw,
                             const std::vector<int64_t> & vw, lr::decode_policy policy, int64_t workers) {
    lr::decode_schedule_options o;
    o.policy = policy;
    o.n_workers = workers;
    return lr::build_decode_schedule(pt.lens, kw, vw, o);
}

class lowrank_ops : public ::testing::TestWithParam<std::string> {
  protected:
    void SetUp() override { be = create_backend(GetParam()); }
    std::unique_ptr<backend> be;
};

// (1) Identity basis at full rank: the ragged ops equal attn_decode / attn_prefill on the same buffers.
TEST_P(lowrank_ops, full_rank_identity_equals_attn_decode_and_prefill) {
    std::mt19937 rng(11);
    const int64_t n_kv = 2, g = 4, hd = 64;
    const page_table pt({1, 300, 0, 77}, 16);
    const std::vector<int64_t> w(size_t(n_kv), hd);
    const auto heads = lr::ragged_heads_table(w, w);
    const auto k = normal(rng, size_t(pt.tokens() * n_kv * hd)),
               v = normal(rng, size_t(pt.tokens() * n_kv * hd));
    const auto q = normal(rng, size_t(int64_t(pt.lens.size()) * g * n_kv * hd));
    const auto kp = ragged_pages(pt, heads, n_kv * hd, k, true),
               vp = ragged_pages(pt, heads, n_kv * hd, v, false);
    const float scale = 1.0f / std::sqrt(float(hd));
    const auto got = decode_ragged(*be, pt, heads, g * n_kv, q, kp, vp,
                                   schedule(pt, w, w, lr::decode_policy::balanced, 8), scale);
    if (got.empty()) GTEST_SKIP() << "attn_decode_ragged not supported on " << GetParam();

    attn_decode_params dp;
    dp.kv = {pt.n_pages, n_kv, pt.page_size, hd};
    dp.batch = int64_t(pt.lens.size()), dp.n_q_heads = g * n_kv, dp.nnz_pages = pt.nnz,
    dp.max_seq_len = pt.max_len;
    dp.scale = scale;
    const auto cpu = create_backend("cpu");
    dev dq = put_f32(*cpu, q), dk = put(*cpu, kp, dtype::f16), dv = put(*cpu, vp, dtype::f16);
    dev di = put_i32(*cpu, pt.indptr), dx = put_i32(*cpu, pt.indices), dl = put_i32(*cpu, pt.last);
    dev out = zeros_f32(*cpu, int64_t(q.size()));
    cpu->run(make_op(dp, {dq.t, dk.t, dv.t, di.t, dx.t, dl.t}, {out.t}));
    const auto want = get_f32(*cpu, out, int64_t(q.size()));
    EXPECT_LT(nmse(got, want), 1e-10);

    // Prefill on the same token-major data: [n_tokens, n_kv * hd] is [n_tokens, n_kv, hd].
    const int64_t nt = pt.tokens();
    std::vector<int32_t> seq{0};
    for (int64_t n : pt.lens) seq.push_back(seq.back() + int32_t(n));
    const auto qp = normal(rng, size_t(nt * g * n_kv * hd));
    std::vector<uint16_t> k16, v16;
    for (float x : k) k16.push_back(float_to_half(x));
    for (float x : v) v16.push_back(float_to_half(x));
    attn_prefill_ragged_params rp;
    rp.batch = int64_t(pt.lens.size()), rp.n_tokens = nt, rp.n_q_heads = g * n_kv, rp.n_kv_heads = n_kv;
    rp.k_total = rp.v_total = n_kv * hd, rp.max_width = hd, rp.max_seq_len = pt.max_len, rp.scale = scale;
    attn_prefill_params fp;
    fp.batch = rp.batch, fp.n_tokens = nt, fp.n_q_heads = g * n_kv, fp.n_kv_heads = n_kv, fp.head_dim = hd;
    fp.max_seq_len = pt.max_len, fp.scale = scale;
    for (bool balanced : {false, true}) {
        rp.balanced = balanced;
        dev a = put_f32(*be, qp), b = put(*be, k16, dtype::f16), c = put(*be, v16, dtype::f16),
            s = put_i32(*be, seq), h = put_i32(*be, heads), o = zeros_f32(*be, int64_t(qp.size()));
        const op_desc op = make_op(rp, {a.t, b.t, c.t, s.t, h.t}, {o.t});
        if (!be->supports(op).ok) GTEST_SKIP() << "attn_prefill_ragged not supported on " << GetParam();
        be->run(op);
        const auto got_p = get_f32(*be, o, int64_t(qp.size()));
        dev a2 = put_f32(*cpu, qp), b2 = put(*cpu, k16, dtype::f16), c2 = put(*cpu, v16, dtype::f16),
            s2 = put_i32(*cpu, seq), o2 = zeros_f32(*cpu, int64_t(qp.size()));
        cpu->run(make_op(fp, {a2.t, b2.t, c2.t, s2.t}, {o2.t}));
        EXPECT_LT(nmse(got_p, get_f32(*cpu, o2, int64_t(qp.size()))), 1e-10) << "balanced=" << balanced;
    }
}

// Projects rows of x [n, heads * in_w] per head with bases (one per KV head, shared by its group)
// through head_project; returns [n, heads * out_w].
std::vector<float> project(backend & be, const std::vector<float> & x, int64_t n, int64_t heads,
                           int64_t group, int64_t in_w, int64_t out_w, const std::vector<float> & bases) {
    head_project_params p;
    p.n_tokens = n, p.n_heads = heads, p.in_total = heads * in_w, p.out_total = heads * out_w;
    p.n_basis = int64_t(bases.size());
    std::vector<int32_t> table;
    for (int64_t h = 0; h < heads; ++h)
        table.insert(table.end(), {int32_t(h * in_w), int32_t(in_w), int32_t((h / group) * in_w * out_w),
                                   int32_t(h * out_w), int32_t(out_w)});
    dev dx = put_f32(be, x), db = put_f32(be, bases), dt = put_i32(be, table),
        dy = zeros_f32(be, n * heads * out_w);
    const op_desc op = make_op(p, {dx.t, db.t, dt.t}, {dy.t});
    if (!be.supports(op).ok) return {};
    be.run(op);
    return get_f32(be, dy, std::max<int64_t>(n, 1) * heads * out_w);
}

// Columns [0, w) of each KV head's d x d matrix, row-major d x w.
std::vector<float> leading_columns(const std::vector<Eigen::MatrixXd> & m, int64_t w) {
    std::vector<float> out;
    for (const auto & r : m)
        for (int64_t i = 0; i < r.rows(); ++i)
            for (int64_t j = 0; j < w; ++j) out.push_back(float(r(i, j)));
    return out;
}

// Exact fp64 decode attention on token-major host data k, v [tokens, n_kv, hd], q [batch, n_q, hd].
std::vector<double> exact_decode(const page_table & pt, const std::vector<float> & q,
                                 const std::vector<float> & k, const std::vector<float> & v, int64_t n_kv,
                                 int64_t g, int64_t hd, double scale) {
    std::vector<double> out(q.size(), 0.0);
    for (size_t b = 0; b < pt.lens.size(); ++b)
        for (int64_t h = 0; h < n_kv * g; ++h) {
            const int64_t c = h / g, n = pt.lens[b];
            if (n == 0) continue;
            std::vector<double> s(static_cast<size_t>(n));
            double mx = -INFINITY, sum = 0;
            for (int64_t j = 0; j < n; ++j) {
                double dot = 0;
                for (int64_t d = 0; d < hd; ++d)
                    dot += double(q[size_t((int64_t(b) * n_kv * g + h) * hd + d)]) *
                           double(k[size_t((pt.flat(int64_t(b), j) * n_kv + c) * hd + d)]);
                s[size_t(j)] = dot * scale;
                mx = std::max(mx, s[size_t(j)]);
            }
            for (auto & x : s) sum += (x = std::exp(x - mx));
            for (int64_t j = 0; j < n; ++j)
                for (int64_t d = 0; d < hd; ++d)
                    out[size_t((int64_t(b) * n_kv * g + h) * hd + d)] +=
                        s[size_t(j)] / sum * double(v[size_t((pt.flat(int64_t(b), j) * n_kv + c) * hd + d)]);
        }
    return out;
}

// Runs the low-rank pipeline: head_project q and k with the leading w columns of Rk, v with those
// of Rv, kv_append_ragged, attn_decode_ragged, then lifts the output back with Rv^T (host).
std::vector<float> lowrank_decode(backend & be, const page_table & pt, const std::vector<float> & q,
                                  const std::vector<float> & k, const std::vector<float> & v,
                                  const std::vector<Eigen::MatrixXd> & rk,
                                  const std::vector<Eigen::MatrixXd> & rv, int64_t g, int64_t hd, int64_t w,
                                  float scale) {
    const int64_t n_kv = int64_t(rk.size()), batch = int64_t(pt.lens.size()), nt = pt.tokens();
    const auto bk = leading_columns(rk, w), bv = leading_columns(rv, w);
    const auto qr = project(be, q, batch, n_kv * g, g, hd, w, bk);
    if (qr.empty()) return {};
    const auto kr = project(be, k, nt, n_kv, 1, hd, w, bk), vr = project(be, v, nt, n_kv, 1, hd, w, bv);
    const std::vector<int64_t> widths(static_cast<size_t>(n_kv), w);
    const auto heads = lr::ragged_heads_table(widths, widths);

    kv_append_ragged_params ap;
    ap.kv = {pt.n_pages, n_kv, pt.page_size, n_kv * w, n_kv * w, w};
    ap.n_tokens = nt, ap.batch = batch, ap.nnz_pages = pt.nnz;
    std::vector<int32_t> bidx, pos;
    for (size_t b = 0; b < pt.lens.size(); ++b)
        for (int64_t j = 0; j < pt.lens[b]; ++j) bidx.push_back(int32_t(b)), pos.push_back(int32_t(j));
    dev dk = put_f32(be, kr), dv = put_f32(be, vr), db = put_i32(be, bidx), dp = put_i32(be, pos),
        di = put_i32(be, pt.indptr), dx = put_i32(be, pt.indices), dh = put_i32(be, heads);
    dev kp = zeros_f16(be, pt.n_pages * pt.page_size * n_kv * w),
        vp = zeros_f16(be, pt.n_pages * pt.page_size * n_kv * w);
    const op_desc app = make_op(ap, {dk.t, dv.t, db.t, dp.t, di.t, dx.t, dh.t}, {kp.t, vp.t});
    if (!be.supports(app).ok) return {};
    be.run(app);
    std::vector<uint16_t> kh(static_cast<size_t>(kp.t.numel())), vh(kh.size());
    be.synchronize();
    be.download(*kp.buf, 0, kh.data(), kh.size() * 2);
    be.download(*vp.buf, 0, vh.data(), vh.size() * 2);
    const auto out_r = decode_ragged(be, pt, heads, n_kv * g, qr, kh, vh,
                                     schedule(pt, widths, widths, lr::decode_policy::balanced, 8), scale);
    if (out_r.empty()) return {};
    std::vector<float> out(static_cast<size_t>(batch * n_kv * g * hd), 0.0f);
    for (int64_t b = 0; b < batch; ++b)
        for (int64_t h = 0; h < n_kv * g; ++h)
            for (int64_t d = 0; d < hd; ++d) {
                double acc = 0;
                for (int64_t j = 0; j < w; ++j)
                    acc += double(out_r[size_t((b * n_kv * g + h) * w + j)]) * rv[size_t(h / g)](d, j);
                out[size_t((b * n_kv * g + h) * hd + d)] = float(acc);
            }
    return out;
}

// (2) A random orthogonal R on q and k (widths = head_dim), V identity: attention is unchanged.
TEST_P(lowrank_ops, random_orthogonal_projection_keeps_the_output) {
    std::mt19937 rng(12);
    const int64_t n_kv = 2, g = 4, hd = 64;
    const page_table pt({1, 300, 0, 77}, 16);
    std::vector<float> k = normal(rng, size_t(pt.tokens() * n_kv * hd)), v = normal(rng, k.size());
    for (auto & x : k) x = round_f16(x);
    for (auto & x : v) x = round_f16(x);  // so V through the identity is stored exactly
    const auto q = normal(rng, size_t(int64_t(pt.lens.size()) * g * n_kv * hd));
    std::vector<Eigen::MatrixXd> rk, rv;
    for (int64_t c = 0; c < n_kv; ++c)
        rk.push_back(random_orthogonal(rng, hd)), rv.push_back(Eigen::MatrixXd::Identity(hd, hd));
    const float scale = 1.0f / std::sqrt(float(hd));
    const auto got = lowrank_decode(*be, pt, q, k, v, rk, rv, g, hd, hd, scale);
    if (got.empty()) GTEST_SKIP() << "low-rank ops not supported on " << GetParam();
    const auto want = exact_decode(pt, q, k, v, n_kv, g, hd, scale);
    // Only the fp16 storage of k R differs from exact attention.
    EXPECT_LT(nmse(got, want), 1e-6);
    EXPECT_GT(nmse(got, want), 0.0) << "the projection must actually change what is stored";
}

// (3) Decaying spectra: error against exact attention falls monotonically as the width grows.
TEST_P(lowrank_ops, error_falls_monotonically_with_width) {
    std::mt19937 rng(13);
    const int64_t n_kv = 2, g = 2, hd = 64;
    const page_table pt({400, 33}, 16);
    std::vector<Eigen::MatrixXd> rk, rv;
    for (int64_t c = 0; c < n_kv; ++c)
        rk.push_back(random_orthogonal(rng, hd)), rv.push_back(random_orthogonal(rng, hd));
    // x = z diag(s) R^T per KV head: energy s_i^2 along column i of R, s_i = 3 * 0.9^i.
    auto shaped = [&](int64_t rows, int64_t heads, int64_t group, const std::vector<Eigen::MatrixXd> & r) {
        std::vector<float> out;
        for (int64_t t = 0; t < rows; ++t)
            for (int64_t h = 0; h < heads; ++h) {
                Eigen::VectorXd z(hd);
                std::normal_distribution<double> d;
                for (int64_t i = 0; i < hd; ++i) z(i) = d(rng) * 3.0 * std::pow(0.9, double(i));
                const Eigen::VectorXd x = r[size_t(h / group)] * z;
                for (int64_t i = 0; i < hd; ++i) out.push_back(float(x(i)));
            }
        return out;
    };
    const auto k = shaped(pt.tokens(), n_kv, 1, rk), v = shaped(pt.tokens(), n_kv, 1, rv);
    const auto q = shaped(int64_t(pt.lens.size()), n_kv * g, g, rk);
    const float scale = 1.0f / std::sqrt(float(hd));
    const auto want = exact_decode(pt, q, k, v, n_kv, g, hd, scale);
    double prev = INFINITY;
    for (int64_t w : {4, 8, 16, 24, 32, 48, 64}) {
        const auto got = lowrank_decode(*be, pt, q, k, v, rk, rv, g, hd, w, scale);
        if (got.empty()) GTEST_SKIP() << "low-rank ops not supported on " << GetParam();
        const double e = nmse(got, want);
        EXPECT_LT(e, prev) << "width " << w;
        prev = e;
    }
    EXPECT_LT(prev, 1e-5) << "full width is exact up to fp16 storage";
}

// Uneven widths (not all multiples of 16), GQA 4, ragged batch with an empty and a 1-token request.
struct uneven {
    std::vector<int64_t> kw = {16, 48, 128, 80}, vw = {32, 16, 128, 40};
    int64_t g = 4;
    page_table pt{{1500, 1, 0, 700}, 16};
    std::vector<int32_t> heads = lr::ragged_heads_table(kw, vw);
    int64_t k_total = 272, v_total = 216;
    std::vector<float> q;
    std::vector<uint16_t> kp, vp;
    explicit uneven(std::mt19937 & rng, float q_scale = 1.0f) {
        q = normal(rng, size_t(int64_t(pt.lens.size()) * g * k_total), q_scale);
        kp = ragged_pages(pt, heads, k_total, normal(rng, size_t(pt.tokens() * k_total)), true);
        vp = ragged_pages(pt, heads, v_total, normal(rng, size_t(pt.tokens() * v_total)), false);
    }
};

// (4) The output does not depend on the schedule.
TEST_P(lowrank_ops, output_is_independent_of_the_schedule) {
    std::mt19937 rng(14);
    const uneven u(rng);
    const float scale = 1.0f / std::sqrt(128.0f);
    const int64_t n_q = u.g * 4;
    const auto ref = decode_ragged(*be, u.pt, u.heads, n_q, u.q, u.kp, u.vp,
                                   schedule(u.pt, u.kw, u.vw, lr::decode_policy::plain, 1), scale);
    if (ref.empty()) GTEST_SKIP() << "attn_decode_ragged not supported on " << GetParam();
    for (auto policy : {lr::decode_policy::plain, lr::decode_policy::balanced})
        for (int64_t workers : {int64_t(4), int64_t(132)}) {
            const auto got = decode_ragged(*be, u.pt, u.heads, n_q, u.q, u.kp, u.vp,
                                           schedule(u.pt, u.kw, u.vw, policy, workers), scale);
            EXPECT_LT(nmse(got, ref), 1e-10) << lr::policy_name(policy) << " on " << workers << " workers";
        }
    // A random schedule: random cut points, rows shuffled.
    lr::decode_schedule s;
    std::vector<std::array<int32_t, 4>> rows;
    for (size_t b = 0; b < u.pt.lens.size(); ++b)
        for (int32_t c = 0; c < 4; ++c)
            for (int64_t first = 0; first < u.pt.lens[b];) {
                const int64_t end = std::min<int64_t>(u.pt.lens[b], first + 1 + int64_t(rng() % 400));
                rows.push_back({int32_t(b), c, int32_t(first), int32_t(end)});
                first = end;
            }
    std::shuffle(rows.begin(), rows.end(), rng);
    s.n_tasks = int64_t(rows.size());
    for (const auto & r : rows) s.schedule.insert(s.schedule.end(), r.begin(), r.end());
    s.merge.assign(size_t(u.pt.lens.size() * 4 + 1), 0);
    for (const auto & r : rows) ++s.merge[size_t(r[0] * 4 + r[1] + 1)];
    for (size_t i = 1; i < s.merge.size(); ++i) s.merge[i] += s.merge[i - 1];
    std::vector<int32_t> order(rows.size());
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
        return std::make_tuple(rows[size_t(a)][0], rows[size_t(a)][1], rows[size_t(a)][2]) <
               std::make_tuple(rows[size_t(b)][0], rows[size_t(b)][1], rows[size_t(b)][2]);
    });
    s.merge.insert(s.merge.end(), order.begin(), order.end());
    EXPECT_LT(nmse(decode_ragged(*be, u.pt, u.heads, n_q, u.q, u.kp, u.vp, s, scale), ref), 1e-10)
        << "random schedule";
}

// What the engine's workers=auto cuts its decode schedules for: at least one task per compute unit,
// and no more than an SM holds blocks (32 on every CUDA GPU so far); on CUDA, the tensor-core kernel
// of 4 warps and 72 KiB keeps 3 per SM where 228 KiB of shared memory fit them (sm_80+: H100, H200);
// OpenCL plans 8 per compute unit on GPUs (4 for ragged decodes of at most CUs / 2 (request, KV head)
// rows, Palu always 8) and 1 on CPU devices (lib/opencl/attn_decode_ragged.cpp).
TEST_P(lowrank_ops, concurrent_decode_tasks_are_the_resident_work_groups) {
    const int64_t cu = std::max(1, be->info().compute_units);
    const int64_t few = std::max<int64_t>(1, cu / 16), many = cu;  // of 8 KV heads: <= cu / 2 rows (cu >= 16), > cu / 2
    for (int bits : {16, 4})
        for (int64_t max_width : {int64_t(64), int64_t(128), int64_t(256)})
            for (int64_t batch : {few, many}) {
                attn_decode_ragged_params p;
                p.kv.n_kv_heads = 8, p.kv.page_size = 16, p.kv.max_width = max_width, p.kv.bits = bits;
                p.kv.k_total = p.kv.v_total = 8 * max_width;
                p.n_q_heads = 32, p.batch = batch;
                const int64_t n = be->concurrent_workgroups(p);
                EXPECT_GE(n, cu) << bits << "-bit pages, widest head " << max_width;
                EXPECT_LE(n, 32 * cu) << bits << "-bit pages, widest head " << max_width;
                if (be->info().api == "CPU" || (be->info().api == "OpenCL" && !be->info().is_gpu)) {
                    EXPECT_EQ(n, cu) << "one work-group per compute unit";
                } else if (be->info().api == "OpenCL") {
                    EXPECT_EQ(n, (batch * 8 * 2 <= cu ? 4 : 8) * cu)
                        << "OpenCL GPU, batch " << batch << ": 4 work-groups per compute unit for few rows, else 8";
                }
            }
    // The balanced search's per-task cost (the engine's task_cost=auto): CUDA's ragged decodes count
    // 16384 per task (cuda_backend/backend_cuda.cpp), OpenCL GPUs' where a (request, KV head) row has
    // 16 compute units or more to itself (lib/opencl/attn_decode_ragged.cpp), every other backend and Palu 0.
    {
        attn_decode_ragged_params p;
        p.kv.n_kv_heads = 8, p.kv.page_size = 16, p.kv.max_width = 128, p.kv.k_total = 512, p.kv.v_total = 384;
        p.n_q_heads = 32, p.batch = 1;
        const bool ocl_gpu = be->info().api == "OpenCL" && be->info().is_gpu;
        EXPECT_EQ(be->decode_task_cost(p), be->info().api == "CUDA" || (ocl_gpu && 8 * 16 <= cu) ? 16384 : 0)
            << "ragged decode, batch 1";
        p.batch = std::max<int64_t>(1, cu / 16);  // 8 x cu / 16 rows: more than cu / 16
        EXPECT_EQ(be->decode_task_cost(p), be->info().api == "CUDA" ? 16384 : 0) << "ragged decode, batch " << p.batch;
        attn_decode_palu_params q;
        q.kv = p.kv, q.n_q_heads = 32, q.head_dim = 128, q.rot_dim = 128, q.batch = 1;
        EXPECT_EQ(be->decode_task_cost(q), 0) << "Palu";
        // ... and its tail (the engine's tail=auto): CUDA's ragged decodes of f16 pages 10 %, else 0.
        p.kv.bits = 16;
        EXPECT_EQ(be->decode_tail_percent(p), be->info().api == "CUDA" ? 10 : 0) << "ragged decode, f16 pages";
        p.kv.bits = 4;
        EXPECT_EQ(be->decode_tail_percent(p), 0) << "ragged decode, q4 pages";
        EXPECT_EQ(be->decode_tail_percent(q), 0) << "Palu";
    }
    if (be->info().api == "OpenCL" && be->info().is_gpu) {
        attn_decode_palu_params p;
        p.kv.n_kv_heads = 8, p.kv.page_size = 16, p.kv.max_width = 64, p.kv.k_total = p.kv.v_total = 512;
        p.n_q_heads = 32, p.head_dim = 128, p.rot_dim = 128, p.batch = few;
        EXPECT_EQ(be->concurrent_workgroups(p), 8 * cu) << "OpenCL GPU, Palu: 8 per compute unit at any batch";
    }
    if (be->info().api == "CUDA" && be->info().api_version.find("compute capability 9.0") != std::string::npos) {
        attn_decode_ragged_params p;
        p.kv.n_kv_heads = 8, p.kv.page_size = 16, p.kv.max_width = 128, p.kv.k_total = 512, p.kv.v_total = 384;
        p.n_q_heads = 32;
        const char * v = std::getenv("KVCOMP_RAGGED_DECODE");
        if (!v || std::string(v) != "simt") {
            EXPECT_EQ(be->concurrent_workgroups(p), 3 * cu) << "tensor-core decode, sm_90";
        }
    }
}

// What the low-rank methods' per-step schedule search gets from this backend (the method calls
// engine::decode_schedule_inputs_for for every layer and batch): with workers=auto, task_cost=auto and
// tail=auto the backend's answers for the layer's decode op (the ragged decode, Palu's on its layers),
// with workers=N / task_cost=N / tail=N the given ones. On GPUs auto differs from task_cost=0 at batch 1,
// so the search sees it.
TEST_P(lowrank_ops, engine_schedule_search_takes_the_backends_workers_and_task_cost) {
    auto config = [](engine::method_options o) {
        o["calib"] = "any.safetensors";  // parsing only
        return engine::lowrank_config_from(lr::lowrank_method::fdc, o);
    };
    const int64_t cu = std::max(1, be->info().compute_units);
    attn_decode_ragged_params ragged;
    ragged.kv.n_kv_heads = 8, ragged.kv.page_size = 16, ragged.kv.max_width = 128;
    ragged.kv.k_total = 512, ragged.kv.v_total = 384, ragged.n_q_heads = 32;
    attn_decode_palu_params palu;
    palu.kv = ragged.kv, palu.n_q_heads = 32, palu.head_dim = 128, palu.rot_dim = 128;
    for (int64_t batch : {int64_t(1), int64_t(16)}) {
        ragged.batch = palu.batch = batch;
        for (const op_params & p : {op_params(ragged), op_params(palu)}) {
            const char * what = std::holds_alternative<attn_decode_palu_params>(p) ? "Palu" : "ragged";
            const engine::decode_schedule_inputs a = engine::decode_schedule_inputs_for(config({}), *be, p);
            EXPECT_EQ(a.workers, be->concurrent_workgroups(p)) << what << ", batch " << batch;
            EXPECT_EQ(a.task_cost, be->decode_task_cost(p)) << what << ", batch " << batch;
            EXPECT_EQ(a.tail_percent, be->decode_tail_percent(p)) << what << ", batch " << batch;
            const engine::decode_schedule_inputs n = engine::decode_schedule_inputs_for(
                config({{"workers", "3"}, {"task_cost", "777"}, {"tail", "7"}}), *be, p);
            EXPECT_EQ(n.workers, 3 * cu) << what;
            EXPECT_EQ(n.task_cost, 777) << what;
            EXPECT_EQ(n.tail_percent, 7) << what;
            EXPECT_EQ(engine::decode_schedule_inputs_for(config({{"task_cost", "0"}}), *be, p).task_cost, 0) << what;
        }
    }
    if (be->info().api == "CUDA" || (be->info().api == "OpenCL" && be->info().is_gpu && 8 * 16 <= cu)) {
        ragged.batch = 1;
        EXPECT_GT(engine::decode_schedule_inputs_for(config({}), *be, ragged).task_cost, 0)
            << "the GPUs' ragged decodes count a cost per task at batch 1";
    }
}

// (5) The scale is the passed one: an independent fp64 reference with 1/sqrt(128) matches, the same
// with 1/sqrt(width) is far off (so a kernel using the width would fail).
TEST_P(lowrank_ops, scale_is_the_passed_one) {
    std::mt19937 rng(15);
    const uneven u(rng, 3.0f);
    const float scale = 1.0f / std::sqrt(128.0f);
    const int64_t n_q = u.g * 4;
    const auto got = decode_ragged(*be, u.pt, u.heads, n_q, u.q, u.kp, u.vp,
                                   schedule(u.pt, u.kw, u.vw, lr::decode_policy::balanced, 16), scale);
    if (got.empty()) GTEST_SKIP() << "attn_decode_ragged not supported on " << GetParam();
    auto reference = [&](bool width_scale) {
        std::vector<double> out(got.size(), 0.0);
        for (size_t b = 0; b < u.pt.lens.size(); ++b)
            for (int64_t c = 0; c < 4; ++c)
                for (int64_t i = 0; i < u.g; ++i) {
                    const int64_t kw = u.kw[size_t(c)], vw = u.vw[size_t(c)], n = u.pt.lens[b];
                    const int32_t * h = &u.heads[size_t(c * 4)];
                    const double sc = width_scale ? 1.0 / std::sqrt(double(kw)) : double(scale);
                    std::vector<double> s;
                    for (int64_t j = 0; j < n; ++j) {
                        const int64_t page = u.pt.indices[size_t(u.pt.indptr[b] + j / 16)];
                        double dot = 0;
                        for (int64_t d = 0; d < kw; ++d)
                            dot +=
                                double(u.q[size_t(int64_t(b) * u.g * u.k_total + u.g * h[1] + i * kw + d)]) *
                                half_to_float(
                                    u.kp[size_t(page * 16 * u.k_total + 16 * h[1] + (j % 16) * kw + d)]);
                        s.push_back(dot * sc);
                    }
                    if (n == 0) continue;
                    const double mx = *std::max_element(s.begin(), s.end());
                    double sum = 0;
                    for (auto & x : s) sum += (x = std::exp(x - mx));
                    for (int64_t j = 0; j < n; ++j) {
                        const int64_t page = u.pt.indices[size_t(u.pt.indptr[b] + j / 16)];
                        for (int64_t d = 0; d < vw; ++d)
                            out[size_t(int64_t(b) * u.g * u.v_total + u.g * h[3] + i * vw + d)] +=
                                s[size_t(j)] / sum *
                                half_to_float(
                                    u.vp[size_t(page * 16 * u.v_total + 16 * h[3] + (j % 16) * vw + d)]);
                    }
                }
        return out;
    };
    EXPECT_LT(nmse(got, reference(false)), 1e-8);
    EXPECT_GT(nmse(got, reference(true)), 1e-3);
}

// (6) Palu with B = identity (latent width = head_dim) is attention over RoPE'd keys: equals the
// rope op on the keys followed by attn_decode. Both pairings, partial rotary.
TEST_P(lowrank_ops, palu_identity_basis_equals_rope_then_attn_decode) {
    const int64_t n_kv = 2, g = 4, hd = 64;
    const page_table pt({1, 130, 0, 45}, 16);
    const std::vector<int64_t> w(size_t(n_kv), hd);
    const auto heads = lr::ragged_heads_table(w, w);
    const auto cpu = create_backend("cpu");
    for (rope_style style : {rope_style::neox, rope_style::interleaved})
        for (int64_t rot : {hd, hd / 2}) {
            std::mt19937 rng(16);
            std::vector<float> k = normal(rng, size_t(pt.tokens() * n_kv * hd)), v = normal(rng, k.size());
            for (auto & x : k) x = round_f16(x);
            const auto q = normal(rng, size_t(int64_t(pt.lens.size()) * g * n_kv * hd));
            const float theta = 10000.0f;
            // aux: B_c = I for each head, then inv_freq.
            std::vector<float> aux(static_cast<size_t>(hd * n_kv * hd), 0.0f);
            for (int64_t c = 0; c < n_kv; ++c)
                for (int64_t i = 0; i < hd; ++i) aux[size_t(hd * c * hd + i * hd + i)] = 1.0f;
            for (int64_t i = 0; i < rot / 2; ++i)
                aux.push_back(float(std::pow(double(theta), -2.0 * double(i) / double(rot))));
            const auto s = schedule(pt, w, w, lr::decode_policy::balanced, 8);
            attn_decode_palu_params p;
            p.kv = {pt.n_pages, n_kv, pt.page_size, n_kv * hd, n_kv * hd, hd};
            p.batch = int64_t(pt.lens.size()), p.n_q_heads = g * n_kv, p.head_dim = hd, p.rot_dim = rot;
            p.nnz_pages = pt.nnz, p.max_seq_len = pt.max_len, p.n_tasks = s.n_tasks, p.style = style;
            p.scale = 1.0f / std::sqrt(float(hd));
            const auto kp = ragged_pages(pt, heads, n_kv * hd, k, true),
                       vp = ragged_pages(pt, heads, n_kv * hd, v, false);
            dev dq = put_f32(*be, q), dk = put(*be, kp, dtype::f16), dv = put(*be, vp, dtype::f16);
            dev di = put_i32(*be, pt.indptr), dx = put_i32(*be, pt.indices), dl = put_i32(*be, pt.last),
                dh = put_i32(*be, heads), ds = put_i32(*be, s.schedule), dm = put_i32(*be, s.merge),
                da = put_f32(*be, aux), out = zeros_f32(*be, int64_t(q.size()));
            const op_desc op =
                make_op(p, {dq.t, dk.t, dv.t, di.t, dx.t, dl.t, dh.t, ds.t, dm.t, da.t}, {out.t});
            if (!be->supports(op).ok) GTEST_SKIP() << "attn_decode_palu not supported on " << GetParam();
            be->run(op);
            const auto got = get_f32(*be, out, int64_t(q.size()));

            // Reference: rope op on token-major keys at their positions, then exact attention.
            rope_params rp;
            rp.n_tokens = pt.tokens(), rp.n_heads = n_kv, rp.head_dim = hd, rp.rot_dim = rot,
            rp.theta = theta;
            rp.style = style;
            std::vector<int32_t> pos;
            for (int64_t n : pt.lens)
                for (int64_t j = 0; j < n; ++j) pos.push_back(int32_t(j));
            dev rk = put_f32(*cpu, k), rpos = put_i32(*cpu, pos), ro = zeros_f32(*cpu, int64_t(k.size()));
            cpu->run(make_op(rp, {rk.t, rpos.t, tensor{}}, {ro.t}));
            const auto k_rot = get_f32(*cpu, ro, int64_t(k.size()));
            const auto want = exact_decode(pt, q, k_rot, v, n_kv, g, hd, double(p.scale));
            // The reference's rotated keys are fp32, Palu's rotation runs at full precision.
            EXPECT_LT(nmse(got, want), 1e-7) << "style " << int(style) << " rot " << rot;
        }
}

INSTANTIATE_TEST_SUITE_P(backends, lowrank_ops, ::testing::ValuesIn(test::backends_to_test()),
                         test::backend_param_name());

// (7) The oracle refuses schedules that miss, repeat or misfile tokens.
TEST(lowrank_ops_cpu, bad_schedules_are_rejected) {
    std::mt19937 rng(17);
    const uneven u(rng);
    const auto cpu = create_backend("cpu");
    const auto good = schedule(u.pt, u.kw, u.vw, lr::decode_policy::balanced, 8);
    auto run = [&](const lr::decode_schedule & s) {
        decode_ragged(*cpu, u.pt, u.heads, u.g * 4, u.q, u.kp, u.vp, s, 0.1f);
    };
    EXPECT_FALSE(decode_ragged(*cpu, u.pt, u.heads, u.g * 4, u.q, u.kp, u.vp, good, 0.1f).empty());
    const int64_t ptr = int64_t(u.pt.lens.size()) * 4 + 1;
    lr::decode_schedule s = good;
    const int32_t t0 = s.merge[size_t(ptr)];  // the first task of (request 0, KV head 0)
    s.schedule[size_t(t0) * 4 + 3] -= 1;      // its range now ends one token early: a gap
    test::expect_error([&] { run(s); }, status::invalid_argument, {"(request 0, KV head 0)"});
    s = good;
    s.merge[size_t(ptr + 1)] = s.merge[size_t(ptr)];  // one task listed twice, another not at all
    test::expect_error([&] { run(s); }, status::invalid_argument, {"task"});
    s = good;
    s.schedule[size_t(t0) * 4 + 1] = 1;  // filed under another KV head
    test::expect_error([&] { run(s); }, status::invalid_argument, {"is merged into"});
}

}  // namespace
