// Line retrieval (LongEval style), the long-context task the default model was trained on:
//
//   line 512: REGISTER_CONTENT is <38012>
//   line 77: REGISTER_CONTENT is <11234>
//   ...
//   What is the REGISTER_CONTENT in line 77?
//
// with the answer "<11234>". Line numbers are distinct in [1, 999], values in [10000, 99999], the
// asked line uniform over the record (the format of tools/model/tasks.py). An example of context N
// holds as many lines as fit so that the prompt (with the tokenizer's BOS) plus the answer is at
// most N tokens. Deterministic from the seed (std::mt19937_64, so the same on every platform); the
// examples differ from tasks.py's, which uses Python's generator.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "host/model/tokenizer.h"

namespace kvcomp::host {

struct retrieval_example {
    std::vector<int32_t> prompt;  // BOS + record + question
    std::string answer;           // "<DDDDD>"
    int64_t n_lines = 0;
    int64_t asked_line = 0;       // index of the asked line in the record (0-based)
};

// `count` examples of at most `context` tokens. Throws invalid_argument when not even two lines fit.
std::vector<retrieval_example> make_line_retrieval(const tokenizer & tok, int64_t context, int64_t count,
                                                   uint64_t seed);

}  // namespace kvcomp::host
