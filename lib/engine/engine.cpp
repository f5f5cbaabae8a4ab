#include "engine/engine.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>

#include "core/registry.h"
#include "engine/llama_forward.h"
#include "engine/model_weights.h"
#include "host/paged/page_pool.h"

namespace kvcomp::engine {

namespace {

using clock_type = std::chrono::steady_clock;

double ms_since(clock_type::time_point t) {
    return std::chrono::duration<double, std::milli>(clock_type::now() - t).count();
}

struct live_request {
    int64_t id = 0;
    generation_request req;
    generation_result res;
    enum class state { waiting, running, done } st = state::waiting;
    int32_t seq = -1;
    std::mt19937_64 rng;
    double last_token_ms = 0.0;
};

}  // namespace

struct engine::impl {
    engine_config cfg;
    host::model_config model;
    std::unique_ptr<backend> be;
    model_weights weights;
    std::unique_ptr<kv_method> method;
    std::unique_ptr<llama_forward> forward;
    std::unique_ptr<host::page_pool> pool;
    std::unique_ptr<host::page_table> table;
    std::map<int64_t, live_request> requests;
    int64_t next_id = 0;
    engine_stats stats;
    buffer_ptr argmax_out;

    int64_t cache_tokens_needed(const live_request & r) const {
        // The last generated token is never appended to the cache.
        return int64_t(r.req.prompt.size()) + std::max<int64_t>(r.req.max_new_tokens, 1) - 1;
    }

    // Frees a sequence's pages in the engine's table and whatever the method keeps for it.
    void release_sequence(int32_t seq) {
        table->release(seq);
        method->release(seq);
    }

    void finish(live_request & r, const std::string & reason, const std::string & error = {}) {
        r.res.finish_reason = reason;
        r.res.error = error;
        if (r.seq >= 0) release_sequence(r.seq);
        r.seq = -1;
        r.st = live_request::state::done;
    }

    // Picks the next token of every row of a step; greedy rows use the device argmax. Forced rows
    // take their given token and record its log-probability.
    std::vector<int32_t> next_tokens(const tensor & logits, const std::vector<live_request *> & rows) {
        const int64_t r = int64_t(rows.size()), V = model.vocab_size;
        bool all_greedy = true;
        for (auto * q : rows)
            all_greedy = all_greedy && q->req.sampling.temperature == 0.0f && q->req.forced_tokens.empty();
        std::vector<int32_t> out(static_cast<size_t>(r));
        if (all_greedy) {
            if (!argmax_out || argmax_out->size() < size_t(r) * 4) argmax_out = be->alloc(size_t(r) * 4 * 2);
            be->run(make_op(argmax_params{r, V}, {logits}, {make_tensor(argmax_out.get(), dtype::i32, {r})}));
            be->download(*argmax_out, 0, out.data(), size_t(r) * 4);
            return out;
        }
        std::vector<float> host(static_cast<size_t>(r * V));
        be->download(*logits.buf, logits.offset, host.data(), host.size() * 4);
        for (int64_t i = 0; i < r; ++i) {
            live_request & q = *rows[size_t(i)];
            const float * row = host.data() + i * V;
            if (q.req.forced_tokens.empty()) {
                out[size_t(i)] = sample_token(row, V, q.req.sampling, q.rng);
                continue;
            }
            const int32_t t = q.req.forced_tokens[q.res.tokens.size()];
            double mx = row[0], sum = 0.0;
            for (int64_t j = 1; j < V; ++j) mx = std::max(mx, double(row[j]));
            for (int64_t j = 0; j < V; ++j) sum += std::exp(double(row[j]) - mx);
            q.res.token_logprobs.push_back(double(row[t]) - mx - std::log(sum));
            out[size_t(i)] = t;
        }
        return out;
    }

    void fill_page_arrays(step_inputs & s, const std::vector<int32_t> & seqs) {
        const host::paged_batch pb = table->batch(seqs);
        s.indptr = pb.indptr, s.indices = pb.indices, s.last_page_len = pb.last_page_len;
        s.max_seq_len = pb.max_seq_len;
        s.batch = int64_t(seqs.size());
        s.seq_ids = seqs;
    }

