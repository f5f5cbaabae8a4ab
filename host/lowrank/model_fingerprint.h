// A cheap, stable identifier of a checkpoint's shape, so a calibration file is not served with a
// model it was not made for.
//
// model_hash = "fnv1a64:" + 16 hex digits of FNV-1a (64-bit) over
//     the canonical config.json (parsed, then dumped compactly with keys sorted, so whitespace and
//     key order do not matter) + "\n" + one line "name[d0,d1,...]\n" per tensor, sorted by name.
// It is cheap (no weight bytes are read) and therefore identifies the architecture, the config and
// the tensor layout, not the weight values: two fine-tunes with identical config.json and shapes
// share a hash, and converting a checkpoint's dtype does not change it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kvcomp::host::lowrank {

struct tensor_shape {
    std::string name;
    std::vector<int64_t> shape;
};

// From config.json text and the checkpoint's tensors (any order). Throws invalid_argument naming
// `config_source` when the text is not valid JSON.
std::string model_hash(const std::string & config_json_text, const std::vector<tensor_shape> & tensors,
                       const std::string & config_source = "config.json");

// From a model directory: DIR/config.json and the tensors of DIR's safetensors (tensor_set::open).
// Throws io_error when config.json cannot be read, and whatever tensor_set::open throws.
std::string model_hash_of_dir(const std::string & model_dir);

// The model kvcomp makes up from DIR/config.json with random weights of `seed` (engine
// random_weights): config.json plus one pseudo-tensor line naming the seed, so a calibration of
// random weights serves only the same random weights.
std::string model_hash_of_random_weights(const std::string & model_dir, uint64_t seed);

}  // namespace kvcomp::host::lowrank
