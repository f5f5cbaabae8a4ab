// The tasks of `kvcomp eval` and `kvcomp sweep`: one (task, context) point scored with a method
// and with the uncompressed cache ("none") on the same examples.
#pragma once

#include <cstdint>
#include <string>

#include "cli/results_csv.h"
#include "engine/engine.h"
#include "host/model/tokenizer.h"

namespace kvcomp::cli {

struct eval_point {
    std::string task;        // line_retrieval, greedy_agreement, perplexity
    int64_t context = 1024;  // tokens
    int64_t examples = 50;
    int64_t gen = 32;        // greedy_agreement: tokens generated per example
    uint64_t seed = 1;
    std::string text_file;   // greedy_agreement / perplexity
};

// Throws invalid_argument naming the valid tasks.
void check_task(const std::string & task);

// Fills row.metric, value, baseline_value, kv_bytes and kv_bytes_baseline. `base` is the engine of
// method "none" (null when `eng` is "none" itself).
void score_point(const eval_point & p, engine::engine & eng, engine::engine * base, const host::tokenizer & tok,
                 result_row & row);

}  // namespace kvcomp::cli
