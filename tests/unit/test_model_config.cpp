// config.json parsing, llama3 RoPE frequencies and checkpoint shape checks (host/model/model_config.h).
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "core/error.h"
#include "support/expect_error.h"
#include "host/model/model_config.h"

namespace fs = std::filesystem;
using namespace kvcomp;
using kvcomp::test::expect_error;
using namespace kvcomp::host;

namespace {


// Llama 3.1 8B's config.json (the fields that matter).
const char * const k_llama31 = R"({
  "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
  "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
  "num_key_value_heads": 8, "vocab_size": 128256, "max_position_embeddings": 131072,
  "rms_norm_eps": 1e-05, "rope_theta": 500000.0, "tie_word_embeddings": false,
  "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                   "original_max_position_embeddings": 8192, "rope_type": "llama3"},
  "attention_bias": false, "mlp_bias": false, "hidden_act": "silu", "torch_dtype": "bfloat16",
  "bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009]})";

// A small config; `extra` is spliced into the object.
std::string small_config(const std::string & arch, const std::string & extra = "") {
    return R"({"architectures": [")" + arch + R"("], "hidden_size": 64, "intermediate_size": 96,
               "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
               "vocab_size": 40)" +
           (extra.empty() ? "" : ", " + extra) + "}";
}

}  // namespace

TEST(model_config, llama31_fields) {
    const model_config c = parse_model_config(k_llama31);
    EXPECT_EQ(c.arch, model_arch::llama);
    EXPECT_EQ(c.hidden_size, 4096);
    EXPECT_EQ(c.num_key_value_heads, 8);
    EXPECT_EQ(c.head_dim, 128);
    EXPECT_EQ(c.gqa_group(), 4);
    EXPECT_EQ(c.kv_dim(), 1024);
    EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-5);
    EXPECT_DOUBLE_EQ(c.rope.theta, 500000.0);
    EXPECT_EQ(c.rope.scaling_type, "llama3");
    EXPECT_EQ(c.torch_dtype, "bfloat16");
    EXPECT_EQ(c.bos_token_ids, (std::vector<int64_t>{128000}));
    EXPECT_EQ(c.eos_token_ids, (std::vector<int64_t>{128001, 128008, 128009}));
    EXPECT_EQ(c.sliding_window, 0);
    EXPECT_FALSE(c.attention_bias);
}

TEST(model_config, llama3_rope_frequencies_follow_hf_formula) {
    const model_config c = parse_model_config(k_llama31);
    ASSERT_EQ(c.rope.inv_freq.size(), 64u);
    ASSERT_EQ(c.rope.freq_factors.size(), 64u);
    // Independent double-precision evaluation of transformers' _compute_llama3_parameters.
    const double pi = 3.14159265358979323846;
    int n_high = 0, n_low = 0, n_mid = 0;
    for (int i = 0; i < 64; ++i) {
        const double inv = 1.0 / std::pow(500000.0, 2.0 * i / 128.0);
        const double wavelen = 2 * pi / inv;
        double want;
        if (wavelen < 8192.0 / 4.0) {
            want = inv;
            ++n_high;
        } else if (wavelen > 8192.0 / 1.0) {
            want = inv / 8.0;
            ++n_low;
        } else {
            const double smooth = (8192.0 / wavelen - 1.0) / (4.0 - 1.0);
            want = (1 - smooth) * inv / 8.0 + smooth * inv;
            ++n_mid;
        }
        EXPECT_NEAR(c.rope.inv_freq[size_t(i)], want, 2e-6 * want) << "pair " << i;
        EXPECT_NEAR(c.rope.freq_factors[size_t(i)], inv / want, 2e-5 * inv / want) << "pair " << i;
    }
    // All three regimes occur for these parameters, so each branch is exercised.
    EXPECT_GT(n_high, 0);
    EXPECT_GT(n_low, 0);
    EXPECT_GT(n_mid, 0);
    EXPECT_FLOAT_EQ(c.rope.freq_factors[0], 1.0f);
    EXPECT_FLOAT_EQ(c.rope.freq_factors[63], 8.0f);

    // Without scaling: plain theta^(-2i/d), factors 1.
    const model_config p = parse_model_config(small_config("LlamaForCausalLM"));
    ASSERT_EQ(p.rope.inv_freq.size(), 8u);
    for (int i = 0; i < 8; ++i) {
        EXPECT_NEAR(p.rope.inv_freq[size_t(i)], 1.0 / std::pow(10000.0, 2.0 * i / 16.0), 1e-7);
        EXPECT_EQ(p.rope.freq_factors[size_t(i)], 1.0f);
    }
}

