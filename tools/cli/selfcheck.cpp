// kvcomp selfcheck: paged decode attention on a backend against the CPU reference.
#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/options.h"
#include "kvcomp/kvcomp.h"

namespace kvcomp::cli {

int run_selfcheck(int argc, char ** argv) {
    po::options_description desc("options");
    desc.add_options()("backend,b", po::value<std::string>()->default_value("default"),
                       "cpu, opencl[:N], cuda[:N] or default ($KVCOMP_BACKEND, else the best available)")(
        "json", "machine-readable output");
    po::variables_map vm;
    if (auto rc = parse_options(argc, argv, desc,
                                "usage: kvcomp selfcheck [--backend NAME] [--json]\n\n"
                                "Builds page tables on the host, appends random K/V into fp16 pages and runs paged\n"
                                "decode attention (32 query heads, 8 KV heads, head dim 128, page size 16, three\n"
                                "requests of 1000, 17 and 257 tokens) on the backend and on the CPU reference.\n"
                                "Exit code 0 when the outputs agree (NMSE <= threshold), 1 otherwise.",
                                vm))
        return *rc;
    selfcheck_report r;
    if (selfcheck(vm["backend"].as<std::string>(), r) != KVCOMP_STATUS_SUCCESS) {
        std::fprintf(stderr, "kvcomp selfcheck: %s\n", kvcomp_last_error());
        return 1;
    }
    if (vm.count("json")) {
        nlohmann::json j = {{"backend", r.backend},   {"device", r.device_name},     {"op", r.shape},
                            {"nmse", r.nmse},         {"threshold", r.threshold},    {"backend_ms", r.backend_ms},
                            {"passed", r.passed}};
        std::printf("%s\n", j.dump(2).c_str());
    } else {
        std::printf("selfcheck on %s (%s)\n  %s\n  NMSE vs CPU reference: %.3g (threshold %.0e)  device time: %.3f ms\n"
                    "  %s\n",
                    r.backend.c_str(), r.device_name.c_str(), r.shape.c_str(), r.nmse, r.threshold, r.backend_ms,
                    r.passed ? "PASSED" : "FAILED");
    }
    return r.passed ? 0 : 1;
}

}  // namespace kvcomp::cli
