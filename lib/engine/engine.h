// The inference engine: loads a model onto one backend, admits requests, and runs prefill and
// decode steps with continuous batching over a paged KV cache reached through a kv_method.
//
// Scheduling: requests wait in submission order. A request is admitted when the page pool can
// hold its prompt plus max_new_tokens (pages are reserved up front, so a running request never
// runs out); admitted prompts are prefilled together (up to max_prefill_tokens per step), then
// every running request decodes one token per step. A request that can never fit (longer than
// the context, or needing more pages than the pool has) fails with a message; the others go on.
// Pages return to the pool when a request finishes.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/backend.h"
#include "engine/kv_method.h"
#include "engine/sampling.h"
#include "host/model/model_config.h"

namespace kvcomp::engine {

struct engine_config {
    std::string model_dir;            // Hugging Face layout: config.json + *.safetensors
    bool random_weights = false;      // true: only config.json is read; weights are random (benchmarks)
    uint64_t weight_seed = 1;
    std::string backend = "default";  // cpu, opencl[:N], cuda[:N], default
    std::string method = "none";      // KV method (kv_method_names())
    method_options method_opts;
    // When set, the engine takes its KV method from this factory instead of create_kv_method(method,
    // method_opts) (`method` is then only a label): for methods users do not pick by name, such as
    // the calibration capture of kvcomp calibrate (engine/kv_method_capture.h).
    std::function<std::unique_ptr<kv_method>()> method_factory;
    dtype matrix_type = dtype::f16;   // weights of the linear layers: f16 or f32
    bool f16_activations = true;      // f16 weights: matmul inputs rounded to f16 (llama_forward.h)
    int32_t page_size = 16;
    int64_t kv_pages = 0;             // pages per layer; 0: max_batch full contexts
    int64_t max_batch = 16;           // requests decoding at once
    int64_t max_context = 0;          // tokens per request (prompt + generated); 0: the model's limit
                                      // (for sliding-window models at most the window, see engine.cpp)
    int64_t max_prefill_tokens = 8192;
};

struct generation_request {
    std::vector<int32_t> prompt;
    int64_t max_new_tokens = 32;
    sampling_params sampling;
    bool stop_at_eos = true;
    // Teacher forcing: when not empty, these tokens are fed instead of sampled ones (max_new_tokens
    // becomes their count) and the log-probability of each is recorded, so perplexity runs through
    // the KV method's decode path like generation does.
    std::vector<int32_t> forced_tokens;
};

struct generation_result {
    std::vector<int32_t> tokens;       // generated tokens (prompt excluded)
    std::string finish_reason;         // "eos", "length" or "error"
    std::string error;                 // when finish_reason == "error"
    double ttft_ms = 0.0;              // from run() start to the first token
    std::vector<double> tbt_ms;        // time between consecutive tokens
    std::vector<double> token_logprobs;  // natural-log probability of each forced token
    uint64_t kv_bytes_peak = 0;        // most KV-cache bytes the request held (kv_method::bytes_held)
};

struct engine_stats {
    int64_t prefill_steps = 0, decode_steps = 0, tokens_generated = 0;
    uint64_t weight_bytes = 0;         // device bytes of the model's weights
    uint64_t kv_bytes_allocated = 0;   // the method's whole cache
    uint64_t kv_bytes_peak = 0;        // most cache bytes held by live requests at once
    int64_t pages_in_use = 0;          // now (0 once every request finished)
    int64_t method_pages_in_use = 0;   // pages of the method's own pool, if it keeps one (e.g. "window")
};

class engine {
public:
    explicit engine(const engine_config & cfg);  // throws kvcomp::error
    ~engine();

    const host::model_config & model() const;
    backend & device();
    const engine_config & config() const;

    // Queues a request; returns its id. Bad requests (empty prompt, token ids outside the
    // vocabulary) throw invalid_argument; ones that cannot fit fail in run() with a message.
    int64_t submit(const generation_request & req);

    // Runs until every submitted request finished. on_token(id, token) is called for each new token.
    void run(const std::function<void(int64_t, int32_t)> & on_token = {});

    const generation_result & result(int64_t id) const;
    engine_stats stats() const;

    // Device bytes the KV method holds for one request of `tokens` cached tokens, in every layer
    // (everything the method stores: codes, metadata, windows), for compression-ratio accounting.
    uint64_t kv_bytes_for_tokens(int64_t tokens) const;

    // Logits (f32 [prompt.size(), vocab]) of every position of a prompt run as one prefill on an
    // empty cache; for cross-backend and oracle comparisons.
    std::vector<float> prompt_logits(const std::vector<int32_t> & prompt);

private:
    struct impl;
    std::unique_ptr<impl> p_;
};

}  // namespace kvcomp::engine
