#include "engine/model_weights.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <random>

#include "host/model/safetensors.h"

namespace kvcomp::engine {

namespace {

// Uploads encoded values (already in the tensor's device dtype).
buffer_ptr upload_bytes(backend & be, const std::vector<uint8_t> & enc, uint64_t & bytes) {
    buffer_ptr b = be.alloc(std::max<size_t>(1, enc.size()));
    if (!enc.empty()) be.upload(*b, 0, enc.data(), enc.size());
    bytes += enc.size();
    return b;
}
buffer_ptr upload_floats(backend & be, const std::vector<float> & v, dtype type, uint64_t & bytes) {
    return upload_bytes(be, host::encode_floats(v, host::st_dtype_from_kvcomp(type)), bytes);
}

// A tensor's bytes in `type` (f32 or f16, round to nearest even), by name and shape.
using tensor_source =
    std::function<std::vector<uint8_t>(const std::string & name, const std::vector<int64_t> & shape, dtype type)>;

model_weights build(backend & be, const host::model_config & cfg, dtype mt, const tensor_source & get) {
    KVCOMP_CHECK_ARG(mt == dtype::f16 || mt == dtype::f32, "weights: matrix type must be f16 or f32, got ",
                     dtype_name(mt));
    model_weights w;
    w.matrix_type = mt;
    const int64_t H = cfg.hidden_size, V = cfg.vocab_size, I = cfg.intermediate_size;
    const int64_t Q = cfg.q_dim(), KV = cfg.kv_dim();
    auto mat = [&](const std::string & n, int64_t rows, int64_t cols) {
        return upload_bytes(be, get(n, {rows, cols}, mt), w.bytes);
    };
    auto vec = [&](const std::string & n, int64_t len) { return upload_bytes(be, get(n, {len}, dtype::f32), w.bytes); };
    w.embed = mat("model.embed_tokens.weight", V, H);
    for (int64_t l = 0; l < cfg.num_hidden_layers; ++l) {
        const std::string p = "model.layers." + std::to_string(l) + ".";
        layer_weights L;
        L.attn_norm = vec(p + "input_layernorm.weight", H);
        L.wq = mat(p + "self_attn.q_proj.weight", Q, H);
        L.wk = mat(p + "self_attn.k_proj.weight", KV, H);
        L.wv = mat(p + "self_attn.v_proj.weight", KV, H);
        if (cfg.attention_bias) {
            L.bq = vec(p + "self_attn.q_proj.bias", Q);
            L.bk = vec(p + "self_attn.k_proj.bias", KV);
            L.bv = vec(p + "self_attn.v_proj.bias", KV);
        }
        L.wo = mat(p + "self_attn.o_proj.weight", H, Q);
        L.mlp_norm = vec(p + "post_attention_layernorm.weight", H);
        L.w_gate = mat(p + "mlp.gate_proj.weight", I, H);
        L.w_up = mat(p + "mlp.up_proj.weight", I, H);
        L.w_down = mat(p + "mlp.down_proj.weight", H, I);
        w.layers.push_back(std::move(L));
    }
    w.final_norm = vec("model.norm.weight", H);
    if (!cfg.tie_word_embeddings) w.lm_head = mat("lm_head.weight", V, H);
    if (cfg.rope.scaling_type == "llama3") w.freq_factors = upload_floats(be, cfg.rope.freq_factors, dtype::f32, w.bytes);
    return w;
}

}  // namespace

model_weights load_model_weights(backend & be, const host::model_config & cfg, const std::string & model_dir,
                                 dtype matrix_type) {
    KVCOMP_CHECK_ARG(!cfg.attention_out_bias && !cfg.mlp_bias, model_dir,
                     ": o_proj / MLP biases are not supported (config.json sets attention_bias or mlp_bias "
                     "for a Llama/Mistral model)");
    const host::tensor_set ts = host::tensor_set::open(model_dir);
    host::check_tensors(ts, cfg);
    return build(be, cfg, matrix_type, [&](const std::string & name, const std::vector<int64_t> &, dtype type) {
        return host::encode_floats(ts.get_floats(name), host::st_dtype_from_kvcomp(type));
    });
}

namespace {

// The random block of random_model_weights and where a named tensor starts in it: a name-keyed
// start (FNV-1a) keeps a tensor's values independent of load order, so host code can recompute
// them (random_weight_reader).
std::vector<float> random_block(uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> nd(0.0f, 0.02f);
    std::vector<float> block(size_t(1) << 20);
    for (float & x : block) x = nd(rng);
    return block;
}
size_t random_start(const std::string & name, size_t period) {
    uint64_t h = 1469598103934665603ull;
    for (unsigned char ch : name) h = (h ^ ch) * 1099511628211ull;
    return size_t(h % period);
}
bool is_norm(const std::string & name) { return name.find("norm") != std::string::npos; }

}  // namespace

model_weights random_model_weights(backend & be, const host::model_config & cfg, dtype matrix_type, uint64_t seed) {
    // One random block reused with a name-keyed start: drawing 8e9 normals for Llama-3-8B shapes
    // would take minutes, and timings do not depend on the values (only on their being finite).
    const std::vector<float> block = random_block(seed);
    // The block is encoded once per dtype and tiled as bytes: converting 8e9 values one by one
    // took minutes of every Llama-3-8B benchmark.
    std::map<dtype, std::vector<uint8_t>> encoded;
    return build(be, cfg, matrix_type, [&](const std::string & name, const std::vector<int64_t> & shape, dtype type) {
        int64_t n = 1;
        for (int64_t d : shape) n *= d;
        if (is_norm(name))
            return host::encode_floats(std::vector<float>(static_cast<size_t>(n), 1.0f), host::st_dtype_from_kvcomp(type));
        auto & enc = encoded[type];
        if (enc.empty()) enc = host::encode_floats(block, host::st_dtype_from_kvcomp(type));
        const size_t es = dtype_size(type), total = size_t(n) * es, period = enc.size();
        std::vector<uint8_t> out(total);
        size_t pos = random_start(name, block.size()) * es, done = 0;
        while (done < total) {
            const size_t len = std::min(total - done, period - pos);
            std::memcpy(out.data() + done, enc.data() + pos, len);
            done += len;
            pos = 0;
        }
        return out;
    });
}

weight_reader random_weight_reader(uint64_t seed) {
    auto block = std::make_shared<const std::vector<float>>(random_block(seed));
    return [block](const std::string & name, int64_t n) {
        std::vector<float> out(static_cast<size_t>(n), 1.0f);
        if (is_norm(name)) return out;
        const size_t start = random_start(name, block->size());
        for (size_t i = 0; i < out.size(); ++i) out[i] = (*block)[(start + i) % block->size()];
        return out;
    };
}

weight_reader checkpoint_weight_reader(const std::string & model_dir) {
    auto ts = std::make_shared<const host::tensor_set>(host::tensor_set::open(model_dir));
    return [ts, model_dir](const std::string & name, int64_t n) {
        std::vector<float> out = ts->get_floats(name);
        KVCOMP_CHECK_ARG(int64_t(out.size()) == n, model_dir, ": tensor ", name, " has ", out.size(),
                         " values, expected ", n);
        return out;
    };
}

}  // namespace kvcomp::engine
