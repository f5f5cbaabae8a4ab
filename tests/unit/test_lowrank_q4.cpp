// zack / fdc with kv_bits=4 (the reduced cache stored as 4-bit rows, core/ragged_q4.h) on the tiny
// random Llama of tests/support, on the CPU reference and every other backend that runs it:
//   (a) the row codec: dequant(quant(x)) is within step / 2 of x per element (digest zack_fdc.md
//       invariant 15; plus the f16 rounding of min and step), codes packed low nibble first;
//   (b) at full rank the method tracks "none" within the bound of a 4-bit cache (derived below);
//   (c) bytes: allocated and per-token bytes are pages x page_size x sum of the q4 row bytes, and
//       the cache is 2w / (4 + 4 ceil(w / 8)) times smaller than kv_bits=16 at the same ranks;
//   (d) a backend's kv_bits=4 decode agrees with the CPU reference's;
//   (f) invariant 15 at full rank (CPU): kv_bits=4 equals "none" fed with dequant(quant(k R D^-1)) D R^T
//       (and v alike), built on the host;
//   (e) errors: kv_bits=3 names the allowed values; palu rejects kv_bits=4; equalize needs kv_bits=4.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <map>
#include <memory>
#include <random>
#include <tuple>

#include "core/ragged_q4.h"
#include "engine/calibrate.h"
#include "engine/engine.h"
#include "engine/lowrank_layout.h"
#include "host/lowrank/calibration_file.h"
#include "host/lowrank/rate_search.h"
#include "support/backends.h"
#include "support/expect_error.h"
#include "support/forwarding_kv_method.h"
#include "support/lowrank_engine.h"
#include "support/tiny_model.h"

using namespace kvcomp;
namespace hl = host::lowrank;

