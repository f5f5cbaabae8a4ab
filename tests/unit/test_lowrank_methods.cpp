// The low-rank KV methods zack / fdc / palu (lib/engine/kv_method_lowrank*) on the tiny random Llama
// of tests/support, each on the CPU reference and on every other backend that runs the low-rank ops
// (skipped with a message where one does not):
//   (a) full rank (calibration at r = 0, every rank = head_dim): the bases are orthogonal, so the
//       prefill logits and the decode path's log-probabilities equal method "none"'s up to rounding
//       (digest zack_fdc.md §9.3, §9.17);
//   (b) the logits' error against "none" shrinks as the ranks grow (compression option, §9.10);
//   (c) bytes: allocated and per-token bytes are the formula pages x page_size x sum (k + v) x 2,
//       and the per-token ratio to "none" is the ranks' kept fraction;
//   (d) a greedy generation gives the same tokens with the balanced and the plain decode schedule;
//   (e) errors: a calibration for another model or method names the file; bad or missing options,
//       and a rank_multiple above head_dim, name the option;
//   (f) prefill=padded (heads zero-padded to head_dim, attn_prefill; the default) and prefill=ragged
//       (attn_prefill_ragged) give the same prefill logits at uneven ranks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <numeric>
#include <memory>
#include <random>
#include <tuple>

#include "core/registry.h"
#include "engine/calibrate.h"
#include "engine/engine.h"
#include "engine/kv_method_lowrank.h"
#include "host/lowrank/calibration_file.h"
#include "host/lowrank/rate_search.h"
#include "support/backends.h"
#include "support/expect_error.h"
#include "support/lowrank_engine.h"
#include "support/lowrank_projected.h"
#include "support/tiny_model.h"

using namespace kvcomp;
namespace hl = host::lowrank;

