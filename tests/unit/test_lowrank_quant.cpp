// kivi / zipcache storing the reduced cache of zack / fdc (options lowrank, calib, rank;
// lib/engine/kv_method_lowrank_quant.h) on the tiny random Llama of tests/support, on every backend:
//   (a) at rank = head_dim (orthogonal bases) with a window longer than every sequence nothing is
//       quantized and nothing is dropped: prefill logits and decode log-probabilities equal "none"'s
//       up to the rounding of the two fp16 caches (the low-rank plumbing: folding, the online
//       projection of q and k, the output through the folded W_O);
//   (b) with 8-bit blocks the error against "none" shrinks as the rank grows;
//   (c) the bytes are the quantizing method's at head_dim = rank (blocks of core/qblock.h and the
//       fp16 window row, at the reduced width);
//   (d) bad options are clear errors naming the option.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/qblock.h"
#include "engine/engine.h"
#include "support/backends.h"
#include "support/expect_error.h"
#include "support/lowrank_engine.h"
#include "support/tiny_model.h"

using namespace kvcomp;

namespace {

using namespace test::lowrank;

// kivi or zipcache over fdc's reduced cache at `rank`, with further options of the quantizing method.
engine::engine_config combined(const std::string & backend, const std::string & method, int64_t rank,
                               engine::method_options o) {
    engine::engine_config c = test::tiny_engine_config(tiny_dir(), backend);
    c.method = method;
    o["lowrank"] = "fdc", o["calib"] = calib_file("fdc"), o["rank"] = std::to_string(rank);
    c.method_opts = o;
    return c;
}

engine::engine_config plain(const std::string & backend) { return test::tiny_engine_config(tiny_dir(), backend); }

class lowrank_quant_on : public ::testing::TestWithParam<std::string> {};

// (a) kivi with residual 256 and zipcache with a block of 256 and tail=window keep every token of
// these sequences (< 256 tokens) in their fp16 window.
TEST_P(lowrank_quant_on, full_rank_pass_through_equals_none) {
    const int64_t d = spec().head_dim;
    engine::engine none(plain(GetParam()));
    const auto prompt = random_tokens(40, 5), forced = random_tokens(12, 6);
    const auto want = none.prompt_logits(prompt);
    const auto want_lp = forced_logprobs(none, prompt, forced);
    const std::vector<std::pair<std::string, engine::method_options>> variants = {
        {"kivi", {{"residual", "256"}, {"group", "32"}}},
        {"zipcache", {{"block", "256"}, {"tail", "window"}, {"ratio", "0"}}}};
    for (const auto & [method, opts] : variants) {
        std::string why;  // a backend whose quantized decode lacks the width skips (CUDA: 32..128, multiples of 16)
        if (!engine_runs(combined(GetParam(), method, d, opts), 40, why)) GTEST_SKIP() << GetParam() << ": " << why;
        engine::engine e(combined(GetParam(), method, d, opts));
        // Both cache fp16, in different bases: the roundings differ, nothing else does (as zack/fdc's
        // full-rank test, test_lowrank_methods.cpp).
        EXPECT_LT(test::nmse(e.prompt_logits(prompt), want), 1e-6) << method;
        const auto lp = forced_logprobs(e, prompt, forced);
        ASSERT_EQ(lp.size(), want_lp.size()) << method;
        for (size_t i = 0; i < lp.size(); ++i) EXPECT_NEAR(lp[i], want_lp[i], 2e-3) << method << " decode step " << i;
    }
}

// (b) 8-bit blocks of 16 tokens (residual 16: most of the prompt is quantized), ranks 16 .. 64.
TEST_P(lowrank_quant_on, error_shrinks_as_rank_grows) {
    engine::engine none(plain(GetParam()));
    const auto prompt = random_tokens(48, 8), forced = random_tokens(24, 9);
    const auto want = forced_logprobs(none, prompt, forced);
    std::vector<double> errs;
    std::string skipped;  // ranks the backend lacks an op for (CUDA: 16); the others are still compared
    const engine::method_options opts = {{"bits", "8"}, {"group", "16"}, {"residual", "16"}};
    for (int64_t rank : {16, 32, 48, 64}) {
        std::string why;
        if (!engine_runs(combined(GetParam(), "kivi", rank, opts), 40, why)) {
            skipped += " rank " + std::to_string(rank) + ": " + why;
            continue;
        }
        engine::engine e(combined(GetParam(), "kivi", rank, opts));
        const auto got = forced_logprobs(e, prompt, forced);
        ASSERT_EQ(got.size(), want.size());
        double sum = 0.0;
        for (size_t i = 0; i < got.size(); ++i) sum += std::abs(got[i] - want[i]);
        errs.push_back(sum / double(got.size()));
    }
    if (errs.size() < 3) GTEST_SKIP() << GetParam() << " runs fewer than 3 of the ranks:" << skipped;
    for (size_t i = 0; i + 1 < errs.size(); ++i) EXPECT_GT(errs[i], errs[i + 1]) << "rank step " << i << skipped;
    EXPECT_LT(errs.back(), 2e-2) << "8-bit blocks at full rank stay close to none";
}

INSTANTIATE_TEST_SUITE_P(lowrank_quant_backends, lowrank_quant_on, ::testing::ValuesIn(test::backends_to_test()),
                         test::backend_param_name());

// (c) kivi's accounting (test_quant_methods.cpp, kivi_streaming_block_counts) at head_dim = rank.
TEST(lowrank_quant, bytes_are_the_blocks_at_the_rank) {
    const int32_t G = 16, R = 32;
    const int64_t rank = 32;
    qblock_layout q;
    q.n_kv_heads = spec().kv_heads, q.head_dim = rank;
    q.lo_tokens = G, q.hi_tokens = 0, q.hi_bits = q.lo_bits = 2, q.v_group = G;
    const uint64_t L = uint64_t(spec().layers);
    const uint64_t slot = uint64_t(q.slot_bytes()) * L;
    // The residual's fp16 window at the rank, in pages of the engine's 16 tokens.
    const uint64_t page = uint64_t(q.n_kv_heads * 16 * rank) * 2 * 2 * L;
    engine::engine e(combined("cpu", "kivi", rank, {{"group", std::to_string(G)}, {"residual", std::to_string(R)}}));
    for (int64_t t : {1, 16, 31, 32, 33, 40, 64, 100})
        EXPECT_EQ(e.kv_bytes_for_tokens(t), uint64_t((t - t % R) / G) * slot + uint64_t((t % R + 15) / 16) * page)
            << "tokens " << t;
}

// (d)
TEST(lowrank_quant, bad_options_are_clear_errors) {
    const auto make = [](const std::string & m, engine::method_options o) {
        return [m, o] { engine::engine e(combined("cpu", m, 32, o)); };
    };
    const auto raw = [](const std::string & m, engine::method_options o) {
        return [m, o] {
            engine::engine_config c = plain("cpu");
            c.method = m, c.method_opts = o;
            engine::engine e(c);
        };
    };
    test::expect_error(raw("kivi", {{"lowrank", "palu"}, {"calib", calib_file("palu")}, {"rank", "32"}}),
                       status::invalid_argument, {"kivi", "lowrank=palu"});
    test::expect_error(raw("kivi", {{"lowrank", "fdc"}, {"rank", "32"}}), status::invalid_argument,
                       {"kivi", "lowrank=fdc", "calib=FILE"});
    test::expect_error(raw("zipcache", {{"lowrank", "zack"}, {"calib", calib_file("zack")}}), status::invalid_argument,
                       {"zipcache", "rank=R"});
    test::expect_error(raw("kivi", {{"rank", "32"}}), status::invalid_argument, {"kivi", "calib and rank", "lowrank"});
    test::expect_error(raw("kivi", {{"lowrank", "fdc"}, {"calib", calib_file("fdc")}, {"rank", "40"}}),
                       status::invalid_argument, {"kivi", "rank", "multiple of 16", "40"});
    test::expect_error(raw("kivi", {{"lowrank", "fdc"}, {"calib", calib_file("fdc")}, {"rank", "80"}}),
                       status::invalid_argument, {"rank=80", "head_dim = 64"});
    // A file of the other method names the file.
    test::expect_error(raw("kivi", {{"lowrank", "fdc"}, {"calib", calib_file("zack")}, {"rank", "32"}}),
                       status::invalid_argument, {calib_file("zack")});
    // The quantizing method's own checks still run at the reduced width: KIVI's group must divide it.
    test::expect_error(make("kivi", {{"group", "64"}, {"residual", "64"}}), status::invalid_argument,
                       {"kivi", "head_dim 32", "value group 64"});
}

}  // namespace
