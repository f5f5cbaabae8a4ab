// Test support for the low-rank KV methods' engine tests: the tiny model, its calibration files
// (made once per process by the calibration flow of kvcomp calibrate), engine configurations with
// them, and log-probabilities of forced tokens through a method's decode path.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "support/tiny_model.h"

namespace kvcomp::test::lowrank {

const tiny_model_spec & spec();
const std::string & tiny_dir();  // the tiny model, written once per process

// n token ids drawn uniformly from the tiny model's vocabulary.
std::vector<int32_t> random_tokens(size_t n, uint64_t seed);

// A full calibration file (r = 0: every rank head_dim on the tiny model) of `method` for `dir`,
// made once per (method, dir).
std::string calib_file(const std::string & method, const std::string & dir = tiny_dir());

// The tiny engine on `backend` with `method` and its options (calib defaults to calib_file(method)).
engine::engine_config config(const std::string & backend, const std::string & method, engine::method_options o = {});

// Whether cfg's backend runs this configuration: prompt logits, then a prefill and two decode steps,
// on prompt_len random tokens. A backend lacking an op (status::unsupported thrown, or the request
// failing with "not supported") returns false with the reason in *why*, so the caller can skip. The
// CPU reference must run it, and any other failure fails: both record a test failure and return false.
bool engine_runs(const engine::engine_config & cfg, size_t prompt_len, std::string & why);

// Log-probabilities of `forced` after `prompt`, through the method's decode path.
std::vector<double> forced_logprobs(engine::engine & e, const std::vector<int32_t> & prompt,
                                    const std::vector<int32_t> & forced);

}  // namespace kvcomp::test::lowrank
