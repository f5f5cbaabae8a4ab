// Model weights on a backend: read from a checkpoint (host/model) or made up at random from a
// config.json alone (for benchmarks at real shapes without the real weights), uploaded once.
//
// Matrices keep Hugging Face's nn.Linear layout [out_features, in_features] and are used with
// gemm(trans_b): y[n_tokens, out] = x[n_tokens, in] * W^T. They are stored in `matrix_type`
// (f16 halves the bytes decode must read; f32 is the exact path for oracle checks). Norm weights
// and biases stay f32.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/backend.h"
#include "host/model/model_config.h"

namespace kvcomp::engine {

struct layer_weights {
    buffer_ptr attn_norm, wq, wk, wv, wo, mlp_norm, w_gate, w_up, w_down;
    buffer_ptr bq, bk, bv;  // Qwen2 q/k/v biases (null when absent)
};

struct model_weights {
    dtype matrix_type = dtype::f16;
    buffer_ptr embed;       // [vocab, hidden] in matrix_type
    buffer_ptr lm_head;     // [vocab, hidden]; null when tied to embed
    buffer_ptr final_norm;  // f32 [hidden]
    buffer_ptr freq_factors;  // f32 [head_dim/2]; null without rope scaling
    std::vector<layer_weights> layers;
    uint64_t bytes = 0;     // device bytes of all weights

    buffer & lm_head_or_embed() const { return lm_head ? *lm_head : *embed; }
};

// Loads from a model directory (checks every tensor against the config first).
model_weights load_model_weights(backend & be, const host::model_config & cfg, const std::string & model_dir,
                                 dtype matrix_type);

// Random weights (normal * 0.02 for matrices, 1 for norms), deterministic from `seed`.
model_weights random_model_weights(backend & be, const host::model_config & cfg, dtype matrix_type, uint64_t seed);

// A weight tensor's f32 values on the host by checkpoint name and element count, for host math on
// the weights (calibration bases): from the checkpoint, or the values random_model_weights(seed)
// uploads (before their rounding to the matrix dtype).
using weight_reader = std::function<std::vector<float>(const std::string & name, int64_t n)>;
weight_reader checkpoint_weight_reader(const std::string & model_dir);
weight_reader random_weight_reader(uint64_t seed);

}  // namespace kvcomp::engine