    void track_peak() {
        uint64_t bytes = 0;
        for (auto & kv : requests)
            if (kv.second.seq >= 0) {
                const uint64_t held = method->bytes_held(kv.second.seq, table->length(kv.second.seq));
                kv.second.res.kv_bytes_peak = std::max(kv.second.res.kv_bytes_peak, held);
                bytes += held;
            }
        stats.kv_bytes_peak = std::max(stats.kv_bytes_peak, bytes);
    }

    void accept(live_request & r, int32_t token, clock_type::time_point t0,
                const std::function<void(int64_t, int32_t)> & on_token) {
        const double now = ms_since(t0);
        if (r.res.tokens.empty())
            r.res.ttft_ms = now;
        else
            r.res.tbt_ms.push_back(now - r.last_token_ms);
        r.last_token_ms = now;
        r.res.tokens.push_back(token);
        ++stats.tokens_generated;
        if (on_token) on_token(r.id, token);
        const auto & eos = model.eos_token_ids;
        if (r.req.stop_at_eos && std::find(eos.begin(), eos.end(), int64_t(token)) != eos.end())
            finish(r, "eos");
        else if (int64_t(r.res.tokens.size()) >= r.req.max_new_tokens)
            finish(r, "length");
    }

    void prefill(const std::vector<live_request *> & batch, clock_type::time_point t0,
                 const std::function<void(int64_t, int32_t)> & on_token) {
        step_inputs s;
        s.prefill = true;
        std::vector<int32_t> seqs;
        s.seq_indptr.push_back(0);
        for (size_t b = 0; b < batch.size(); ++b) {
            const auto & prompt = batch[b]->req.prompt;
            for (size_t i = 0; i < prompt.size(); ++i) {
                s.tokens.push_back(prompt[i]);
                s.positions.push_back(int32_t(i));
                s.batch_idx.push_back(int32_t(b));
            }
            s.seq_indptr.push_back(int32_t(s.tokens.size()));
            s.logit_rows.push_back(int32_t(s.tokens.size() - 1));
            seqs.push_back(batch[b]->seq);
        }
        fill_page_arrays(s, seqs);
        const tensor logits = forward->run(*method, s);
        ++stats.prefill_steps;
        track_peak();
        const auto next = next_tokens(logits, batch);
        for (size_t b = 0; b < batch.size(); ++b) accept(*batch[b], next[b], t0, on_token);
    }

