// ZipCache's saliency (digest zipcache.md §10 T7-T13): the CPU backend's probe_scores op (column
// sums of the probes' causal attention rows) and host/quant/saliency (probe positions, normalized
// scores, the top-r split), checked against attention computed by hand in double here.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <set>
#include <vector>

#include "core/backend.h"
#include "core/registry.h"
#include "host/quant/saliency.h"

using namespace kvcomp;
namespace hq = kvcomp::host::quant;

namespace {

// Attention inputs of one prompt: q [L, nq, D], k [L, nkv, D] (token-major), positions 0..L-1.
struct prompt_qk {
    int64_t L = 0, nq = 1, nkv = 1, D = 16;
    std::vector<float> q, k;
    float scale = 0.25f;
    float Q(int64_t t, int64_t h, int64_t c) const { return q[size_t((t * nq + h) * D + c)]; }
    float K(int64_t t, int64_t h, int64_t c) const { return k[size_t((t * nkv + h) * D + c)]; }
};

prompt_qk random_qk(int64_t L, int64_t nq, int64_t nkv, int64_t D, uint64_t seed, float qscale = 1.0f) {
    prompt_qk p;
    p.L = L, p.nq = nq, p.nkv = nkv, p.D = D;
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    p.q.resize(size_t(L * nq * D));
    p.k.resize(size_t(L * nkv * D));
    for (auto & x : p.q) x = qscale * nd(rng);
    for (auto & x : p.k) x = nd(rng);
    return p;
}

// scores [nkv, L] from the CPU backend's probe_scores, probes at the given positions.
std::vector<float> probe_scores(const prompt_qk & p, const std::vector<int32_t> & probes) {
    static const auto be = create_backend("cpu");
    const int64_t np = int64_t(probes.size());
    std::vector<float> qp;
    for (int32_t t : probes)
        qp.insert(qp.end(), p.q.begin() + long(t * p.nq * p.D), p.q.begin() + long((t + 1) * p.nq * p.D));
    std::vector<int32_t> key_pos(static_cast<size_t>(p.L));
    std::iota(key_pos.begin(), key_pos.end(), 0);
    const auto bq = upload_vector(*be, qp), bp = upload_vector(*be, probes), bk = upload_vector(*be, p.k),
               bkp = upload_vector(*be, key_pos);
    const auto out = be->alloc(size_t(p.nkv * p.L) * 4);
    probe_scores_params ps;
    ps.n_probes = np, ps.n_keys = p.L, ps.n_q_heads = p.nq, ps.n_kv_heads = p.nkv, ps.head_dim = p.D;
    ps.scale = p.scale;
    be->run(make_op(ps,
                    {make_tensor(bq.get(), dtype::f32, {np, p.nq, p.D}), make_tensor(bp.get(), dtype::i32, {np}),
                     make_tensor(bk.get(), dtype::f32, {p.L, p.nkv, p.D}), make_tensor(bkp.get(), dtype::i32, {p.L})},
                    {make_tensor(out.get(), dtype::f32, {p.nkv, p.L})}));
    std::vector<float> s(static_cast<size_t>(p.nkv * p.L));
    be->download(*out, 0, s.data(), s.size() * 4);
    return s;
}

// The causal attention matrix A[t][i] of query head h, by hand in double.
std::vector<std::vector<double>> attention(const prompt_qk & p, int64_t h) {
    const int64_t kvh = h / (p.nq / p.nkv);
    std::vector<std::vector<double>> A(size_t(p.L), std::vector<double>(size_t(p.L), 0.0));
    for (int64_t t = 0; t < p.L; ++t) {
        std::vector<double> logit(size_t(t + 1));
        double mx = -INFINITY, sum = 0;
        for (int64_t i = 0; i <= t; ++i) {
            double d = 0;
            for (int64_t c = 0; c < p.D; ++c) d += double(p.Q(t, h, c)) * double(p.K(i, kvh, c));
            logit[size_t(i)] = d * double(p.scale);
            mx = std::max(mx, logit[size_t(i)]);
        }
        for (int64_t i = 0; i <= t; ++i) sum += std::exp(logit[size_t(i)] - mx);
        for (int64_t i = 0; i <= t; ++i) A[size_t(t)][size_t(i)] = std::exp(logit[size_t(i)] - mx) / sum;
    }
    return A;
}

std::vector<int32_t> all_rows(int64_t L) {
    std::vector<int32_t> r(static_cast<size_t>(L));
    std::iota(r.begin(), r.end(), 0);
    return r;
}

std::vector<int32_t> positions(int64_t L) { return all_rows(L); }

double harmonic(int64_t n) {
    double s = 0;
    for (int64_t i = 1; i <= n; ++i) s += 1.0 / double(i);
    return s;
}

// --- T7 ------------------------------------------------------------------------------------------

TEST(quant_saliency, all_probes_column_sums_total_L_and_last_score_is_the_diagonal) {
    const prompt_qk p = random_qk(40, 1, 1, 16, 3);
    const auto sums = probe_scores(p, all_rows(p.L));
    double total = 0;
    for (float s : sums) total += s;
    EXPECT_NEAR(total, double(p.L), 1e-4);  // every causal row sums to 1
    const auto pt = hq::normalized_scores(sums.data(), positions(p.L), all_rows(p.L), hq::nnz_mode::probe, int32_t(p.L - 1));
    for (size_t i = 0; i < pt.size(); ++i) {
        EXPECT_GT(pt[i], 0.0) << i;
        EXPECT_LE(pt[i], 1.0 + 1e-6) << i;
    }
    const auto A = attention(p, 0);
    EXPECT_NEAR(pt.back(), A[size_t(p.L - 1)][size_t(p.L - 1)], 1e-6);
    EXPECT_NEAR(pt[0], [&] {  // key 0: mean over all L rows
        double s = 0;
        for (int64_t t = 0; t < p.L; ++t) s += A[size_t(t)][0];
        return s / double(p.L);
    }(), 1e-6);
    // The first row attends only to key 0 (A[0][0] = 1): its sum is at least 1.
    EXPECT_GE(sums[0], 1.0f - 1e-6f);
}

// --- T8 ------------------------------------------------------------------------------------------

TEST(quant_saliency, uniform_attention_ratios_are_harmonic_numbers) {
    prompt_qk p = random_qk(100, 1, 1, 16, 4);
    std::fill(p.q.begin(), p.q.end(), 0.0f);  // all logits equal: row t attends 1/(t+1) to each key
    const auto sums = probe_scores(p, all_rows(p.L));
    const double H = harmonic(100);
    EXPECT_NEAR(H, 5.187, 1e-3);
    EXPECT_NEAR(sums[0] / sums[99], 100.0 * H, 1e-4 * 100.0 * H);  // accumulated: L * H_L = 518.74
    EXPECT_NEAR(100.0 * H, 518.74, 1e-2);
    for (int64_t i = 0; i < 100; ++i) EXPECT_NEAR(sums[size_t(i)], H - harmonic(i), 1e-5) << i;
    const auto pt = hq::normalized_scores(sums.data(), positions(100), all_rows(100), hq::nnz_mode::probe, 99);
    EXPECT_NEAR(pt[0] / pt[99], H, 1e-4 * H);  // normalized: H_L = 5.187
    EXPECT_NEAR(pt[99], 0.01, 1e-7);
    // Normalized scores still favour early keys under uniform attention, but by H_L, not L * H_L.
    for (int64_t i = 1; i < 100; ++i) EXPECT_LT(pt[size_t(i)], pt[size_t(i - 1)] + 1e-9);
}

// --- T9 ------------------------------------------------------------------------------------------

// Eq. 8 by hand: p~_i = sum over probe rows t >= i of A[t][i], divided by the probes at or after i.
std::vector<double> eq8(const std::vector<std::vector<double>> & A, const std::vector<int32_t> & probes, int64_t L) {
    std::vector<double> out(size_t(L), 0.0);
    for (int64_t i = 0; i < L; ++i) {
        double s = 0;
        int64_t n = 0;
        for (int32_t t : probes)
            if (t >= i) s += A[size_t(t)][size_t(i)], ++n;
        out[size_t(i)] = n ? s / double(n) : 0.0;
    }
    return out;
}

TEST(quant_saliency, probe_estimate_equals_eq8_by_hand) {
    const prompt_qk p = random_qk(64, 1, 1, 32, 5, 2.0f);  // peaked rows
    const auto A = attention(p, 0);
    const auto exact = eq8(A, all_rows(64), 64);
    // All rows as probes: exactly Eq. 8.
    {
        const auto sums = probe_scores(p, all_rows(64));
        const auto pt = hq::normalized_scores(sums.data(), positions(64), all_rows(64), hq::nnz_mode::probe, 63);
        for (int64_t i = 0; i < 64; ++i) EXPECT_NEAR(pt[size_t(i)], exact[size_t(i)], 1e-6 * (1 + exact[size_t(i)])) << i;
    }
    // ZipCache's probes (recent + random): Eq. 8 over those rows; and for keys inside the recent
    // window (every row at or after them is a probe) the exact value.
    const auto probes = hq::prompt_probes(64, 0.1, 0.1, 9);
    const int64_t n_recent = 64 - int64_t(std::floor(0.9 * 64));  // 7
    const auto sums = probe_scores(p, probes);
    const auto pt = hq::normalized_scores(sums.data(), positions(64), probes, hq::nnz_mode::probe, 63);
    const auto want = eq8(A, probes, 64);
    int64_t differs = 0;
    for (int64_t i = 0; i < 64; ++i) {
        EXPECT_NEAR(pt[size_t(i)], want[size_t(i)], 1e-6 * (1 + want[size_t(i)])) << i;
        if (i >= 64 - n_recent) {
            EXPECT_NEAR(pt[size_t(i)], exact[size_t(i)], 1e-6) << "recent key " << i;
        }
        differs += std::fabs(want[size_t(i)] - exact[size_t(i)]) > 1e-3;
    }
    EXPECT_GT(differs, 0);  // a probe subset is an estimate: it must not coincide with Eq. 8 everywhere
    // Causal normalization divides the same sums by L - i.
    const auto pc = hq::normalized_scores(sums.data(), positions(64), probes, hq::nnz_mode::causal, 63);
    for (int64_t i = 0; i < 64; ++i) EXPECT_NEAR(pc[size_t(i)], double(sums[size_t(i)]) / double(64 - i), 1e-12);
}

// --- T10 -----------------------------------------------------------------------------------------

TEST(quant_saliency, normalization_counts_are_structural) {
    // A key no probe attends to (its logits underflow to exactly 0 in every row that sees it)
    // does not change the other keys' counts; its own score is 0, not 0/0.
    prompt_qk p = random_qk(30, 1, 1, 16, 6);
    for (int64_t c = 0; c < p.D; ++c) p.k[size_t(10 * p.D + c)] = 0.0f;
    for (int64_t t = 0; t < p.L; ++t) p.q[size_t(t * p.D)] = 1.0f;  // q . k_10 = 0, q . k_5 huge below
    for (int64_t c = 0; c < p.D; ++c) p.k[size_t(5 * p.D + c)] = c == 0 ? -1e4f : 0.0f;
    const std::vector<int32_t> probes = {3, 12, 20, 29};
    const auto sums = probe_scores(p, probes);
    EXPECT_EQ(sums[5], 0.0f);  // underflowed in every row
    const auto pt = hq::normalized_scores(sums.data(), positions(30), probes, hq::nnz_mode::probe, 29);
    const auto A = attention(p, 0);
    for (int64_t i = 0; i < 30; ++i) {
        const int64_t count = std::count_if(probes.begin(), probes.end(), [&](int32_t t) { return t >= i; });
        EXPECT_NEAR(pt[size_t(i)], count ? double(sums[size_t(i)]) / double(count) : 0.0, 1e-12) << i;
        EXPECT_NEAR(pt[size_t(i)], eq8(A, probes, 30)[size_t(i)], 1e-6) << i;
    }
    EXPECT_EQ(pt[5], 0.0);
    // normalized_scores never looks at values: all-ones sums give 1 / count, keys after the last
    // probe give 0; probe order does not matter.
    const std::vector<float> ones(40, 1.0f);
    const std::vector<int32_t> kp = {0, 4, 5, 9, 10, 17, 30, 31};
    const std::vector<int32_t> pr = {17, 5, 30, 9};
    const auto o = hq::normalized_scores(ones.data(), kp, pr, hq::nnz_mode::probe, 31);
    const std::vector<double> want = {1.0 / 4, 1.0 / 4, 1.0 / 4, 1.0 / 3, 1.0 / 2, 1.0 / 2, 1.0, 0.0};
    for (size_t i = 0; i < kp.size(); ++i) EXPECT_DOUBLE_EQ(o[i], want[i]) << "key " << kp[i];
    const auto oc = hq::normalized_scores(ones.data(), kp, pr, hq::nnz_mode::causal, 31);
    for (size_t i = 0; i < kp.size(); ++i) EXPECT_DOUBLE_EQ(oc[i], 1.0 / double(31 - kp[i] + 1));
}

// --- T11 -----------------------------------------------------------------------------------------

TEST(quant_saliency, gqa_kv_head_score_is_the_sum_over_its_query_heads) {
    const prompt_qk p = random_qk(33, 4, 2, 16, 8, 1.5f);
    const std::vector<int32_t> probes = {0, 7, 8, 20, 31, 32};
    const auto joint = probe_scores(p, probes);
    for (int64_t h = 0; h < 2; ++h) {
        std::vector<double> want(33, 0.0);
        for (int64_t g = 0; g < 2; ++g) {
            // Query head 2h+g alone against KV head h (a repeat_kv-expanded single head).
            prompt_qk one;
            one.L = 33, one.nq = 1, one.nkv = 1, one.D = 16, one.scale = p.scale;
            for (int64_t t = 0; t < 33; ++t)
                for (int64_t c = 0; c < 16; ++c) {
                    one.q.push_back(p.Q(t, 2 * h + g, c));
                    one.k.push_back(p.K(t, h, c));
                }
            const auto s = probe_scores(one, probes);
            for (int64_t i = 0; i < 33; ++i) want[size_t(i)] += s[size_t(i)];
            // And the same by hand.
            const auto A = attention(p, 2 * h + g);
            for (int64_t i = 0; i < 33; ++i) {
                double e = 0;
                for (int32_t t : probes)
                    if (t >= i) e += A[size_t(t)][size_t(i)];
                EXPECT_NEAR(s[size_t(i)], e, 1e-5);
            }
        }
        for (int64_t i = 0; i < 33; ++i) EXPECT_NEAR(joint[size_t(h * 33 + i)], want[size_t(i)], 1e-5) << h << " " << i;
    }
    // Column totals: each of the two query heads per KV head contributes one per probe row.
    for (int64_t h = 0; h < 2; ++h) {
        double total = 0;
        for (int64_t i = 0; i < 33; ++i) total += joint[size_t(h * 33 + i)];
        EXPECT_NEAR(total, 2.0 * double(probes.size()), 1e-4);
    }
}

// --- T12 -----------------------------------------------------------------------------------------

TEST(quant_saliency, selection_sizes_partition_and_ties) {
    // n_hi = n - floor((1 - r) n), with exact decimal ratios (0.6 of 100 is 60, not 61).
    EXPECT_EQ(hq::regular_count(100, 0.4), 60);
    EXPECT_EQ(hq::regular_count(100, 0.6), 40);
    EXPECT_EQ(hq::regular_count(100, 0.1), 90);
    EXPECT_EQ(hq::regular_count(16, 0.4), 9);  // 9.6 -> 9: 7 salient
    EXPECT_EQ(hq::regular_count(10, 0.7), 3);
    EXPECT_EQ(hq::regular_count(7, 0.0), 7);
    EXPECT_EQ(hq::regular_count(7, 1.0), 0);
    EXPECT_EQ(hq::regular_count(0, 0.4), 0);
    std::mt19937_64 rng(12);
    for (double r : {0.0, 0.05, 0.1, 0.25, 0.4, 0.5, 0.6, 0.75, 0.9, 1.0})
        for (int64_t n : {1, 2, 3, 7, 16, 31, 100, 128}) {
            // Exact rational reference: floor((1 - r) n) with r = k / 100.
            const int64_t rk = int64_t(std::lround(r * 100));
            const int64_t n_lo = (100 - rk) * n / 100;
            ASSERT_EQ(hq::regular_count(n, r), n_lo) << "n " << n << " r " << r;
            std::vector<double> sc(static_cast<size_t>(n));
            for (auto & s : sc) s = double(rng() % 5);  // many ties
            const auto order = hq::split_by_saliency(sc, r);
            ASSERT_EQ(int64_t(order.size()), n);
            const int64_t n_hi = n - n_lo;
            std::set<int32_t> all(order.begin(), order.end());
            EXPECT_EQ(int64_t(all.size()), n);  // disjoint, and with n entries: a permutation of 0..n-1
            EXPECT_EQ(*all.begin(), 0);
            EXPECT_EQ(*all.rbegin(), n - 1);
            EXPECT_TRUE(std::is_sorted(order.begin(), order.begin() + n_hi));
            EXPECT_TRUE(std::is_sorted(order.begin() + n_hi, order.end()));
            // Every salient score >= every regular one; on equal scores the lower index is salient.
            for (int64_t a = 0; a < n_hi; ++a)
                for (int64_t b = n_hi; b < n; ++b) {
                    const int32_t i = order[size_t(a)], j = order[size_t(b)];
                    ASSERT_TRUE(sc[size_t(i)] > sc[size_t(j)] || (sc[size_t(i)] == sc[size_t(j)] && i < j))
                        << "salient " << i << " (" << sc[size_t(i)] << ") vs regular " << j << " (" << sc[size_t(j)] << ")";
                }
            EXPECT_EQ(hq::split_by_saliency(sc, r), order);  // deterministic
        }
    // All equal: the first n_hi indices are salient.
    const auto flat = hq::split_by_saliency(std::vector<double>(10, 0.5), 0.3);
    EXPECT_EQ(flat, (std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
    const auto two = hq::split_by_saliency({0.1, 0.9, 0.5, 0.9, 0.2}, 0.4);
    EXPECT_EQ(two, (std::vector<int32_t>{1, 3, 0, 2, 4}));
}

// --- T13 -----------------------------------------------------------------------------------------

TEST(quant_saliency, a_planted_key_every_probe_attends_to_becomes_salient) {
    const int64_t L = 80, D = 32;
    const auto probes = hq::prompt_probes(L, 0.05, 0.05, 1);
    const int64_t n_hi = L - hq::regular_count(L, 0.1);  // 8 salient of 80
    ASSERT_EQ(n_hi, 8);
    // Every query shares a direction u.
    std::vector<float> u(static_cast<size_t>(D));
    for (int64_t c = 0; c < D; ++c) u[size_t(c)] = (c % 3 == 0) ? 1.0f : -0.5f;
    prompt_qk plain = random_qk(L, 2, 1, D, 13);
    for (int64_t t = 0; t < L; ++t)
        for (int64_t h = 0; h < 2; ++h)
            for (int64_t c = 0; c < D; ++c) plain.q[size_t((t * 2 + h) * D + c)] += 0.5f * u[size_t(c)];
    const auto s0 = probe_scores(plain, probes);
    const auto p0 = hq::normalized_scores(s0.data(), positions(L), probes, hq::nnz_mode::probe, int32_t(L - 1));
    const auto o0 = hq::split_by_saliency(p0, 0.1);
    // Plant the key along u at the least salient token of an early, a middle and a late range.
    for (auto range : {std::pair<int64_t, int64_t>{0, 20}, {30, 50}, {60, 75}}) {
        const int64_t planted = std::min_element(p0.begin() + range.first, p0.begin() + range.second) - p0.begin();
        ASSERT_TRUE(std::find(o0.begin(), o0.begin() + n_hi, int32_t(planted)) == o0.begin() + n_hi);
        prompt_qk p = plain;
        for (int64_t c = 0; c < D; ++c) p.k[size_t(planted * D + c)] = 1.5f * u[size_t(c)];
        const auto sums = probe_scores(p, probes);
        const auto pt = hq::normalized_scores(sums.data(), positions(L), probes, hq::nnz_mode::probe, int32_t(L - 1));
        const auto order = hq::split_by_saliency(pt, 0.1);
        EXPECT_TRUE(std::find(order.begin(), order.begin() + n_hi, int32_t(planted)) != order.begin() + n_hi)
            << "planted key " << planted << " not salient";
        // It is the top score among the keys every probe can see as much as it.
        EXPECT_EQ(std::max_element(pt.begin(), pt.begin() + planted + 1) - pt.begin(), planted);
    }
}

// --- prompt_probes -------------------------------------------------------------------------------

TEST(quant_saliency, prompt_probes_counts_order_and_determinism) {
    EXPECT_TRUE(hq::prompt_probes(0, 0.05, 0.05, 0).empty());
    EXPECT_EQ(hq::prompt_probes(1, 0.05, 0.05, 0), (std::vector<int32_t>{0}));
    EXPECT_EQ(hq::prompt_probes(10, 0.0, 0.0, 0), (std::vector<int32_t>{9}));  // at least the last token
    EXPECT_EQ(hq::prompt_probes(5, 0.0, 1.0, 3), (std::vector<int32_t>{0, 1, 2, 3, 4}));
    EXPECT_EQ(hq::prompt_probes(5, 1.0, 0.0, 3), (std::vector<int32_t>{0, 1, 2, 3, 4}));
    for (int64_t len : {2, 3, 17, 20, 60, 100, 1000, 4096})
        for (double rec : {0.0, 0.05, 0.1, 0.3})
            for (double rnd : {0.0, 0.05, 0.1, 0.5}) {
                const auto pr = hq::prompt_probes(len, rec, rnd, 77);
                // Exact rational counts (fractions are whole percent): ceil(rec * len) recent, at least 1,
                // and floor(rnd * len) random ones from the older tokens.
                const int64_t rk = int64_t(std::lround(rec * 100)), dk = int64_t(std::lround(rnd * 100));
                const int64_t n_recent = std::max<int64_t>(1, (rk * len + 99) / 100);
                const int64_t n_random = std::min<int64_t>(len - n_recent, dk * len / 100);
                ASSERT_EQ(int64_t(pr.size()), n_recent + n_random) << "len " << len << " rec " << rec << " rnd " << rnd;
                EXPECT_TRUE(std::adjacent_find(pr.begin(), pr.end(), [](int32_t a, int32_t b) { return a >= b; }) ==
                            pr.end());  // strictly ascending: sorted, no duplicates
                EXPECT_GE(pr.front(), 0);
                EXPECT_EQ(pr.back(), len - 1);
                for (int64_t t = len - n_recent; t < len; ++t)
                    EXPECT_TRUE(std::binary_search(pr.begin(), pr.end(), int32_t(t))) << "recent " << t;
                EXPECT_EQ(hq::prompt_probes(len, rec, rnd, 77), pr);
            }
    // The random picks depend on the seed, and are spread over the older tokens.
    const auto a = hq::prompt_probes(1000, 0.05, 0.05, 1), b = hq::prompt_probes(1000, 0.05, 0.05, 2);
    EXPECT_NE(a, b);
    int64_t early = 0;
    for (int32_t t : a) early += t < 475;
    EXPECT_GT(early, 10);  // about 25 of 50 expected
    EXPECT_LT(early, 40);
}

}  // namespace
