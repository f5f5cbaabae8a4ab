// config.json parsing, RoPE frequencies, expected checkpoint tensors. See model_config.h.
#include "host/model/model_config.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace kvcomp::host {

using json = nlohmann::json;

namespace {

// Defaults of the transformers config class of each architecture (SmolLM3: configuration_smollm3.py,
// rope theta 2e6 and tied embeddings; the layout of the checkpoint is Llama's).
struct arch_info {
    model_arch arch;
    const char * class_name;
    const char * model_type;
    int64_t default_max_positions;
    double default_rope_theta;
    bool default_tie_embeddings;
};
const arch_info k_archs[] = {
    {model_arch::llama, "LlamaForCausalLM", "llama", 2048, 10000.0, false},
    {model_arch::mistral, "MistralForCausalLM", "mistral", 4096 * 32, 10000.0, false},
    {model_arch::qwen2, "Qwen2ForCausalLM", "qwen2", 32768, 10000.0, false},
    {model_arch::smollm3, "SmolLM3ForCausalLM", "smollm3", 32768, 2000000.0, true},
};

// "A, B, C" of the supported class names (or model types) for error messages.
std::string supported_archs(bool model_types) {
    std::string s;
    for (const auto & k : k_archs)
        s += (s.empty() ? "" : ", ") + std::string(model_types ? k.model_type : k.class_name);
    return s;
}

// Reads fields of one JSON object, naming the file and the field in every error.
class reader {
  public:
    reader(const json & j, std::string source, std::string prefix = "")
        : j_(j), src_(std::move(source)), prefix_(std::move(prefix)) {}

    bool has(const char * key) const { return j_.contains(key) && !j_[key].is_null(); }
    std::string field(const char * key) const { return prefix_ + key; }

    [[noreturn]] void fail(const char * key, const std::string & what) const {
        KVCOMP_THROW(status::invalid_argument, src_, ": field '", field(key), "' ", what);
    }
    void require(const char * key) const {
        if (!has(key)) fail(key, "is missing (required)");
    }
    int64_t get_int(const char * key) const {
        require(key);
        const json & v = j_[key];
        if (!v.is_number_integer()) fail(key, "must be an integer, got " + v.dump());
        return v.get<int64_t>();
    }
    int64_t get_int(const char * key, int64_t def) const { return has(key) ? get_int(key) : def; }
    int64_t get_positive(const char * key) const {
        const int64_t v = get_int(key);
        if (v <= 0) fail(key, "must be positive, got " + std::to_string(v));
        return v;
    }
    int64_t get_positive(const char * key, int64_t def) const { return has(key) ? get_positive(key) : def; }
    double get_double(const char * key) const {
        require(key);
        const json & v = j_[key];
        if (!v.is_number()) fail(key, "must be a number, got " + v.dump());
        return v.get<double>();
    }
    double get_double(const char * key, double def) const { return has(key) ? get_double(key) : def; }
    bool get_bool(const char * key, bool def) const {
        if (!has(key)) return def;
        if (!j_[key].is_boolean()) fail(key, "must be true or false, got " + j_[key].dump());
        return j_[key].get<bool>();
    }
    std::string get_string(const char * key, const std::string & def) const {
        if (!has(key)) return def;
        if (!j_[key].is_string()) fail(key, "must be a string, got " + j_[key].dump());
        return j_[key].get<std::string>();
    }
    // An int, a list of ints, or null/absent (empty).
    std::vector<int64_t> get_id_list(const char * key) const {
        std::vector<int64_t> out;
        if (!has(key)) return out;
        const json & v = j_[key];
        if (v.is_number_integer()) {
            out.push_back(v.get<int64_t>());
        } else if (v.is_array()) {
            for (const json & e : v) {
                if (!e.is_number_integer())
                    fail(key, "must be an integer or a list of integers, got " + v.dump());
                out.push_back(e.get<int64_t>());
            }
        } else {
            fail(key, "must be an integer or a list of integers, got " + v.dump());
        }
        return out;
    }