TEST(model_config, defaults_and_architectures) {
    const model_config l = parse_model_config(
        R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 64, "intermediate_size": 96,
            "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 320, "rope_scaling": null,
            "eos_token_id": 257, "head_dim": null})");
    EXPECT_EQ(l.num_key_value_heads, 4);  // default: heads
    EXPECT_EQ(l.head_dim, 16);            // default: hidden / heads
    EXPECT_DOUBLE_EQ(l.rope.theta, 10000.0);
    EXPECT_EQ(l.max_position_embeddings, 2048);
    EXPECT_DOUBLE_EQ(l.rms_norm_eps, 1e-6);
    EXPECT_EQ(l.eos_token_ids, (std::vector<int64_t>{257}));
    EXPECT_TRUE(l.bos_token_ids.empty());
    EXPECT_EQ(l.rope.scaling_type, "");

    const model_config q = parse_model_config(small_config("Qwen2ForCausalLM", R"("tie_word_embeddings": true,
        "sliding_window": 4096, "use_sliding_window": false, "rope_theta": 1000000.0)"));
    EXPECT_EQ(q.arch, model_arch::qwen2);
    EXPECT_TRUE(q.attention_bias);  // Qwen2: q/k/v biases by default
    EXPECT_FALSE(q.attention_out_bias);
    EXPECT_EQ(q.sliding_window, 0);  // recorded only with use_sliding_window
    const model_config qs = parse_model_config(small_config("Qwen2ForCausalLM", R"("use_sliding_window": true,
        "sliding_window": 128, "max_window_layers": 1)"));
    EXPECT_EQ(qs.sliding_window, 128);
    EXPECT_EQ(qs.sliding_window_from_layer, 1);

    // Mistral: window as given, null disables, absent takes MistralConfig's 4096. An explicit head_dim
    // need not equal hidden / heads (Mistral Nemo).
    EXPECT_EQ(
        parse_model_config(small_config("MistralForCausalLM", R"("sliding_window": 32)")).sliding_window, 32);
    EXPECT_EQ(
        parse_model_config(small_config("MistralForCausalLM", R"("sliding_window": null)")).sliding_window,
        0);
    EXPECT_EQ(parse_model_config(small_config("MistralForCausalLM")).sliding_window, 4096);
    const model_config m = parse_model_config(small_config("MistralForCausalLM", R"("head_dim": 8)"));
    EXPECT_EQ(m.head_dim, 8);
    EXPECT_EQ(m.q_dim(), 32);
    // model_type alone selects the architecture.
    EXPECT_EQ(parse_model_config(R"({"model_type": "qwen2", "hidden_size": 8, "intermediate_size": 8,
        "num_hidden_layers": 1, "num_attention_heads": 2, "vocab_size": 8})")
                  .arch,
              model_arch::qwen2);
    // transformers v5 "rope_parameters".
    const model_config v5 = parse_model_config(small_config("LlamaForCausalLM", R"("rope_parameters": {
        "rope_theta": 500000.0, "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
        "high_freq_factor": 4.0, "original_max_position_embeddings": 8192})"));
    EXPECT_DOUBLE_EQ(v5.rope.theta, 500000.0);
    EXPECT_EQ(v5.rope.scaling_type, "llama3");
}

