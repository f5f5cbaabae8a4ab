// The select_salient op (core/op.h) against the host ranking it replaces in the prefill: for random
// column sums with many ties and zero counts, on every backend under test, its rows table equals
// the one built from host::quant::split_by_saliency(normalized_scores(...)) (store_prefill's
// host path), for both normalizations (nnz probe and causal). The counts the op takes are computed
// here by brute force, not with the host's normalization_counts, so the comparison also checks
// that function. Plus the op's argument checks and the CPU reference's refusal of bad tables.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "core/backend.h"
#include "core/registry.h"
#include "host/quant/saliency.h"
#include "support/backends.h"
#include "support/expect_error.h"

using namespace kvcomp;
namespace hq = kvcomp::host::quant;

namespace {

struct step_case {
    int64_t kv_heads = 2;
    int32_t hi_tokens = 40, lo_tokens = 60;
    double ratio = 0.4;
    hq::nnz_mode nnz = hq::nnz_mode::probe;
    std::vector<int32_t> lens;  // prompt lengths (every token ranked, as zipcache's prefill)
};

// The inputs of one step and the rows table the host path builds from them.
struct step_data {
    int64_t n_tokens = 0, n_blocks = 0;
    std::vector<float> sums;  // [kv_heads, n_tokens]
    std::vector<int32_t> count, prompts, want_rows;
};

int64_t cdiv(int64_t a, int64_t b) {
    return b > 0 ? (a + b - 1) / b : 0;
}

step_data make_step(const step_case & c, uint64_t seed) {
    std::mt19937_64 rng(seed);
    step_data d;
    const int64_t H = c.kv_heads, G = c.hi_tokens + c.lo_tokens;
    for (int32_t len : c.lens) d.n_tokens += len;
    d.count.assign(size_t(d.n_tokens), 0);
    d.sums.assign(size_t(H * d.n_tokens), 0.0f);
    std::vector<std::vector<int32_t>> probes;
    int32_t row = 0;
    for (size_t b = 0; b < c.lens.size(); ++b) {
        const int32_t len = c.lens[b];
        probes.push_back(hq::prompt_probes(len, 0.1, 0.1, seed + b));
        for (int32_t i = 0; i < len; ++i) {
            int32_t n = 0;  // brute force: probes at or after token i, or every later token (causal)
            for (int32_t t : probes.back()) n += t >= i;
            d.count[size_t(row + i)] = c.nnz == hq::nnz_mode::causal ? len - i : n;
        }
        // Sums: level * count (exact ties across tokens with different counts), some plain random
        // values, and tokens no probe sees (count 0) with nonzero sums.
        for (int64_t h = 0; h < H; ++h)
            for (int32_t i = 0; i < len; ++i) {
                const int32_t n = d.count[size_t(row + i)];
                const int kind = int(rng() % 4);
                float x = float(rng() % 4) * 0.25f * float(std::max(n, 1));
                if (kind == 0) x = std::uniform_real_distribution<float>(0.0f, 2.0f)(rng);
                d.sums[size_t(h * d.n_tokens + row + i)] = x;
            }
        const int32_t n_hi = len - int32_t(hq::regular_count(len, c.ratio));
        d.prompts.insert(d.prompts.end(), {row, len, n_hi, int32_t(d.n_blocks)});
        d.n_blocks += std::max(cdiv(n_hi, c.hi_tokens), cdiv(len - n_hi, c.lo_tokens));
        row += len;
    }
    // The host path: normalized scores, split, then store_prefill's block layout.
    d.want_rows.assign(size_t(d.n_blocks * H * G), 0);
    for (size_t b = 0; b < c.lens.size(); ++b) {
        const int32_t first_row = d.prompts[4 * b], len = d.prompts[4 * b + 1], n_hi = d.prompts[4 * b + 2];
        const int64_t first_block = d.prompts[4 * b + 3], n_lo = len - n_hi;
        std::vector<int32_t> pos(static_cast<size_t>(len));
        for (int32_t i = 0; i < len; ++i) pos[size_t(i)] = i;
        for (int64_t h = 0; h < H; ++h) {
            const auto o =
                hq::split_by_saliency(hq::normalized_scores(d.sums.data() + h * d.n_tokens + first_row, pos,
                                                            probes[b], c.nnz, len - 1),
                                      c.ratio);
            const int64_t nb = std::max(cdiv(n_hi, c.hi_tokens), cdiv(n_lo, c.lo_tokens));
            for (int64_t bi = 0; bi < nb; ++bi) {
                const int64_t hi = std::clamp<int64_t>(n_hi - bi * c.hi_tokens, 0, c.hi_tokens);
                const int64_t lo = std::clamp<int64_t>(n_lo - bi * c.lo_tokens, 0, c.lo_tokens);
                int32_t * dst = d.want_rows.data() + ((first_block + bi) * H + h) * G;
                for (int64_t x = 0; x < hi; ++x) dst[x] = first_row + o[size_t(bi * c.hi_tokens + x)];
                for (int64_t x = 0; x < lo; ++x)
                    dst[hi + x] = first_row + o[size_t(n_hi + bi * c.lo_tokens + x)];
            }
        }
    }
    return d;
}

select_salient_params params_of(const step_case & c, const step_data & d) {
    select_salient_params p;
    p.n_kv_heads = c.kv_heads, p.n_tokens = d.n_tokens, p.n_prompts = int64_t(c.lens.size());
    p.n_blocks = d.n_blocks, p.hi_tokens = c.hi_tokens, p.lo_tokens = c.lo_tokens;
    return p;
}

std::vector<int32_t> run_op(backend & be, const step_case & c, const step_data & d) {
    const int64_t G = c.hi_tokens + c.lo_tokens;
    const auto bs = upload_vector(be, d.sums), bc = upload_vector(be, d.count),
               bp = upload_vector(be, d.prompts);
    const auto br = be.alloc(size_t(d.n_blocks * c.kv_heads * G) * 4);
    const op_desc op = make_op(params_of(c, d),
                               {make_tensor(bs.get(), dtype::f32, {c.kv_heads, d.n_tokens}),
                                make_tensor(bc.get(), dtype::i32, {d.n_tokens}),
                                make_tensor(bp.get(), dtype::i32, {int64_t(c.lens.size()), 4})},
                               {make_tensor(br.get(), dtype::i32, {d.n_blocks, c.kv_heads, G})});
    if (!be.supports(op).ok) return {};
    be.run(op);
    std::vector<int32_t> rows(size_t(d.n_blocks * c.kv_heads * G));
    be.download(*br, 0, rows.data(), rows.size() * 4);
    return rows;
}

class select_salient_on : public ::testing::TestWithParam<std::string> {};

TEST_P(select_salient_on, equals_the_host_ranking) {
    const auto be = create_backend(GetParam());
    std::vector<step_case> cases;
    for (hq::nnz_mode nnz : {hq::nnz_mode::probe, hq::nnz_mode::causal}) {
        // ZipCache's block at its default ratio, ragged prompts (one token, block-boundary sizes).
        cases.push_back({2, 40, 60, 0.4, nnz, {1000, 1, 37, 200, 333}});
        // GQA KV head counts 1 and 8, other ratios and an odd block.
        cases.push_back({1, 7, 9, 0.45, nnz, {100, 16, 517}});
        cases.push_back({8, 10, 90, 0.1, nnz, {2049, 64}});
        cases.push_back({2, 60, 40, 0.6, nnz, {999}});
        // Ratio 0 and 1 layouts (one segment): n_hi = 0 and n_hi = n.
        cases.push_back({2, 0, 16, 0.0, nnz, {50, 17}});
        cases.push_back({2, 16, 0, 1.0, nnz, {50, 17}});
    }
    bool ran = false;
    for (size_t i = 0; i < cases.size(); ++i) {
        const step_case & c = cases[i];
        SCOPED_TRACE("case " + std::to_string(i) +
                     (c.nnz == hq::nnz_mode::causal ? " (causal)" : " (probe)"));
        const step_data d = make_step(c, 1000 + i);
        const auto got = run_op(*be, c, d);
        if (got.empty()) continue;
        ran = true;
        size_t differ = 0, first = 0;
        for (size_t e = got.size(); e-- > 0;)
            if (got[e] != d.want_rows[e]) ++differ, first = e;
        EXPECT_EQ(differ, 0u) << "first at " << first << ": " << got[first] << " vs " << d.want_rows[first];
    }
    if (!ran) GTEST_SKIP() << "select_salient not supported on " << GetParam();
}

INSTANTIATE_TEST_SUITE_P(quant_backends, select_salient_on, ::testing::ValuesIn(test::backends_to_test()),
                         test::backend_param_name());

// check_op's view checks, and the CPU reference's checks of the host-built prompt table.
TEST(select_salient, bad_views_and_tables_are_clear_errors) {
    const auto be = create_backend("cpu");
    const step_case c{2, 4, 6, 0.4, hq::nnz_mode::probe, {10, 7}};
    const step_data d = make_step(c, 5);
    const auto bs = upload_vector(*be, d.sums), bc = upload_vector(*be, d.count);
    const auto br = be->alloc(size_t(d.n_blocks * 2 * 10) * 4);
    const tensor sums = make_tensor(bs.get(), dtype::f32, {2, d.n_tokens});
    const tensor count = make_tensor(bc.get(), dtype::i32, {d.n_tokens});
    const tensor rows = make_tensor(br.get(), dtype::i32, {d.n_blocks, 2, 10});
    auto run_with = [&](std::vector<int32_t> prompts, const tensor & s, select_salient_params p) {
        const auto bp = upload_vector(*be, prompts);
        be->run(make_op(p, {s, count, make_tensor(bp.get(), dtype::i32, {2, 4})}, {rows}));
    };
    const select_salient_params p = params_of(c, d);
    run_with(d.prompts, sums, p);  // the good table runs
    test::expect_error(
        [&] {
            run_with(d.prompts, make_tensor(bs.get(), dtype::i32, {2, d.n_tokens}), p);
        },
        status::invalid_argument, {"select_salient", "sums has dtype i32"});
    select_salient_params empty_block = p;
    empty_block.hi_tokens = empty_block.lo_tokens = 0;
    test::expect_error([&] { run_with(d.prompts, sums, empty_block); }, status::invalid_argument,
                       {"select_salient", "at least one token"});
    auto with = [&](size_t at, int32_t v) {
        std::vector<int32_t> t = d.prompts;
        t[at] = v;
        return t;
    };
    test::expect_error([&] { run_with(with(4, 11), sums, p); }, status::invalid_argument,
                       {"select_salient", "prompt 1 ranks tokens [11, 18) outside the 17 columns"});
    test::expect_error([&] { run_with(with(2, 11), sums, p); }, status::invalid_argument,
                       {"select_salient", "prompt 0 has n_hi 11 of 10 tokens"});
    test::expect_error([&] { run_with(with(7, 0), sums, p); }, status::invalid_argument,
                       {"select_salient", "block 0 belongs to two prompts"});
    test::expect_error([&] { run_with(with(7, int32_t(d.n_blocks)), sums, p); }, status::invalid_argument,
                       {"select_salient", "prompt 1 needs blocks"});
    select_salient_params no_hi = p;
    no_hi.hi_tokens = 0, no_hi.lo_tokens = 10;
    test::expect_error([&] { run_with(d.prompts, sums, no_hi); }, status::invalid_argument,
                       {"select_salient", "segment of capacity 0"});
}

}  // namespace