    void decode(const std::vector<live_request *> & batch, clock_type::time_point t0,
                const std::function<void(int64_t, int32_t)> & on_token) {
        step_inputs s;
        std::vector<int32_t> seqs;
        for (size_t b = 0; b < batch.size(); ++b) {
            live_request & r = *batch[b];
            KVCOMP_ASSERT(table->extend(r.seq, 1));  // pages were reserved at admission
            s.tokens.push_back(r.res.tokens.back());
            s.positions.push_back(int32_t(table->length(r.seq) - 1));
            s.batch_idx.push_back(int32_t(b));
            s.logit_rows.push_back(int32_t(b));
            seqs.push_back(r.seq);
        }
        fill_page_arrays(s, seqs);
        const tensor logits = forward->run(*method, s);
        ++stats.decode_steps;
        track_peak();
        const auto next = next_tokens(logits, batch);
        for (size_t b = 0; b < batch.size(); ++b) accept(*batch[b], next[b], t0, on_token);
    }
};

engine::engine(const engine_config & cfg) : p_(std::make_unique<impl>()) {
    impl & p = *p_;
    p.cfg = cfg;
    KVCOMP_CHECK_ARG(cfg.page_size > 0, "engine: page_size must be positive, got ", cfg.page_size);
    KVCOMP_CHECK_ARG(cfg.max_batch > 0, "engine: max_batch must be positive, got ", cfg.max_batch);
    KVCOMP_CHECK_ARG(cfg.max_prefill_tokens > 0, "engine: max_prefill_tokens must be positive");
    p.model = host::load_model_config(cfg.model_dir);
    p.method = cfg.method_factory ? cfg.method_factory() : create_kv_method(cfg.method, cfg.method_opts);
    KVCOMP_CHECK_ARG(p.method != nullptr, "engine: the method factory returned no method");
    p.be = create_backend(cfg.backend);
    p.weights = cfg.random_weights ? random_model_weights(*p.be, p.model, cfg.matrix_type, cfg.weight_seed)
                                   : load_model_weights(*p.be, p.model, cfg.model_dir, cfg.matrix_type);
    // Sliding-window attention (Mistral, some Qwen2) is not implemented: within the window it is
    // the same as full attention, so contexts are limited to the window to keep results exact.
    const int64_t window = p.model.sliding_window;
    KVCOMP_CHECK_ARG(window <= 0 || p.cfg.max_context <= window, "engine: ", cfg.model_dir,
                     " uses sliding-window attention (window ", window, " tokens), which kvcomp does not implement; "
                     "max_context ", p.cfg.max_context, " must be <= the window");
    if (p.cfg.max_context <= 0) p.cfg.max_context = p.model.max_position_embeddings;
    if (window > 0) p.cfg.max_context = std::min(p.cfg.max_context, window);
    KVCOMP_CHECK_ARG(p.cfg.max_context > 0, "engine: the model sets no max_position_embeddings; give max_context");
    const int64_t pages_per_request = (p.cfg.max_context + cfg.page_size - 1) / cfg.page_size;
    if (p.cfg.kv_pages <= 0) p.cfg.kv_pages = pages_per_request * cfg.max_batch;
    kv_shape shape;
    shape.n_layers = p.model.num_hidden_layers, shape.n_q_heads = p.model.num_attention_heads;
    shape.n_kv_heads = p.model.num_key_value_heads, shape.head_dim = p.model.head_dim;
    shape.n_pages = p.cfg.kv_pages, shape.page_size = cfg.page_size;
    shape.max_requests = cfg.max_batch;
    p.method->prepare(*p.be, model_context{p.model, p.weights, cfg.model_dir, cfg.random_weights, cfg.weight_seed});
    p.method->allocate(*p.be, shape);
    p.pool = std::make_unique<host::page_pool>(int32_t(p.cfg.kv_pages));
    p.table = std::make_unique<host::page_table>(*p.pool, cfg.page_size);
    p.forward = std::make_unique<llama_forward>(*p.be, p.model, p.weights, cfg.f16_activations);
    p.stats.kv_bytes_allocated = p.method->bytes_allocated();
    p.stats.weight_bytes = p.weights.bytes + p.method->weight_bytes();
}

engine::~engine() = default;

const host::model_config & engine::model() const { return p_->model; }
backend & engine::device() { return *p_->be; }
const engine_config & engine::config() const { return p_->cfg; }

int64_t engine::submit(const generation_request & req) {
    KVCOMP_CHECK_ARG(!req.prompt.empty(), "request: the prompt is empty");
    KVCOMP_CHECK_ARG(req.max_new_tokens >= 1, "request: max_new_tokens must be >= 1, got ", req.max_new_tokens);
    for (size_t i = 0; i < req.prompt.size(); ++i)
        KVCOMP_CHECK_ARG(req.prompt[i] >= 0 && req.prompt[i] < p_->model.vocab_size, "request: prompt token ", i,
                         " is ", req.prompt[i], ", outside the vocabulary [0,", p_->model.vocab_size, ")");
    check_sampling(req.sampling);
    for (size_t i = 0; i < req.forced_tokens.size(); ++i)
        KVCOMP_CHECK_ARG(req.forced_tokens[i] >= 0 && req.forced_tokens[i] < p_->model.vocab_size, "request: forced token ",
                         i, " is ", req.forced_tokens[i], ", outside the vocabulary [0,", p_->model.vocab_size, ")");
    live_request r;
    r.id = p_->next_id++;
    r.req = req;
    if (!req.forced_tokens.empty()) {
        r.req.max_new_tokens = int64_t(req.forced_tokens.size());
        r.req.stop_at_eos = false;
    }
    r.rng.seed(req.sampling.seed);
    p_->requests.emplace(r.id, std::move(r));
    return p_->next_id - 1;
}

void engine::run(const std::function<void(int64_t, int32_t)> & on_token) {
    impl & p = *p_;
    const auto t0 = clock_type::now();
    const int64_t pool_tokens = p.pool->capacity() * int64_t(p.cfg.page_size);
    for (auto & kv : p.requests) {
        live_request & r = kv.second;
        if (r.st != live_request::state::waiting) continue;
        const int64_t plen = int64_t(r.req.prompt.size());
        if (plen > p.cfg.max_context)
            p.finish(r, "error", concat("prompt of ", plen, " tokens is longer than the context (", p.cfg.max_context,
                                        " tokens)"));
        else if (p.cache_tokens_needed(r) > pool_tokens)
            p.finish(r, "error", concat("page pool too small: the request needs ", p.cache_tokens_needed(r),
                                        " cached tokens, the pool holds ", pool_tokens, " (", p.pool->capacity(),
                                        " pages of ", p.cfg.page_size, ")"));
        else
            r.req.max_new_tokens = std::min(r.req.max_new_tokens, p.cfg.max_context - plen + 1);
    }
    for (;;) {
        std::vector<live_request *> running, admitted;
        for (auto & kv : p.requests)
            if (kv.second.st == live_request::state::running) running.push_back(&kv.second);
        int64_t prefill_tokens = 0;
        for (auto & kv : p.requests) {
            live_request & r = kv.second;
            if (r.st != live_request::state::waiting) continue;
            const int64_t plen = int64_t(r.req.prompt.size());
            if (int64_t(running.size() + admitted.size()) >= p.cfg.max_batch) break;
            if (!admitted.empty() && prefill_tokens + plen > p.cfg.max_prefill_tokens) break;
            const int32_t seq = p.table->create_sequence();
            if (!p.table->reserve(seq, p.cache_tokens_needed(r))) {
                p.table->release(seq);
                break;  // first come, first served: wait for pages
            }
            KVCOMP_ASSERT(p.table->extend(seq, plen));
            r.seq = seq;
            r.st = live_request::state::running;
            admitted.push_back(&r);
            prefill_tokens += plen;
        }
        if (!admitted.empty()) p.prefill(admitted, t0, on_token);
        std::vector<live_request *> decoding;
        for (auto * r : running)
            if (r->st == live_request::state::running) decoding.push_back(r);
        for (auto * r : admitted)
            if (r->st == live_request::state::running) decoding.push_back(r);
        if (!decoding.empty()) p.decode(decoding, t0, on_token);
        if (admitted.empty() && decoding.empty()) break;  // nothing left that can run
    }
    for (auto & kv : p.requests)  // only possible if a request could never be admitted
        if (kv.second.st == live_request::state::waiting)
            p.finish(kv.second, "error", "request could not be scheduled (page pool exhausted)");
    p.stats.pages_in_use = p.pool->used_pages();
}

const generation_result & engine::result(int64_t id) const {
    auto it = p_->requests.find(id);
    KVCOMP_CHECK_ARG(it != p_->requests.end(), "engine: unknown request id ", id);
    return it->second.res;
}

engine_stats engine::stats() const {
    engine_stats s = p_->stats;
    s.pages_in_use = p_->pool->used_pages();
    s.method_pages_in_use = p_->method->pages_in_use();
    return s;
}

uint64_t engine::kv_bytes_for_tokens(int64_t tokens) const { return p_->method->bytes_for_tokens(tokens); }

std::vector<float> engine::prompt_logits(const std::vector<int32_t> & prompt) {
    impl & p = *p_;
    KVCOMP_CHECK_ARG(!prompt.empty() && int64_t(prompt.size()) <= p.cfg.max_context,
                     "prompt_logits: prompt of ", prompt.size(), " tokens (context ", p.cfg.max_context, ")");
    for (int32_t t : prompt)
        KVCOMP_CHECK_ARG(t >= 0 && t < p.model.vocab_size, "prompt_logits: token ", t, " outside the vocabulary");
    const int32_t seq = p.table->create_sequence();
    if (!p.table->extend(seq, int64_t(prompt.size()))) {
        p.table->release(seq);
        KVCOMP_THROW(status::out_of_memory, "prompt_logits: page pool too small for ", prompt.size(), " tokens");
    }
    step_inputs s;
    s.prefill = true;
    s.tokens = prompt;
    for (size_t i = 0; i < prompt.size(); ++i) {
        s.positions.push_back(int32_t(i));
        s.batch_idx.push_back(0);
        s.logit_rows.push_back(int32_t(i));
    }
    s.seq_indptr = {0, int32_t(prompt.size())};
    p.fill_page_arrays(s, {seq});
    std::vector<float> out;
    try {
        const tensor logits = p.forward->run(*p.method, s);
        out.resize(size_t(logits.numel()));
        p.be->download(*logits.buf, logits.offset, out.data(), out.size() * 4);
    } catch (...) {
        p.release_sequence(seq);
        throw;
    }
    p.release_sequence(seq);
    return out;
}

}  // namespace kvcomp::engine
