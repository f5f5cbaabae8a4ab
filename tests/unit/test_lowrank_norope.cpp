// ZACK / FDC / Palu on a model with layers without RoPE (a tiny random SmolLM3, layers 0 and 3
// NoPE): the fully folded mode of ZACK's Lemma 1 (lib/engine/lowrank_layout.h, lowrank_layer::
// fold_qk), on the CPU reference and every other backend that runs the low-rank ops:
//   (a) full rank (calibration at r = 0): equal to method "none" up to the fp16 cache's rounding;
//   (b) uneven ranks: equal to "none" fed with host-projected k and v (support/lowrank_projected.h;
//       palu's keys rotated after the projection only on the RoPE layers), an independent
//       construction, so a basis folded wrongly into W_Q / W_K shows;
//   (c) folded (fold_qk=1, the default) against the online projection (fold_qk=0; zack, fdc) at
//       uneven ranks, padded and ragged prefill and decode: the same attention up to rounding
//       (Lemma 2: (q R)(k R)^T = q R R^T k^T either way);
//   (d) the folded layers take q' and k' straight from the projection GEMMs: attend() receives them
//       at the reduced widths there and at head_dim elsewhere, and the model's W_Q / W_K of those
//       layers are freed (CPU);
//   (e) the error falls as the ranks grow with the folded layers (CPU); palu with fold_qk=0 on this
//       model is refused with a message.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "engine/engine.h"
#include "host/lowrank/calibration_file.h"
#include "support/backends.h"
#include "support/expect_error.h"
#include "support/forwarding_kv_method.h"
#include "support/lowrank_engine.h"
#include "support/lowrank_projected.h"
#include "support/tiny_model.h"

using namespace kvcomp;
namespace hl = host::lowrank;
using namespace test::lowrank;

