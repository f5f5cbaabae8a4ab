// Model hash for calibration files. See model_fingerprint.h.
#include "host/lowrank/model_fingerprint.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "host/model/safetensors.h"

namespace kvcomp::host::lowrank {

namespace {

// FNV-1a: tiny, dependency-free and stable across platforms; collisions only need to be unlikely
// between the handful of checkpoints a user has, not resistant to an adversary.
constexpr uint64_t k_fnv_offset = 14695981039346656037ull;
constexpr uint64_t k_fnv_prime = 1099511628211ull;

void fnv1a(uint64_t & h, const std::string & s) {
    for (unsigned char c : s) {
        h ^= c;
        h *= k_fnv_prime;
    }
}

}  // namespace

std::string model_hash(const std::string & config_json_text, const std::vector<tensor_shape> & tensors,
                       const std::string & config_source) {
    nlohmann::json cfg;
    try {
        cfg = nlohmann::json::parse(config_json_text);
    } catch (const nlohmann::json::exception & e) {
        KVCOMP_THROW(status::invalid_argument, config_source, ": not valid JSON: ", e.what());
    }
    uint64_t h = k_fnv_offset;
    fnv1a(h, cfg.dump());  // nlohmann's objects are std::map: keys come out sorted
    fnv1a(h, "\n");
    std::vector<const tensor_shape *> sorted;
    for (const auto & t : tensors) sorted.push_back(&t);
    std::sort(sorted.begin(), sorted.end(),
              [](const tensor_shape * a, const tensor_shape * b) { return a->name < b->name; });
    for (const tensor_shape * t : sorted) {
        std::string line = t->name + "[";
        for (size_t i = 0; i < t->shape.size(); ++i) line += (i ? "," : "") + std::to_string(t->shape[i]);
        fnv1a(h, line + "]\n");
    }
    char buf[32];
    std::snprintf(buf, sizeof buf, "fnv1a64:%016llx", static_cast<unsigned long long>(h));
    return buf;
}

namespace {
std::string config_path(const std::string & model_dir) {
    return (std::filesystem::path(model_dir) / "config.json").string();
}
std::string read_config(const std::string & cfg_path) {
    std::ifstream in(cfg_path, std::ios::binary);
    if (!in) KVCOMP_THROW(status::io_error, cfg_path, ": cannot open (needed for the model hash)");
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
}
}  // namespace

std::string model_hash_of_dir(const std::string & model_dir) {
    const std::string cfg_path = config_path(model_dir);
    const std::string text = read_config(cfg_path);
    const tensor_set ts = tensor_set::open(model_dir);
    std::vector<tensor_shape> shapes;
    for (const std::string & name : ts.names()) shapes.push_back({name, ts.get(name).shape});
    return model_hash(text, shapes, cfg_path);
}

std::string model_hash_of_random_weights(const std::string & model_dir, uint64_t seed) {
    const std::string cfg_path = config_path(model_dir);
    return model_hash(read_config(cfg_path), {{"random_weights_seed=" + std::to_string(seed), {}}}, cfg_path);
}

}  // namespace kvcomp::host::lowrank