  private:
    const json & j_;
    std::string src_;
    std::string prefix_;
};

void parse_rope_scaling(const json & rs, const std::string & source, const char * field, rope_config & rope) {
    if (!rs.is_object())
        KVCOMP_THROW(status::invalid_argument, source, ": field '", field,
                     "' must be an object or null, got ", rs.dump());
    reader r(rs, source, std::string(field) + ".");
    // transformers accepts both "rope_type" (current) and "type" (older files).
    std::string type = r.get_string("rope_type", r.get_string("type", ""));
    if (type.empty())
        KVCOMP_THROW(status::invalid_argument, source, ": field '", field,
                     "' has neither 'rope_type' nor 'type'");
    if (type == "default") return;
    if (type != "llama3")
        KVCOMP_THROW(status::invalid_argument, source, ": ", field, " type '", type,
                     "' is not supported (supported: null, default, llama3)");
    rope.scaling_type = type;
    rope.factor = r.get_double("factor");
    rope.low_freq_factor = r.get_double("low_freq_factor");
    rope.high_freq_factor = r.get_double("high_freq_factor");
    rope.original_max_position_embeddings = r.get_positive("original_max_position_embeddings");
}

// Which layers apply RoPE, from no_rope_layers or no_rope_layer_interval (model_config::uses_rope).
// transformers reads the list by layer index and tests it for truth; here an entry must be 0 or 1
// (or false/true), so a typo such as 2 or "0" is an error instead of a silent "RoPE".
std::vector<bool> parse_rope_layers(const reader & r, const json & j, int64_t layers) {
    std::vector<bool> out(static_cast<size_t>(layers), true);
    if (!r.has("no_rope_layers")) {
        // transformers computes (l + 1) % interval: 0 would raise there.
        const int64_t interval = r.get_positive("no_rope_layer_interval", 4);
        for (int64_t l = 0; l < layers; ++l) out[size_t(l)] = (l + 1) % interval != 0;
        return out;
    }
    const json & v = j["no_rope_layers"];
    if (!v.is_array())
        r.fail("no_rope_layers",
               "must be a list of 0/1 per layer (1 = the layer uses RoPE, 0 = no RoPE), got " + v.dump());
    if (int64_t(v.size()) < layers)
        r.fail("no_rope_layers", "has " + std::to_string(v.size()) + " entries, but num_hidden_layers is " +
                                     std::to_string(layers) + " (one per layer: 1 = RoPE, 0 = no RoPE)");
    for (size_t l = 0; l < v.size(); ++l) {
        const json & e = v[l];
        const bool is_bit =
            e.is_boolean() || (e.is_number_integer() && (e.get<int64_t>() == 0 || e.get<int64_t>() == 1));
        if (!is_bit)
            r.fail("no_rope_layers", "entry " + std::to_string(l) + " is " + e.dump() +
                                         "; each entry must be 0 (no RoPE) or 1 (RoPE)");
        if (int64_t(l) < layers) out[l] = e.is_boolean() ? e.get<bool>() : e.get<int64_t>() == 1;
    }
    return out;
}

// SmolLM3's sliding window: transformers gives layer l the window when use_sliding_window is true,
// sliding_window is set and layer_types[l] is "sliding_attention"; layer_types defaults to
// "sliding_attention" on the layers without RoPE. Returns the window, or 0 when no layer has one.
int64_t smollm3_sliding_window(const reader & r, const json & j, const std::vector<bool> & uses_rope) {
    const bool enabled = r.get_bool("use_sliding_window", false) && r.has("sliding_window");
    const int64_t layers = int64_t(uses_rope.size());
    bool any_sliding = false;
    if (r.has("layer_types")) {
        const json & t = j["layer_types"];
        if (!t.is_array() || int64_t(t.size()) != layers)
            r.fail("layer_types", "must be a list of num_hidden_layers (" + std::to_string(layers) +
                                      ") strings, got " + t.dump());
        for (const json & e : t) {
            const std::string s = e.is_string() ? e.get<std::string>() : e.dump();
            if (s != "full_attention" && s != "sliding_attention")
                r.fail(
                    "layer_types",
                    "has '" + s + "', which is not supported (supported: full_attention, sliding_attention)");
            any_sliding = any_sliding || s == "sliding_attention";
        }
    } else {
        for (bool rope : uses_rope) any_sliding = any_sliding || !rope;
    }
    return enabled && any_sliding ? r.get_int("sliding_window") : 0;
}

}  // namespace

