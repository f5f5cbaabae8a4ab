// Per-head SVD bases (host/lowrank/svd_basis.h): U Sigma R^T reconstructs X, R is orthonormal, the
// full-rank projection is exact, the truncation error equals the dropped sigma^2 and falls with the
// rank, the sign convention is deterministic, the ZACK / FDC stacks slice the Hugging Face weights
// correctly, the Gram route agrees with the SVD, and bad shapes are rejected by name.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "host/lowrank/svd_basis.h"
#include "support/expect_error.h"

using namespace kvcomp;
using namespace kvcomp::host::lowrank;
using kvcomp::test::expect_error;

namespace {

// n x d row-major Gaussian data with column j scaled by 1.5^-j: distinct, decaying singular values
// like real K/V activations.
std::vector<double> random_rows(int64_t n, int64_t d, unsigned seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<double> g(0.0, 1.0);
    std::vector<double> x(size_t(n * d));
    for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < d; ++j) x[size_t(i * d + j)] = g(rng) * std::pow(1.5, -double(j));
    // Mix the columns with a random (full-rank) matrix so the principal directions are not the axes.
    std::vector<double> mix(size_t(d * d));
    for (double & m : mix) m = g(rng);
    std::vector<double> y(x.size(), 0.0);
    for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < d; ++j)
            for (int64_t t = 0; t < d; ++t)
                y[size_t(i * d + j)] += x[size_t(i * d + t)] * mix[size_t(t * d + j)];
    return y;
}

// ||X - X R_k R_k^T||_F^2.
double truncation_error(const std::vector<double> & x, int64_t n, const svd_basis & b, int64_t k) {
    const int64_t d = b.dim;
    double err = 0.0;
    for (int64_t i = 0; i < n; ++i) {
        std::vector<double> c(size_t(k), 0.0);  // x_i R_k
        for (int64_t j = 0; j < k; ++j)
            for (int64_t t = 0; t < d; ++t) c[size_t(j)] += x[size_t(i * d + t)] * b.at(t, j);
        for (int64_t t = 0; t < d; ++t) {
            double rec = 0.0;
            for (int64_t j = 0; j < k; ++j) rec += c[size_t(j)] * b.at(t, j);
            const double e = x[size_t(i * d + t)] - rec;
            err += e * e;
        }
    }
    return err;
}

double frob2(const std::vector<double> & x) {
    double s = 0.0;
    for (double v : x) s += v * v;
    return s;
}

TEST(lowrank_svd_basis, reconstructs_input_and_is_orthonormal) {
    const int64_t n = 40, d = 12;
    const std::vector<double> x = random_rows(n, d, 1);
    const svd_basis b = stacked_svd({mat_view::of(x, n, d)}, "test", true);
    ASSERT_EQ(b.dim, d);
    ASSERT_EQ(b.sigma.size(), size_t(d));
    ASSERT_EQ(b.u.size(), size_t(n * d));
    for (int64_t j = 1; j < d; ++j) EXPECT_GE(b.sigma[size_t(j - 1)], b.sigma[size_t(j)]);
    EXPECT_GT(b.sigma[size_t(d - 1)], 1e-6 * b.sigma[0]);  // full-rank data
    const double scale = std::sqrt(frob2(x));
    for (int64_t i = 0; i < n; ++i)
        for (int64_t t = 0; t < d; ++t) {
            double rec = 0.0;  // (U Sigma R^T)_{it}
            for (int64_t j = 0; j < d; ++j) rec += b.u[size_t(i * d + j)] * b.sigma[size_t(j)] * b.at(t, j);
            EXPECT_NEAR(rec, x[size_t(i * d + t)], 1e-12 * scale);
        }
    for (int64_t a = 0; a < d; ++a)
        for (int64_t c = 0; c < d; ++c) {
            double dot = 0.0;
            for (int64_t t = 0; t < d; ++t) dot += b.at(t, a) * b.at(t, c);
            EXPECT_NEAR(dot, a == c ? 1.0 : 0.0, 1e-12);
        }
}

TEST(lowrank_svd_basis, truncation_error_is_the_dropped_energy_and_falls_with_rank) {
    const int64_t n = 64, d = 16;
    const std::vector<double> x = random_rows(n, d, 2);
    const svd_basis b = stacked_svd({mat_view::of(x, n, d)}, "test");
    const double total = frob2(x);
    double prev = std::numeric_limits<double>::infinity();
    for (int64_t k = 0; k <= d; ++k) {
        const double err = truncation_error(x, n, b, k);
        double dropped = 0.0;
        for (int64_t j = k; j < d; ++j) dropped += b.sigma[size_t(j)] * b.sigma[size_t(j)];
        EXPECT_NEAR(err, dropped, 1e-10 * total) << "k=" << k;  // digest §9.6
        EXPECT_LT(err, prev + 1e-12 * total) << "k=" << k;
        if (k > 0 && k < d) {
            EXPECT_LT(err, prev) << "error must fall strictly while sigma > 0, k=" << k;
        }
        prev = err;
    }
    EXPECT_NEAR(truncation_error(x, n, b, d), 0.0, 1e-20 * total + 1e-24);  // X R R^T = X at full rank
}