namespace {

using namespace test::lowrank;

// --- (a) the row codec ------------------------------------------------------------------------------

TEST(ragged_q4_codec, error_is_at_most_half_a_step) {
    std::mt19937_64 rng(3);
    std::normal_distribution<float> n01(0.0f, 1.0f);
    for (int64_t w : {1, 2, 7, 8, 9, 16, 33, 64, 128, 255, 256}) {
        for (int kind = 0; kind < 4; ++kind) {
            // Normal rows; rows with one dominant channel (the unequalized rotated basis); constant
            // rows (step 0); rows at a large offset (min's f16 rounding matters).
            std::vector<float> x(static_cast<size_t>(w));
            for (int64_t i = 0; i < w; ++i) {
                const float z = n01(rng);
                x[size_t(i)] = kind == 0   ? z
                               : kind == 1 ? (i == 0 ? 40.0f * z : z)
                               : kind == 2 ? 1.25f
                                           : 300.0f + z;
            }
            std::vector<uint8_t> row(size_t(ragged_q4_row_bytes(w)), 0xff);
            ragged_q4_quantize_row(x.data(), w, row.data());
            const float mn = *std::min_element(x.begin(), x.end()),
                        mx = *std::max_element(x.begin(), x.end());
            const float qmin = ragged_q4_min(row.data()), step = ragged_q4_step(row.data());
            // The parameters are the f16 roundings of min and (max - min) / 15.
            EXPECT_EQ(qmin, half_to_float(float_to_half(mn)));
            EXPECT_EQ(step, half_to_float(float_to_half((mx - mn) / 15.0f)));
            // Invariant 15 with the f16 rounding of the parameters: x - min is off by |mn - qmin| and
            // the top of the grid by 15 |step - (mx - mn) / 15|.
            const double slack = std::fabs(double(mn) - qmin) +
                                 15.0 * std::fabs(double(step) - (double(mx) - mn) / 15.0) +
                                 1e-6 * (std::fabs(mx) + std::fabs(mn));
            std::vector<float> y(static_cast<size_t>(w));
            ragged_q4_dequantize_row(row.data(), w, y.data());
            for (int64_t i = 0; i < w; ++i) {
                EXPECT_LE(std::fabs(double(y[size_t(i)]) - x[size_t(i)]), step / 2.0 + slack)
                    << "w=" << w << " kind=" << kind << " i=" << i;
                // Packing: channel i in byte 4 + i / 2, low nibble first (read independently here).
                const int code = (row[size_t(4 + i / 2)] >> (i % 2 ? 4 : 0)) & 15;
                EXPECT_EQ(y[size_t(i)], float(code) * step + qmin);
            }
            if (kind == 2) {
                EXPECT_EQ(step, 0.0f);
            }
            // Padding codes up to the 32-bit word are zero.
            for (int64_t i = w; i < 8 * ((w + 7) / 8); ++i)
                EXPECT_EQ((row[size_t(4 + i / 2)] >> (i % 2 ? 4 : 0)) & 15, 0) << "w=" << w << " pad " << i;
        }
    }
    EXPECT_EQ(ragged_q4_row_bytes(1), 8);
    EXPECT_EQ(ragged_q4_row_bytes(64), 36);
    EXPECT_EQ(ragged_q4_row_bytes(65), 40);
}

// --- (b)-(d) the method on every backend ------------------------------------------------------------

using param = std::tuple<std::string, std::string>;  // backend, method

class lowrank_q4 : public ::testing::TestWithParam<param> {
  protected:
    void SetUp() override {
        backend_ = std::get<0>(GetParam());
        method_ = std::get<1>(GetParam());
        std::string why;
        if (!engine_runs(config(backend_, method_, {{"kv_bits", "4"}}), 3, why))
            GTEST_SKIP() << backend_ << " does not run " << method_ << " kv_bits=4: " << why;
    }
    std::string backend_, method_;
};

// Full rank: the prompt's logits come from prefill on the exact K''/V'' (equal to none's up to
// rounding, as kv_bits=16); every decode step attends to the 4-bit cache. A 4-bit row of range R
// has error <= R / 30 per element, a few percent of the row's scale in every logit and output, so
// the decode log-probabilities move by a few hundredths. Measured on this model (12 forced steps,
// CPU and PoCL alike): |dlogp| mean 0.025 / 0.037, max 0.062 / 0.096 for zack / fdc (kv_bits=16:
// 4e-4; without the equalization: zack 0.033 / 0.13); a query basis that does not undo D gives
// mean 0.47, max 1.1. The bounds (max 0.25, mean 0.08) sit ~2.5x above the measurement and ~5x
// below that bug.
TEST_P(lowrank_q4, full_rank_tracks_none) {
    engine::engine none(config(backend_, "none")), q4(config(backend_, method_, {{"kv_bits", "4"}}));
    const auto prompt = random_tokens(40, 5);
    EXPECT_LT(test::nmse(q4.prompt_logits(prompt), none.prompt_logits(prompt)), 1e-6);
    const auto forced = random_tokens(12, 6);
    const auto lw = forced_logprobs(none, prompt, forced), lg = forced_logprobs(q4, prompt, forced);
    ASSERT_EQ(lg.size(), lw.size());
    double mean = 0.0, worst = 0.0;
    for (size_t i = 0; i < lw.size(); ++i) {
        mean += std::fabs(lg[i] - lw[i]) / double(lw.size());
        worst = std::max(worst, std::fabs(lg[i] - lw[i]));
    }
    EXPECT_LT(worst, 0.25) << method_;
    EXPECT_LT(mean, 0.08) << method_;
    // ... and the 4-bit cache is really used: decode differs from kv_bits=16 (bit-identical
    // results would mean the q4 pages were never read).
    engine::engine f16(config(backend_, method_));
    EXPECT_NE(forced_logprobs(f16, prompt, forced), lg);
    std::cout << "[ measured ] " << backend_ << " " << method_ << " kv_bits=4 full rank: decode |dlogp| mean "
              << mean << " max " << worst << "\n";
}

TEST_P(lowrank_q4, kv_bytes_are_the_q4_rows) {
    const hl::calibration c = hl::read_calibration(calib_file(method_));
    auto q4_cfg =
        config(backend_, method_, {{"kv_bits", "4"}, {"compression", "0.45"}, {"rank_multiple", "8"}});
    auto f16_cfg = config(backend_, method_, {{"compression", "0.45"}, {"rank_multiple", "8"}});
    q4_cfg.kv_pages = f16_cfg.kv_pages = 24;
    engine::engine q4(q4_cfg), f16(f16_cfg);
    // The per-token bytes from the ranks f16 serves (the same ranks: kv_bits does not change them).
    const uint64_t f16_row = f16.kv_bytes_for_tokens(16) / 16;
    uint64_t q4_row = 0, dims = 0;
    const hl::kv_ranks r = hl::removal_rate_for_compression(c.spectra(), 0.45, 8).ranks;
    for (size_t i = 0; i < r.k.size(); ++i) {
        q4_row += uint64_t(ragged_q4_row_bytes(r.k[i]) + ragged_q4_row_bytes(r.v[i]));
        dims += uint64_t(r.k[i] + r.v[i]);
    }
    ASSERT_EQ(f16_row, dims * 2);
    EXPECT_EQ(q4.stats().kv_bytes_allocated, 24u * 16u * q4_row);
    for (int64_t t : {1, 16, 17, 100}) {
        const uint64_t pages = uint64_t((t + 15) / 16);
        EXPECT_EQ(q4.kv_bytes_for_tokens(t), pages * 16u * q4_row) << t << " tokens";
    }
    // 4-bit codes plus 4 bytes of parameters per row of w: 2w / (4 + 4 ceil(w / 8)) times smaller,
    // 3.2 (w = 32) to 3.56 (w = 64) on this model's 64-wide heads; never 4 (the parameters).
    const double ratio = double(f16.kv_bytes_for_tokens(100)) / double(q4.kv_bytes_for_tokens(100));
    EXPECT_GT(ratio, 3.0);
    EXPECT_LT(ratio, 4.0);
    // Prefill and decode run on these pages.
    engine::generation_request g;
    g.prompt = random_tokens(50, 7);
    g.max_new_tokens = 5;
    g.stop_at_eos = false;
    const int64_t id = q4.submit(g);
    q4.run();
    EXPECT_NE(q4.result(id).finish_reason, "error") << q4.result(id).error;
    EXPECT_EQ(q4.result(id).tokens.size(), 5u);
}

// A backend's kernels against the CPU reference's (same codes by contract, dequantization in fp32):
// decode log-probabilities within the kv_bits=16 cross-backend tolerance.
TEST_P(lowrank_q4, backend_matches_cpu) {
    if (backend_ == "cpu") GTEST_SKIP() << "the reference itself";
    const auto prompt = random_tokens(60, 15);
    const auto forced = random_tokens(10, 16);
    const engine::method_options o = {{"kv_bits", "4"}, {"compression", "0.5"}};
    engine::engine cpu(config("cpu", method_, o)), be(config(backend_, method_, o));
    const auto want = forced_logprobs(cpu, prompt, forced), got = forced_logprobs(be, prompt, forced);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 2e-3) << "decode step " << i;
}