bool model_config::all_layers_use_rope() const {
    for (bool r : uses_rope)
        if (!r) return false;
    return true;
}

const char * model_arch_name(model_arch a) {
    for (const auto & k : k_archs)
        if (k.arch == a) return k.class_name;
    return "unknown";
}

void compute_rope_frequencies(rope_config & rope, int64_t head_dim) {
    KVCOMP_CHECK_ARG(head_dim > 0 && head_dim % 2 == 0, "rope: head_dim must be positive and even, got ",
                     head_dim);
    KVCOMP_CHECK_ARG(rope.theta > 0, "rope: rope_theta must be positive, got ", rope.theta);
    const int64_t half = head_dim / 2;
    rope.inv_freq.assign(size_t(half), 0.0f);
    rope.freq_factors.assign(size_t(half), 1.0f);
    // transformers: 1.0 / (base ** (torch.arange(0, dim, 2).float() / dim)) in float32. The exponent
    // is a float32 quotient; pow is evaluated in double and rounded, which is within one ulp of
    // torch's float32 pow.
    const float base = float(rope.theta);
    std::vector<float> inv(static_cast<size_t>(half));
    for (int64_t i = 0; i < half; ++i) {
        const float e = float(2 * i) / float(head_dim);
        inv[size_t(i)] = 1.0f / float(std::pow(double(base), double(e)));
    }
    if (rope.scaling_type.empty()) {
        rope.inv_freq = inv;
        return;
    }
    KVCOMP_CHECK_ARG(rope.scaling_type == "llama3", "rope: unsupported scaling type '", rope.scaling_type,
                     "'");
    KVCOMP_CHECK_ARG(rope.factor > 0, "rope_scaling.factor must be positive, got ", rope.factor);
    KVCOMP_CHECK_ARG(rope.low_freq_factor > 0 && rope.high_freq_factor > rope.low_freq_factor,
                     "rope_scaling: need 0 < low_freq_factor < high_freq_factor, got low_freq_factor=",
                     rope.low_freq_factor, " high_freq_factor=", rope.high_freq_factor);
    KVCOMP_CHECK_ARG(rope.original_max_position_embeddings > 0,
                     "rope_scaling.original_max_position_embeddings must be positive, got ",
                     rope.original_max_position_embeddings);
    // _compute_llama3_parameters, step by step with the same dtypes as torch: tensors are float32;
    // Python scalars meeting a float32 tensor are converted to float32 first.
    const double old_ctx = double(rope.original_max_position_embeddings);
    const float low_freq_wavelen = float(old_ctx / rope.low_freq_factor);
    const float high_freq_wavelen = float(old_ctx / rope.high_freq_factor);
    const float factor = float(rope.factor);
    const float two_pi = float(2.0 * 3.14159265358979323846);  // math.pi
    const float lff = float(rope.low_freq_factor);
    const float span = float(rope.high_freq_factor - rope.low_freq_factor);
    for (int64_t i = 0; i < half; ++i) {
        const float f = inv[size_t(i)];
        const float wavelen = two_pi / f;
        // Long wavelengths (low frequencies) are slowed down by `factor`; short ones are kept.
        float out = wavelen > low_freq_wavelen ? f / factor : f;
        const bool medium = !(wavelen < high_freq_wavelen) && !(wavelen > low_freq_wavelen);
        if (medium) {
            // Between the two: interpolate, smooth = 0 at the low-frequency edge, 1 at the high one.
            const float smooth = (float(old_ctx) / wavelen - lff) / span;
            out = (1.0f - smooth) * out / factor + smooth * out;
        }
        rope.inv_freq[size_t(i)] = out;
        rope.freq_factors[size_t(i)] = f / out;
    }
}