TEST(lowrank_svd_basis, signs_are_canonical_and_deterministic) {
    const int64_t n = 30, d = 8;
    std::vector<double> x = random_rows(n, d, 3);
    const svd_basis a = stacked_svd({mat_view::of(x, n, d)}, "test");
    const svd_basis again = stacked_svd({mat_view::of(x, n, d)}, "test");
    EXPECT_EQ(a.basis, again.basis);  // bitwise: files are reproducible
    for (int64_t j = 0; j < d; ++j) {
        int64_t best = 0;
        for (int64_t i = 1; i < d; ++i)
            if (std::abs(a.at(i, j)) > std::abs(a.at(best, j))) best = i;
        EXPECT_GT(a.at(best, j), 0.0) << "column " << j;
    }
    // -X has the same right singular vectors up to sign; the convention removes the sign.
    for (double & v : x) v = -v;
    const svd_basis neg = stacked_svd({mat_view::of(x, n, d)}, "test");
    for (size_t i = 0; i < a.basis.size(); ++i) EXPECT_NEAR(neg.basis[i], a.basis[i], 1e-12);
}

TEST(lowrank_svd_basis, fewer_rows_than_dims_still_gives_a_full_basis) {
    const int64_t n = 3, d = 8;
    const std::vector<double> x = random_rows(n, d, 4);
    const svd_basis b = stacked_svd({mat_view::of(x, n, d)}, "test");
    for (int64_t j = n; j < d; ++j) EXPECT_EQ(b.sigma[size_t(j)], 0.0);
    for (int64_t a = 0; a < d; ++a)
        for (int64_t c = 0; c < d; ++c) {
            double dot = 0.0;
            for (int64_t t = 0; t < d; ++t) dot += b.at(t, a) * b.at(t, c);
            EXPECT_NEAR(dot, a == c ? 1.0 : 0.0, 1e-12);
        }
    EXPECT_NEAR(truncation_error(x, n, b, n), 0.0, 1e-20 * frob2(x));  // rank n already exact
}

TEST(lowrank_svd_basis, float_and_double_inputs_agree) {
    const int64_t n = 20, d = 6;
    const std::vector<double> x = random_rows(n, d, 5);
    const std::vector<float> xf(x.begin(), x.end());
    const std::vector<double> xr(xf.begin(), xf.end());  // the same values, rounded to float
    EXPECT_EQ(stacked_svd({mat_view::of(xf, n, d)}, "f").basis,
              stacked_svd({mat_view::of(xr, n, d)}, "d").basis);
}

TEST(lowrank_svd_basis, qk_basis_stacks_the_group_queries_then_keys) {
    const int64_t d = 8;
    const std::vector<double> q0 = random_rows(10, d, 6), q1 = random_rows(12, d, 7),
                              k = random_rows(9, d, 8);
    const svd_basis b = qk_basis({mat_view::of(q0, 10, d), mat_view::of(q1, 12, d)}, mat_view::of(k, 9, d));
    std::vector<double> stacked = q0;
    stacked.insert(stacked.end(), q1.begin(), q1.end());
    stacked.insert(stacked.end(), k.begin(), k.end());
    EXPECT_EQ(b.basis, stacked_svd({mat_view::of(stacked, 31, d)}, "manual").basis);
    expect_error([&] { qk_basis({}, mat_view::of(k, 9, d)); }, status::invalid_argument, {"no query heads"});
    expect_error([&] { qk_basis({mat_view::of(q0, 20, 4)}, mat_view::of(k, 9, d)); },
                 status::invalid_argument, {"block 1 has 8 columns, block 0 has 4"});
}

