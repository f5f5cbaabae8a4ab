// Text files that eval tasks read (held-out text for perplexity and greedy agreement, the haystack
// of the needle task): read whole and validated once, so every task gives the same message for the
// same bad file.
#pragma once

#include <string>

namespace kvcomp::host {

// The file's bytes. Throws invalid_argument naming the file when it cannot be read, is empty, or
// is not valid UTF-8 (a binary or Latin-1 file would otherwise be scored as garbage tokens).
std::string read_task_text(const std::string & path);

}  // namespace kvcomp::host
