// Target compression -> removal rate (F_p) and the accuracy-constrained search
// (host/lowrank/rate_search.h): steps agree with ranks_for_removal_rate, the map is monotone and
// picks the smallest r that meets the target, and the bisection finds the boundary of a monotone
// score curve with few evaluations.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "host/lowrank/rate_search.h"
#include "support/expect_error.h"

using namespace kvcomp;
using namespace kvcomp::host::lowrank;
using kvcomp::test::expect_error;

namespace {

// Decaying spectra with a different decay per head, so heads get different ranks.
kv_spectra random_spectra(int64_t layers, int64_t heads, int64_t d, unsigned seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<double> decay(0.01, 0.3), scale(0.5, 20.0);
    kv_spectra s;
    s.num_layers = layers;
    s.num_kv_heads = heads;
    s.head_dim = d;
    for (int part = 0; part < 2; ++part) {
        for (int64_t h = 0; h < layers * heads; ++h) {
            const double a = decay(rng), c = scale(rng);
            std::vector<double> sig;
            for (int64_t i = 0; i < d; ++i) sig.push_back(c * std::exp(-a * double(i)));
            (part == 0 ? s.sigma_k : s.sigma_v).push_back(sig);
        }
    }
    return s;
}

TEST(lowrank_rate_search, steps_agree_with_direct_rank_selection) {
    const kv_spectra s = random_spectra(3, 2, 64, 1);
    for (int64_t m : {1, 16}) {
        const std::vector<rate_step> steps = achievable_compressions(s, m);
        ASSERT_GE(steps.size(), 2u);
        EXPECT_EQ(steps[0].removal_rate, 0.0);
        for (size_t i = 0; i < steps.size(); ++i) {
            const kv_ranks at = ranks_for_removal_rate(s, steps[i].removal_rate, m);
            EXPECT_EQ(at.kept_dims(), steps[i].kept_dims) << "step " << i;
            EXPECT_EQ(at.compression(), steps[i].compression) << "step " << i;
            if (i > 0) {
                EXPECT_GT(steps[i].removal_rate, steps[i - 1].removal_rate);
                EXPECT_GT(steps[i].compression, steps[i - 1].compression);
                // The step really begins at its r: just below it, more dims are kept.
                const double below = std::nextafter(steps[i].removal_rate, 0.0);
                EXPECT_EQ(ranks_for_removal_rate(s, below, m).kept_dims(), steps[i - 1].kept_dims)
                    << "step " << i;
            }
        }
        // The last step: every head at its lowest rank (m, or 1 for m = 1).
        EXPECT_EQ(steps.back().kept_dims, 2 * 3 * 2 * m);
    }
}

TEST(lowrank_rate_search, target_map_is_monotone_and_minimal) {
    const kv_spectra s = random_spectra(4, 2, 64, 7);
    const int64_t m = 16;
    double prev_r = -1.0;
    for (int i = 0; i <= 75; ++i) {
        const double target = i / 100.0;
        const rate_choice c = removal_rate_for_compression(s, target, m);
        EXPECT_GE(c.compression(), target) << "target " << target;
        EXPECT_GE(c.removal_rate, prev_r) << "r must not decrease as the target grows";
        prev_r = c.removal_rate;
        for (int64_t k : c.ranks.k) EXPECT_EQ(k % m, 0);
        for (int64_t v : c.ranks.v) EXPECT_EQ(v % m, 0);
        // Minimal: any smaller r misses the target.
        if (c.removal_rate > 0.0) {
            const double below = std::nextafter(c.removal_rate, 0.0);
            EXPECT_LT(ranks_for_removal_rate(s, below, m).compression(), target) << "target " << target;
        }
    }
    // All heads at 16 of 64 dims: the most this configuration can remove is 0.75.
    EXPECT_DOUBLE_EQ(removal_rate_for_compression(s, 0.75, m).compression(), 0.75);
    expect_error([&] { removal_rate_for_compression(s, 0.8, m); }, status::invalid_argument,
                 {"target compression 0.8", "(0.75"});
    expect_error([&] { removal_rate_for_compression(s, 1.0, m); }, status::invalid_argument, {"[0, 1)"});
    expect_error([&] { removal_rate_for_compression(s, -0.1, m); }, status::invalid_argument, {"[0, 1)"});
}

TEST(lowrank_rate_search, zero_target_keeps_every_nonzero_dim) {
    kv_spectra s;
    s.num_layers = 1;
    s.num_kv_heads = 1;
    s.head_dim = 4;
    s.sigma_k = {{3, 2, 0, 0}};
    s.sigma_v = {{1, 1, 1, 1}};
    const rate_choice c = removal_rate_for_compression(s, 0.0, 1);
    EXPECT_EQ(c.removal_rate, 0.0);
    EXPECT_EQ(c.ranks.k[0], 2);  // the zero directions cost nothing to drop
    EXPECT_EQ(c.ranks.v[0], 4);
}

// The largest grid point whose score passes, by evaluating all of them.
size_t brute_force_answer(const std::vector<double> & grid, double (*f)(double), double thr, bool & found) {
    found = false;
    size_t best = 0;
    for (size_t i = 0; i < grid.size(); ++i)
        if (f(grid[i]) >= thr) {
            best = i;
            found = true;
        }
    return best;
}

double falling_score(double c) {
    return 80.0 * (1.0 - 0.5 * c * c * c);  // 80 uncompressed, falling faster as compression grows
}

TEST(lowrank_rate_search, accuracy_search_finds_the_boundary_of_a_monotone_curve) {
    const kv_spectra s = random_spectra(4, 2, 64, 3);
    std::vector<double> grid;
    for (const rate_step & st : achievable_compressions(s, 1)) grid.push_back(st.compression);
    ASSERT_GT(grid.size(), 50u);
    for (double keep : {0.99, 0.95, 0.9}) {
        int calls = 0;
        const auto res = search_compression_for_accuracy(grid,
                                                         [&](double c) {
                                                             ++calls;
                                                             return falling_score(c);
                                                         },
                                                         80.0, {keep});
        bool found = false;
        const size_t want = brute_force_answer(grid, falling_score, keep * 80.0, found);
        ASSERT_TRUE(found);
        ASSERT_TRUE(res.found);
        EXPECT_EQ(res.index, want) << "keep " << keep;
        EXPECT_EQ(res.compression, grid[want]);
        EXPECT_GE(res.score, keep * 80.0);
        EXPECT_EQ(res.threshold, keep * 80.0);
        // Bisection: the first and last points, then about log2(n) more.
        EXPECT_LE(calls, int(std::ceil(std::log2(double(grid.size())))) + 2);
        EXPECT_EQ(size_t(calls), res.probes.size());
        // The point just above the answer fails (a boundary, not just any passing point).
        if (want + 1 < grid.size()) {
            EXPECT_LT(falling_score(grid[want + 1]), keep * 80.0);
        }
    }
}

TEST(lowrank_rate_search, accuracy_search_edge_cases) {
    const std::vector<double> grid = {0.0, 0.1, 0.2, 0.3};
    // Everything passes: the largest compression, after two probes.
    auto res = search_compression_for_accuracy(
        grid, [](double) { return 1.0; }, 1.0);
    EXPECT_TRUE(res.found);
    EXPECT_EQ(res.index, 3u);
    EXPECT_EQ(res.probes.size(), 2u);
    // Nothing passes: not found after probing grid[0].
    res = search_compression_for_accuracy(
        grid, [](double) { return 0.5; }, 1.0);
    EXPECT_FALSE(res.found);
    EXPECT_EQ(res.probes.size(), 1u);
    // A non-monotone curve: the answer is still a probed point that passed.
    res =
        search_compression_for_accuracy(grid, [](double c) { return c == 0.1 ? 0.0 : 1.0 - c; }, 1.0, {0.75});
    ASSERT_TRUE(res.found);
    bool probed_and_passed = false;
    for (const auto & p : res.probes) probed_and_passed |= (p.compression == res.compression && p.passed);
    EXPECT_TRUE(probed_and_passed);
    // keep_fraction 1: only scores equal to the baseline pass.
    res = search_compression_for_accuracy(grid, [](double c) { return c <= 0.1 ? 2.0 : 1.9; }, 2.0, {1.0});
    EXPECT_EQ(res.index, 1u);
}

TEST(lowrank_rate_search, accuracy_search_rejects_bad_input) {
    const auto one = [](double) { return 1.0; };
    expect_error([&] { search_compression_for_accuracy({}, one, 1.0); }, status::invalid_argument, {"empty"});
    expect_error(
        [&] {
            search_compression_for_accuracy({0.1, 0.1}, one, 1.0);
        },
        status::invalid_argument, {"grid[1] = 0.1", "strictly ascending"});
    expect_error(
        [&] {
            search_compression_for_accuracy({0.5, 1.0}, one, 1.0);
        },
        status::invalid_argument, {"grid[1] = 1"});
    expect_error([&] { search_compression_for_accuracy({0.1}, one, 0.0); }, status::invalid_argument,
                 {"baseline score 0"});
    expect_error([&] { search_compression_for_accuracy({0.1}, one, 1.0, {1.5}); }, status::invalid_argument,
                 {"keep_fraction 1.5"});
    expect_error(
        [&] {
            search_compression_for_accuracy(
                {0.1, 0.2}, [](double c) { return c > 0.15 ? NAN : 1.0; }, 1.0);
        },
        status::invalid_argument, {"score at compression 0.2", "not finite"});
}

}  // namespace