INSTANTIATE_TEST_SUITE_P(lowrank_q4_backends, lowrank_q4,
                         ::testing::Combine(::testing::ValuesIn(test::backends_to_test()),
                                            ::testing::Values("zack", "fdc")),
                         test::backend_method_param_name());

// --- invariant 15 at full rank: the uncompressed cache fed with dequant(quant(k R D^-1)) D R^T -------
//
// Method "none" behind a wrapper that quantizes every cached k and v on the host, in double, in the
// head's equalized rotated basis (R from the calibration file, D from its singular values), exactly
// as core/ragged_q4.h's quantizer, then rotates back; the prompt's own attention sees the exact k and
// v (as zack/fdc's prefill) and only the cache holds the quantized ones. Nothing of the low-rank ops,
// their tables or the folded weights is used, so this checks the device path (bases with D folded,
// head_project, q4 append and decode, W_O with D_v) against an independent construction.
class quantized_none : public test::forwarding_kv_method {
  public:
    quantized_none(hl::calibration c)
        : forwarding_kv_method(engine::create_kv_method("none", {})), c_(std::move(c)) {}
    std::string name() const override { return "quantized_none"; }
    void allocate(backend & be, const engine::kv_shape & shape) override {
        shape_ = shape;
        forwarding_kv_method::allocate(be, shape);
    }
    void attend(backend & be, int64_t layer, const engine::kv_step & s, const tensor & q, const tensor & k,
                const tensor & v, const tensor & out, float scale) override {
        const int64_t n = s.n_tokens, nkv = shape_.n_kv_heads, d = shape_.head_dim;
        const size_t bytes = size_t(n * nkv * d) * 4, out_bytes = size_t(out.numel()) * 4;
        if (!buf_ || buf_->size() < 2 * bytes + out_bytes) buf_ = be.alloc(2 * bytes + out_bytes);
        const tensor kt = make_tensor(buf_.get(), dtype::f32, {n, nkv, d});
        const tensor vt = make_tensor(buf_.get(), dtype::f32, {n, nkv, d}, bytes);
        quantize(be, k, kt, c_.k, layer);
        quantize(be, v, vt, c_.v, layer);
        if (s.prefill) {
            // The prompt attends to its exact k and v; then the same slots are overwritten with the
            // quantized ones (the append of a step writes its tokens' slots), its output discarded.
            inner().attend(be, layer, s, q, k, v, out, scale);
            const tensor junk = make_tensor(buf_.get(), dtype::f32, {out.numel()}, 2 * bytes);
            inner().attend(be, layer, s, q, kt, vt, junk, scale);
        } else {
            inner().attend(be, layer, s, q, kt, vt, out, scale);
        }
    }

