// Calibration (engine/kv_method_capture.h, engine/calibrate.h): the capture method gives the same
// logits as "none" and Gram matrices equal to X^T X of independently computed post-RoPE q/k (and v)
// rows; run_calibration's bases equal the direct SVDs of the stacked rows; its file round-trips
// and is refused for another model.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>
#include <random>
#include <vector>

#include "core/registry.h"
#include "engine/calibrate.h"
#include "engine/engine.h"
#include "engine/kv_method_capture.h"
#include "engine/model_weights.h"
#include "host/lowrank/model_fingerprint.h"
#include "host/lowrank/svd_basis.h"
#include "host/model/model_config.h"
#include "host/model/safetensors.h"
#include "support/expect_error.h"
#include "support/tiny_model.h"

using namespace kvcomp;
using namespace kvcomp::host::lowrank;

namespace {

std::vector<int32_t> random_tokens(size_t n, int32_t vocab, uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::uniform_int_distribution<int32_t> d(0, vocab - 1);
    std::vector<int32_t> t(n);
    for (auto & x : t) x = d(rng);
    return t;
}

// Rows of KV head c in one layer, as capture stacks them: the g query rows of each token, then its
// key row (or only the value rows).
std::vector<double> head_rows(const test::reference_qkv & r, int64_t c, int64_t nq, int64_t nkv, int64_t hd,
                              bool values) {
    const int64_t g = nq / nkv;
    std::vector<double> rows;
    for (size_t t = 0; t < r.k.size(); ++t) {
        if (values) {
            rows.insert(rows.end(), r.v[t].begin() + c * hd, r.v[t].begin() + (c + 1) * hd);
            continue;
        }
        rows.insert(rows.end(), r.q[t].begin() + c * g * hd, r.q[t].begin() + (c + 1) * g * hd);
        rows.insert(rows.end(), r.k[t].begin() + c * hd, r.k[t].begin() + (c + 1) * hd);
    }
    return rows;
}

// max |a - b| / max |b|
double rel_max_diff(const std::vector<double> & a, const std::vector<double> & b) {
    double num = 0, den = 0;
    for (size_t i = 0; i < b.size(); ++i) num = std::max(num, std::abs(a[i] - b[i])), den = std::max(den, std::abs(b[i]));
    return num / den;
}

// The capture method's logits and Grams on the tiny model of `spec`.
void check_capture(const test::tiny_model_spec & spec, const std::string & name) {
    const std::string dir = test::write_tiny_model(spec, name);
    const auto tokens = random_tokens(40, int32_t(spec.vocab), 7);

    engine::engine plain(test::tiny_engine_config(dir, "cpu"));
    const auto want_logits = plain.prompt_logits(tokens);

    auto grams = std::make_shared<engine::capture_grams>();
    grams->with_v = true;
    auto cfg = test::tiny_engine_config(dir, "cpu");
    cfg.method_factory = [grams] { return engine::make_kv_method_capture(grams); };
    engine::engine cap(cfg);
    EXPECT_EQ(cap.stats().kv_bytes_allocated, plain.stats().kv_bytes_allocated);
    EXPECT_EQ(cap.prompt_logits(tokens), want_logits);  // same ops on the same backend: bit for bit
    EXPECT_EQ(grams->tokens, 40);

    std::vector<test::reference_qkv> ref;
    test::reference_logits(dir, tokens, {}, &ref);
    ASSERT_EQ(int64_t(ref.size()), spec.layers);
    const int64_t nq = spec.heads, nkv = spec.kv_heads, hd = spec.head_dim;
    ASSERT_EQ(int64_t(grams->qk.size()), spec.layers * nkv);
    ASSERT_EQ(grams->v.size(), grams->qk.size());
    for (int64_t l = 0; l < spec.layers; ++l)
        for (int64_t c = 0; c < nkv; ++c) {
            const auto & qk = grams->qk[size_t(l * nkv + c)];
            const auto & v = grams->v[size_t(l * nkv + c)];
            EXPECT_EQ(qk.rows_added(), 40 * (nq / nkv + 1));
            EXPECT_EQ(v.rows_added(), 40);
            const auto xqk = head_rows(ref[size_t(l)], c, nq, nkv, hd, false);
            const auto xv = head_rows(ref[size_t(l)], c, nq, nkv, hd, true);
            gram_accumulator want_qk(hd), want_v(hd);
            want_qk.add(mat_view::of(xqk, int64_t(xqk.size()) / hd, hd));
            want_v.add(mat_view::of(xv, int64_t(xv.size()) / hd, hd));
            // The engine runs in f32, the reference in double.
            EXPECT_LT(rel_max_diff(qk.gram(), want_qk.gram()), 1e-5) << "layer " << l << " head " << c;
            EXPECT_LT(rel_max_diff(v.gram(), want_v.gram()), 1e-5) << "layer " << l << " head " << c;
        }
}

}  // namespace