model_config parse_model_config(const std::string & json_text, const std::string & source) {
    json j;
    try {
        j = json::parse(json_text);
    } catch (const json::exception & e) {
        KVCOMP_THROW(status::invalid_argument, source, ": not valid JSON: ", e.what());
    }
    if (!j.is_object()) KVCOMP_THROW(status::invalid_argument, source, ": not a JSON object");
    reader r(j, source);
    model_config c;

    // Architecture: architectures[0], else model_type.
    c.model_type = r.get_string("model_type", "");
    const arch_info * arch = nullptr;
    if (r.has("architectures")) {
        const json & a = j["architectures"];
        if (!a.is_array() || a.empty() || !a[0].is_string())
            r.fail("architectures", "must be a non-empty list of strings, got " + a.dump());
        c.architecture = a[0].get<std::string>();
        for (const auto & k : k_archs)
            if (c.architecture == k.class_name) arch = &k;
        if (!arch)
            KVCOMP_THROW(status::invalid_argument, source, ": field 'architectures' = '", c.architecture,
                         "' is not supported (supported: ", supported_archs(false), ")");
    } else if (!c.model_type.empty()) {
        for (const auto & k : k_archs)
            if (c.model_type == k.model_type) arch = &k;
        if (!arch)
            KVCOMP_THROW(status::invalid_argument, source, ": field 'model_type' = '", c.model_type,
                         "' is not supported (supported: ", supported_archs(true), ")");
        c.architecture = arch->class_name;
    } else {
        r.fail("architectures", "is missing (required; or give 'model_type')");
    }
    c.arch = arch->arch;

    c.hidden_size = r.get_positive("hidden_size");
    c.intermediate_size = r.get_positive("intermediate_size");
    c.num_hidden_layers = r.get_positive("num_hidden_layers");
    c.num_attention_heads = r.get_positive("num_attention_heads");
    c.vocab_size = r.get_positive("vocab_size");
    if (c.arch == model_arch::smollm3 && !j.contains("num_key_value_heads"))
        c.num_key_value_heads = 4;  // SmolLM3Config's default; an explicit null means "heads", as below
    else
        c.num_key_value_heads = r.get_positive("num_key_value_heads", c.num_attention_heads);
    if (r.has("head_dim")) {
        c.head_dim = r.get_positive("head_dim");  // explicit: need not equal hidden / heads (Mistral Nemo)
    } else {
        if (c.hidden_size % c.num_attention_heads != 0)
            KVCOMP_THROW(status::invalid_argument, source, ": num_attention_heads (", c.num_attention_heads,
                         ") does not divide hidden_size (", c.hidden_size, ") and head_dim is not given");
        c.head_dim = c.hidden_size / c.num_attention_heads;
    }
    if (c.num_attention_heads % c.num_key_value_heads != 0)
        KVCOMP_THROW(status::invalid_argument, source, ": num_key_value_heads (", c.num_key_value_heads,
                     ") does not divide num_attention_heads (", c.num_attention_heads, ")");
    if (c.head_dim % 2 != 0)
        KVCOMP_THROW(status::invalid_argument, source, ": head_dim (", c.head_dim, ") must be even for RoPE");
    c.max_position_embeddings = r.get_positive("max_position_embeddings", arch->default_max_positions);
    c.rms_norm_eps = r.get_double("rms_norm_eps", 1e-6);
    if (!(c.rms_norm_eps > 0)) r.fail("rms_norm_eps", "must be positive, got " + j["rms_norm_eps"].dump());

    // RoPE: rope_theta + rope_scaling, or transformers v5's combined "rope_parameters".
    c.rope.theta = r.get_double("rope_theta", arch->default_rope_theta);
    if (r.has("rope_parameters") && !r.has("rope_scaling")) {
        const json & rp = j["rope_parameters"];
        if (rp.is_object() && rp.contains("rope_theta") && !rp["rope_theta"].is_null()) {
            if (!rp["rope_theta"].is_number()) r.fail("rope_parameters", "has a non-numeric rope_theta");
            c.rope.theta = rp["rope_theta"].get<double>();
        }
        parse_rope_scaling(rp, source, "rope_parameters", c.rope);
    } else if (r.has("rope_scaling")) {
        parse_rope_scaling(j["rope_scaling"], source, "rope_scaling", c.rope);
    }
    if (!(c.rope.theta > 0)) r.fail("rope_theta", "must be positive, got " + std::to_string(c.rope.theta));
    try {
        compute_rope_frequencies(c.rope, c.head_dim);
    } catch (const error & e) {
        KVCOMP_THROW(e.code(), source, ": ", e.what());
    }

    c.tie_word_embeddings = r.get_bool("tie_word_embeddings", arch->default_tie_embeddings);
    c.uses_rope.assign(size_t(c.num_hidden_layers), true);
    if (c.arch == model_arch::smollm3 || r.has("no_rope_layers"))
        c.uses_rope = parse_rope_layers(r, j, c.num_hidden_layers);
    if (c.arch != model_arch::smollm3 && !c.all_layers_use_rope()) {
        // Llama / Mistral / Qwen2 in transformers rotate every layer and never read this field:
        // honouring it would run another model than the checkpoint's (and than the HF oracle's).
        int64_t first = 0;
        while (c.uses_rope[size_t(first)]) ++first;
        r.fail("no_rope_layers", "marks layer " + std::to_string(first) + " as without RoPE, but " +
                                     c.architecture +
                                     " applies RoPE on every layer (transformers ignores this field there); "
                                     "layers without RoPE are read for SmolLM3ForCausalLM only");
    }
    if (c.arch == model_arch::qwen2) {
        // Qwen2's attention always has q/k/v biases and no o_proj bias; honour an explicit field.
        c.attention_bias = r.get_bool("attention_bias", true);
        c.attention_out_bias = false;
    } else {
        c.attention_bias = r.get_bool("attention_bias", false);
        c.attention_out_bias = c.attention_bias;
        c.mlp_bias = r.get_bool("mlp_bias", false);
    }
    c.hidden_act = r.get_string("hidden_act", "silu");
    if (c.hidden_act != "silu") r.fail("hidden_act", "= '" + c.hidden_act + "' is not supported (only silu)");
    c.torch_dtype = r.get_string("torch_dtype", r.get_string("dtype", ""));
    c.bos_token_ids = r.get_id_list("bos_token_id");
    c.eos_token_ids = r.get_id_list("eos_token_id");

    if (c.arch == model_arch::mistral) {
        // MistralConfig defaults sliding_window to 4096 when absent; null disables it.
        if (!j.contains("sliding_window"))
            c.sliding_window = 4096;
        else
            c.sliding_window = r.get_int("sliding_window", 0);
    } else if (c.arch == model_arch::qwen2 && r.get_bool("use_sliding_window", false)) {
        c.sliding_window = r.get_int("sliding_window", 4096);
        c.sliding_window_from_layer = r.get_int("max_window_layers", 28);
    } else if (c.arch == model_arch::smollm3) {
        c.sliding_window = smollm3_sliding_window(r, j, c.uses_rope);
    }
    if (c.sliding_window < 0) r.fail("sliding_window", "must be non-negative or null");
    return c;
}