TEST(lowrank_svd_basis, zack_v_stacks_v_with_the_group_columns_of_o_proj) {
    const int64_t d = 4, hidden = 6, nq = 4, tokens = 10;
    const std::vector<double> v = random_rows(tokens, d, 9);
    const std::vector<double> o_proj = random_rows(hidden, nq * d, 10);  // HF layout [hidden, nq*d]
    const svd_basis b =
        zack_v_basis(mat_view::of(v, tokens, d), mat_view::of(o_proj, hidden, nq * d), {2, 3}, 2.0);
    // Manual: [V; 2*(W_O^2)^T; 2*(W_O^3)^T], (W_O^h)^T = o_proj[:, h*d:(h+1)*d].
    std::vector<double> x = v;
    for (int64_t h : {2, 3})
        for (int64_t i = 0; i < hidden; ++i)
            for (int64_t j = 0; j < d; ++j) x.push_back(2.0 * o_proj[size_t(i * nq * d + h * d + j)]);
    EXPECT_EQ(b.basis, stacked_svd({mat_view::of(x, tokens + 2 * hidden, d)}, "manual").basis);

    const auto vv = mat_view::of(v, tokens, d);
    expect_error([&] { zack_v_basis(vv, mat_view::of(o_proj, hidden * 2, nq * d / 2 - 2), {0}); },
                 status::invalid_argument, {"o_proj has 6 columns", "head_dim 4"});
    expect_error([&] { zack_v_basis(vv, mat_view::of(o_proj, hidden, nq * d), {4}); },
                 status::invalid_argument, {"query head 4 outside [0, 4)"});
    expect_error(
        [&] {
            zack_v_basis(vv, mat_view::of(o_proj, hidden, nq * d), {1, 1});
        },
        status::invalid_argument, {"query head 1 listed twice"});
    expect_error([&] { zack_v_basis(vv, mat_view::of(o_proj, hidden, nq * d), {1}, 0.0); },
                 status::invalid_argument, {"w_o_scale 0"});
}

TEST(lowrank_svd_basis, fdc_v_is_the_svd_of_the_heads_w_v) {
    const int64_t d = 4, hidden = 10, nkv = 3;
    const std::vector<double> v_proj = random_rows(nkv * d, hidden, 11);  // HF layout [nkv*d, hidden]
    const svd_basis b = fdc_v_basis(mat_view::of(v_proj, nkv * d, hidden), 1, d);
    // W_V^1 (hidden x d) = transpose of rows d..2d-1.
    std::vector<double> w(size_t(hidden * d));
    for (int64_t i = 0; i < hidden; ++i)
        for (int64_t j = 0; j < d; ++j) w[size_t(i * d + j)] = v_proj[size_t((d + j) * hidden + i)];
    EXPECT_EQ(b.basis, stacked_svd({mat_view::of(w, hidden, d)}, "manual").basis);
    double s2 = 0.0;
    for (double s : b.sigma) s2 += s * s;
    EXPECT_NEAR(s2, frob2(w), 1e-12 * frob2(w));
    EXPECT_NEAR(truncation_error(w, hidden, b, d), 0.0, 1e-20 * frob2(w));
    expect_error([&] { fdc_v_basis(mat_view::of(v_proj, nkv * d, hidden), 3, d); }, status::invalid_argument,
                 {"kv_head 3 outside [0, 3)"});
    expect_error([&] { fdc_v_basis(mat_view::of(v_proj, nkv * d, hidden), 0, 5); }, status::invalid_argument,
                 {"v_proj has 12 rows", "head_dim 5"});
}

TEST(lowrank_svd_basis, gram_route_matches_the_svd) {
    const int64_t d = 8;
    const std::vector<double> a = random_rows(50, d, 12), c = random_rows(30, d, 13);
    gram_accumulator g(d);
    g.add(mat_view::of(a, 50, d));
    g.add(mat_view::of(c, 30, d), 0.5);
    EXPECT_EQ(g.rows_added(), 80);
    std::vector<double> stacked = a;
    for (double v : c) stacked.push_back(0.5 * v);
    const svd_basis ref = stacked_svd({mat_view::of(stacked, 80, d)}, "svd");
    const svd_basis got = basis_from_gram(g.gram(), d, "gram");
    for (int64_t j = 0; j < d; ++j)
        EXPECT_NEAR(got.sigma[size_t(j)], ref.sigma[size_t(j)], 1e-9 * ref.sigma[0]);
    // Same signs by the shared convention, so the columns agree entry by entry.
    for (size_t i = 0; i < ref.basis.size(); ++i) EXPECT_NEAR(got.basis[i], ref.basis[i], 1e-7);
    expect_error([&] { g.add(mat_view::of(a, 25, 16)); }, status::invalid_argument, {"16 columns", "dim 8"});
    std::vector<double> bad = g.gram();
    bad[1] += 1.0;
    expect_error([&] { basis_from_gram(bad, d, "G"); }, status::invalid_argument,
                 {"G: Gram matrix not symmetric at (1, 0)"});
}

TEST(lowrank_svd_basis, rejects_non_finite_and_empty_input) {
    std::vector<double> x = random_rows(5, 4, 14);
    x[6] = std::numeric_limits<double>::quiet_NaN();
    expect_error([&] { stacked_svd({mat_view::of(x, 5, 4)}, "X"); }, status::invalid_argument,
                 {"X: block 0 element (1, 2)", "not finite"});
    expect_error([&] { stacked_svd({}, "X"); }, status::invalid_argument, {"X: no blocks"});
    expect_error([&] { stacked_svd({mat_view::of(x, 0, 4)}, "X"); }, status::invalid_argument, {"no rows"});
}

}  // namespace
