// attn_prefill's optional lse output, which ZipCache's prefill hands to probe_scores (use_lse)
// instead of letting it compute the probe rows' log-denominators itself. On every backend:
//   - lse equals log sum_j exp(scale * q.k_j) over the row's causal keys, computed here in double;
//   - probe_scores with that lse gives the column sums it computes on its own (a different unit,
//     scale or row order in the lse would change every sum).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/backend.h"
#include "core/dtype.h"
#include "core/op.h"
#include "core/registry.h"
#include "support/backends.h"

using namespace kvcomp;

namespace {

class prefill_lse_on : public ::testing::TestWithParam<std::string> {};

TEST_P(prefill_lse_on, matches_the_log_denominator_and_serves_probe_scores) {
    const auto be = create_backend(GetParam());
    const std::vector<int32_t> seqs = {37, 70};
    const int64_t QH = 8, KH = 2, D = 64, group = QH / KH;
    const float scale = 1.0f / 8.0f;
    const int64_t n = 37 + 70;
    std::mt19937_64 rng(17);
    std::normal_distribution<float> n01(0.0f, 1.0f);
    std::vector<float> q(size_t(n * QH * D)), kf(size_t(n * KH * D));
    std::vector<uint16_t> k16(kf.size()), v16(kf.size());
    for (auto & x : q) x = n01(rng);
    for (size_t i = 0; i < kf.size(); ++i) {
        k16[i] = float_to_half(n01(rng));
        kf[i] = half_to_float(k16[i]);  // probe_scores reads the same keys in f32
        v16[i] = float_to_half(n01(rng));
    }
    const std::vector<int32_t> indptr = {0, seqs[0], seqs[0] + seqs[1]};

    auto qb = upload_vector(*be, q), kb = upload_vector(*be, k16), vb = upload_vector(*be, v16),
         ib = upload_vector(*be, indptr);
    auto ob = be->alloc(size_t(n * QH * D) * 4), lb = be->alloc(size_t(n * QH) * 4);
    attn_prefill_params pp;
    pp.batch = 2, pp.n_tokens = n, pp.n_q_heads = QH, pp.n_kv_heads = KH, pp.head_dim = D, pp.max_seq_len = 70;
    pp.scale = scale;
    const op_desc prefill = make_op(pp,
                                    {make_tensor(qb.get(), dtype::f32, {n, QH, D}), make_tensor(kb.get(), dtype::f16, {n, KH, D}),
                                     make_tensor(vb.get(), dtype::f16, {n, KH, D}), make_tensor(ib.get(), dtype::i32, {3})},
                                    {make_tensor(ob.get(), dtype::f32, {n, QH, D}), make_tensor(lb.get(), dtype::f32, {n, QH})});
    ASSERT_TRUE(be->supports(prefill).ok) << be->supports(prefill).reason;
    be->run(prefill);
    std::vector<float> lse(size_t(n * QH));
    be->download(*lb, 0, lse.data(), lse.size() * 4);

    // (a) Against double precision: row i of request b sees its keys 0..i.
    for (int64_t b = 0; b < 2; ++b)
        for (int64_t i = indptr[size_t(b)]; i < indptr[size_t(b) + 1]; ++i)
            for (int64_t h = 0; h < QH; ++h) {
                double mx = -INFINITY;
                std::vector<double> s;
                for (int64_t j = indptr[size_t(b)]; j <= i; ++j) {
                    double dot = 0.0;
                    for (int64_t c = 0; c < D; ++c)
                        dot += double(q[size_t((i * QH + h) * D + c)]) * kf[size_t((j * KH + h / group) * D + c)];
                    s.push_back(dot * scale);
                    mx = std::max(mx, s.back());
                }
                double sum = 0.0;
                for (double x : s) sum += std::exp(x - mx);
                // The GPU kernels round q * scale to f16 for the tensor cores (~1e-3 on a logit).
                EXPECT_NEAR(lse[size_t(i * QH + h)], mx + std::log(sum), 5e-3) << "row " << i << " head " << h;
            }

    // (b) probe_scores with the prefill's lse equals probe_scores computing its own.
    const std::vector<int32_t> probe_rows = {3, 20, 36, 37 + 5, 37 + 40, 37 + 69};  // step rows
    std::vector<int32_t> probe_pos, probe_indptr = {0, 3, 6};
    std::vector<int32_t> key_pos(static_cast<size_t>(n));
    std::vector<float> qp, lp;
    for (int32_t r : probe_rows) {
        const int32_t b = r < seqs[0] ? 0 : 1;
        probe_pos.push_back(r - indptr[size_t(b)]);
        qp.insert(qp.end(), q.begin() + r * QH * D, q.begin() + (r + 1) * QH * D);
        lp.insert(lp.end(), lse.begin() + r * QH, lse.begin() + (r + 1) * QH);
    }
    for (int64_t b = 0; b < 2; ++b)
        for (int32_t i = indptr[size_t(b)]; i < indptr[size_t(b) + 1]; ++i) key_pos[size_t(i)] = i - indptr[size_t(b)];
    const int64_t np = int64_t(probe_rows.size());
    auto qpb = upload_vector(*be, qp), lpb = upload_vector(*be, lp), ppb = upload_vector(*be, probe_pos),
         kfb = upload_vector(*be, kf), kpb = upload_vector(*be, key_pos), pib = upload_vector(*be, probe_indptr);
    std::vector<std::vector<float>> sums;
    for (bool use_lse : {false, true}) {
        auto sb = be->alloc(size_t(KH * n) * 4);
        probe_scores_params ps;
        ps.n_probes = np, ps.n_keys = n, ps.n_q_heads = QH, ps.n_kv_heads = KH, ps.head_dim = D;
        ps.scale = scale, ps.use_lse = use_lse, ps.batch = 2;
        be->run(make_op(ps,
                        {make_tensor(qpb.get(), dtype::f32, {np, QH, D}), make_tensor(ppb.get(), dtype::i32, {np}),
                         make_tensor(kfb.get(), dtype::f32, {n, KH, D}), make_tensor(kpb.get(), dtype::i32, {n}),
                         use_lse ? make_tensor(lpb.get(), dtype::f32, {np, QH}) : tensor{},
                         make_tensor(pib.get(), dtype::i32, {3}), make_tensor(ib.get(), dtype::i32, {3})},
                        {make_tensor(sb.get(), dtype::f32, {KH, n})}));
        sums.emplace_back(size_t(KH * n));
        be->download(*sb, 0, sums.back().data(), sums.back().size() * 4);
    }
    double total = 0.0;
    for (size_t i = 0; i < sums[0].size(); ++i) {
        EXPECT_NEAR(sums[1][i], sums[0][i], 2e-3 * std::max(1e-3, double(sums[0][i]))) << "key column " << i;
        total += sums[0][i];
    }
    // Each (probe, query head) row's weights sum to 1 over its keys: the columns add up to probes x QH.
    EXPECT_NEAR(total, double(np * QH), 1e-3 * double(np * QH));
}

INSTANTIATE_TEST_SUITE_P(prefill_lse_backends, prefill_lse_on, ::testing::ValuesIn(test::backends_to_test()),
                         test::backend_param_name());

}  // namespace