// SmolLM3 (transformers' configuration_smollm3.py / modeling_smollm3.py): Llama plus per-layer
// RoPE from no_rope_layers (1 = RoPE, 0 = none) or every no_rope_layer_interval-th layer without.
TEST(model_config, smollm3_layers_without_rope) {
    auto smol = [](const std::string & extra) {
        return R"({"architectures": ["SmolLM3ForCausalLM"], "hidden_size": 64, "intermediate_size": 96,
                   "num_hidden_layers": 8, "num_attention_heads": 8, "vocab_size": 40)" +
               (extra.empty() ? "" : ", " + extra) + "}";
    };
    // Absent: the default interval 4 drops RoPE on layers 3 and 7 ((l + 1) % 4 == 0).
    const model_config d = parse_model_config(smol(""));
    EXPECT_EQ(d.arch, model_arch::smollm3);
    EXPECT_EQ(d.uses_rope, (std::vector<bool>{true, true, true, false, true, true, true, false}));
    EXPECT_FALSE(d.layer_uses_rope(3));
    EXPECT_FALSE(d.all_layers_use_rope());
    // SmolLM3Config's other defaults: 4 KV heads when absent, rope_theta 2e6, tied embeddings,
    // 32768 positions; layout as Llama's (no biases).
    EXPECT_EQ(d.num_key_value_heads, 4);
    EXPECT_DOUBLE_EQ(d.rope.theta, 2000000.0);
    EXPECT_TRUE(d.tie_word_embeddings);
    EXPECT_EQ(d.max_position_embeddings, 32768);
    EXPECT_FALSE(d.attention_bias);
    EXPECT_EQ(d.sliding_window, 0);
    EXPECT_EQ(parse_model_config(smol(R"("num_key_value_heads": null)")).num_key_value_heads, 8);
    // An interval, null list = absent; an explicit list wins (entries past the last layer ignored,
    // as transformers ignores them; booleans read as 0/1).
    EXPECT_EQ(parse_model_config(smol(R"("no_rope_layer_interval": 2, "no_rope_layers": null)")).uses_rope,
              (std::vector<bool>{true, false, true, false, true, false, true, false}));
    EXPECT_EQ(parse_model_config(
                  smol(R"("no_rope_layers": [0, 1, 1, 1, 1, 1, 1, 0, 0], "no_rope_layer_interval": 3)"))
                  .uses_rope,
              (std::vector<bool>{false, true, true, true, true, true, true, false}));
    EXPECT_EQ(
        parse_model_config(smol(R"("no_rope_layers": [true, true, false, true, true, true, true, true])"))
            .uses_rope[2],
        false);
    // model_type alone selects it too.
    EXPECT_EQ(parse_model_config(R"({"model_type": "smollm3", "hidden_size": 8, "intermediate_size": 8,
        "num_hidden_layers": 1, "num_attention_heads": 4, "vocab_size": 8})")
                  .arch,
              model_arch::smollm3);
    // Sliding window: on the layers layer_types marks, by default the NoPE ones.
    EXPECT_EQ(parse_model_config(smol(R"("use_sliding_window": true, "sliding_window": 32)")).sliding_window,
              32);
    EXPECT_EQ(parse_model_config(smol(R"("use_sliding_window": false, "sliding_window": 32)")).sliding_window,
              0);
    const std::string all_full = R"("layer_types": ["full_attention", "full_attention", "full_attention",
        "full_attention", "full_attention", "full_attention", "full_attention", "full_attention"])";
    EXPECT_EQ(parse_model_config(smol(R"("use_sliding_window": true, "sliding_window": 32, )" + all_full))
                  .sliding_window,
              0);
    // Other architectures rotate every layer; a list of ones is accepted.
    const model_config l =
        parse_model_config(small_config("LlamaForCausalLM", R"("no_rope_layers": [1, 1])"));
    EXPECT_EQ(l.uses_rope, (std::vector<bool>{true, true}));
    EXPECT_TRUE(parse_model_config(small_config("LlamaForCausalLM", R"("no_rope_layer_interval": 1)"))
                    .all_layers_use_rope());

    // Errors name the field and the value.
    expect_error([&] { parse_model_config(smol(R"("no_rope_layers": [1, 1, 1, 0])"), "smol/config.json"); },
                 status::invalid_argument,
                 {"smol/config.json", "no_rope_layers", "4 entries", "num_hidden_layers is 8"});
    expect_error([&] { parse_model_config(smol(R"("no_rope_layers": [1, 1, 2, 1, 1, 1, 1, 0])")); },
                 status::invalid_argument, {"no_rope_layers", "entry 2 is 2", "0 (no RoPE) or 1 (RoPE)"});
    expect_error([&] { parse_model_config(smol(R"("no_rope_layers": [1, 1, "0", 1, 1, 1, 1, 0])")); },
                 status::invalid_argument, {"no_rope_layers", "entry 2 is \"0\""});
    expect_error([&] { parse_model_config(smol(R"("no_rope_layers": [1, 1, 0.5, 1, 1, 1, 1, 0])")); },
                 status::invalid_argument, {"no_rope_layers", "entry 2 is 0.5"});
    expect_error([&] { parse_model_config(smol(R"("no_rope_layers": 4)")); }, status::invalid_argument,
                 {"no_rope_layers", "must be a list"});
    expect_error([&] { parse_model_config(smol(R"("no_rope_layer_interval": 0)")); },
                 status::invalid_argument, {"no_rope_layer_interval", "positive", "0"});
    expect_error([&] { parse_model_config(smol(R"("layer_types": ["full_attention"])")); },
                 status::invalid_argument, {"layer_types", "num_hidden_layers (8)"});
    expect_error(
        [&] {
            parse_model_config(
                smol(R"("layer_types": ["chunked_attention", "full_attention", "full_attention",
                "full_attention", "full_attention", "full_attention", "full_attention", "full_attention"])"));
        },
        status::invalid_argument, {"layer_types", "chunked_attention"});
    expect_error([] { parse_model_config(small_config("LlamaForCausalLM", R"("no_rope_layers": [1, 0])")); },
                 status::invalid_argument,
                 {"no_rope_layers", "layer 1", "LlamaForCausalLM", "SmolLM3ForCausalLM"});
    expect_error([] { parse_model_config(small_config("MistralForCausalLM", R"("no_rope_layers": [1])")); },
                 status::invalid_argument, {"no_rope_layers", "1 entries", "num_hidden_layers is 2"});
}

