// Hugging Face config.json for the decoder-only architectures kvcomp runs (Llama, Mistral, Qwen2,
// SmolLM3), the tensor names and shapes a checkpoint of that config must hold, and the RoPE
// frequencies.
//
// Required fields (an error names the missing one): "architectures" (a one-element list; "model_type"
// alone is accepted as a fallback), hidden_size, intermediate_size, num_hidden_layers,
// num_attention_heads, vocab_size. Every other field takes the default of the transformers config
// class of that architecture when absent or null (listed with each member below), so a config reads
// the way transformers reads it.
//
// Errors: io_error when the file cannot be read; invalid_argument (message names the file, the
// field and the value) for bad JSON, an unknown architecture, a missing required field, a field of
// the wrong type or out of range, inconsistent head counts, an unsupported rope_scaling type or
// hidden_act, a no_rope_layers list that is too short or holds anything but 0/1.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "host/model/safetensors.h"

namespace kvcomp::host {

enum class model_arch { llama, mistral, qwen2, smollm3 };
const char * model_arch_name(model_arch a);  // "LlamaForCausalLM", ...

// RoPE parameters. Position p rotates dimension pair i (0 <= i < head_dim/2, pairs (i, i+head_dim/2)
// in the Hugging Face "rotate_half" layout) by angle p * inv_freq[i].
struct rope_config {
    double theta = 10000.0;    // rope_theta; default 10000
    std::string scaling_type;  // "" (none / "default") or "llama3"
    // llama3 parameters (rope_scaling.{factor, low_freq_factor, high_freq_factor,
    // original_max_position_embeddings}); all required when scaling_type is "llama3".
    double factor = 1.0;
    double low_freq_factor = 1.0;
    double high_freq_factor = 4.0;
    int64_t original_max_position_embeddings = 0;
    // inv_freq[i] = theta^(-2i/head_dim) / freq_factors[i]; size head_dim/2. Filled by
    // parse_model_config: all 1 without scaling; for llama3 the divisor that Hugging Face's
    // _compute_llama3_parameters applies (same formula, evaluated in float32 like torch; see .cpp).
    std::vector<float> freq_factors;
    std::vector<float> inv_freq;  // the final per-pair frequencies, float32 like transformers' buffer
};

struct model_config {
    model_arch arch = model_arch::llama;
    std::string architecture;  // as written, e.g. "Qwen2ForCausalLM"
    std::string model_type;    // "llama" / "mistral" / "qwen2" / "smollm3" ("" when absent)
    int64_t hidden_size = 0;
    int64_t intermediate_size = 0;
    int64_t num_hidden_layers = 0;
    int64_t num_attention_heads = 0;
    // default num_attention_heads (SmolLM3: 4 when absent, num_attention_heads when null)
    int64_t num_key_value_heads = 0;
    int64_t head_dim = 0;             // default hidden_size / num_attention_heads
    int64_t vocab_size = 0;
    int64_t max_position_embeddings = 0;  // default: llama 2048, mistral 131072, qwen2/smollm3 32768
    double rms_norm_eps = 1e-6;           // default 1e-6 (every architecture)
    rope_config rope;                     // rope_theta default 10000 (SmolLM3: 2e6)
    // Per layer: whether RoPE rotates that layer's q and k. SmolLM3 reads it from no_rope_layers (a
    // list of at least num_hidden_layers ints, despite the name 1 = the layer USES RoPE, 0 = it does
    // not: transformers' `self.use_rope = config.no_rope_layers[layer_idx]`; entries past the last
    // layer are ignored as transformers ignores them) or, when that is absent or null, builds it from
    // no_rope_layer_interval (default 4): layer l has no RoPE when (l + 1) % interval == 0. Every
    // other architecture rotates every layer (see parse_model_config for a no_rope_layers field in
    // their files). Size num_hidden_layers after parsing.
    std::vector<bool> uses_rope;
    bool tie_word_embeddings = false;  // default false, SmolLM3 true (lm_head.weight then absent/ignored)
    // Biases: q/k/v projections (attention_bias; Qwen2 always true unless the file says otherwise)
    // and o_proj (Llama's attention_bias covers o_proj too; Qwen2 has none).
    bool attention_bias = false;
    bool attention_out_bias = false;
    bool mlp_bias = false;               // Llama's mlp_bias: gate/up/down biases
    std::string hidden_act = "silu";     // only "silu" is accepted
    std::string torch_dtype;             // "bfloat16", "float16", "float32" or "" (also read from "dtype")
    std::vector<int64_t> bos_token_ids;  // int or list in the file; empty when absent or null
    std::vector<int64_t> eos_token_ids;
    // Sliding-window attention: window in tokens, 0 = full attention. Mistral: sliding_window as given
    // (null = 0). Qwen2: sliding_window only when use_sliding_window is true, and then only for layers
    // >= max_window_layers (recorded in sliding_window_from_layer); SmolLM3: sliding_window when
    // use_sliding_window is true and some layer's layer_types entry is "sliding_attention" (by
    // default its layers without RoPE); Llama: 0.
    int64_t sliding_window = 0;
    int64_t sliding_window_from_layer = 0;

    int64_t q_dim() const { return num_attention_heads * head_dim; }
    int64_t kv_dim() const { return num_key_value_heads * head_dim; }
    int64_t gqa_group() const { return num_attention_heads / num_key_value_heads; }
    // Whether layer l applies RoPE (true where uses_rope was never filled, e.g. a hand-built config).
    bool layer_uses_rope(int64_t l) const { return uses_rope.empty() || uses_rope[size_t(l)]; }
    bool all_layers_use_rope() const;
};

// Parses config.json text; `source` names the file in messages.
model_config parse_model_config(const std::string & json_text, const std::string & source = "config.json");
// Reads DIR/config.json, or `path` itself when it is a file.
model_config load_model_config(const std::string & path);

// The per-pair RoPE frequencies for head_dim (see rope_config::inv_freq), for callers that build a
// rope_config by hand. Throws invalid_argument on bad llama3 parameters.
void compute_rope_frequencies(rope_config & rope, int64_t head_dim);

struct expected_tensor {
    std::string name;
    std::vector<int64_t> shape;  // Hugging Face layout: nn.Linear weight is [out_features, in_features]
};

// Every tensor a checkpoint of `cfg` must contain, in load order: model.embed_tokens.weight
// [vocab, hidden]; per layer N: model.layers.N.input_layernorm.weight [hidden],
// .self_attn.{q,k,v,o}_proj.weight (+ .bias when the config has them), .post_attention_layernorm.weight,
// .mlp.{gate,up,down}_proj.weight; model.norm.weight [hidden]; lm_head.weight [vocab, hidden] unless
// tie_word_embeddings.
std::vector<expected_tensor> expected_tensors(const model_config & cfg);

// Checks `tensors` against expected_tensors(cfg): each must exist, have that shape and a float dtype
// (F32/F16/BF16). Throws invalid_argument listing up to 8 problems, e.g.
// "model.layers.3.self_attn.k_proj.weight has shape [512,2048], config.json implies [256,2048]".
// Extra tensors (e.g. a tied lm_head.weight, rotary inv_freq buffers) are ignored.
void check_tensors(const tensor_set & tensors, const model_config & cfg);

}  // namespace kvcomp::host