model_config load_model_config(const std::string & path) {
    std::error_code ec;
    const std::string file = std::filesystem::is_directory(path, ec) ? path + "/config.json" : path;
    std::ifstream in(file, std::ios::binary);
    if (!in) KVCOMP_THROW(status::io_error, file, ": cannot open");
    std::ostringstream ss;
    ss << in.rdbuf();
    if (in.bad()) KVCOMP_THROW(status::io_error, file, ": read failed");
    return parse_model_config(ss.str(), file);
}

std::vector<expected_tensor> expected_tensors(const model_config & c) {
    std::vector<expected_tensor> out;
    const int64_t h = c.hidden_size, q = c.q_dim(), kv = c.kv_dim(), ff = c.intermediate_size;
    out.push_back({"model.embed_tokens.weight", {c.vocab_size, h}});
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
        const std::string p = "model.layers." + std::to_string(l) + ".";
        out.push_back({p + "input_layernorm.weight", {h}});
        out.push_back({p + "self_attn.q_proj.weight", {q, h}});
        if (c.attention_bias) out.push_back({p + "self_attn.q_proj.bias", {q}});
        out.push_back({p + "self_attn.k_proj.weight", {kv, h}});
        if (c.attention_bias) out.push_back({p + "self_attn.k_proj.bias", {kv}});
        out.push_back({p + "self_attn.v_proj.weight", {kv, h}});
        if (c.attention_bias) out.push_back({p + "self_attn.v_proj.bias", {kv}});
        out.push_back({p + "self_attn.o_proj.weight", {h, q}});
        if (c.attention_out_bias) out.push_back({p + "self_attn.o_proj.bias", {h}});
        out.push_back({p + "post_attention_layernorm.weight", {h}});
        out.push_back({p + "mlp.gate_proj.weight", {ff, h}});
        if (c.mlp_bias) out.push_back({p + "mlp.gate_proj.bias", {ff}});
        out.push_back({p + "mlp.up_proj.weight", {ff, h}});
        if (c.mlp_bias) out.push_back({p + "mlp.up_proj.bias", {ff}});
        out.push_back({p + "mlp.down_proj.weight", {h, ff}});
        if (c.mlp_bias) out.push_back({p + "mlp.down_proj.bias", {h}});
    }
    out.push_back({"model.norm.weight", {h}});
    if (!c.tie_word_embeddings) out.push_back({"lm_head.weight", {c.vocab_size, h}});
    return out;
}

