#include <cstdio>
#include <cstring>
#include <string>

#include "cli/commands.h"

namespace kvcomp::cli {

namespace {

void print_usage(FILE * out) {
    std::fprintf(out,
                 "kvcomp: LLM inference with a compressed KV cache\n\n"
                 "usage: kvcomp <command> [options]   (kvcomp <command> --help for its options)\n\n"
                 "commands:\n"
                 "  info        list backends and devices, driver versions, memory and features\n"
                 "  selfcheck   run paged decode attention on a backend and compare with the CPU reference\n"
                 "  generate    generate text with a model on a backend, with a KV cache method\n"
                 "  compare     run a prompt on several backends: do logits and greedy tokens agree?\n"
                 "  bench       time to first token, time between tokens, tokens/s, KV bytes\n"
                 "  eval        a task's score with a KV method next to the uncompressed score, KV bytes, ratio\n"
                 "  sweep       methods x settings x tasks x contexts into one CSV, resumable\n"
                 "  calibrate   per-head bases and ranks of ZACK / FDC / Palu into a calibration file\n"
                 "  ratesearch  the largest ZACK / FDC / Palu compression keeping 99%% of the uncompressed score\n"
                 "  methods     the KV cache methods and their options (--method, --method-opt)\n\n"
                 "environment: KVCOMP_BACKEND picks the default backend (cpu, opencl:N, cuda:N)\n");
}

}  // namespace

int dispatch(int argc, char ** argv) {
    if (argc < 2 || !std::strcmp(argv[1], "-h") || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "help")) {
        print_usage(stdout);
        return argc < 2 ? 2 : 0;
    }
    const std::string cmd = argv[1];
    if (cmd == "--version") {
        std::printf("kvcomp 0.1.0\n");
        return 0;
    }
    if (cmd == "info") return run_info(argc - 1, argv + 1);
    if (cmd == "selfcheck") return run_selfcheck(argc - 1, argv + 1);
    if (cmd == "generate") return run_generate(argc - 1, argv + 1);
    if (cmd == "compare") return run_compare(argc - 1, argv + 1);
    if (cmd == "bench") return run_bench(argc - 1, argv + 1);
    if (cmd == "eval") return run_eval(argc - 1, argv + 1);
    if (cmd == "sweep") return run_sweep(argc - 1, argv + 1);
    if (cmd == "calibrate") return run_calibrate(argc - 1, argv + 1);
    if (cmd == "ratesearch") return run_ratesearch(argc - 1, argv + 1);
    if (cmd == "methods") return run_methods(argc - 1, argv + 1);
    std::fprintf(stderr, "kvcomp: unknown command '%s'\n\n", cmd.c_str());
    print_usage(stderr);
    return 2;
}

}  // namespace kvcomp::cli
