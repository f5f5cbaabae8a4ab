// Needle in a haystack: one key line hidden at a chosen depth of a long haystack, then a question
// about it, in the line-retrieval format the default model was trained on (tools/model/tasks.py):
//
//   <haystack line>                                (KJV verses, or distractor records, see below)
//   ...
//   line 417: REGISTER_CONTENT is <38012>          <- the needle, at depth d of the haystack
//   ...
//   <haystack line>
//   What is the REGISTER_CONTENT in line 417?
//
// with the answer "<38012>". Two haystacks:
//  - text: whole lines of a filler text (e.g. MODEL/heldout.txt or the user's file); the classic
//    needle test for models that read prose. The default model scores ~0 on it (it never saw
//    records inside prose; measured in docs/RESULTS.md), so for it use
//  - keys: distractor records "line K: REGISTER_CONTENT is <V>" with other keys (RULER's multi-key
//    needle), where the depth of the one asked key is controlled, unlike line_retrieval's.
// Depth 0 puts the needle right after BOS, depth 1 right before the
// question; in between it goes to the line boundary nearest to d x (haystack tokens). A text
// haystack starts at a line drawn by the seed and wraps around at the end of the text; lines
// longer than 256 bytes are broken at a space (or a UTF-8 character boundary) so a text without
// newlines still gives boundaries to insert at. The haystack, key and value of example i
// depend only on (seed, context, i), not on the depth, so a depth sweep moves the same needle
// through the same text. Deterministic (std::mt19937_64) on every platform.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "host/model/tokenizer.h"

namespace kvcomp::host {

struct needle_example {
    std::vector<int32_t> prompt;  // BOS + haystack with the needle + question
    std::string answer;           // "<DDDDD>"
    double depth = 0.0;           // where the needle landed: filler tokens before it / all filler tokens
};

// `count` examples of at most `context` tokens (prompt + answer). `filler`: the text haystack,
// UTF-8 (checked by the caller, see task_text.h); empty: the keys haystack. Throws invalid_argument when depth is outside [0, 1], the
// filler has no text, or the context leaves no room for the needle, the question and a filler line.
std::vector<needle_example> make_needle(const tokenizer & tok, const std::string & filler, int64_t context,
                                        double depth, int64_t count, uint64_t seed);

// "0,0.25,1" -> {0, 0.25, 1}; throws invalid_argument naming the option and the bad item.
std::vector<double> parse_depths(const std::string & s, const char * option);

}  // namespace kvcomp::host
