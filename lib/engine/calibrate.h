// Calibration of the low-rank KV methods (ZACK, FDC, Palu): capture, bases, ranks, file contents.
// kvcomp calibrate is a thin wrapper; tests call it directly. Digest: research/zack_fdc.md §8.1.
//
// Per (layer, KV head) c, with g query heads per KV head:
//   K basis, zack and fdc: SVD of the post-RoPE [Q_p^{h1}; ...; Q_p^{hg}; K_p^c] (unrotated on
//     layers without RoPE) over the calibration tokens (host/lowrank qk_basis, computed from
//     streamed Gram matrices: the capture method of engine/kv_method_capture.h, running the engine,
//     prefill only, on the chosen backend).
//   V basis, zack: SVD of [V^c; (W_O^{h1})^T; ...; (W_O^{hg})^T] (zack_v_basis, unweighted stack,
//     §10.5), V captured like K, W_O read from the checkpoint.
//   V basis, fdc: right singular vectors of W_V^c (fdc_v_basis; "FDC-faithful", §10.9).
//   palu: plain SVD of W_K^c for K and of W_V^c for V: the plain-SVD approximation of Palu (real Palu
//     whitens with activation statistics, decomposes groups of heads jointly and searches ranks
//     with Fisher information; none of that is done here). Palu runs no model: weights only.
// Projection biases (Qwen2) are ignored by the weight-only bases.
//
// Ranks: one shared removal rate r (rank_selection.h) or the smallest r reaching an overall KV
// compression (rate_search.h), rounded up to rank_multiple. The file holds the full d x d bases
// (truncated = false), so a runtime may re-slice them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "host/lowrank/calibration_file.h"
#include "host/model/tokenizer.h"

namespace kvcomp::engine {

struct calibrate_config {
    std::string model_dir;
    std::string backend = "default";  // where the capture forward runs
    bool random_weights = false;      // the model of random_model_weights(weight_seed): config.json only
    uint64_t weight_seed = 1;
    bool f32_weights = false;         // device weights f32 (tests: the exact path); default f16
    host::lowrank::lowrank_method method = host::lowrank::lowrank_method::fdc;
    // Calibration prompts (token ids, each at most the engine's context); unused by palu.
    std::vector<std::vector<int32_t>> prompts;
    // Exactly one: a removal rate r in [0, 1], or an overall KV compression target in [0, 1).
    std::optional<double> removal_rate, compression;
    int64_t rank_multiple = 16;
};

struct calibrate_result {
    host::lowrank::calibration calib;  // what write_calibration writes
    int64_t tokens_captured = 0;       // 0 for palu
};

// Throws invalid_argument naming the bad setting (no prompt for zack/fdc, both or neither rate,
// r outside [0, 1], rank_multiple outside [1, head_dim], ...), and whatever the engine throws.
calibrate_result run_calibration(const calibrate_config & cfg);

// The fingerprint a calibration file records for the model the engine runs: model_hash_of_dir, or
// for random weights a hash of config.json and the weight seed (random weights of another seed are
// another model).
std::string engine_model_hash(const std::string & model_dir, bool random_weights, uint64_t weight_seed);

// Calibration tokens. random: n ids drawn uniformly (seeded) from the tokenizer's non-special ids
// below min(tokenizer vocabulary, model vocabulary) (FDC: random vocabulary tokens).
std::vector<int32_t> random_calibration_tokens(const host::tokenizer & tok, int64_t model_vocab, int64_t n,
                                               uint64_t seed);

// Cuts tokens into prompts of at most `chunk` tokens, each starting with bos when bos >= 0 (the
// bos counts towards chunk; chunk must be >= 2 then). A tail shorter than 2 tokens is dropped.
std::vector<std::vector<int32_t>> chunk_prompts(const std::vector<int32_t> & tokens, int64_t chunk, int32_t bos);

}  // namespace kvcomp::engine
