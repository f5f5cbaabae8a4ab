// Per-head ranks from a shared removal rate (host/lowrank/rank_selection.h): the ZACK Eq. 6 / FDC
// Eq. 1 rule on a hand-computed spectrum, rounding to multiples, the edge rates, the overall
// compression accounting and the rejection of bad spectra.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "host/lowrank/rank_selection.h"
#include "support/expect_error.h"

using namespace kvcomp;
using namespace kvcomp::host::lowrank;
using kvcomp::test::expect_error;

namespace {

// sigma = 4, 3, 2, 1 (sum 10). Removed tail shares: tail(1) = 6/10, tail(2) = 3/10, tail(3) = 1/10,
// tail(4) = 0. The rank is the smallest k whose tail share is <= r.
const std::vector<double> k_sigma = {4, 3, 2, 1};

TEST(lowrank_rank_selection, raw_rank_matches_hand_computed_tail_shares) {
    EXPECT_EQ(raw_rank_for_removal_rate(k_sigma, 0.0), 4);
    EXPECT_EQ(raw_rank_for_removal_rate(k_sigma, 0.05), 4);
    EXPECT_EQ(raw_rank_for_removal_rate(k_sigma, 0.1), 3);   // exactly tail(3): removing dim 3 is allowed
    EXPECT_EQ(raw_rank_for_removal_rate(k_sigma, 0.29), 3);  // removing dims 2..3 would remove 0.3 > 0.29
    EXPECT_EQ(raw_rank_for_removal_rate(k_sigma, 0.3), 2);
    EXPECT_EQ(raw_rank_for_removal_rate(k_sigma, 0.59), 2);
    EXPECT_EQ(raw_rank_for_removal_rate(k_sigma, 0.6), 1);
    EXPECT_EQ(raw_rank_for_removal_rate(k_sigma, 1.0), 1);  // never below one dim
}

TEST(lowrank_rank_selection, uses_plain_sigma_sum_not_energy) {
    // sigma = 3, 1: tail(1) = 1/4 by the sum of sigma, but 1/10 by sigma^2. At r = 0.2 the paper's
    // rule keeps both dims; an energy rule would drop one.
    EXPECT_EQ(raw_rank_for_removal_rate({3, 1}, 0.2), 2);
    EXPECT_EQ(raw_rank_for_removal_rate({3, 1}, 0.25), 1);
}

TEST(lowrank_rank_selection, zero_rate_keeps_exactly_the_nonzero_values) {
    EXPECT_EQ(raw_rank_for_removal_rate({5, 2, 0, 0}, 0.0), 2);
    EXPECT_EQ(raw_rank_for_removal_rate({0, 0, 0}, 0.0), 1);  // an all-zero head keeps one dim
    EXPECT_EQ(raw_rank_for_removal_rate({0, 0, 0}, 0.5), 1);
}

TEST(lowrank_rank_selection, tail_fractions_are_the_rank_breakpoints) {
    const std::vector<double> t = tail_fractions(k_sigma);
    ASSERT_EQ(t.size(), 5u);
    EXPECT_EQ(t[0], 1.0);
    EXPECT_EQ(t[1], 0.6);
    EXPECT_EQ(t[2], 0.3);
    EXPECT_EQ(t[3], 0.1);
    EXPECT_EQ(t[4], 0.0);
    // Just below a breakpoint the rank is one higher than at it.
    for (int k = 1; k <= 3; ++k) {
        EXPECT_EQ(raw_rank_for_removal_rate(k_sigma, t[size_t(k)]), k);
        EXPECT_EQ(raw_rank_for_removal_rate(k_sigma, std::nextafter(t[size_t(k)], 0.0)), k + 1);
    }
}

TEST(lowrank_rank_selection, rank_never_grows_with_the_rate) {
    std::vector<double> s;
    for (int i = 0; i < 128; ++i) s.push_back(100.0 * std::exp(-0.05 * i) + 0.1);
    int64_t prev = 128;
    for (int i = 0; i <= 1000; ++i) {
        const int64_t k = raw_rank_for_removal_rate(s, i / 1000.0);
        EXPECT_LE(k, prev) << "r=" << i / 1000.0;
        prev = k;
    }
    EXPECT_EQ(prev, 1);
}

TEST(lowrank_rank_selection, rounds_up_to_the_multiple_and_clamps_to_head_dim) {
    EXPECT_EQ(round_rank(1, 64, 16), 16);
    EXPECT_EQ(round_rank(16, 64, 16), 16);
    EXPECT_EQ(round_rank(17, 64, 16), 32);
    EXPECT_EQ(round_rank(63, 64, 16), 64);
    EXPECT_EQ(round_rank(64, 64, 16), 64);
    EXPECT_EQ(round_rank(65, 72, 16), 72);  // 80 would exceed head_dim 72
    EXPECT_EQ(round_rank(37, 128, 1), 37);  // multiple 1: no rounding
    EXPECT_EQ(round_rank(5, 8, 8), 8);
    expect_error([] { round_rank(3, 8, 0); }, status::invalid_argument, {"rank_multiple = 0"});
    expect_error([] { round_rank(3, 8, 16); }, status::invalid_argument,
                 {"rank_multiple = 16", "head_dim = 8"});
    expect_error([] { round_rank(9, 8, 4); }, status::invalid_argument, {"raw rank 9"});
    expect_error([] { round_rank(0, 8, 4); }, status::invalid_argument, {"raw rank 0"});
    // rank_for_removal_rate = raw rank then rounding: r = 0.3 gives raw 2, multiple 3 gives 3.
    EXPECT_EQ(rank_for_removal_rate(k_sigma, 0.3, 3), 3);
    EXPECT_EQ(rank_for_removal_rate(k_sigma, 0.6, 2), 2);
}

TEST(lowrank_rank_selection, model_ranks_and_overall_compression) {
    // 1 layer, 2 KV heads, head_dim 4, multiple 1. At r = 0.3:
    //   head 0 K {4,3,2,1} -> 2;  head 0 V {1,1,1,1} (tails .75 .5 .25 0) -> 3
    //   head 1 K {9,1,0,0} (tail(1) = 0.1) -> 1;  head 1 V {2,2,0,0} (tail(1) = 0.5) -> 2
    // kept = 2 + 1 + 3 + 2 = 8 of 16 -> compression 1/2.
    kv_spectra s;
    s.num_layers = 1;
    s.num_kv_heads = 2;
    s.head_dim = 4;
    s.sigma_k = {{4, 3, 2, 1}, {9, 1, 0, 0}};
    s.sigma_v = {{1, 1, 1, 1}, {2, 2, 0, 0}};
    const kv_ranks r = ranks_for_removal_rate(s, 0.3, 1);
    EXPECT_EQ(r.k, (std::vector<int64_t>{2, 1}));
    EXPECT_EQ(r.v, (std::vector<int64_t>{3, 2}));
    EXPECT_EQ(r.kept_dims(), 8);
    EXPECT_EQ(r.full_dims(), 16);
    EXPECT_DOUBLE_EQ(r.kept_fraction(), 0.5);
    EXPECT_DOUBLE_EQ(r.compression(), 0.5);
    // Multiple 2: K 2, 1->2; V 3->4, 2 -> kept 10.
    const kv_ranks r2 = ranks_for_removal_rate(s, 0.3, 2);
    EXPECT_EQ(r2.k, (std::vector<int64_t>{2, 2}));
    EXPECT_EQ(r2.v, (std::vector<int64_t>{4, 2}));
    EXPECT_EQ(r2.kept_dims(), 10);
}

TEST(lowrank_rank_selection, rejects_bad_rates_and_spectra) {
    expect_error([] { raw_rank_for_removal_rate(k_sigma, -0.1); }, status::invalid_argument, {"r = -0.1"});
    expect_error([] { raw_rank_for_removal_rate(k_sigma, 1.5); }, status::invalid_argument, {"r = 1.5"});
    expect_error([] { raw_rank_for_removal_rate({}, 0.1); }, status::invalid_argument,
                 {"no singular values"});
    expect_error(
        [] {
            raw_rank_for_removal_rate({1, 2}, 0.1);
        },
        status::invalid_argument, {"[1] = 2", "non-increasing"});
    expect_error([] { raw_rank_for_removal_rate({1, -1}, 0.1); }, status::invalid_argument, {"[1] = -1"});
    expect_error([] { raw_rank_for_removal_rate({std::numeric_limits<double>::quiet_NaN()}, 0.1); },
                 status::invalid_argument, {"finite"});

    kv_spectra s;
    s.num_layers = 2;
    s.num_kv_heads = 1;
    s.head_dim = 2;
    s.sigma_k = {{2, 1}, {2, 1}};
    s.sigma_v = {{2, 1}};
    expect_error([&] { s.validate(); }, status::invalid_argument,
                 {"sigma_v 1 heads", "num_layers * num_kv_heads = 2"});
    s.sigma_v = {{2, 1}, {1, 2}};
    expect_error([&] { s.validate(); }, status::invalid_argument, {"layer 1 kv_head 0 V sigma[1]"});
    s.sigma_v = {{2, 1}, {2, 1, 0}};
    expect_error([&] { s.validate(); }, status::invalid_argument,
                 {"layer 1 kv_head 0 V sigma has 3", "head_dim 2"});
    s.sigma_v = {{2, 1}, {2, 1}};
    expect_error([&] { ranks_for_removal_rate(s, 0.1, 3); }, status::invalid_argument, {"rank_multiple = 3"});
}

}  // namespace
