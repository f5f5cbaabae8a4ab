// One forward pass of a Llama-family decoder (Llama 2/3, Mistral, Qwen2, SmolLM3) as a list of op
// descriptors on one backend. The KV cache is reached only through the kv_method.
//
// Per layer: rms_norm -> q/k/v projections (+ Qwen2 biases) -> rope(q), rope(k) (skipped on the
// layers model_config::uses_rope marks as without RoPE: SmolLM3's NoPE layers) -> method.attend
// (append + attention) -> o_proj accumulated into the residual (gemm beta = 1) -> rms_norm ->
// gate/up -> silu_mul -> down_proj accumulated into the residual. After the last layer only the
// rows whose logits are wanted (the last token of each request) go through the final norm and
// lm_head. A method's layer_projection (kv_method.h) replaces v_proj / o_proj (and, on layers
// without RoPE, q_proj / k_proj) and their widths, and may ask for k before RoPE.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/kv_method.h"
#include "engine/model_weights.h"

namespace kvcomp::engine {

// Host-side inputs of one step; uploaded in one transfer by llama_forward::run.
struct step_inputs {
    bool prefill = false;
    std::vector<int32_t> tokens, positions, batch_idx;   // [n_tokens]
    std::vector<int32_t> indptr, indices, last_page_len;  // page table after the append
    std::vector<int32_t> seq_indptr;                      // prefill: [batch+1]
    std::vector<int32_t> seq_ids;                         // [batch] the engine's sequence id of each request
    std::vector<int32_t> logit_rows;                      // rows of the step whose logits are wanted
    int64_t batch = 0, max_seq_len = 0;
};

class llama_forward {
public:
    // f16_activations: with f16 weights, each weight matmul takes its input rounded to f16 (one
    // f16 x f16 -> f32 product with fp32 accumulation, as fp16 inference in transformers does);
    // false keeps fp32 inputs (exact mixed products: on CUDA two tensor-core GEMMs, so the
    // weights are read twice per step).
    llama_forward(backend & be, const host::model_config & cfg, const model_weights & w, bool f16_activations);

    // Runs every layer for the step's tokens and returns the logits of step.logit_rows as a device
    // view f32 [rows, vocab] (valid until the next run).
    tensor run(kv_method & method, const step_inputs & step);

private:
    void reserve(const kv_method & method, int64_t n_tokens, int64_t n_rows);
    tensor act(size_t which, std::initializer_list<int64_t> shape) const;
    tensor matmul_input(const tensor & x);  // x, or its f16 copy when f16_inputs_
    void linear(const tensor & x, buffer & w, buffer * bias, int64_t out, int64_t in, const tensor & y, int64_t n,
                bool accumulate);

    backend & be_;
    const host::model_config & cfg_;
    const model_weights & w_;
    bool f16_inputs_;
    std::vector<buffer_ptr> act_;  // activation buffers, grown as needed
    buffer_ptr inputs_;            // the step's i32 arrays
    int64_t cap_tokens_ = 0, cap_rows_ = 0;
    size_t inputs_cap_ = 0;
};

}  // namespace kvcomp::engine
