// The engine against an independent double-precision forward pass, on every available backend:
// logits of a prompt, greedy tokens, continuous batching that does not change any request's
// tokens, the page pool back to empty, and bad input that fails one request cleanly.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "core/registry.h"
#include "support/backends.h"
#include "engine/engine.h"
#include "support/tiny_model.h"

using namespace kvcomp;

namespace {


const std::string & tiny_dir() {
    static const std::string dir = test::write_tiny_model(test::tiny_model_spec{}, "engine");
    return dir;
}

engine::engine_config tiny_config(const std::string & backend) { return test::tiny_engine_config(tiny_dir(), backend); }



class engine_on : public ::testing::TestWithParam<std::string> {};

TEST_P(engine_on, prompt_logits_match_reference) {
    engine::engine e(tiny_config(GetParam()));
    const auto prompt = test::make_prompt(37, 1);  // crosses two page boundaries
    const auto got = e.prompt_logits(prompt);
    const auto want = test::reference_logits(tiny_dir(), prompt);
    ASSERT_EQ(got.size(), want.size());
    EXPECT_LE(test::nmse(got, want), test::logits_tolerance(GetParam())) << GetParam();
    EXPECT_EQ(e.stats().pages_in_use, 0);
}

TEST_P(engine_on, qwen2_biases_match_reference) {
    test::tiny_model_spec spec;
    spec.qwen2 = true;
    static const std::string dir = test::write_tiny_model(spec, "engine_qwen2");
    auto cfg = tiny_config(GetParam());
    cfg.model_dir = dir;
    engine::engine e(cfg);
    const auto prompt = test::make_prompt(21, 9);
    const auto got = e.prompt_logits(prompt);
    const auto want = test::reference_logits(dir, prompt);
    ASSERT_EQ(got.size(), want.size());
    EXPECT_LE(test::nmse(got, want), test::logits_tolerance(GetParam())) << GetParam();
}

TEST_P(engine_on, greedy_tokens_match_reference_and_batching_changes_nothing) {
    const std::vector<std::vector<int32_t>> prompts = {test::make_prompt(5, 2), test::make_prompt(17, 3), test::make_prompt(33, 4)};
    const int64_t n_new = 12;
    std::vector<std::vector<int32_t>> alone;
    for (const auto & p : prompts) {
        engine::engine e(tiny_config(GetParam()));
        engine::generation_request r;
        r.prompt = p, r.max_new_tokens = n_new, r.stop_at_eos = false;
        const int64_t id = e.submit(r);
        e.run();
        alone.push_back(e.result(id).tokens);
        EXPECT_EQ(e.result(id).finish_reason, "length");
    }
    // The reference recomputes the whole sequence per token: check the shortest prompt only.
    EXPECT_EQ(alone[0], test::reference_greedy(tiny_dir(), prompts[0], n_new));

    engine::engine e(tiny_config(GetParam()));
    std::vector<int64_t> ids;
    for (const auto & p : prompts) {
        engine::generation_request r;
        r.prompt = p, r.max_new_tokens = n_new, r.stop_at_eos = false;
        ids.push_back(e.submit(r));
    }
    int64_t streamed = 0;
    e.run([&](int64_t, int32_t) { ++streamed; });
    for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(e.result(ids[i]).tokens, alone[i]) << "request " << i;
    EXPECT_EQ(streamed, n_new * int64_t(prompts.size()));
    EXPECT_EQ(e.stats().pages_in_use, 0);
    EXPECT_GT(e.stats().kv_bytes_peak, 0u);
}

TEST_P(engine_on, teacher_forcing_logprobs_match_reference) {
    engine::engine e(tiny_config(GetParam()));
    const auto prompt = test::make_prompt(10, 11), forced = test::make_prompt(9, 12);
    engine::generation_request r;
    r.prompt = prompt, r.forced_tokens = forced;
    const int64_t id = e.submit(r);
    e.run();
    const auto & res = e.result(id);
    ASSERT_EQ(res.tokens, forced);
    ASSERT_EQ(res.token_logprobs.size(), forced.size());
    std::vector<int32_t> all = prompt;
    all.insert(all.end(), forced.begin(), forced.end());
    const auto ref = test::reference_logits(tiny_dir(), all);
    const int64_t V = e.model().vocab_size;
    for (size_t i = 0; i < forced.size(); ++i) {
        const float * row = ref.data() + (prompt.size() - 1 + i) * size_t(V);
        double mx = row[0], sum = 0;
        for (int64_t j = 0; j < V; ++j) mx = std::max(mx, double(row[j]));
        for (int64_t j = 0; j < V; ++j) sum += std::exp(double(row[j]) - mx);
        EXPECT_NEAR(res.token_logprobs[i], double(row[forced[i]]) - mx - std::log(sum), test::logprob_tolerance(GetParam())) << "token " << i;
    }
    EXPECT_EQ(e.stats().pages_in_use, 0);
}

TEST_P(engine_on, bad_requests_fail_alone) {
    auto cfg = tiny_config(GetParam());
    cfg.kv_pages = 4;  // 64 tokens in the pool
    engine::engine e(cfg);
    engine::generation_request ok, too_long, too_big;
    ok.prompt = test::make_prompt(10, 5), ok.max_new_tokens = 5;
    too_long.prompt = test::make_prompt(300, 6);  // longer than the 256-token context
    too_big.prompt = test::make_prompt(60, 7), too_big.max_new_tokens = 20;  // needs 79 cached tokens
    const int64_t a = e.submit(ok), b = e.submit(too_long), c = e.submit(too_big);
    e.run();
    EXPECT_NE(e.result(a).finish_reason, "error") << e.result(a).error;
    EXPECT_EQ(e.result(a).tokens.size(), 5u);
    EXPECT_EQ(e.result(b).finish_reason, "error");
    EXPECT_NE(e.result(b).error.find("longer than the context"), std::string::npos) << e.result(b).error;
    EXPECT_EQ(e.result(c).finish_reason, "error");
    EXPECT_NE(e.result(c).error.find("page pool too small"), std::string::npos) << e.result(c).error;
    EXPECT_EQ(e.stats().pages_in_use, 0);

    engine::generation_request bad;
    bad.prompt = {1, 2, 999};
    EXPECT_THROW(e.submit(bad), kvcomp::error);
    bad.prompt = {};
    EXPECT_THROW(e.submit(bad), kvcomp::error);
}

INSTANTIATE_TEST_SUITE_P(backends, engine_on, ::testing::ValuesIn(test::backends_to_test()), test::backend_param_name());

TEST(engine, fp16_cache_bytes_are_exact) {
    // layers x tokens x KV heads x head dim x 2 bytes x 2 (K and V), with pages of one token and
    // with whole pages of 16.
    const test::tiny_model_spec spec;
    for (int32_t page : {1, 16}) {
        auto cfg = tiny_config("cpu");
        cfg.page_size = page;
        engine::engine e(cfg);
        for (int64_t tokens : {16, 48, 256}) {
            const uint64_t want = uint64_t(spec.layers * tokens * spec.kv_heads * spec.head_dim * 2 * 2);
            EXPECT_EQ(e.kv_bytes_for_tokens(tokens), want) << "page " << page << ", tokens " << tokens;
        }
        EXPECT_EQ(e.kv_bytes_for_tokens(17), uint64_t(spec.layers * (page == 1 ? 17 : 32) * spec.kv_heads * spec.head_dim * 4));
        EXPECT_EQ(e.stats().kv_bytes_allocated,
                  uint64_t(spec.layers * cfg.max_batch * cfg.max_context * spec.kv_heads * spec.head_dim * 4));
    }
}

TEST(engine, unknown_method_and_bad_checkpoint_are_clear_errors) {
    auto cfg = tiny_config("cpu");
    cfg.method = "zipzap";
    try {
        engine::engine e(cfg);
        FAIL() << "unknown method accepted";
    } catch (const kvcomp::error & err) {
        EXPECT_NE(std::string(err.what()).find("valid methods: none"), std::string::npos) << err.what();
    }
    cfg = tiny_config("cpu");
    cfg.model_dir = "/nonexistent/model";
    EXPECT_THROW(engine::engine e(cfg), kvcomp::error);
}

}  // namespace
