// The tasks of `kvcomp eval` and `kvcomp sweep`: one (task, context) point scored with a method
// and with the uncompressed cache ("none") on the same examples.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cli/results_csv.h"
#include "engine/engine.h"
#include "host/model/tokenizer.h"

namespace kvcomp::cli {

struct eval_point {
    std::string task;        // line_retrieval, needle, greedy_agreement, perplexity
    int64_t context = 1024;  // tokens
    int64_t examples = 50;
    int64_t gen = 32;        // greedy_agreement: tokens generated per example
    uint64_t seed = 1;
    double depth = 0.0;      // needle: where the key line goes, 0 (first) .. 1 (last)
    std::string haystack = "keys";  // needle: "keys" (distractor records) or "text" (text_file)
    std::string text_file;   // greedy_agreement / perplexity / needle (the haystack)
    // The validation split (kvcomp ratesearch tunes on it; reports use the default split). The
    // synthetic tasks differ only by `seed` (the caller picks one reports do not use); text windows
    // do not depend on the seed, so here they start half a window stride later than the report
    // split's (stride = (text tokens - context) / examples): with the same examples and
    // context <= stride / 2 no token is in both. task_opts() then carries "split=validation".
    bool validation = false;
};

// Throws invalid_argument naming the valid tasks.
void check_task(const std::string & task);

// The points of one task over the contexts (and, for needle, the depths), copies of `proto`.
// Throws invalid_argument on an unknown needle haystack.
std::vector<eval_point> task_points(const eval_point & proto, const std::vector<int64_t> & contexts,
                                    const std::vector<double> & depths);

// The row's task_opts: what besides task, context and seed decides the task's data, e.g.
// "depth=0.25;haystack=text;text=heldout.txt" (the text file by name, so the CSV does not carry local paths),
// with ";split=validation" (or just "split=validation") on the validation split.
std::string task_opts(const eval_point & p);

// Fills row.metric, value, baseline_value, kv_bytes and kv_bytes_baseline. `base` is the engine of
// method "none" (null when `eng` is "none" itself).
void score_point(const eval_point & p, engine::engine & eng, engine::engine * base, const host::tokenizer & tok,
                 result_row & row);

}  // namespace kvcomp::cli
