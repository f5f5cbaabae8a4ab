// kvcomp methods [NAME ...]: the KV cache methods the other commands take (--method NAME) and each
// one's options (--method-opt KEY=VALUE), with their defaults (engine/kv_method_help.cpp).
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "engine/kv_method.h"

namespace kvcomp::cli {

int run_methods(int argc, char ** argv) {
    std::vector<std::string> names;
    for (int i = 1; i < argc; ++i) {
        if (!std::strcmp(argv[i], "-h") || !std::strcmp(argv[i], "--help")) {
            std::printf("usage: kvcomp methods [NAME ...]\n\n"
                        "Lists the KV cache methods (--method NAME of generate, compare, bench, eval, sweep)\n"
                        "and each one's options (--method-opt KEY=VALUE, repeatable), with their defaults.\n"
                        "Without a name: every method.\n");
            return 0;
        }
        names.push_back(argv[i]);
    }
    if (names.empty()) names = engine::kv_method_names();
    try {
        std::string text;
        for (const auto & n : names) text += (text.empty() ? "" : "\n") + engine::kv_method_help(n);
        std::fputs(text.c_str(), stdout);
    } catch (const std::exception & e) {
        std::fprintf(stderr, "kvcomp methods: %s\n", e.what());
        return 2;
    }
    return 0;
}

}  // namespace kvcomp::cli
