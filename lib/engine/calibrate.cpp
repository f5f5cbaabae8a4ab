// Calibration driver (calibrate.h): runs the capture forward, turns Gram matrices and weights into
// per-head bases, picks ranks and fills a calibration file's contents.
#include "engine/calibrate.h"

#include <algorithm>
#include <memory>
#include <random>

#include "engine/engine.h"
#include "engine/kv_method_capture.h"
#include "engine/model_weights.h"
#include "host/lowrank/model_fingerprint.h"
#include "host/lowrank/rate_search.h"
#include "host/model/model_config.h"

namespace kvcomp::engine {

namespace {

using namespace host::lowrank;

head_basis to_head(svd_basis && b) {
    head_basis h;
    h.cols = b.dim;
    h.basis = std::move(b.basis);
    h.sigma = std::move(b.sigma);
    return h;
}

std::string head_name(int64_t l, int64_t c, const char * side) {
    return concat("layer ", l, " KV head ", c, " ", side);
}

// Runs every prompt through the engine (prefill only) with the capture method.
std::shared_ptr<capture_grams> capture(const calibrate_config & cfg, bool with_v) {
    auto grams = std::make_shared<capture_grams>();
    grams->with_v = with_v;
    engine_config ec;
    ec.model_dir = cfg.model_dir;
    ec.backend = cfg.backend;
    ec.random_weights = cfg.random_weights;
    ec.weight_seed = cfg.weight_seed;
    ec.matrix_type = cfg.f32_weights ? dtype::f32 : dtype::f16;
    ec.method = "capture";
    ec.method_factory = [grams] { return make_kv_method_capture(grams); };
    int64_t longest = 0;
    for (const auto & p : cfg.prompts) longest = std::max<int64_t>(longest, int64_t(p.size()));
    ec.max_context = longest + 1;
    ec.max_batch = std::min<int64_t>(16, int64_t(cfg.prompts.size()));
    ec.max_prefill_tokens = std::max<int64_t>(ec.max_prefill_tokens, longest);
    engine eng(ec);
    std::vector<int64_t> ids;
    for (const auto & p : cfg.prompts) {
        generation_request r;
        r.prompt = p;
        r.max_new_tokens = 1;  // the prefill's token ends the request: no decode step
        ids.push_back(eng.submit(r));
    }
    eng.run();
    for (size_t i = 0; i < ids.size(); ++i) {
        const auto & res = eng.result(ids[i]);
        KVCOMP_CHECK_ARG(res.finish_reason != "error", "calibrate: prompt ", i, " failed: ", res.error);
    }
    return grams;
}

}  // namespace

calibrate_result run_calibration(const calibrate_config & cfg) {
    const lowrank_method m = cfg.method;
    const char * mname = lowrank_method_name(m);
    KVCOMP_CHECK_ARG(cfg.removal_rate.has_value() != cfg.compression.has_value(), "calibrate ", mname,
                     ": give exactly one of a removal rate or a compression target");
    if (cfg.removal_rate)
        KVCOMP_CHECK_ARG(*cfg.removal_rate >= 0.0 && *cfg.removal_rate <= 1.0, "calibrate ", mname,
                         ": removal rate ", *cfg.removal_rate, " is outside [0, 1]");
    if (cfg.compression)
        KVCOMP_CHECK_ARG(*cfg.compression >= 0.0 && *cfg.compression < 1.0, "calibrate ", mname,
                         ": compression ", *cfg.compression, " is outside [0, 1)");
    const host::model_config mc = host::load_model_config(cfg.model_dir);
    const int64_t L = mc.num_hidden_layers, nq = mc.num_attention_heads, nkv = mc.num_key_value_heads;
    const int64_t d = mc.head_dim, hidden = mc.hidden_size, grp = nq / nkv;
    KVCOMP_CHECK_ARG(cfg.rank_multiple >= 1 && cfg.rank_multiple <= d, "calibrate ", mname, ": rank multiple ",
                     cfg.rank_multiple, " is outside [1, head_dim = ", d, "]");
    const bool runs_model = m != lowrank_method::palu;
    KVCOMP_CHECK_ARG(!runs_model || !cfg.prompts.empty(), "calibrate ", mname, ": no calibration tokens");

    calibrate_result out;
    std::shared_ptr<capture_grams> grams;
    if (runs_model) {
        grams = capture(cfg, m == lowrank_method::zack);
        out.tokens_captured = grams->tokens;
    }
    const weight_reader weights =
        cfg.random_weights ? random_weight_reader(cfg.weight_seed) : checkpoint_weight_reader(cfg.model_dir);
    calibration & c = out.calib;
    c.method = m;
    c.model_hash = engine_model_hash(cfg.model_dir, cfg.random_weights, cfg.weight_seed);
    c.rank_multiple = cfg.rank_multiple;
    kv_spectra sp;
    sp.num_layers = L, sp.num_kv_heads = nkv, sp.head_dim = d;
    for (int64_t l = 0; l < L; ++l) {
        const std::string p = "model.layers." + std::to_string(l) + ".self_attn.";
        const auto wv = weights(p + "v_proj.weight", nkv * d * hidden);
        std::vector<float> wk, wo;
        if (m == lowrank_method::palu) wk = weights(p + "k_proj.weight", nkv * d * hidden);
        if (m == lowrank_method::zack) wo = weights(p + "o_proj.weight", hidden * nq * d);  // [hidden, nq * d]
        for (int64_t h = 0; h < nkv; ++h) {
            const size_t i = size_t(l * nkv + h);
            if (runs_model) {
                c.k.push_back(to_head(basis_from_gram(grams->qk[i].gram(), d, head_name(l, h, "QK"))));
            } else {
                c.k.push_back(to_head(fdc_v_basis(mat_view::of(wk, nkv * d, hidden), h, d)));
            }
            if (m == lowrank_method::zack) {
                // [V^c; (W_O^{h})^T for the group's query heads]: V's Gram plus the W_O blocks' Gram.
                gram_accumulator acc = grams->v[i];
                std::vector<float> block(static_cast<size_t>(hidden * d));
                for (int64_t qh = h * grp; qh < (h + 1) * grp; ++qh) {
                    for (int64_t r = 0; r < hidden; ++r)
                        std::copy_n(wo.data() + r * nq * d + qh * d, d, block.data() + r * d);
                    acc.add(mat_view::of(block, hidden, d));
                }
                c.v.push_back(to_head(basis_from_gram(acc.gram(), d, head_name(l, h, "V-W_O"))));
            } else {
                c.v.push_back(to_head(fdc_v_basis(mat_view::of(wv, nkv * d, hidden), h, d)));
            }
            sp.sigma_k.push_back(c.k.back().sigma);
            sp.sigma_v.push_back(c.v.back().sigma);
        }
    }
    if (cfg.removal_rate) {
        c.removal_rate = *cfg.removal_rate;
        c.ranks = ranks_for_removal_rate(sp, c.removal_rate, cfg.rank_multiple);
    } else {
        const rate_choice rc = removal_rate_for_compression(sp, *cfg.compression, cfg.rank_multiple);
        c.removal_rate = rc.removal_rate;
        c.ranks = rc.ranks;
    }
    c.validate();
    return out;
}

std::string engine_model_hash(const std::string & model_dir, bool random_weights, uint64_t weight_seed) {
    return random_weights ? model_hash_of_random_weights(model_dir, weight_seed) : model_hash_of_dir(model_dir);
}

std::vector<int32_t> random_calibration_tokens(const host::tokenizer & tok, int64_t model_vocab, int64_t n,
                                               uint64_t seed) {
    KVCOMP_CHECK_ARG(n > 0, "calibrate: token count must be positive, got ", n);
    std::vector<int32_t> pool;
    const int32_t top = int32_t(std::min<int64_t>(tok.vocab_size(), model_vocab));
    for (int32_t id = 0; id < top; ++id) {
        bool ordinary = false;
        try {
            ordinary = !tok.is_special(id);
        } catch (const error &) {
            // an id the tokenizer leaves unassigned
        }
        if (ordinary) pool.push_back(id);
    }
    KVCOMP_CHECK_ARG(!pool.empty(), "calibrate: the tokenizer has no ordinary token below ", top);
    std::mt19937_64 rng(seed);
    std::uniform_int_distribution<size_t> pick(0, pool.size() - 1);
    std::vector<int32_t> out(static_cast<size_t>(n));
    for (auto & t : out) t = pool[pick(rng)];
    return out;
}

std::vector<std::vector<int32_t>> chunk_prompts(const std::vector<int32_t> & tokens, int64_t chunk, int32_t bos) {
    const int64_t body = bos >= 0 ? chunk - 1 : chunk;
    KVCOMP_CHECK_ARG(body >= 1, "calibrate: prompts of ", chunk, " tokens leave no room for text");
    std::vector<std::vector<int32_t>> out;
    for (size_t at = 0; at < tokens.size(); at += size_t(body)) {
        std::vector<int32_t> p;
        if (bos >= 0) p.push_back(bos);
        const size_t end = std::min(tokens.size(), at + size_t(body));
        p.insert(p.end(), tokens.begin() + int64_t(at), tokens.begin() + int64_t(end));
        if (p.size() >= 2) out.push_back(std::move(p));
    }
    return out;
}

}  // namespace kvcomp::engine
