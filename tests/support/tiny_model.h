// Test support: writes a small random Llama checkpoint (config.json + model.safetensors) and
// computes its logits with a straightforward, independent double-precision forward pass, so the
// engine can be checked against a second implementation of the same math.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/engine.h"

namespace kvcomp::test {

struct tiny_model_spec {
    // head_dim 64: the smallest head size every backend's attention kernels take.
    int64_t hidden = 128, intermediate = 192, layers = 2, heads = 4, kv_heads = 2, head_dim = 64;
    int64_t vocab = 300, max_pos = 512;
    double rope_theta = 10000.0, rms_eps = 1e-5;
    bool tie_embeddings = false;
    std::string weight_dtype = "F32";  // F32, F16 or BF16 in the file
    bool qwen2 = false;                // Qwen2ForCausalLM: q/k/v projections with biases
    // SmolLM3ForCausalLM: Llama plus layers without RoPE, written as no_rope_layers (1 = RoPE,
    // 0 = none) when the list is given, else left to no_rope_layer_interval's default (every 4th).
    bool smollm3 = false;
    std::vector<int> no_rope_layers;
    int64_t eos = 257;
    uint64_t seed = 42;
};

// Writes DIR/config.json and DIR/model.safetensors; returns DIR (created under the temp dir).
std::string write_tiny_model(const tiny_model_spec & spec, const std::string & name);

// A path for `name` in this test process's own temporary directory (created on first use): CTest
// runs every test in its own process, several at once with -j, so fixed paths in /tmp would have
// one process rewrite a model or calibration file while another reads it.
std::string scratch_path(const std::string & name);

// Optional sliding window of the KV method "window": the first prefill_len tokens (the prompt)
// attend causally to the whole prefix; every later (decoded) token at position t attends only to
// positions max(0, t - window) .. t. window 0: full causal attention everywhere.
struct decode_window {
    int64_t window = 0, prefill_len = 0;
};

// What attention receives in one layer, in double, token-major: post-RoPE q [tokens][n_q_heads *
// head_dim], post-RoPE k and v [tokens][n_kv_heads * head_dim] (before the fp16 rounding of the cache).
// On a layer without RoPE (model_config::uses_rope) q and k are the projections as they are.
struct reference_qkv {
    std::vector<std::vector<double>> q, k, v;
};

// Logits f32 [tokens.size(), vocab] of every position, in double. K and V are rounded to fp16
// like the KV cache stores them, so the comparison with the engine is tight. When qkv is given it
// receives every layer's attention inputs.
std::vector<float> reference_logits(const std::string & dir, const std::vector<int32_t> & tokens,
                                    const decode_window & w = {}, std::vector<reference_qkv> * qkv = nullptr);

// Greedy continuation of `prompt` by the reference (recomputes the whole sequence per token).
// With w.window > 0 the prompt is the prefill (w.prefill_len is taken as prompt.size()).
std::vector<int32_t> reference_greedy(const std::string & dir, const std::vector<int32_t> & prompt, int64_t n_new,
                                      decode_window w = {});

// Engine settings the engine tests share: fp32 weights (the tight path), pages of 16, 4 requests
// at once, 256-token contexts, method "none".
engine::engine_config tiny_engine_config(const std::string & dir, const std::string & backend);

// Whether the backend's prefill attention rounds q and the softmax weights to fp16 (tensor cores): CUDA,
// and OpenCL on NVIDIA's driver (attn_prefill.cl's PREFILL_MMA kernel) unless KVCOMP_CL_PREFILL_MMA=0 or
// KVCOMP_CL_TENSOR_CORES=0 keeps its fp32 kernel.
bool prefill_rounds_to_fp16(const std::string & backend);
// Whether the quantized decode on `backend` sums channel-scaled (ZipCache) blocks and window tiles
// apart, per item, in tensor-core kernels whose results agree with KIVI's to fp32 rounding rather than
// bit for bit: CUDA, and NVIDIA's OpenCL unless KVCOMP_CL_QUANT_WARPS or KVCOMP_CL_TENSOR_CORES is 0.
bool quant_decode_sums_per_item(const std::string & backend);

// Logits NMSE the engine tests accept against the fp64 reference on a backend (fp32 weights):
// 1e-9 where every op is fp32; 1e-7 where the prefill attention rounds q to fp16 (its op tolerance in
// test_backend_ops is 1e-6; measured there ~4e-8; engine logits 1.3e-8 to 3e-8 on NVIDIA's OpenCL,
// visit 106). The matching tolerance for a log-probability is logprob_tolerance().
inline double logits_tolerance(const std::string & backend) { return prefill_rounds_to_fp16(backend) ? 1e-7 : 1e-9; }
inline double logprob_tolerance(const std::string & backend) { return prefill_rounds_to_fp16(backend) ? 1e-3 : 1e-4; }

// Submits one greedy request per prompt (n_new tokens, no EOS stop) to `e` and returns their ids.
std::vector<int64_t> submit_greedy(engine::engine & e, const std::vector<std::vector<int32_t>> & prompts,
                                   int64_t n_new);
// Greedy tokens of each prompt, all submitted to one engine (continuous batching) and run; throws
// std::runtime_error (a failing test) if a request ends other than by reaching its length.
std::vector<std::vector<int32_t>> generate_greedy(engine::engine & e, const std::vector<std::vector<int32_t>> & prompts,
                                                  int64_t n_new);

// ||a - b||^2 / ||b||^2 over n values, in double.
double nmse(const float * a, const float * b, size_t n);
inline double nmse(const std::vector<float> & a, const std::vector<float> & b) {
    return nmse(a.data(), b.data(), std::min(a.size(), b.size()));
}

}  // namespace kvcomp::test