TEST(model_config, errors_name_field_and_value) {
    expect_error([] { parse_model_config(small_config("GPT2LMHeadModel")); }, status::invalid_argument,
                 {"architectures", "GPT2LMHeadModel", "SmolLM3ForCausalLM"});
    expect_error(
        [] {
            parse_model_config(R"({"architectures": ["LlamaForCausalLM"], "intermediate_size": 8,
        "num_hidden_layers": 1, "num_attention_heads": 2, "vocab_size": 8})",
                               "my/config.json");
        },
        status::invalid_argument, {"my/config.json", "hidden_size", "missing"});
    expect_error([] { parse_model_config(R"({"hidden_size": 8})"); }, status::invalid_argument,
                 {"architectures"});
    expect_error([] { parse_model_config(small_config("LlamaForCausalLM", R"("num_attention_heads": 6)")); },
                 status::invalid_argument, {"num_attention_heads (6)", "hidden_size (64)"});
    expect_error([] { parse_model_config(small_config("LlamaForCausalLM", R"("num_key_value_heads": 3)")); },
                 status::invalid_argument, {"num_key_value_heads (3)", "num_attention_heads (4)"});
    expect_error(
        [] {
            parse_model_config(
                small_config("LlamaForCausalLM", R"("rope_scaling": {"type": "yarn", "factor": 4.0})"));
        },
        status::invalid_argument, {"rope_scaling", "yarn"});
    expect_error(
        [] {
            parse_model_config(small_config("LlamaForCausalLM",
                                            R"("rope_scaling": {"rope_type": "linear", "factor": 2.0})"));
        },
        status::invalid_argument, {"linear"});
    expect_error(
        [] {
            parse_model_config(small_config("LlamaForCausalLM", R"("rope_scaling": {"rope_type": "llama3",
        "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192})"));
        },
        status::invalid_argument, {"rope_scaling.factor"});
    expect_error(
        [] {
            parse_model_config(small_config("LlamaForCausalLM", R"("rope_scaling": {"rope_type": "llama3",
        "factor": 8.0, "low_freq_factor": 4.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192})"));
        },
        status::invalid_argument, {"low_freq_factor"});
    expect_error(
        [] { parse_model_config(R"({"architectures": ["LlamaForCausalLM"], "hidden_size": "64"})"); },
        status::invalid_argument, {"hidden_size", "integer", "\"64\""});
    expect_error([] { parse_model_config(small_config("LlamaForCausalLM", R"("vocab_size": 0)")); },
                 status::invalid_argument, {"vocab_size", "positive"});
    expect_error([] { parse_model_config(small_config("LlamaForCausalLM", R"("hidden_act": "gelu")")); },
                 status::invalid_argument, {"hidden_act", "gelu"});
    expect_error([] { parse_model_config(small_config("LlamaForCausalLM", R"("eos_token_id": "x")")); },
                 status::invalid_argument, {"eos_token_id"});
    expect_error([] { parse_model_config("{not json"); }, status::invalid_argument, {"JSON"});
    expect_error([] { load_model_config("/nonexistent/kvcomp/dir"); }, status::io_error,
                 {"/nonexistent/kvcomp/dir"});
}

