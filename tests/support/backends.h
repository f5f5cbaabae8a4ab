// Test support shared by the engine tests: which backends to run on, gtest names for them, and
// synthetic prompts.
#pragma once

#include <algorithm>
#include <tuple>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/registry.h"

namespace kvcomp::test {

// The CPU reference and, for each other compiled-in API, its first GPU device, else its first device
// (cuda:0; opencl:1 on the GPU host, whose opencl:0 is PoCL on the CPU; opencl:0 where PoCL is the only
// OpenCL device), or the comma-separated devices of $KVCOMP_TEST_BACKENDS (e.g. "cpu,opencl:0").
inline std::vector<std::string> backends_to_test() {
    std::vector<std::string> names, apis;
    if (const char * env = std::getenv("KVCOMP_TEST_BACKENDS"); env && *env) {
        std::string list = env, cur;
        for (char c : list + ",")
            if (c == ',') {
                if (!cur.empty()) names.push_back(cur);
                cur.clear();
            } else {
                cur += c;
            }
        return names;
    }
    const auto devices = list_devices();
    for (const auto & d : devices) {
        if (std::find(apis.begin(), apis.end(), d.info.api) != apis.end()) continue;
        apis.push_back(d.info.api);
        const auto gpu = std::find_if(devices.begin(), devices.end(),
                                      [&](const auto & e) { return e.info.api == d.info.api && e.info.is_gpu; });
        names.push_back(gpu != devices.end() ? gpu->info.name : d.info.name);
    }
    return names;
}

// gtest parameter names: "opencl:0" -> "opencl_0".
struct backend_param_name {
    template <typename Info>
    std::string operator()(const Info & info) const {
        std::string n = info.param;
        std::replace(n.begin(), n.end(), ':', '_');
        return n;
    }
};

// gtest parameter names of (backend, method) tuples: ("opencl:0", "fdc") -> "opencl_0_fdc".
struct backend_method_param_name {
    template <typename Info>
    std::string operator()(const Info & info) const {
        std::string n = std::get<0>(info.param);
        std::replace(n.begin(), n.end(), ':', '_');
        return n + "_" + std::get<1>(info.param);
    }
};

// A deterministic prompt of n byte-range token ids.
inline std::vector<int32_t> make_prompt(size_t n, int32_t salt) {
    std::vector<int32_t> p;
    for (size_t i = 0; i < n; ++i) p.push_back(int32_t((i * 37 + size_t(salt) * 11 + 5) % 256));
    return p;
}

}  // namespace kvcomp::test