TEST(calibrate, capture_matches_none_and_reference_grams) {
    check_capture(test::tiny_model_spec{}, "calib_capture");
}

// Layers without RoPE (SmolLM3): the forward skips RoPE there, so capture sees q and k as the
// projections made them, which is what the reference's rows are on those layers (and what the
// folded W_Q / W_K of zack/fdc produce).
TEST(calibrate, capture_on_layers_without_rope_takes_unrotated_q_and_k) {
    test::tiny_model_spec spec;
    spec.smollm3 = true;
    spec.layers = 4;
    spec.no_rope_layers = {0, 1, 1, 0};
    check_capture(spec, "calib_capture_norope");
}

TEST(calibrate, bases_match_direct_svd_and_file_round_trips) {
    const test::tiny_model_spec spec;
    const std::string dir = test::write_tiny_model(spec, "calib_run");
    const int64_t nq = spec.heads, nkv = spec.kv_heads, hd = spec.head_dim, H = spec.hidden;
    engine::calibrate_config cfg;
    cfg.model_dir = dir, cfg.backend = "cpu", cfg.f32_weights = true;
    cfg.method = lowrank_method::zack;
    cfg.prompts = {random_tokens(48, int32_t(spec.vocab), 3)};
    cfg.removal_rate = 0.2;
    const auto res = engine::run_calibration(cfg);
    EXPECT_EQ(res.tokens_captured, 48);
    const calibration & c = res.calib;
    EXPECT_EQ(c.model_hash, model_hash_of_dir(dir));

    // The Gram route gives the singular values of the stacked SVD (qk_basis / zack_v_basis).
    std::vector<test::reference_qkv> ref;
    test::reference_logits(dir, cfg.prompts[0], {}, &ref);
    const auto ts = host::tensor_set::open(dir);
    for (int64_t l = 0; l < spec.layers; ++l) {
        const auto wo = ts.get_floats("model.layers." + std::to_string(l) + ".self_attn.o_proj.weight");
        for (int64_t h = 0; h < nkv; ++h) {
            const auto xqk = head_rows(ref[size_t(l)], h, nq, nkv, hd, false);
            const auto xv = head_rows(ref[size_t(l)], h, nq, nkv, hd, true);
            const auto direct_k = stacked_svd({mat_view::of(xqk, int64_t(xqk.size()) / hd, hd)}, "k");
            std::vector<int64_t> group;
            for (int64_t q = h * (nq / nkv); q < (h + 1) * (nq / nkv); ++q) group.push_back(q);
            const auto direct_v = zack_v_basis(mat_view::of(xv, int64_t(xv.size()) / hd, hd),
                                               mat_view::of(wo, H, nq * hd), group);
            const size_t i = size_t(l * nkv + h);
            EXPECT_LT(rel_max_diff(c.k[i].sigma, direct_k.sigma), 1e-4) << "K layer " << l << " head " << h;
            EXPECT_LT(rel_max_diff(c.v[i].sigma, direct_v.sigma), 1e-4) << "V layer " << l << " head " << h;
            // Leading basis vector, up to float rounding (signs are canonical on both routes).
            double dot = 0;
            for (int64_t r = 0; r < hd; ++r) dot += c.k[i].basis[size_t(r * hd)] * direct_k.at(r, 0);
            EXPECT_NEAR(dot, 1.0, 1e-6);
        }
    }

    const std::string file = (std::filesystem::temp_directory_path() / "kvcomp_test_calib.safetensors").string();
    write_calibration(file, c);
    calibration_expectation ex;
    ex.method = lowrank_method::zack, ex.model_hash = model_hash_of_dir(dir);
    ex.num_layers = spec.layers, ex.num_kv_heads = nkv, ex.head_dim = hd;
    const calibration back = read_calibration(file, ex);
    EXPECT_EQ(back.ranks.k, c.ranks.k);
    EXPECT_EQ(back.ranks.v, c.ranks.v);
    EXPECT_DOUBLE_EQ(back.removal_rate, 0.2);
    ASSERT_EQ(back.k.size(), c.k.size());
    for (size_t i = 0; i < c.k.size(); ++i) {
        EXPECT_LT(rel_max_diff(back.k[i].basis, c.k[i].basis), 1e-6);
        EXPECT_LT(rel_max_diff(back.v[i].sigma, c.v[i].sigma), 1e-6);
    }

    // Another checkpoint (a different vocabulary) has another hash: the file is refused.
    test::tiny_model_spec other = spec;
    other.vocab = 301;
    const std::string other_dir = test::write_tiny_model(other, "calib_other");
    ex.model_hash = model_hash_of_dir(other_dir);
    test::expect_error([&] { read_calibration(file, ex); }, status::invalid_argument,
                       {"model_hash", "different checkpoint"});
    std::filesystem::remove(file);
}

