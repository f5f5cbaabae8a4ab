#include "support/tiny_model.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <stdexcept>

#include "core/dtype.h"
#include "core/error.h"
#include "core/registry.h"
#include "host/model/model_config.h"
#include "host/model/safetensors.h"

#include <unistd.h>

namespace kvcomp::test {

namespace fs = std::filesystem;

namespace {

// Whether `backend` names an OpenCL device of NVIDIA's driver (where the tensor-core kernels run)
// and none of the variables in `opt_outs` is "0".
bool nvidia_opencl_unless(const std::string & backend, std::initializer_list<const char *> opt_outs) {
    if (backend.rfind("opencl", 0) != 0) return false;
    for (const char * off : opt_outs)
        if (const char * v = std::getenv(off); v && std::string(v) == "0") return false;
    const std::string name = resolve_backend_name(backend);  // the device create_backend picks
    for (const auto & d : list_devices())
        if (d.info.name == name)
            return d.info.vendor.find("NVIDIA") != std::string::npos ||
                   d.info.platform.find("NVIDIA") != std::string::npos;
    return false;
}

}  // namespace

bool prefill_rounds_to_fp16(const std::string & backend) {
    if (backend.rfind("cuda", 0) == 0) return true;
    return nvidia_opencl_unless(backend, {"KVCOMP_CL_PREFILL_MMA", "KVCOMP_CL_TENSOR_CORES"});
}

bool quant_decode_sums_per_item(const std::string & backend) {
    if (backend.rfind("cuda", 0) == 0) return true;
    return nvidia_opencl_unless(backend, {"KVCOMP_CL_QUANT_WARPS", "KVCOMP_CL_TENSOR_CORES"});
}

std::string scratch_path(const std::string & name) {
    static const fs::path root = [] {
        const fs::path r = fs::temp_directory_path() / ("kvcomp_test_" + std::to_string(::getpid()));
        fs::create_directories(r);
        return r;
    }();
    return (root / name).string();
}

std::string write_tiny_model(const tiny_model_spec & s, const std::string & name) {
    const fs::path dir = scratch_path(name);
    fs::create_directories(dir);
    const char * arch = s.qwen2 ? "Qwen2ForCausalLM" : s.smollm3 ? "SmolLM3ForCausalLM" : "LlamaForCausalLM";
    const char * model_type = s.qwen2 ? "qwen2" : s.smollm3 ? "smollm3" : "llama";
    nlohmann::json cfg = {{"architectures", {arch}},
                          {"model_type", model_type},
                          {"hidden_size", s.hidden},
                          {"intermediate_size", s.intermediate},
                          {"num_hidden_layers", s.layers},
                          {"num_attention_heads", s.heads},
                          {"num_key_value_heads", s.kv_heads},
                          {"head_dim", s.head_dim},
                          {"vocab_size", s.vocab},
                          {"max_position_embeddings", s.max_pos},
                          {"rms_norm_eps", s.rms_eps},
                          {"rope_theta", s.rope_theta},
                          {"tie_word_embeddings", s.tie_embeddings},
                          {"hidden_act", "silu"},
                          {"bos_token_id", 256},
                          {"eos_token_id", s.eos},
                          {"torch_dtype", "float32"}};
    if (!s.no_rope_layers.empty()) cfg["no_rope_layers"] = s.no_rope_layers;
    std::ofstream(dir / "config.json") << cfg.dump(2);

    const host::model_config mc = host::load_model_config(dir.string());
    std::mt19937_64 rng(s.seed);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    host::st_dtype type = host::st_dtype::f32;
    KVCOMP_CHECK_ARG(host::st_dtype_from_name(s.weight_dtype, type), "bad dtype ", s.weight_dtype);
    std::vector<std::vector<uint8_t>> store;
    std::vector<host::st_write_tensor> tensors;
    for (const auto & e : host::expected_tensors(mc)) {
        int64_t n = 1;
        for (int64_t d : e.shape) n *= d;
        std::vector<float> v(static_cast<size_t>(n));
        const bool norm = e.name.find("norm") != std::string::npos;
        // Scales chosen so activations stay O(1) and logits are well separated.
        const float scale = norm ? 0.1f : e.name.find("embed") != std::string::npos ? 1.0f
                                                                                  : 1.0f / std::sqrt(float(e.shape.back()));
        for (float & x : v) x = norm ? 1.0f + scale * nd(rng) : scale * nd(rng);
        store.push_back(host::encode_floats(v, type));
        tensors.push_back({e.name, type, e.shape, store.back().data(), store.back().size()});
    }
    host::write_safetensors((dir / "model.safetensors").string(), tensors);
    return dir.string();
}

namespace {

struct ref_model {
    host::model_config cfg;
    std::map<std::string, std::vector<float>> w;
    explicit ref_model(const std::string & dir) : cfg(host::load_model_config(dir)) {
        const auto ts = host::tensor_set::open(dir);
        for (const auto & e : host::expected_tensors(cfg)) w[e.name] = ts.get_floats(e.name);
    }
    const std::vector<float> & at(const std::string & n) const { return w.at(n); }
};

using mat = std::vector<std::vector<double>>;  // [tokens][features]

mat linear(const mat & x, const std::vector<float> & W, int64_t out, int64_t in) {
    mat y(x.size(), std::vector<double>(static_cast<size_t>(out), 0.0));
    for (size_t t = 0; t < x.size(); ++t)
        for (int64_t o = 0; o < out; ++o) {
            double acc = 0.0;
            for (int64_t i = 0; i < in; ++i) acc += x[t][size_t(i)] * double(W[size_t(o * in + i)]);
            y[t][size_t(o)] = acc;
        }
    return y;
}

void add_bias(mat & y, const std::vector<float> & b) {
    for (auto & row : y)
        for (size_t i = 0; i < row.size(); ++i) row[i] += double(b[i]);
}

mat rms_norm(const mat & x, const std::vector<float> & w, double eps) {
    mat y = x;
    for (auto & row : y) {
        double ss = 0.0;
        for (double v : row) ss += v * v;
        const double inv = 1.0 / std::sqrt(ss / double(row.size()) + eps);
        for (size_t i = 0; i < row.size(); ++i) row[i] *= inv * double(w[i]);
    }
    return y;
}

void rope(mat & x, int64_t heads, int64_t hd, double theta) {
    for (size_t t = 0; t < x.size(); ++t)
        for (int64_t h = 0; h < heads; ++h)
            for (int64_t i = 0; i < hd / 2; ++i) {
                const double a = double(t) * std::pow(theta, -2.0 * double(i) / double(hd));
                double & x0 = x[t][size_t(h * hd + i)];
                double & x1 = x[t][size_t(h * hd + i + hd / 2)];
                const double r0 = x0 * std::cos(a) - x1 * std::sin(a), r1 = x1 * std::cos(a) + x0 * std::sin(a);
                x0 = r0, x1 = r1;
            }
}

double to_half_and_back(double v) { return double(half_to_float(float_to_half(float(v)))); }

}  // namespace

std::vector<float> reference_logits(const std::string & dir, const std::vector<int32_t> & tokens,
                                    const decode_window & w, std::vector<reference_qkv> * qkv) {
    const ref_model m(dir);
    const auto & c = m.cfg;
    const int64_t H = c.hidden_size, nq = c.num_attention_heads, nkv = c.num_key_value_heads, hd = c.head_dim;
    const int64_t I = c.intermediate_size, V = c.vocab_size;
    const auto & emb = m.at("model.embed_tokens.weight");
    mat x;
    for (int32_t t : tokens) {
        std::vector<double> row(static_cast<size_t>(H));
        for (int64_t i = 0; i < H; ++i) row[size_t(i)] = emb[size_t(t * H + i)];
        x.push_back(row);
    }
    const size_t n = tokens.size();
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
        const std::string p = "model.layers." + std::to_string(l) + ".";
        const mat h = rms_norm(x, m.at(p + "input_layernorm.weight"), c.rms_norm_eps);
        mat q = linear(h, m.at(p + "self_attn.q_proj.weight"), nq * hd, H);
        mat k = linear(h, m.at(p + "self_attn.k_proj.weight"), nkv * hd, H);
        mat v = linear(h, m.at(p + "self_attn.v_proj.weight"), nkv * hd, H);
        if (c.attention_bias) {
            add_bias(q, m.at(p + "self_attn.q_proj.bias"));
            add_bias(k, m.at(p + "self_attn.k_proj.bias"));
            add_bias(v, m.at(p + "self_attn.v_proj.bias"));
        }
        if (c.layer_uses_rope(l)) {
            rope(q, nq, hd, c.rope.theta);
            rope(k, nkv, hd, c.rope.theta);
        }
        if (qkv) qkv->push_back({q, k, v});
        for (auto & row : k)
            for (double & e : row) e = to_half_and_back(e);
        for (auto & row : v)
            for (double & e : row) e = to_half_and_back(e);
        mat att(n, std::vector<double>(static_cast<size_t>(nq * hd), 0.0));
        for (size_t t = 0; t < n; ++t)
            for (int64_t hq = 0; hq < nq; ++hq) {
                const int64_t hk = hq / (nq / nkv);
                // First key this token sees: 0, or the start of its window for decoded tokens.
                const size_t lo = w.window > 0 && int64_t(t) >= w.prefill_len
                                      ? size_t(std::max<int64_t>(0, int64_t(t) - w.window))
                                      : 0;
                std::vector<double> s(t + 1, 0.0);
                double mx = -1e300;
                for (size_t j = lo; j <= t; ++j) {
                    double d = 0.0;
                    for (int64_t i = 0; i < hd; ++i) d += q[t][size_t(hq * hd + i)] * k[j][size_t(hk * hd + i)];
                    s[j] = d / std::sqrt(double(hd));
                    mx = std::max(mx, s[j]);
                }
                double sum = 0.0;
                for (size_t j = lo; j <= t; ++j) sum += s[j] = std::exp(s[j] - mx);
                for (size_t j = lo; j <= t; ++j)
                    for (int64_t i = 0; i < hd; ++i) att[t][size_t(hq * hd + i)] += s[j] / sum * v[j][size_t(hk * hd + i)];
            }
        const mat o = linear(att, m.at(p + "self_attn.o_proj.weight"), H, nq * hd);
        for (size_t t = 0; t < n; ++t)
            for (int64_t i = 0; i < H; ++i) x[t][size_t(i)] += o[t][size_t(i)];
        const mat h2 = rms_norm(x, m.at(p + "post_attention_layernorm.weight"), c.rms_norm_eps);
        const mat g = linear(h2, m.at(p + "mlp.gate_proj.weight"), I, H);
        const mat u = linear(h2, m.at(p + "mlp.up_proj.weight"), I, H);
        mat a = g;
        for (size_t t = 0; t < n; ++t)
            for (int64_t i = 0; i < I; ++i) {
                const double gv = g[t][size_t(i)];
                a[t][size_t(i)] = gv / (1.0 + std::exp(-gv)) * u[t][size_t(i)];
            }
        const mat d = linear(a, m.at(p + "mlp.down_proj.weight"), H, I);
        for (size_t t = 0; t < n; ++t)
            for (int64_t i = 0; i < H; ++i) x[t][size_t(i)] += d[t][size_t(i)];
    }
    const mat hf = rms_norm(x, m.at("model.norm.weight"), c.rms_norm_eps);
    const mat logits = linear(hf, m.at(c.tie_word_embeddings ? "model.embed_tokens.weight" : "lm_head.weight"), V, H);
    std::vector<float> out;
    for (const auto & row : logits)
        for (double e : row) out.push_back(float(e));
    return out;
}

