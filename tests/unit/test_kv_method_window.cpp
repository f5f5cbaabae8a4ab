// The sliding-window baseline "window" (lib/engine/kv_method_window.cpp): a window as long as the
// sequence changes nothing against "none"; a short window matches an independent fp64 reference
// that attends decoded tokens only to the last N tokens; exact byte accounting and lazily held
// ring pages; clear option errors; rings returned when requests end; and on the shipped default
// model, the truncated cache visibly loses line retrieval that "none" answers.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "core/registry.h"
#include "support/backends.h"
#include "engine/engine.h"
#include "engine/llama_forward.h"
#include "engine/model_weights.h"
#include "host/model/tokenizer_factory.h"
#include "support/expect_error.h"
#include "support/tiny_model.h"

using namespace kvcomp;

namespace {


const std::string & tiny_dir() {
    static const std::string dir = test::write_tiny_model(test::tiny_model_spec{}, "kv_window");
    return dir;
}

engine::engine_config tiny_config(const std::string & backend, const std::string & method, int64_t window) {
    engine::engine_config c = test::tiny_engine_config(tiny_dir(), backend);
    c.method = method;
    if (method == "window") c.method_opts["window"] = std::to_string(window);
    return c;
}



// The method alone on the CPU backend, with the tiny model's shapes.
std::unique_ptr<engine::kv_method> make_window(backend & be, int64_t window, int64_t n_pages,
                                               int64_t max_requests) {
    const auto m = host::load_model_config(tiny_dir());
    auto method = engine::create_kv_method("window", {{"window", std::to_string(window)}});
    engine::kv_shape shape;
    shape.n_layers = m.num_hidden_layers, shape.n_q_heads = m.num_attention_heads;
    shape.n_kv_heads = m.num_key_value_heads, shape.head_dim = m.head_dim;
    shape.n_pages = n_pages, shape.page_size = 16, shape.max_requests = max_requests;
    method->allocate(be, shape);
    return method;
}

uint64_t page_bytes(const host::model_config & m, int64_t page_size) {
    return uint64_t(page_size * m.num_key_value_heads * m.head_dim) * 2 /*fp16*/ * 2 /*K and V*/ *
           uint64_t(m.num_hidden_layers);
}

class window_on : public ::testing::TestWithParam<std::string> {};

// (1) A window that holds every token: the same prompt logits (bit for bit: the same prefill ops)
// and the same greedy tokens as "none", batched.
TEST_P(window_on, window_covering_the_sequence_equals_none) {
    const std::vector<std::vector<int32_t>> prompts = {test::make_prompt(5, 2), test::make_prompt(17, 3),
                                                       test::make_prompt(33, 4)};
    const int64_t n_new = 12;  // longest sequence: 33 + 12 - 1 = 44 cached tokens
    engine::engine none(tiny_config(GetParam(), "none", 0)), win(tiny_config(GetParam(), "window", 44));
    EXPECT_EQ(win.prompt_logits(prompts[2]), none.prompt_logits(prompts[2]));
    EXPECT_EQ(test::generate_greedy(win, prompts, n_new), test::generate_greedy(none, prompts, n_new));
    EXPECT_EQ(win.stats().pages_in_use, 0);
    EXPECT_EQ(win.stats().method_pages_in_use, 0);
}

// (2) A short window, driven through the forward pass directly so every decode step's logits can
// be compared with the fp64 reference that attends decoded tokens to positions t-N..t only. Two
// requests in one batch: one prompt longer than the window (prefill keeps only its tail), one
// shorter (the ring fills, then wraps twice); page_size 4 so the ring (N+1 = 11 slots) spans 3
// pages with a partial last one.
TEST_P(window_on, decode_logits_match_windowed_reference) {
    const int64_t N = 10, n_decode = 24;
    const auto be = create_backend(GetParam());
    const auto cfg = host::load_model_config(tiny_dir());
    const auto weights = engine::load_model_weights(*be, cfg, tiny_dir(), dtype::f32);
    auto method = engine::create_kv_method("window", {{"window", std::to_string(N)}});
    engine::kv_shape shape;
    shape.n_layers = cfg.num_hidden_layers, shape.n_q_heads = cfg.num_attention_heads;
    shape.n_kv_heads = cfg.num_key_value_heads, shape.head_dim = cfg.head_dim;
    shape.n_pages = 64, shape.page_size = 4, shape.max_requests = 2;
    method->allocate(*be, shape);
    engine::llama_forward fwd(*be, cfg, weights, true);

    // Full token sequences (teacher forcing): prompt then decoded tokens.
    const std::vector<size_t> prompt_len = {13, 6};
    std::vector<std::vector<int32_t>> seq = {test::make_prompt(13 + n_decode, 7), test::make_prompt(6 + n_decode, 8)};
    const int64_t V = cfg.vocab_size;
    std::vector<std::vector<float>> got(2);  // per request: logits of each decode step

    engine::step_inputs pre;
    pre.prefill = true,
    pre.batch =
        2,  // (vectors built, not assigned from braces: GCC 12 warns falsely on the latter, -Wnonnull)
        pre.seq_ids = std::vector<int32_t>{0, 1}, pre.seq_indptr = std::vector<int32_t>{0};
    for (int32_t b = 0; b < 2; ++b) {
        for (size_t i = 0; i < prompt_len[size_t(b)]; ++i) {
            pre.tokens.push_back(seq[size_t(b)][i]);
            pre.positions.push_back(int32_t(i));
            pre.batch_idx.push_back(b);
        }
        pre.seq_indptr.push_back(int32_t(pre.tokens.size()));
        pre.logit_rows.push_back(int32_t(pre.tokens.size() - 1));
        pre.max_seq_len = std::max<int64_t>(pre.max_seq_len, int64_t(prompt_len[size_t(b)]));
    }
    fwd.run(*method, pre);
    EXPECT_EQ(method->pages_in_use(), 3 + 2);  // 13 tokens: the whole ring; 6 tokens: 2 pages of 4
    for (int64_t step = 0; step < n_decode; ++step) {
        engine::step_inputs s;
        s.batch = 2, s.seq_ids = std::vector<int32_t>{0, 1}, s.logit_rows = s.seq_ids,
        s.batch_idx = s.seq_ids;
        for (size_t b = 0; b < 2; ++b) {
            const size_t pos = prompt_len[b] + size_t(step);
            s.tokens.push_back(seq[b][pos]);
            s.positions.push_back(int32_t(pos));
            s.max_seq_len = std::max<int64_t>(s.max_seq_len, int64_t(pos) + 1);
        }
        const tensor logits = fwd.run(*method, s);
        std::vector<float> host(size_t(2 * V));
        be->download(*logits.buf, logits.offset, host.data(), host.size() * 4);
        for (size_t b = 0; b < 2; ++b)
            got[b].insert(got[b].end(), host.begin() + long(b) * V, host.begin() + long(b + 1) * V);
    }
    EXPECT_EQ(method->pages_in_use(), 6);
    for (size_t b = 0; b < 2; ++b) {
        const auto want = test::reference_logits(tiny_dir(), seq[b], {N, int64_t(prompt_len[b])});
        const auto full = test::reference_logits(tiny_dir(), seq[b]);
        for (int64_t step = 0; step < n_decode; ++step) {
            const size_t row = (prompt_len[b] + size_t(step)) * size_t(V);
            const float * g = got[b].data() + step * V;
            EXPECT_LE(test::nmse(g, want.data() + row, size_t(V)), test::logits_tolerance(GetParam()))
                << "request " << b << " decode step " << step;
            // Once tokens fall out of the window the windowed and full references must differ
            // clearly, or this comparison would not show that the window is applied.
            if (int64_t(prompt_len[b]) + step > N + 2) {
                EXPECT_GT(test::nmse(want.data() + row, full.data() + row, size_t(V)), 1e-6) << "step " << step;
            }
        }
    }
    method->release(0);
    method->release(1);
    method->release(7);  // unknown: no-op
    EXPECT_EQ(method->pages_in_use(), 0);
}

// (2b) Through the engine: greedy tokens with a short window equal the windowed reference's, and
// batching (with rings released and reused: max_batch 2 for 3 requests) changes nothing.
TEST_P(window_on, greedy_tokens_match_windowed_reference_and_rings_are_reused) {
    const int64_t N = 8, n_new = 14;
    const std::vector<std::vector<int32_t>> prompts = {test::make_prompt(11, 5), test::make_prompt(4, 6),
                                                       test::make_prompt(20, 9)};
    auto cfg = tiny_config(GetParam(), "window", N);
    cfg.max_batch = 2;
    engine::engine e(cfg);
    const auto batched = test::generate_greedy(e, prompts, n_new);
    EXPECT_EQ(batched[0], test::reference_greedy(tiny_dir(), prompts[0], n_new, {N, 0}));
    for (size_t i = 1; i < prompts.size(); ++i) {
        engine::engine alone(tiny_config(GetParam(), "window", N));
        EXPECT_EQ(test::generate_greedy(alone, {prompts[i]}, n_new)[0], batched[i]) << "request " << i;
    }
    // (5) Everything returned: the engine's page pool and the method's rings.
    EXPECT_EQ(e.stats().pages_in_use, 0);
    EXPECT_EQ(e.stats().method_pages_in_use, 0);
}

INSTANTIATE_TEST_SUITE_P(backends, window_on, ::testing::ValuesIn(test::backends_to_test()), test::backend_param_name());

// (3) Byte accounting: the pool and the per-request bytes are exactly the fp16 pages of the ring
// (N + 1 slots), and the pages a running request holds are the ones bytes_for_tokens counts.
TEST(kv_method_window, bytes_are_exact) {
    const auto m = host::load_model_config(tiny_dir());
    const uint64_t page16 = page_bytes(m, 16);
    const auto cpu = create_backend("cpu");
    {
        const int64_t N = 20;  // ring of 21 slots: 2 pages of 16
        engine::engine e(tiny_config("cpu", "window", N));
        // max_batch 4 rings of 2 pages (the engine's own pool would be 4 * 256/16 = 64 pages).
        EXPECT_EQ(e.stats().kv_bytes_allocated, 4 * 2 * page16);
        const auto w = make_window(*cpu, N, 64, 4);
        EXPECT_EQ(w->bytes_allocated(), 4 * 2 * page16);
        for (int64_t t : {0, 1, 16, 17, 20, 21, 22, 40, 255})
            EXPECT_EQ(w->bytes_for_tokens(t), uint64_t((std::min<int64_t>(t, N + 1) + 15) / 16) * page16)
                << "tokens " << t;

        // Ring pages are taken as the ring fills: a 5-token prompt holds 1 page until its 17th
        // cached token, then 2, and never more.
        engine::generation_request r;
        r.prompt = test::make_prompt(5, 1), r.max_new_tokens = 30, r.stop_at_eos = false;
        const int64_t id = e.submit(r);
        int64_t seen = 0, wrong = 0;
        e.run([&](int64_t, int32_t) {
            const int64_t cached = 5 + seen++;  // the token just produced is not cached yet
            const int64_t pages = (std::min<int64_t>(cached, N + 1) + 15) / 16;
            if (e.stats().method_pages_in_use != pages) ++wrong;
        });
        EXPECT_EQ(seen, 30);
        EXPECT_EQ(wrong, 0);
        EXPECT_EQ(e.result(id).tokens.size(), 30u);
        EXPECT_EQ(e.stats().kv_bytes_peak, 2 * page16);  // 34 cached tokens, 21 kept
        EXPECT_EQ(e.stats().method_pages_in_use, 0);
    }
    {
        // N = 64 with pages of 16: 65 slots, 5 pages (ceil(N / page_size) + 1).
        engine::engine e(tiny_config("cpu", "window", 64));
        EXPECT_EQ(e.stats().kv_bytes_allocated, 4 * 5 * page16);
        const auto w = make_window(*cpu, 64, 64, 4);
        EXPECT_EQ(w->bytes_for_tokens(64), 4 * page16);
        EXPECT_EQ(w->bytes_for_tokens(65), 5 * page16);
        EXPECT_EQ(w->bytes_for_tokens(1000), 5 * page16);
    }
    {
        // A window longer than the context: the pool is the engine's, as for "none".
        engine::engine win(tiny_config("cpu", "window", 100000)), none(tiny_config("cpu", "none", 0));
        EXPECT_EQ(win.stats().kv_bytes_allocated, none.stats().kv_bytes_allocated);
        EXPECT_EQ(make_window(*cpu, 100000, 64, 4)->bytes_for_tokens(200), (200 + 15) / 16 * page16);
    }
}

// (4) Options: window is required, a positive integer; anything else names the option and value.
TEST(kv_method_window, bad_options_are_clear_errors) {
    const auto make = [](engine::method_options o) { return [o] { engine::create_kv_method("window", o); }; };
    test::expect_error(make({}), status::invalid_argument, {"window", "required"});
    for (const char * bad : {"0", "-3", "abc", "12x", " 5", "+5", "", "99999999999"})
        test::expect_error(make({{"window", bad}}), status::invalid_argument,
                           {"window", std::string("'") + bad + "'", "positive integer"});
    test::expect_error(make({{"window", "8"}, {"size", "5"}}), status::invalid_argument,
                       {"unknown option 'size'", "5"});
    EXPECT_NO_THROW(engine::create_kv_method("window", {{"window", "1"}}));
    auto cfg = tiny_config("cpu", "window", 8);
    cfg.method_opts.clear();
    test::expect_error([&] { engine::engine e(cfg); }, status::invalid_argument, {"window=N", "required"});
}

// (5) prompt_logits and a window of 1 (each decoded token sees itself and one token before it)
// leave nothing held.
TEST(kv_method_window, rings_return_after_prompt_logits_and_tiny_windows) {
    engine::engine e(tiny_config("cpu", "window", 1));
    const auto logits = e.prompt_logits(test::make_prompt(40, 3));
    EXPECT_EQ(logits.size(), size_t(40 * 300));
    EXPECT_EQ(e.stats().method_pages_in_use, 0);
    const auto out = test::generate_greedy(e, {test::make_prompt(9, 1), test::make_prompt(30, 2)}, 6);
    EXPECT_EQ(out[0], test::reference_greedy(tiny_dir(), test::make_prompt(9, 1), 6, {1, 0}));
    EXPECT_EQ(e.stats().pages_in_use, 0);
    EXPECT_EQ(e.stats().method_pages_in_use, 0);
}

// (6) The shipped default model: a record of 25 lines whose asked line is near the start. "none"
// answers it; window=64 keeps only the question and the tail of the record, and answers wrongly.
TEST(kv_method_window, default_model_loses_line_retrieval) {
    const std::string dir = std::string(KVCOMP_SOURCE_DIR) + "/tools/model/default";
    const auto tok = host::load_tokenizer(dir);
    std::string text;
    std::string answer;
    for (int i = 0; i < 25; ++i) {
        const int line = 100 + (i * 379) % 899;  // distinct line numbers in [100, 999)
        const int value = 10000 + (i * 7919 + 1234) % 89999;
        const std::string v = "<" + std::to_string(value) + ">";
        text += "line " + std::to_string(line) + ": REGISTER_CONTENT is " + v + "\n";
        if (i == 3) answer = v;
    }
    const int asked = 100 + (3 * 379) % 899;
    text += "What is the REGISTER_CONTENT in line " + std::to_string(asked) + "?\n";
    host::encode_options eo;
    eo.add_special = true;
    const auto prompt = tok->encode(text, eo);
    ASSERT_GT(prompt.size(), 900u);

    auto answer_of = [&](const std::string & method) {
        engine::engine_config c;
        c.model_dir = dir, c.backend = "cpu", c.max_batch = 1, c.max_context = 1024, c.method = method;
        if (method == "window") c.method_opts["window"] = "64";
        engine::engine e(c);
        engine::generation_request r;
        r.prompt = prompt, r.max_new_tokens = 7, r.stop_at_eos = false;
        const int64_t id = e.submit(r);
        e.run();
        EXPECT_EQ(e.stats().method_pages_in_use, 0);
        return tok->decode(e.result(id).tokens, true);
    };
    EXPECT_EQ(answer_of("none"), answer);
    const std::string windowed = answer_of("window");
    EXPECT_NE(windowed, answer) << "window=64 still retrieved line " << asked;
    std::printf("[ window ] line %d: none -> %s, window=64 -> '%s'\n", asked, answer.c_str(),
                windowed.c_str());
}

}  // namespace