  private:
    void quantize(backend & be, const tensor & x, const tensor & y, const std::vector<hl::head_basis> & bases,
                  int64_t layer) {
        const int64_t nkv = shape_.n_kv_heads, d = shape_.head_dim, rows = x.numel() / d;
        std::vector<float> in(static_cast<size_t>(x.numel())), res(in.size()), r(static_cast<size_t>(d));
        std::vector<uint8_t> row(size_t(ragged_q4_row_bytes(d)));
        be.download(*x.buf, x.offset, in.data(), in.size() * 4);
        for (int64_t t = 0; t < rows; ++t) {
            const hl::head_basis & b = bases[size_t(layer * nkv + t % nkv)];
            const std::vector<double> dsc = engine::equalization_scales(b.sigma, d);
            for (int64_t j = 0; j < d; ++j) {
                // The f32 coefficients of the method's bases and a double sum, as the CPU's
                // head_project: k'' then has the same bits, so the same codes (v'' comes out of the
                // folded W_V instead, and may differ in the last bit).
                double acc = 0;
                for (int64_t i = 0; i < d; ++i)
                    acc += double(in[size_t(t * d + i)]) *
                           double(float(b.basis[size_t(i * b.cols + j)] / dsc[size_t(j)]));
                r[size_t(j)] = float(acc);
            }
            ragged_q4_quantize_row(r.data(), d, row.data());
            ragged_q4_dequantize_row(row.data(), d, r.data());
            for (int64_t i = 0; i < d; ++i) {
                double acc = 0;
                for (int64_t j = 0; j < d; ++j)
                    acc += double(r[size_t(j)]) * dsc[size_t(j)] * b.basis[size_t(i * b.cols + j)];
                res[size_t(t * d + i)] = float(acc);
            }
        }
        be.upload(*y.buf, y.offset, res.data(), res.size() * 4);
    }

    hl::calibration c_;
    engine::kv_shape shape_;
    buffer_ptr buf_;
};

TEST(lowrank_q4_invariant, full_rank_equals_none_on_dequantized_rotated_k_and_v) {
    const auto prompt = random_tokens(40, 61);
    const auto forced = random_tokens(10, 62);
    for (const char * m : {"zack", "fdc"}) {
        const hl::calibration c = hl::read_calibration(calib_file(m));
        auto ref_cfg = test::tiny_engine_config(tiny_dir(), "cpu");
        ref_cfg.method = "quantized_none";
        ref_cfg.method_factory = [c] { return std::make_unique<quantized_none>(c); };
        engine::engine ref(ref_cfg), q4(config("cpu", m, {{"kv_bits", "4"}})), none(config("cpu", "none"));
        const auto want = forced_logprobs(ref, prompt, forced), got = forced_logprobs(q4, prompt, forced);
        const auto exact = forced_logprobs(none, prompt, forced);
        ASSERT_EQ(got.size(), want.size());
        double worst = 0.0, worst_none = 0.0;
        for (size_t i = 0; i < want.size(); ++i) {
            worst = std::max(worst, std::fabs(got[i] - want[i]));
            worst_none = std::max(worst_none, std::fabs(got[i] - exact[i]));
        }
        std::cout << "[ measured ] " << m << " kv_bits=4 vs none on dequantized k/v: max |dlogp| " << worst
                  << " (vs exact none: " << worst_none << ")\n";
        // Measured 0.0044 (zack) / 0.0072 (fdc), against 0.076 / 0.041 from exact none: the
        // construction explains the q4 path's deviation up to code flips of v'' (produced by the
        // folded W_V' in another rounding order, so a value on a rounding boundary may take the
        // neighbouring code) and none's f16 cache of the dequantized values.
        EXPECT_LT(worst, 0.015) << m;
        EXPECT_LT(worst, worst_none / 2) << m;
    }
}

// --- (e) errors --------------------------------------------------------------------------------------

TEST(lowrank_q4_errors, bad_kv_bits_names_the_allowed_values) {
    for (const char * bits : {"3", "8", "x"})
        test::expect_error(
            [&] {
                engine::engine e(config("cpu", "zack", {{"kv_bits", bits}}));
            },
            status::invalid_argument, {"kv_bits", "16", "4"});
    test::expect_error(
        [] {
            engine::engine e(config("cpu", "palu", {{"kv_bits", "4"}}));
        },
        status::invalid_argument, {"kv_bits=4", "palu"});
    test::expect_error(
        [] {
            engine::engine e(config("cpu", "fdc", {{"equalize", "0"}}));
        },
        status::invalid_argument, {"equalize", "kv_bits=4"});
    // kv_bits=16 is the default and accepted everywhere; equalize=0 is the ablation of kv_bits=4.
    engine::engine ablation(config("cpu", "zack", {{"kv_bits", "4"}, {"equalize", "0"}}));
    engine::engine e(config("cpu", "palu", {{"kv_bits", "16"}}));
}

}  // namespace