void check_tensors(const tensor_set & tensors, const model_config & cfg) {
    constexpr size_t k_max_listed = 8;
    std::vector<std::string> problems;
    size_t count = 0;
    for (const expected_tensor & e : expected_tensors(cfg)) {
        std::string p;
        if (!tensors.contains(e.name)) {
            p = e.name + " is missing (config.json implies " + shape_to_string(e.shape) + ")";
        } else {
            const st_view v = tensors.get(e.name);
            if (v.shape != e.shape)
                p = e.name + " has shape " + shape_to_string(v.shape) + ", config.json implies " +
                    shape_to_string(e.shape);
            else if (v.type != st_dtype::f32 && v.type != st_dtype::f16 && v.type != st_dtype::bf16)
                p = e.name + " has dtype " + st_dtype_name(v.type) + ", expected F32, F16 or BF16";
        }
        if (p.empty()) continue;
        ++count;
        if (problems.size() < k_max_listed) problems.push_back(p);
    }
    if (count == 0) return;
    std::string msg = tensors.source() + " does not match config.json (" + model_arch_name(cfg.arch) + ", " +
                      std::to_string(count) + (count == 1 ? " problem): " : " problems): ");
    for (size_t i = 0; i < problems.size(); ++i) msg += (i ? "; " : "") + problems[i];
    if (count > problems.size()) msg += "; ... and " + std::to_string(count - problems.size()) + " more";
    KVCOMP_THROW(status::invalid_argument, msg);
}

}  // namespace kvcomp::host
