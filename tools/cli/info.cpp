// kvcomp info: backends, devices, drivers, memory, features and op support.
#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/options.h"
#include "kvcomp/kvcomp.h"

namespace kvcomp::cli {

namespace {

std::string join(const std::vector<std::string> & v, const char * sep) {
    std::string out;
    for (const auto & s : v) out += (out.empty() ? "" : sep) + s;
    return out;
}

}  // namespace

int run_info(int argc, char ** argv) {
    po::options_description desc("options");
    desc.add_options()("json", "machine-readable output");
    po::variables_map vm;
    if (auto rc = parse_options(argc, argv, desc,
                                "usage: kvcomp info [--json]\n\n"
                                "Lists every backend device kvcomp can use (cpu, opencl:N, cuda:N), with driver\n"
                                "and API versions, memory, fp16 arithmetic and int8 dot-product support, and which\n"
                                "ops each device runs. The default device is $KVCOMP_BACKEND, else the best available.",
                                vm))
        return *rc;

    std::vector<device_summary> devs;
    std::vector<std::string> notes;
    std::string def;
    if (list_devices(devs, notes, def) != KVCOMP_STATUS_SUCCESS) {
        std::fprintf(stderr, "kvcomp info: %s\n", kvcomp_last_error());
        return 1;
    }
    if (vm.count("json")) {
        nlohmann::json j;
        j["default_backend"] = def;
        j["notes"] = notes;
        for (const auto & d : devs)
            j["devices"].push_back({{"name", d.name},
                                    {"api", d.api},
                                    {"device", d.device_name},
                                    {"vendor", d.vendor},
                                    {"platform", d.platform},
                                    {"driver_version", d.driver_version},
                                    {"api_version", d.api_version},
                                    {"is_gpu", d.is_gpu},
                                    {"compute_units", d.compute_units},
                                    {"global_mem_bytes", d.global_mem_bytes},
                                    {"fp16_arith", d.fp16_arith},
                                    {"int8_dot", d.int8_dot},
                                    {"ops_supported", d.ops_supported},
                                    {"ops_missing", d.ops_missing}});
        std::printf("%s\n", j.dump(2).c_str());
        return 0;
    }
    std::printf("kvcomp 0.1.0 — %zu device(s); default backend: %s\n", devs.size(), def.c_str());
    for (const auto & d : devs) {
        std::printf("\n%-10s %s (%s)%s\n", d.name.c_str(), d.device_name.c_str(), d.api.c_str(),
                    d.name == def ? "  [default]" : "");
        std::printf("  vendor %s | platform %s | driver %s | %s\n", d.vendor.c_str(), d.platform.c_str(),
                    d.driver_version.c_str(), d.api_version.c_str());
        std::printf("  %s, %d compute units, %.1f GiB, fp16 arithmetic: %s, int8 dot: %s\n", d.is_gpu ? "GPU" : "CPU",
                    d.compute_units, double(d.global_mem_bytes) / double(1ull << 30), d.fp16_arith ? "yes" : "no",
                    d.int8_dot ? "yes" : "no");
        std::printf("  ops: %s\n", join(d.ops_supported, " ").c_str());
        for (const auto & m : d.ops_missing) std::printf("  not supported: %s\n", m.c_str());
    }
    for (const auto & n : notes) std::printf("\nnote: %s\n", n.c_str());
    return 0;
}

}  // namespace kvcomp::cli
