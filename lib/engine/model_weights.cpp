#include "engine/model_weights.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <map>
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

model_weights random_model_weights(backend & be, const host::model_config & cfg, dtype matrix_type, uint64_t seed) {
    // One random block reused with a rotating start: drawing 8e9 normals for Llama-3-8B shapes would
    // take minutes, and timings do not depend on the values (only on their being finite).
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> nd(0.0f, 0.02f);
    // The block is encoded once per dtype and tiled as bytes: converting 8e9 values one by one
    // took minutes of every Llama-3-8B benchmark.
    std::vector<float> block(size_t(1) << 20);
    for (float & x : block) x = nd(rng);
    std::map<dtype, std::vector<uint8_t>> encoded;
    size_t start = 0;
    return build(be, cfg, matrix_type, [&](const std::string & name, const std::vector<int64_t> & shape, dtype type) {
        int64_t n = 1;
        for (int64_t d : shape) n *= d;
        if (name.find("norm") != std::string::npos)
            return host::encode_floats(std::vector<float>(static_cast<size_t>(n), 1.0f), host::st_dtype_from_kvcomp(type));
        auto & enc = encoded[type];
        if (enc.empty()) enc = host::encode_floats(block, host::st_dtype_from_kvcomp(type));
        const size_t es = dtype_size(type), total = size_t(n) * es, period = enc.size();
        std::vector<uint8_t> out(total);
        size_t pos = (start % block.size()) * es, done = 0;
        while (done < total) {
            const size_t len = std::min(total - done, period - pos);
            std::memcpy(out.data() + done, enc.data() + pos, len);
            done += len;
            pos = 0;
        }
        start += 7919;
        return out;
    });
}

}  // namespace kvcomp::engine
