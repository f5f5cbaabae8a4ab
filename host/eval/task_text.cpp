#include "host/eval/task_text.h"

#include <fstream>
#include <sstream>

#include "core/error.h"
#include "host/model/tokenizer.h"

namespace kvcomp::host {

std::string read_task_text(const std::string & path) {
    std::ifstream f(path, std::ios::binary);
    KVCOMP_CHECK_ARG(f.good(), "cannot read text file '", path, "'");
    std::ostringstream ss;
    ss << f.rdbuf();
    std::string text = ss.str();
    KVCOMP_CHECK_ARG(!text.empty(), "text file '", path, "' is empty");
    KVCOMP_CHECK_ARG(utf8_is_valid(text), "text file '", path, "' is not valid UTF-8");
    return text;
}

}  // namespace kvcomp::host