namespace {

const std::vector<int> k_no_rope = {0, 1, 1, 0};

const std::string & nope_dir() {
    static const std::string dir = [] {
        test::tiny_model_spec s = spec();  // the low-rank tests' tiny model, plus NoPE layers
        s.smollm3 = true;
        s.layers = 4;
        s.no_rope_layers = k_no_rope;
        return test::write_tiny_model(s, "lowrank_norope");
    }();
    return dir;
}

std::vector<bool> rope_layers() {
    std::vector<bool> r;
    for (int x : k_no_rope) r.push_back(x == 1);
    return r;
}

engine::engine_config nope_config(const std::string & backend, const std::string & method,
                                  engine::method_options o = {}) {
    auto c = test::tiny_engine_config(nope_dir(), backend);
    c.method = method;
    if (method != "none" && !o.count("calib")) o["calib"] = calib_file(method, nope_dir());
    c.method_opts = o;
    return c;
}

// Whether `backend` runs the low-rank ops (the CPU must; others may answer "unsupported").
bool runs_lowrank(const std::string & backend, std::string & why) {
    return engine_runs(nope_config(backend, "fdc"), 3, why);
}

// Prefill logits (NMSE) and decode log-probabilities (absolute) of two engines agree.
void expect_same_model(engine::engine & a, engine::engine & b, double logits_bound, double logprob_bound,
                       const std::string & what) {
    const auto prompt = random_tokens(40, 61), forced = random_tokens(8, 62);
    EXPECT_LT(test::nmse(a.prompt_logits(prompt), b.prompt_logits(prompt)), logits_bound) << what;
    const auto la = forced_logprobs(a, prompt, forced), lb = forced_logprobs(b, prompt, forced);
    ASSERT_EQ(la.size(), lb.size()) << what;
    for (size_t i = 0; i < la.size(); ++i)
        EXPECT_NEAR(la[i], lb[i], logprob_bound) << what << " decode step " << i;
}

using param = std::tuple<std::string, std::string>;  // backend, method

class lowrank_norope : public ::testing::TestWithParam<param> {
  protected:
    void SetUp() override {
        backend_ = std::get<0>(GetParam());
        method_ = std::get<1>(GetParam());
        std::string why;
        if (!runs_lowrank(backend_, why))
            GTEST_SKIP() << backend_ << " does not run the low-rank ops: " << why;
    }
    std::string backend_, method_;
};

TEST_P(lowrank_norope, full_rank_equals_none) {
    const hl::calibration c = hl::read_calibration(calib_file(method_, nope_dir()));
    for (size_t i = 0; i < c.ranks.k.size(); ++i) ASSERT_EQ(c.ranks.k[i], spec().head_dim);
    engine::engine none(nope_config(backend_, "none")), lr(nope_config(backend_, method_));
    // Both cache fp16, of K and V in different bases: only the roundings differ (measured on the CPU
    // and PoCL: NMSE 4e-8 to 9e-8, log-probabilities within 6e-4), as in test_lowrank_methods.cpp.
    expect_same_model(lr, none, 1e-6, 2e-3, method_);
}

TEST_P(lowrank_norope, uneven_ranks_equal_none_on_projected_k_and_v) {
    hl::calibration c;
    const std::string file = uneven_calib_file(method_, nope_dir(), &c);
    const bool palu = method_ == "palu";
    auto ref_cfg = test::tiny_engine_config(nope_dir(), backend_);
    ref_cfg.method = "projected_none";
    ref_cfg.method_factory = [=]() -> std::unique_ptr<engine::kv_method> {
        return projected_reference(c, palu, float(spec().rope_theta), rope_layers());
    };
    engine::engine ref(ref_cfg), lr(nope_config(backend_, method_, {{"calib", file}}));
    expect_same_model(lr, ref, 1e-6, 2e-3, method_);
}

INSTANTIATE_TEST_SUITE_P(backends, lowrank_norope,
                         ::testing::Combine(::testing::ValuesIn(test::backends_to_test()),
                                            ::testing::Values("zack", "fdc", "palu")),
                         test::backend_method_param_name());

// zack and fdc only: palu has no online mode on layers without RoPE (refused, see the errors test).
class lowrank_norope_online : public lowrank_norope {};

TEST_P(lowrank_norope_online, folded_equals_online_projection) {
    const std::string file = uneven_calib_file(method_, nope_dir());
    for (const char * prefill : {"padded", "ragged"}) {
        engine::engine folded(nope_config(backend_, method_, {{"calib", file}, {"prefill", prefill}}));
        engine::engine online(
            nope_config(backend_, method_, {{"calib", file}, {"prefill", prefill}, {"fold_qk", "0"}}));
        // The folded x (W_Q R) and the online (x W_Q) R are the same sums in another order, in f32:
        // k' differs by f32 roundings, which now and then flip an fp16 rounding of the cache
        // (measured on the CPU and PoCL: NMSE 1e-12 to 1.5e-10, log-probabilities within 3e-5; on
        // CUDA, whose prefill attention rounds q' to f16 for the tensor cores, 1.2e-9 to 1.6e-9 on
        // an H200), far tighter than the fp16 cache's own error against none (NMSE ~1e-7).
        expect_same_model(folded, online, 1e-8, 2e-4, method_ + " prefill=" + prefill);
    }
    // kv_bits=4: the equalization D goes into W_Q' as R_k D and into W_K' as R_k D^-1, as on the
    // online side (a D on the wrong side scales the logits per channel: the prefill, which attends
    // to the exact k'', shows it). Decode reads 4-bit codes of k'', where an f32 rounding now and
    // then moves a code by one step (measured log-probabilities within 3.2e-3).
    engine::engine folded(nope_config(backend_, method_, {{"calib", file}, {"kv_bits", "4"}}));
    engine::engine online(
        nope_config(backend_, method_, {{"calib", file}, {"kv_bits", "4"}, {"fold_qk", "0"}}));
    expect_same_model(folded, online, 1e-8, 1e-2, method_ + " kv_bits=4");
}

INSTANTIATE_TEST_SUITE_P(backends, lowrank_norope_online,
                         ::testing::Combine(::testing::ValuesIn(test::backends_to_test()),
                                            ::testing::Values("zack", "fdc")),
                         test::backend_method_param_name());

// --- (d) the folded layers' q and k come from the projections (CPU) ---------------------------------

// Forwards to the method under test and records, per layer, the widths attend() receives.
class width_probe : public test::forwarding_kv_method {
  public:
    width_probe(std::unique_ptr<engine::kv_method> inner, std::vector<std::pair<int64_t, int64_t>> & seen)
        : forwarding_kv_method(std::move(inner)), seen_(seen) {}
    void prepare(backend & be, const engine::model_context & m) override {
        forwarding_kv_method::prepare(be, m);
        for (const auto & L : m.weights.layers) released_.push_back(!L.wq && !L.wk);
    }
    void attend(backend & be, int64_t layer, const engine::kv_step & s, const tensor & q, const tensor & k,
                const tensor & v, const tensor & out, float scale) override {
        if (int64_t(seen_.size()) <= layer) seen_.resize(size_t(layer + 1));
        seen_[size_t(layer)] = {q.numel() / s.n_tokens, k.numel() / s.n_tokens};
        forwarding_kv_method::attend(be, layer, s, q, k, v, out, scale);
    }
    std::vector<bool> released_;

