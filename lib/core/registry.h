// Registry of compiled-in backends and their devices.
//
// Devices are named "cpu" (the reference backend, always present), "opencl:N" (every OpenCL
// device of every platform, numbered in platform then device order) and "cuda:N". The default
// backend is $KVCOMP_BACKEND when set, else the best available: cuda:0, then the first OpenCL
// GPU, then the first OpenCL device, then cpu. KVCOMP_DISABLE_OPENCL=1 / KVCOMP_DISABLE_CUDA=1
// hide those APIs (read here and nowhere else).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/backend.h"

namespace kvcomp {

struct device_entry {
    device_info info;
    std::function<std::unique_ptr<backend>()> create;
};

// Every device found, in the order above. Enumerated once per process.
const std::vector<device_entry> & list_devices();

// Creates a backend by name ("cpu", "opencl", "opencl:1", "cuda:0", "default"). "cuda" means
// cuda:0; "opencl" the first OpenCL GPU, else opencl:0. Throws backend_unavailable naming the
// valid choices.
std::unique_ptr<backend> create_backend(const std::string & name);

// Name of the backend create_backend("default") picks.
std::string default_backend_name();

// The device name create_backend(requested) looks up: "default" or "" as default_backend_name(), "cuda"
// as cuda:0, "opencl" as the first OpenCL GPU (else opencl:0); any other name as it is.
std::string resolve_backend_name(const std::string & requested);

// What the registry could not enumerate (e.g. "OpenCL: no platforms (CL_PLATFORM_NOT_FOUND_KHR)").
const std::vector<std::string> & registry_notes();

// Hooks each API's enumerator implements (registry.cpp calls those compiled in).
namespace cl {
void enumerate_devices(std::vector<device_entry> & out, std::vector<std::string> & notes);
}
namespace cuda {
void enumerate_devices(std::vector<device_entry> & out, std::vector<std::string> & notes);
}
namespace cpu {
std::unique_ptr<backend> create_backend();
device_info device();
}

}  // namespace kvcomp
