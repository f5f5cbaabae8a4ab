// The quantizing methods (lib/engine/kv_method_quant.cpp) give the same cache whether requests are
// prefilled and flushed together or one by one: the ragged probe_scores call of a batched step
// must rank each prompt (and each decode window) exactly as a step of that request alone does.
// The prefill's device ranking (select_salient) and the host ranking give the same cache too.
// Driven through the kv_method interface with synthetic q/k/v (a token's vectors depend only on
// its request, position and layer), so both schedules feed the method identical data.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "core/registry.h"
#include "engine/kv_method.h"
#include "support/backends.h"

using namespace kvcomp;

namespace {

engine::kv_shape shape() {
    engine::kv_shape s;
    s.n_layers = 2, s.n_q_heads = 4, s.n_kv_heads = 2, s.head_dim = 64;  // CUDA's prefill has 64 and 128
    s.n_pages = 64, s.page_size = 16, s.max_requests = 4;
    return s;
}

// q [n_q_heads * head_dim] then k, v [n_kv_heads * head_dim] of one token. Queries share a
// direction per request so attention is peaked and the saliency ranking is far from uniform.
std::vector<float> token_qkv(int32_t req, int32_t pos, int64_t layer) {
    const auto sh = shape();
    std::mt19937_64 rng(uint64_t(req) * 1000003u + uint64_t(pos) * 7919u + uint64_t(layer) * 31u + 1);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    const int64_t nq = sh.n_q_heads * sh.head_dim, nk = sh.n_kv_heads * sh.head_dim;
    std::vector<float> x(static_cast<size_t>(nq + 2 * nk));
    for (auto & e : x) e = nd(rng);
    for (int64_t c = 0; c < nq; ++c) x[size_t(c)] += 1.5f * float(((c + req) % 5) - 2);
    return x;
}

struct tokens {
    std::vector<int32_t> req, pos;  // per token of the step, grouped by request
};

// Runs one step over all layers, then maintain(); returns out per layer [n_tokens * q_row].
std::vector<std::vector<float>> run_step(backend & be, engine::kv_method & m, bool prefill, const tokens & t) {
    const auto sh = shape();
    const int64_t n = int64_t(t.req.size()), qr = sh.n_q_heads * sh.head_dim, kr = sh.n_kv_heads * sh.head_dim;
    engine::kv_step s;
    s.prefill = prefill, s.n_tokens = n;
    std::vector<int32_t> bidx;
    for (int64_t i = 0; i < n; ++i) {
        if (i == 0 || t.req[size_t(i)] != t.req[size_t(i) - 1]) {
            s.seq_ids.push_back(t.req[size_t(i)]);
            s.host_seq_indptr.push_back(int32_t(i));
        }
        bidx.push_back(int32_t(s.seq_ids.size()) - 1);
        s.max_seq_len = std::max<int64_t>(s.max_seq_len, t.pos[size_t(i)] + 1);
    }
    s.host_seq_indptr.push_back(int32_t(n));
    s.batch = int64_t(s.seq_ids.size());
    s.host_positions = t.pos, s.host_batch_idx = bidx;
    const auto b_ind = upload_vector(be, s.host_seq_indptr), b_pos = upload_vector(be, t.pos),
               b_idx = upload_vector(be, bidx);
    s.seq_indptr = make_tensor(b_ind.get(), dtype::i32, {s.batch + 1});
    s.positions = make_tensor(b_pos.get(), dtype::i32, {n});
    s.batch_idx = make_tensor(b_idx.get(), dtype::i32, {n});
    std::vector<std::vector<float>> outs;
    for (int64_t l = 0; l < sh.n_layers; ++l) {
        std::vector<float> q, k, v;
        for (int64_t i = 0; i < n; ++i) {
            const auto x = token_qkv(t.req[size_t(i)], t.pos[size_t(i)], l);
            q.insert(q.end(), x.begin(), x.begin() + qr);
            k.insert(k.end(), x.begin() + qr, x.begin() + qr + kr);
            v.insert(v.end(), x.begin() + qr + kr, x.end());
        }
        const auto bq = upload_vector(be, q), bk = upload_vector(be, k), bv = upload_vector(be, v);
        const auto bo = be.alloc(q.size() * 4);
        m.attend(be, l, s, make_tensor(bq.get(), dtype::f32, {n, sh.n_q_heads, sh.head_dim}),
                 make_tensor(bk.get(), dtype::f32, {n, sh.n_kv_heads, sh.head_dim}),
                 make_tensor(bv.get(), dtype::f32, {n, sh.n_kv_heads, sh.head_dim}),
                 make_tensor(bo.get(), dtype::f32, {n, sh.n_q_heads, sh.head_dim}),
                 1.0f / std::sqrt(float(sh.head_dim)));
        std::vector<float> o(q.size());
        be.download(*bo, 0, o.data(), o.size() * 4);
        outs.push_back(std::move(o));
    }
    m.maintain(be, s);
    return outs;
}

// A request's rows of a step's outputs, per layer.
std::vector<float> rows_of(const std::vector<std::vector<float>> & outs, const tokens & t, int32_t req) {
    const auto sh = shape();
    const size_t qr = size_t(sh.n_q_heads * sh.head_dim);
    std::vector<float> r;
    for (const auto & o : outs)
        for (size_t i = 0; i < t.req.size(); ++i)
            if (t.req[i] == req) r.insert(r.end(), o.begin() + long(i * qr), o.begin() + long((i + 1) * qr));
    return r;
}

// outputs[request] = the request's rows of every step, in step order.
using run_outputs = std::vector<std::vector<float>>;

// Prefill of `lens` then n_decode decode steps. batch_prefill / batch_decode: all requests in one
// step, else one step per request.
run_outputs run(const std::string & backend_name, const std::string & method, const engine::method_options & o,
                const std::vector<int32_t> & lens, int32_t n_decode, bool batch_prefill, bool batch_decode) {
    const auto be = create_backend(backend_name);
    auto m = engine::create_kv_method(method, o);
    m->allocate(*be, shape());
    const int32_t B = int32_t(lens.size());
    run_outputs out(static_cast<size_t>(B));
    auto step = [&](bool prefill, const std::vector<int32_t> & reqs, int32_t decode_step) {
        tokens t;
        for (int32_t r : reqs) {
            const int32_t first = prefill ? 0 : lens[size_t(r)] + decode_step;
            const int32_t count = prefill ? lens[size_t(r)] : 1;
            for (int32_t p = first; p < first + count; ++p) t.req.push_back(r), t.pos.push_back(p);
        }
        const auto outs = run_step(*be, *m, prefill, t);
        for (int32_t r : reqs) {
            const auto rows = rows_of(outs, t, r);
            out[size_t(r)].insert(out[size_t(r)].end(), rows.begin(), rows.end());
        }
    };
    std::vector<int32_t> all;
    for (int32_t r = 0; r < B; ++r) all.push_back(r);
    if (batch_prefill)
        step(true, all, 0);
    else
        for (int32_t r = 0; r < B; ++r) step(true, {r}, 0);
    for (int32_t d = 0; d < n_decode; ++d)
        if (batch_decode)
            step(false, all, d);
        else
            for (int32_t r = 0; r < B; ++r) step(false, {r}, d);
    return out;
}

// Every request's outputs of the two runs are the same bits.
void expect_same_bits(const run_outputs & a, const run_outputs & b) {
    ASSERT_EQ(a.size(), b.size());
    for (size_t r = 0; r < a.size(); ++r) {
        ASSERT_EQ(a[r].size(), b[r].size());
        size_t differ = 0;
        for (size_t i = 0; i < a[r].size(); ++i) differ += std::memcmp(&a[r][i], &b[r][i], sizeof(float)) != 0;
        EXPECT_EQ(differ, 0u) << "request " << r << ": " << differ << " of " << a[r].size()
                              << " output values differ";
    }
}

class quant_batching_on : public ::testing::TestWithParam<std::string> {};

// Prompts of uneven lengths (block 16: partial blocks; kivi: different residual tails, so windows
// flush at different steps), 20 decode steps: zipcache flushes every request's window at step 16
// in one maintain() (one ragged probe_scores call per layer over the window pool).
TEST_P(quant_batching_on, batched_steps_equal_one_request_per_step) {
    const std::vector<int32_t> lens = {45, 13, 70};
    const int32_t n_decode = 20;
    // Decode attention may split its work by batch size on a device, which changes rounding; the
    // cache itself must not change, so off the CPU only the prefill is batched differently and the
    // decode steps (which read that cache) are batched alike.
    const bool cpu = GetParam() == "cpu";
    struct method_case {
        std::string name;
        engine::method_options o;
    };
    for (const method_case & c : {method_case{"zipcache", {{"block", "16"}}},
                                  method_case{"zipcache", {{"block", "16"}, {"nnz", "causal"}, {"ratio", "0.25"}}},
                                  method_case{"kivi", {{"group", "16"}, {"residual", "32"}}}}) {
        SCOPED_TRACE(c.name + (c.o.count("nnz") ? " (nnz causal)" : ""));
        const auto batched = run(GetParam(), c.name, c.o, lens, n_decode, true, true);
        const auto single = run(GetParam(), c.name, c.o, lens, n_decode, false, !cpu);
        expect_same_bits(batched, single);
    }
    // The comparison sees the ranking: other probe draws (seed) rank differently and change the
    // decode outputs that read the quantized prompt.
    const auto a = run(GetParam(), "zipcache", {{"block", "16"}}, lens, 2, true, true);
    const auto b = run(GetParam(), "zipcache", {{"block", "16"}, {"seed", "7"}}, lens, 2, true, true);
    size_t differ = 0;
    for (size_t r = 0; r < lens.size(); ++r)
        for (size_t i = 0; i < a[r].size(); ++i) differ += a[r][i] != b[r][i];
    EXPECT_GT(differ, 0u);
}

// The prefill's ranking on the device (select_salient, where the backend has it) and on the host
// (select=host: the probe sums are downloaded and ranked by host/quant/saliency) give the same
// cache: a batched prefill and the decode steps that read its blocks are bit-identical.
TEST_P(quant_batching_on, device_and_host_ranking_give_the_same_cache) {
    const std::vector<int32_t> lens = {45, 13, 70};
    for (const engine::method_options & o :
         {engine::method_options{{"block", "16"}},
          engine::method_options{{"block", "16"}, {"nnz", "causal"}, {"ratio", "0.25"}}}) {
        SCOPED_TRACE(o.count("nnz") ? "nnz causal" : "nnz probe");
        engine::method_options on_host = o;
        on_host["select"] = "host";
        expect_same_bits(run(GetParam(), "zipcache", o, lens, 4, true, true),
                         run(GetParam(), "zipcache", on_host, lens, 4, true, true));
    }
}

INSTANTIATE_TEST_SUITE_P(quant_backends, quant_batching_on, ::testing::ValuesIn(test::backends_to_test()),
                         test::backend_param_name());

}  // namespace