  private:
    std::vector<std::pair<int64_t, int64_t>> & seen_;
};

TEST(lowrank_norope_cpu, folded_layers_take_q_and_k_from_the_projections) {
    const int64_t d = spec().head_dim, nq = spec().heads, nkv = spec().kv_heads, g = nq / nkv;
    for (const char * m : {"zack", "fdc", "palu"}) {
        hl::calibration c;
        const std::string file = uneven_calib_file(m, nope_dir(), &c);
        for (const char * fold : {"1", "0"}) {
            if (std::string(m) == "palu" && std::string(fold) == "0") continue;
            std::vector<std::pair<int64_t, int64_t>> seen;
            width_probe * probe = nullptr;
            auto cfg = test::tiny_engine_config(nope_dir(), "cpu");
            cfg.method = m;
            cfg.method_factory = [&, m, fold]() -> std::unique_ptr<engine::kv_method> {
                auto p = std::make_unique<width_probe>(
                    engine::create_kv_method(m, {{"calib", file}, {"fold_qk", fold}}), seen);
                probe = p.get();
                return p;
            };
            engine::engine e(cfg);
            e.prompt_logits(random_tokens(20, 71));
            ASSERT_EQ(seen.size(), k_no_rope.size());
            for (size_t l = 0; l < seen.size(); ++l) {
                int64_t kt = 0;
                for (int64_t h = 0; h < nkv; ++h) kt += c.ranks.k[l * size_t(nkv) + size_t(h)];
                const bool folded = k_no_rope[l] == 0 && std::string(fold) == "1";
                const std::string at = std::string(m) + " fold_qk=" + fold + " layer " + std::to_string(l);
                // Folded: q' [g * k_total] and k' [k_total] out of the GEMMs (no head_project made
                // them); elsewhere the full q and k the online projection starts from.
                EXPECT_EQ(seen[l].first, folded ? g * kt : nq * d) << at;
                EXPECT_EQ(seen[l].second, folded ? kt : nkv * d) << at;
                EXPECT_EQ(probe->released_[l], folded) << at << ": the model's W_Q / W_K freed";
                const engine::layer_projection * p = probe->projection(int64_t(l));
                ASSERT_NE(p, nullptr);
                EXPECT_EQ(p->w_q != nullptr, folded) << at;
                EXPECT_EQ(p->k_pre_rope, std::string(m) == "palu" && !folded) << at;
            }
        }
    }
}

// --- (e) error against "none" falls as the ranks grow; palu's online mode refused ----------------

TEST(lowrank_norope_cpu, error_shrinks_as_ranks_grow) {
    engine::engine none(nope_config("cpu", "none"));
    const auto prompt = random_tokens(48, 81);
    const auto want = none.prompt_logits(prompt);
    for (const char * m : {"zack", "fdc", "palu"}) {
        std::vector<double> errs;
        for (double p : {0.7, 0.5, 0.3, 0.1}) {
            engine::engine e(
                nope_config("cpu", m, {{"compression", std::to_string(p)}, {"rank_multiple", "4"}}));
            errs.push_back(test::nmse(e.prompt_logits(prompt), want));
        }
        for (size_t i = 0; i + 1 < errs.size(); ++i) EXPECT_GT(errs[i], errs[i + 1]) << m << " step " << i;
        EXPECT_GT(errs.front(), 1e-4) << m << ": a 70 % compression should be visible in the logits";
    }
}

TEST(lowrank_norope_cpu, palu_online_mode_and_bad_fold_option_are_refused) {
    test::expect_error(
        [] {
            engine::engine e(nope_config("cpu", "palu", {{"fold_qk", "0"}}));
        },
        status::invalid_argument, {"palu", "fold_qk=0", "layer 0", "without RoPE"});
    test::expect_error(
        [] {
            engine::engine e(nope_config("cpu", "fdc", {{"fold_qk", "2"}}));
        },
        status::invalid_argument, {"fold_qk"});
    // On a model whose layers all use RoPE the option changes nothing, and palu accepts 0.
    auto c = config("cpu", "palu", {{"fold_qk", "0"}});
    engine::engine plain(c), def(config("cpu", "palu"));
    const auto prompt = random_tokens(20, 91);
    EXPECT_EQ(plain.prompt_logits(prompt), def.prompt_logits(prompt));
}

}  // namespace
