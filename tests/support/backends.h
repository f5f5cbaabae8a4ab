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

// The CPU reference and the first device of each other compiled-in API (cuda:0, opencl:0), or the
// comma-separated devices of $KVCOMP_TEST_BACKENDS (e.g. "cuda:0,opencl:1" on a host whose first
// OpenCL device is PoCL on the CPU).
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
    for (const auto & d : list_devices())
        if (std::find(apis.begin(), apis.end(), d.info.api) == apis.end()) {
            apis.push_back(d.info.api);
            names.push_back(d.info.name);
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
