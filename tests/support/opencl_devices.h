// Test support for the OpenCL kernel-choice tests (test_opencl_*_kernel.cpp): each listed OpenCL device's
// backend, and the environment switches that override a launcher's choice.
#pragma once

#include <cstdlib>
#include <initializer_list>
#include <memory>
#include <string>

#include "core/registry.h"

namespace kvcomp::test {

// The first of `vars` that is set in the environment, else nullptr.
inline const char * first_set(std::initializer_list<const char *> vars) {
    for (const char * v : vars)
        if (std::getenv(v)) return v;
    return nullptr;
}

// Calls fn(backend, where) for every OpenCL device listed, where = "opencl:N (device name)" for messages;
// returns how many there were.
template <typename Fn>
int for_each_opencl_device(Fn && fn) {
    int n = 0;
    for (const auto & d : list_devices()) {
        if (d.info.api != "OpenCL") continue;
        ++n;
        auto be = d.create();
        fn(*be, d.info.name + " (" + d.info.device_name + ")");
    }
    return n;
}

}  // namespace kvcomp::test