TEST(calibrate, fdc_palu_compression_target_and_bad_settings) {
    const test::tiny_model_spec spec;
    const std::string dir = test::write_tiny_model(spec, "calib_fdc");
    engine::calibrate_config cfg;
    cfg.model_dir = dir, cfg.backend = "cpu", cfg.f32_weights = true;
    cfg.method = lowrank_method::palu;  // weights only: no prompts needed
    cfg.compression = 0.3;
    const auto palu = engine::run_calibration(cfg);
    EXPECT_EQ(palu.tokens_captured, 0);
    EXPECT_GE(palu.calib.ranks.compression(), 0.3);

    cfg.method = lowrank_method::fdc;
    test::expect_error([&] { engine::run_calibration(cfg); }, status::invalid_argument, {"no calibration tokens"});
    cfg.prompts = engine::chunk_prompts(random_tokens(70, int32_t(spec.vocab), 5), 32, 1);
    ASSERT_EQ(cfg.prompts.size(), 3u);  // 31 + 31 + 8 tokens, each after the bos
    EXPECT_EQ(cfg.prompts[2].size(), 9u);
    const auto fdc = engine::run_calibration(cfg);
    EXPECT_EQ(fdc.tokens_captured, 73);  // 70 + 3 bos
    // FDC's V basis is W_V's, like Palu's.
    for (size_t i = 0; i < fdc.calib.v.size(); ++i) EXPECT_EQ(fdc.calib.v[i].sigma, palu.calib.v[i].sigma);

    cfg.removal_rate = 0.5;  // with compression set too
    test::expect_error([&] { engine::run_calibration(cfg); }, status::invalid_argument, {"exactly one"});
    cfg.compression.reset();
    cfg.removal_rate = 1.5;
    test::expect_error([&] { engine::run_calibration(cfg); }, status::invalid_argument, {"removal rate 1.5"});
}

// The random-weight model of kvcomp bench: the host reader gives the values the engine uploads
// (f32 weights: bit for bit), the file records a hash of config.json and the seed (another seed or
// the checkpoint itself is another model), and an FDC calibration of it runs.
TEST(calibrate, random_weights_reader_hash_and_fdc_run) {
    const test::tiny_model_spec spec;
    const std::string dir = test::write_tiny_model(spec, "calib_random");
    const auto mc = host::load_model_config(dir);
    auto be = create_backend("cpu");
    const auto w = engine::random_model_weights(*be, mc, dtype::f32, 5);
    const int64_t n = mc.kv_dim() * mc.hidden_size;
    std::vector<float> uploaded(static_cast<size_t>(n));
    be->download(*w.layers[1].wv, 0, uploaded.data(), uploaded.size() * 4);
    const auto host_values = engine::random_weight_reader(5)("model.layers.1.self_attn.v_proj.weight", n);
    EXPECT_EQ(host_values, uploaded);
    EXPECT_NE(engine::random_weight_reader(6)("model.layers.1.self_attn.v_proj.weight", n), uploaded);

    const std::string h5 = engine::engine_model_hash(dir, true, 5);
    EXPECT_NE(h5, engine::engine_model_hash(dir, true, 6));
    EXPECT_NE(h5, engine::engine_model_hash(dir, false, 5));
    EXPECT_EQ(engine::engine_model_hash(dir, false, 5), model_hash_of_dir(dir));

    engine::calibrate_config cfg;
    cfg.model_dir = dir, cfg.backend = "cpu", cfg.f32_weights = true;
    cfg.random_weights = true, cfg.weight_seed = 5;
    cfg.method = lowrank_method::fdc;
    cfg.prompts = {random_tokens(40, int32_t(spec.vocab), 9)};
    cfg.removal_rate = 0.2;
    const auto res = engine::run_calibration(cfg);
    EXPECT_EQ(res.calib.model_hash, h5);
    EXPECT_EQ(res.tokens_captured, 40);
}