std::vector<int32_t> reference_greedy(const std::string & dir, const std::vector<int32_t> & prompt, int64_t n_new,
                                      decode_window w) {
    w.prefill_len = int64_t(prompt.size());
    std::vector<int32_t> seq = prompt, out;
    const int64_t V = host::load_model_config(dir).vocab_size;
    for (int64_t i = 0; i < n_new; ++i) {
        const auto logits = reference_logits(dir, seq, w);
        const float * last = logits.data() + (seq.size() - 1) * size_t(V);
        int32_t best = 0;
        for (int32_t j = 1; j < V; ++j)
            if (last[j] > last[best]) best = j;
        out.push_back(best);
        seq.push_back(best);
    }
    return out;
}

engine::engine_config tiny_engine_config(const std::string & dir, const std::string & backend) {
    engine::engine_config c;
    c.model_dir = dir;
    c.backend = backend;
    c.matrix_type = dtype::f32;
    c.page_size = 16;
    c.max_batch = 4;
    c.max_context = 256;
    return c;
}

double nmse(const float * a, const float * b, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; ++i) {
        num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
        den += double(b[i]) * b[i];
    }
    return num / den;
}

std::vector<int64_t> submit_greedy(engine::engine & e, const std::vector<std::vector<int32_t>> & prompts,
                                   int64_t n_new) {
    std::vector<int64_t> ids;
    for (const auto & p : prompts) {
        engine::generation_request r;
        r.prompt = p, r.max_new_tokens = n_new, r.stop_at_eos = false;
        ids.push_back(e.submit(r));
    }
    return ids;
}

std::vector<std::vector<int32_t>> generate_greedy(engine::engine & e, const std::vector<std::vector<int32_t>> & prompts,
                                                  int64_t n_new) {
    const std::vector<int64_t> ids = submit_greedy(e, prompts, n_new);
    e.run();
    std::vector<std::vector<int32_t>> out;
    for (int64_t id : ids) {
        const auto & res = e.result(id);
        // A request that did not run to its length is a test failure, not an empty (comparable) list.
        if (res.finish_reason != "length")
            throw std::runtime_error("request " + std::to_string(id) + " ended with '" + res.finish_reason + "': " + res.error);
        out.push_back(res.tokens);
    }
    return out;
}

}  // namespace kvcomp::test