TEST(model_config, expected_tensors_layout) {
    const model_config q =
        parse_model_config(small_config("Qwen2ForCausalLM", R"("tie_word_embeddings": true)"));
    const std::vector<expected_tensor> t = expected_tensors(q);
    auto find = [&](const std::string & n) -> const expected_tensor * {
        for (const auto & e : t)
            if (e.name == n) return &e;
        return nullptr;
    };
    ASSERT_NE(find("model.embed_tokens.weight"), nullptr);
    EXPECT_EQ(find("model.embed_tokens.weight")->shape, (std::vector<int64_t>{40, 64}));
    EXPECT_EQ(find("model.layers.1.self_attn.q_proj.weight")->shape, (std::vector<int64_t>{64, 64}));
    EXPECT_EQ(find("model.layers.1.self_attn.k_proj.weight")->shape, (std::vector<int64_t>{32, 64}));
    EXPECT_EQ(find("model.layers.1.self_attn.k_proj.bias")->shape, (std::vector<int64_t>{32}));
    EXPECT_EQ(find("model.layers.0.self_attn.o_proj.bias"), nullptr);
    EXPECT_EQ(find("model.layers.0.mlp.down_proj.weight")->shape, (std::vector<int64_t>{64, 96}));
    EXPECT_EQ(find("model.layers.0.mlp.gate_proj.weight")->shape, (std::vector<int64_t>{96, 64}));
    EXPECT_NE(find("model.norm.weight"), nullptr);
    EXPECT_EQ(find("lm_head.weight"), nullptr);  // tied
    EXPECT_EQ(find("model.layers.2.input_layernorm.weight"), nullptr);
    // 1 embed + 2 layers x (2 norms + 4 proj + 3 biases + 3 mlp) + final norm.
    EXPECT_EQ(t.size(), 1u + 2u * 12u + 1u);
    const model_config l = parse_model_config(small_config("LlamaForCausalLM"));
    EXPECT_EQ(expected_tensors(l).size(), 1u + 2u * 9u + 2u);
}

TEST(model_config, check_tensors_reports_shape_mismatch) {
    const fs::path dir =
        fs::temp_directory_path() /
        ("kvcomp_cfg_" + std::to_string(std::chrono::steady_clock::now().time_since_epoch().count()));
    fs::remove_all(dir);
    fs::create_directories(dir);
    const model_config c = parse_model_config(small_config("LlamaForCausalLM"));
    std::ofstream(dir / "config.json") << small_config("LlamaForCausalLM");
    EXPECT_EQ(load_model_config(dir.string()).hidden_size, 64);

    // A checkpoint with everything, where `bad` gets shape [64, 64] and `drop` is left out.
    auto write = [&](const std::string & bad, const std::string & drop, st_dtype type = st_dtype::bf16) {
        std::vector<std::vector<uint8_t>> bufs;
        std::vector<st_write_tensor> ts;
        for (const expected_tensor & e : expected_tensors(c)) {
            if (e.name == drop) continue;
            std::vector<int64_t> shape = e.name == bad ? std::vector<int64_t>{64, 64} : e.shape;
            int64_t n = 1;
            for (int64_t d : shape) n *= d;
            bufs.emplace_back(size_t(n) * st_dtype_size(type), uint8_t(0));
            ts.push_back({e.name, type, shape, bufs.back().data(), bufs.back().size()});
        }
        write_safetensors((dir / "model.safetensors").string(), ts);
        return tensor_set::open(dir.string());
    };
    EXPECT_NO_THROW(check_tensors(write("", ""), c));
    expect_error([&] { check_tensors(write("model.layers.1.self_attn.k_proj.weight", ""), c); },
                 status::invalid_argument,
                 {"model.layers.1.self_attn.k_proj.weight has shape [64,64], config.json implies [32,64]",
                  dir.string(), "1 problem"});
    expect_error([&] { check_tensors(write("", "model.layers.0.mlp.up_proj.weight"), c); },
                 status::invalid_argument, {"model.layers.0.mlp.up_proj.weight is missing", "[96,64]"});
    expect_error([&] { check_tensors(write("", "", st_dtype::i16), c); }, status::invalid_argument,
                 {"I16", "21 problems", "and 13 more"});
    fs::remove_all(dir);
}