namespace {

using namespace test::lowrank;

// Whether `backend` runs the low-rank ops: the CPU reference must; another backend answers
// "unsupported" until its kernels land (the test then skips with that message).
bool runs_lowrank(const std::string & backend, const std::string & method, std::string & why) {
    return engine_runs(config(backend, method), 3, why);
}

using param = std::tuple<std::string, std::string>;  // backend, method

class lowrank : public ::testing::TestWithParam<param> {
  protected:
    void SetUp() override {
        backend_ = std::get<0>(GetParam());
        method_ = std::get<1>(GetParam());
        std::string why;
        if (!runs_lowrank(backend_, method_, why))
            GTEST_SKIP() << backend_ << " does not run " << method_ << ": " << why;
    }
    std::string backend_, method_;
};

TEST_P(lowrank, full_rank_equals_none) {
    const std::string file = calib_file(method_);
    const hl::calibration c = hl::read_calibration(file);
    for (size_t i = 0; i < c.ranks.k.size(); ++i) {  // otherwise this would not be the full-rank case
        ASSERT_EQ(c.ranks.k[i], spec().head_dim);
        ASSERT_EQ(c.ranks.v[i], spec().head_dim);
    }
    engine::engine none(config(backend_, "none")), lr(config(backend_, method_));
    const auto prompt = random_tokens(40, 5);
    const auto want = none.prompt_logits(prompt), got = lr.prompt_logits(prompt);
    // Both cache fp16, of K and V in different bases: the roundings differ, nothing else does
    // (measured on the CPU: NMSE 3e-8 to 5e-8, log-probabilities within 4e-4).
    EXPECT_LT(test::nmse(got, want), 1e-6) << method_;
    const auto forced = random_tokens(12, 6);
    const auto lw = forced_logprobs(none, prompt, forced), lg = forced_logprobs(lr, prompt, forced);
    ASSERT_EQ(lg.size(), lw.size());
    for (size_t i = 0; i < lw.size(); ++i) EXPECT_NEAR(lg[i], lw[i], 2e-3) << method_ << " decode step " << i;
}

TEST_P(lowrank, error_shrinks_as_ranks_grow) {
    engine::engine none(config(backend_, "none"));
    const auto prompt = random_tokens(48, 8);
    const auto want = none.prompt_logits(prompt);
    std::vector<double> errs;
    for (double p : {0.7, 0.5, 0.3, 0.1}) {
        engine::engine e(
            config(backend_, method_, {{"compression", std::to_string(p)}, {"rank_multiple", "4"}}));
        errs.push_back(test::nmse(e.prompt_logits(prompt), want));
    }
    engine::engine full(config(backend_, method_));
    const double full_err = test::nmse(full.prompt_logits(prompt), want);
    for (size_t i = 0; i + 1 < errs.size(); ++i) EXPECT_GT(errs[i], errs[i + 1]) << "compression step " << i;
    EXPECT_GT(errs.back(), full_err);
    EXPECT_GT(errs.front(), 1e-4) << "a 70 % compression should be visible in the logits";
}

TEST_P(lowrank, kv_bytes_are_the_formula) {
    const double p = 0.45;
    const int64_t multiple = 8;
    auto cfg = config(backend_, method_,
                      {{"compression", std::to_string(p)}, {"rank_multiple", std::to_string(multiple)}});
    cfg.kv_pages = 24;
    engine::engine e(cfg);
    auto none_cfg = config(backend_, "none");
    none_cfg.kv_pages = 24;
    engine::engine none(none_cfg);
    // The ranks the method must have chosen, from the file's singular values.
    const hl::calibration c = hl::read_calibration(calib_file(method_));
    const hl::kv_ranks r = hl::removal_rate_for_compression(c.spectra(), p, multiple).ranks;
    ASSERT_GE(r.compression(), p);
    const uint64_t dims = uint64_t(r.kept_dims());  // sum over layers and KV heads of k + v
    EXPECT_EQ(e.stats().kv_bytes_allocated, 24u * 16u * dims * 2u);
    for (int64_t t : {1, 16, 17, 100}) {
        const uint64_t pages = uint64_t((t + 15) / 16);
        EXPECT_EQ(e.kv_bytes_for_tokens(t), pages * 16u * dims * 2u) << t << " tokens";
        EXPECT_DOUBLE_EQ(double(e.kv_bytes_for_tokens(t)) / double(none.kv_bytes_for_tokens(t)),
                         r.kept_fraction());
    }
}

TEST_P(lowrank, balanced_and_plain_schedules_agree) {
    // 1100 tokens: long enough for the balanced cut to split a request (chunks of >= 256 tokens), and
    // differently for 1 and 3 workers per compute unit.
    const std::vector<std::vector<int32_t>> prompts = {random_tokens(1100, 21), random_tokens(37, 22),
                                                       random_tokens(600, 23)};
    std::vector<std::vector<std::vector<int32_t>>> out;
    // The balanced schedule for the backend's concurrent tasks (workers=auto, the default), for 1 and
    // 3 workers per compute unit (more, shorter tasks), with a large per-token cost (another cut) and
    // the plain one.
    const std::vector<engine::method_options> schedules = {{{"schedule", "balanced"}},
                                                           {{"schedule", "balanced"}, {"workers", "1"}},
                                                           {{"schedule", "balanced"}, {"workers", "3"}},
                                                           {{"schedule", "balanced"}, {"token_cost", "512"}},
                                                           {{"schedule", "plain"}}};
    for (engine::method_options o : schedules) {
        o["compression"] = "0.5";
        auto cfg = config(backend_, method_, o);
        cfg.max_context = 1200;
        engine::engine e(cfg);
        out.push_back(test::generate_greedy(e, prompts, 10));
    }
    for (size_t i = 1; i < out.size(); ++i) EXPECT_EQ(out[0], out[i]) << "schedule " << i;
}

// The schedule's tail through the engine: a 4200-token prompt at compression 0.5, whose rows on this
// backend's workers get tail pieces at tail=50 (checked on layer 0's ranks with the schedule the engine
// builds: the backend's workers, no task cost), gives the log-probabilities of tail=0 at every decode step.
// fdc only (the prompt takes seconds on the CPU reference).
TEST_P(lowrank, tail_pieces_decode_as_without) {
    if (method_ != "fdc") GTEST_SKIP() << "fdc only";
    const double p = 0.5;
    const hl::kv_ranks r = hl::removal_rate_for_compression(hl::read_calibration(calib_file(method_)).spectra(), p, 16).ranks;
    const std::vector<int64_t> k(r.k.begin(), r.k.begin() + r.num_kv_heads), v(r.v.begin(), r.v.begin() + r.num_kv_heads);
    const std::vector<std::vector<int32_t>> prompts = {random_tokens(4200, 31)};
    {
        const auto be = create_backend(backend_);
        attn_decode_ragged_params dp;
        dp.kv.n_kv_heads = r.num_kv_heads, dp.kv.page_size = 16, dp.kv.max_width = spec().head_dim;
        dp.kv.k_total = std::accumulate(k.begin(), k.end(), int64_t(0));
        dp.kv.v_total = std::accumulate(v.begin(), v.end(), int64_t(0));
        dp.n_q_heads = spec().heads, dp.batch = 1;
        hl::decode_schedule_options o = engine::decode_schedule_options_for(
            engine::lowrank_config_from(hl::lowrank_method::fdc, {{"calib", "f"}, {"tail", "50"}}));
        o.n_workers = be->concurrent_workgroups(dp);
        const hl::decode_schedule with = hl::build_decode_schedule({4201}, k, v, o);
        int64_t parts = 0;
        for (int64_t n : with.parts) parts += n;
        ASSERT_GT(with.n_tasks, parts) << "the test needs tail pieces on layer 0";
    }
    // Log-probabilities of forced tokens, not greedy tokens: a token the pieces miss moves them by more than
    // the summation order does, and might not change a greedy pick (here: identical on the CPU reference,
    // within 3e-7 on PoCL; with the last piece one token short, 5e-5 to 1e-3 apart).
    const auto forced = random_tokens(6, 32);
    std::vector<std::vector<double>> out;
    for (const char * tail : {"0", "50"}) {
        auto cfg = config(backend_, method_, {{"compression", std::to_string(p)}, {"tail", tail}});
        cfg.max_context = 4300;
        engine::engine e(cfg);
        out.push_back(forced_logprobs(e, prompts[0], forced));
    }
    ASSERT_EQ(out[0].size(), out[1].size());
    for (size_t i = 0; i < out[0].size(); ++i) EXPECT_NEAR(out[1][i], out[0][i], 1e-5) << "decode step " << i;
}

INSTANTIATE_TEST_SUITE_P(lowrank_backends, lowrank,
                         ::testing::Combine(::testing::ValuesIn(test::backends_to_test()),
                                            ::testing::Values("zack", "fdc", "palu")),
                         test::backend_method_param_name());

// --- reduced, uneven ranks against an independent construction -----------------------------------------
//
// projected_none (support/lowrank_projected.h) runs method "none" on k and v projected on the host
// with each head's R R^T: nothing of the low-rank ops or of their tables is used, so a wrong offset
// for uneven head widths shows here (at full rank every width is head_dim and any packing looks the
// same).

class lowrank_reduced : public ::testing::TestWithParam<std::string> {};

TEST_P(lowrank_reduced, uneven_ranks_equal_none_on_projected_k_and_v) {
    const std::string be = GetParam();
    std::string why;
    if (!runs_lowrank(be, "palu", why) || !runs_lowrank(be, "zack", why))
        GTEST_SKIP() << be << " does not run the low-rank ops: " << why;
    const auto prompt = random_tokens(40, 31);
    const auto forced = random_tokens(6, 32);
    for (const char * m : {"zack", "fdc", "palu"}) {
        hl::calibration c;
        const std::string file = uneven_calib_file(m, tiny_dir(), &c);
        const bool palu = std::string(m) == "palu";
        auto ref_cfg = test::tiny_engine_config(tiny_dir(), be);
        ref_cfg.method = "projected_none";
        ref_cfg.method_factory = [=]() -> std::unique_ptr<engine::kv_method> {
            return projected_reference(c, palu, float(spec().rope_theta));
        };
        engine::engine ref(ref_cfg), lr(config(be, m, {{"calib", file}}));
        const auto want = ref.prompt_logits(prompt);
        EXPECT_LT(test::nmse(lr.prompt_logits(prompt), want), 1e-6) << m;
        const auto lw = forced_logprobs(ref, prompt, forced), lg = forced_logprobs(lr, prompt, forced);
        ASSERT_EQ(lg.size(), lw.size());
        for (size_t i = 0; i < lw.size(); ++i) EXPECT_NEAR(lg[i], lw[i], 2e-3) << m << " decode step " << i;
    }
}

// The padded prefill (attn_prefill on heads zero-padded to head_dim) against the ragged one
// (attn_prefill_ragged in the reduced dims) at uneven ranks: zero columns add nothing to q'.k' and
// the padded output columns are dropped, and both attend to the same fp16 K and V, so only the
// kernels' summation order differs (measured: bit-identical logits on the CPU and on PoCL; the
// CPU bound is tight because on this model a 1 % error in the softmax scale is only NMSE 5e-6,
// while a misplaced head is 8e-2). One prompt alone and three prompts in one prefill step (the
// batched seq_indptr path), where greedy decode shows the prefill through the first tokens.
TEST_P(lowrank_reduced, padded_and_ragged_prefill_agree) {
    const std::string be = GetParam();
    std::string why;
    if (!runs_lowrank(be, "palu", why) || !runs_lowrank(be, "zack", why))
        GTEST_SKIP() << be << " does not run the low-rank ops: " << why;
    const auto prompt = random_tokens(45, 41);
    const std::vector<std::vector<int32_t>> batch = {random_tokens(70, 42), random_tokens(9, 43),
                                                     random_tokens(33, 44)};
    const double bound = be == "cpu" ? 1e-10 : 1e-6;
    for (const char * m : {"zack", "fdc", "palu"}) {
        const std::string file = uneven_calib_file(m, tiny_dir());
        engine::engine padded(config(be, m, {{"calib", file}, {"prefill", "padded"}}));
        engine::engine ragged(config(be, m, {{"calib", file}, {"prefill", "ragged"}}));
        EXPECT_LT(test::nmse(padded.prompt_logits(prompt), ragged.prompt_logits(prompt)), bound) << m;
        EXPECT_EQ(test::generate_greedy(padded, batch, 4), test::generate_greedy(ragged, batch, 4)) << m;
    }
}

INSTANTIATE_TEST_SUITE_P(lowrank_backends, lowrank_reduced, ::testing::ValuesIn(test::backends_to_test()),
                         test::backend_param_name());

// The default prefill is the padded one: only it keeps the padding bases and tables on the device
// (counted in the method's weight bytes), and it gives the padded path's logits.
TEST(lowrank_prefill, default_is_padded) {
    const auto prompt = random_tokens(30, 51);
    for (const char * m : {"zack", "fdc", "palu"}) {
        const std::string file = uneven_calib_file(m, tiny_dir());
        engine::engine def(config("cpu", m, {{"calib", file}}));
        engine::engine padded(config("cpu", m, {{"calib", file}, {"prefill", "padded"}}));
        engine::engine ragged(config("cpu", m, {{"calib", file}, {"prefill", "ragged"}}));
        EXPECT_EQ(def.stats().weight_bytes, padded.stats().weight_bytes) << m;
        EXPECT_GT(padded.stats().weight_bytes, ragged.stats().weight_bytes) << m;
        EXPECT_EQ(def.prompt_logits(prompt), padded.prompt_logits(prompt)) << m;
    }
}

// --- folding paths (CPU): fp16 weights (gemm f32 x f16, W_O through f32) and a V bias (Qwen2) ----------

TEST(lowrank_folding, full_rank_with_f16_weights_and_with_a_v_bias) {
    test::tiny_model_spec qwen = spec();
    qwen.qwen2 = true;
    const std::string qwen_dir = test::write_tiny_model(qwen, "kv_lowrank_qwen2");
    const auto prompt = random_tokens(40, 9);
    for (const char * m : {"zack", "fdc", "palu"}) {
        // f16 weights: both runs round the same products to f16 except W_V' / W_O', folded in f32
        // and rounded once (measured NMSE 3e-7 against none's f16 run).
        auto none16 = config("cpu", "none"), lr16 = config("cpu", m);
        none16.matrix_type = lr16.matrix_type = dtype::f16;
        engine::engine n16(none16), l16(lr16);
        EXPECT_LT(test::nmse(l16.prompt_logits(prompt), n16.prompt_logits(prompt)), 1e-5) << m << " f16";
        // b_V' = R_v^T b_V (dropping it gives NMSE 2.5e-2 here).
        auto none_q = test::tiny_engine_config(qwen_dir, "cpu"), lr_q = none_q;
        lr_q.method = m;
        lr_q.method_opts = {{"calib", calib_file(m, qwen_dir)}};
        engine::engine nq(none_q), lq(lr_q);
        EXPECT_LT(test::nmse(lq.prompt_logits(prompt), nq.prompt_logits(prompt)), 1e-6) << m << " qwen2";
    }
}

// Benchmarks run random weights from config.json alone: a calibration made on those weights (same
// seed) is accepted; the checkpoint's calibration, or one of another seed, is another model's.
TEST(lowrank_folding, random_weights_take_a_calibration_of_the_same_random_weights) {
    namespace fs = std::filesystem;
    const fs::path bare = test::scratch_path("lowrank_config_only");
    fs::create_directories(bare);
    fs::copy_file(fs::path(tiny_dir()) / "config.json", bare / "config.json", fs::copy_options::overwrite_existing);
    engine::calibrate_config cc;
    cc.model_dir = bare.string(), cc.backend = "cpu", cc.f32_weights = true;
    cc.random_weights = true, cc.weight_seed = 7;
    cc.method = hl::lowrank_method::fdc;
    cc.prompts = {random_tokens(64, 13)};
    cc.compression = 0.5;
    const std::string file = test::scratch_path("lowrank_random_fdc.safetensors");
    hl::write_calibration(file, engine::run_calibration(cc).calib);

    auto cfg = config("cpu", "fdc", {{"calib", file}});
    cfg.model_dir = bare.string();
    cfg.random_weights = true, cfg.weight_seed = 7;
    {
        engine::engine e(cfg);
        EXPECT_EQ(e.prompt_logits(random_tokens(8, 3)).size(), size_t(8 * spec().vocab));
    }
    cfg.weight_seed = 8;
    test::expect_error([&] { engine::engine e(cfg); }, status::invalid_argument, {file, "model_hash"});
    cfg.weight_seed = 7;
    cfg.method_opts["calib"] = calib_file("fdc");  // made on the checkpoint in tiny_dir()
    test::expect_error([&] { engine::engine e(cfg); }, status::invalid_argument, {"model_hash"});
}

// --- errors (CPU) -----------------------------------------------------------------------------------

TEST(lowrank_errors, calibration_of_another_model_or_method_names_the_file) {
    test::tiny_model_spec other = spec();
    other.intermediate = 160;  // same layers / heads / head_dim: only the fingerprint tells them apart
    const std::string other_dir = test::write_tiny_model(other, "kv_lowrank_other");
    const std::string foreign = calib_file("fdc", other_dir);
    test::expect_error(
        [&] {
            engine::engine e(config("cpu", "fdc", {{"calib", foreign}}));
        },
        status::invalid_argument, {foreign});
    const std::string zack_file = calib_file("zack");
    test::expect_error(
        [&] {
            engine::engine e(config("cpu", "fdc", {{"calib", zack_file}}));
        },
        status::invalid_argument, {zack_file, "zack"});
}

// The options as the engine's per-step schedule gets them: token_cost=auto resolves per page format
// (1 for f16 pages, 64 for kv_bits=4), task_cost=auto stays the backend's (-1 in the config), a
// given N is kept, and schedule=plain is the plain policy.
TEST(lowrank_options, token_cost_and_policy_reach_the_decode_schedule) {
    auto opts = [](engine::method_options o) {
        o["calib"] = "any.safetensors";  // parsing only: the file is opened when the method loads
        return engine::decode_schedule_options_for(engine::lowrank_config_from(hl::lowrank_method::fdc, o));
    };
    EXPECT_EQ(opts({}).token_cost, 1);
    EXPECT_EQ(opts({}).policy, hl::decode_policy::balanced);
    EXPECT_EQ(opts({{"kv_bits", "4"}}).token_cost, 64);
    EXPECT_EQ(opts({{"token_cost", "auto"}, {"kv_bits", "4"}}).token_cost, 64);
    EXPECT_EQ(opts({{"token_cost", "512"}}).token_cost, 512);
    EXPECT_EQ(opts({{"token_cost", "0"}, {"kv_bits", "4"}}).token_cost, 0);
    EXPECT_EQ(opts({}).task_cost, 0) << "auto: the backend's, asked per layer by the engine";
    EXPECT_EQ(opts({{"task_cost", "16384"}}).task_cost, 16384);
    EXPECT_EQ(engine::lowrank_config_from(hl::lowrank_method::zack, {{"calib", "f"}}).task_cost, -1);
    EXPECT_EQ(opts({{"schedule", "plain"}}).policy, hl::decode_policy::plain);
    EXPECT_EQ(opts({}).tail_percent, 0) << "auto: the backend's, asked per layer by the engine";
    EXPECT_EQ(opts({{"tail", "20"}}).tail_percent, 20);
    EXPECT_EQ(engine::lowrank_config_from(hl::lowrank_method::zack, {{"calib", "f"}}).tail_percent, -1);
    EXPECT_EQ(engine::lowrank_config_from(hl::lowrank_method::zack, {{"calib", "f"}, {"workers", "3"}}).worker_scale, 3);
    EXPECT_EQ(engine::lowrank_config_from(hl::lowrank_method::zack, {{"calib", "f"}}).worker_scale, 0);
}

TEST(lowrank_errors, bad_options_name_the_option) {
    const std::string f = calib_file("fdc");
    auto make = [&](engine::method_options o) { return [o] { engine::engine e(config("cpu", "fdc", o)); }; };
    for (const char * r : {"1", "1.5", "-0.1", "x"})
        test::expect_error(make({{"calib", f}, {"removal_rate", r}}), status::invalid_argument,
                           {"removal_rate"});
    for (const char * p : {"0", "1", "2"})
        test::expect_error(make({{"calib", f}, {"compression", p}}), status::invalid_argument,
                           {"compression"});
    test::expect_error(make({{"calib", f}, {"compression", "0.5"}, {"removal_rate", "0.1"}}),
                       status::invalid_argument, {"at most one"});
    test::expect_error(make({{"calib", f}, {"rank_multiple", "8"}}), status::invalid_argument,
                       {"rank_multiple"});
    test::expect_error(make({{"calib", f}, {"schedule", "lpt"}}), status::invalid_argument, {"schedule"});
    for (const char * w : {"0", "17", "x", "3x"})
        test::expect_error(make({{"calib", f}, {"workers", w}}), status::invalid_argument,
                           {"workers", "auto or an integer in [1, 16]"});
    test::expect_error(make({{"calib", f}, {"schedule", "plain"}, {"workers", "3"}}), status::invalid_argument,
                       {"workers", "schedule=balanced"});
    for (const char * c : {"-1", "4097", "x", "64k"})
        test::expect_error(make({{"calib", f}, {"token_cost", c}}), status::invalid_argument,
                           {"token_cost", "auto or an integer in [0, 4096]"});
    test::expect_error(make({{"calib", f}, {"schedule", "plain"}, {"token_cost", "64"}}), status::invalid_argument,
                       {"token_cost", "schedule=balanced"});
    for (const char * c : {"-1", "1073741825", "x"})
        test::expect_error(make({{"calib", f}, {"task_cost", c}}), status::invalid_argument,
                           {"task_cost", "auto or an integer in [0, 1073741824]"});
    test::expect_error(make({{"calib", f}, {"schedule", "plain"}, {"task_cost", "64"}}), status::invalid_argument,
                       {"task_cost", "schedule=balanced"});
    for (const char * c : {"-1", "51", "x"})
        test::expect_error(make({{"calib", f}, {"tail", c}}), status::invalid_argument, {"tail"});
    test::expect_error(make({{"calib", f}, {"schedule", "plain"}, {"tail", "20"}}), status::invalid_argument,
                       {"tail", "schedule=balanced"});
    test::expect_error(make({{"calib", f}, {"prefill", "flash"}}), status::invalid_argument,
                       {"prefill=flash", "padded", "ragged"});
    test::expect_error(make({{"calib", f}, {"frobnicate", "1"}}), status::invalid_argument, {"frobnicate"});
    test::expect_error(
        [] {
            engine::engine e(config("cpu", "fdc", {{"calib", ""}}));
        },
        status::invalid_argument, {"calib"});
    test::expect_error(
        [] {
            auto c = test::tiny_engine_config(tiny_dir(), "cpu");
            c.method = "zack";
            engine::engine e(c);
        },
        status::invalid_argument, {"calib=FILE"});
    // A rank cannot exceed head_dim (64 here): a multiple of 128 would force one.
    test::expect_error(make({{"calib", f}, {"compression", "0.5"}, {"rank_multiple", "128"}}),
                       status::invalid_argument, {"rank_multiple=128", "head_dim = 64"});
}

}  // namespace
