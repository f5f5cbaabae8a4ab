// Enumerates the compiled-in backends once and creates backends by name.
#include "core/registry.h"

#include <cstdlib>
#include <mutex>

namespace kvcomp {

namespace {

[[maybe_unused]] bool env_flag(const char * name) {
    const char * v = std::getenv(name);
    return v && *v && std::string(v) != "0";
}

struct registry_state {
    std::vector<device_entry> devices;
    std::vector<std::string> notes;
};

registry_state & state() {
    static registry_state s;
    static std::once_flag once;
    std::call_once(once, [] {
        s.devices.push_back({cpu::device(), [] { return cpu::create_backend(); }});
#ifdef KVCOMP_USE_CUDA
        if (env_flag("KVCOMP_DISABLE_CUDA"))
            s.notes.push_back("CUDA: disabled by KVCOMP_DISABLE_CUDA");
        else
            cuda::enumerate_devices(s.devices, s.notes);
#else
        s.notes.push_back("CUDA: not compiled in (configure with -DKVCOMP_CUDA=ON)");
#endif
#ifdef KVCOMP_USE_OPENCL
        if (env_flag("KVCOMP_DISABLE_OPENCL"))
            s.notes.push_back("OpenCL: disabled by KVCOMP_DISABLE_OPENCL");
        else
            cl::enumerate_devices(s.devices, s.notes);
#else
        s.notes.push_back("OpenCL: not compiled in (configure with -DKVCOMP_OPENCL=ON)");
#endif
    });
    return s;
}

std::string valid_names() {
    std::string out;
    for (const auto & d : state().devices) out += (out.empty() ? "" : ", ") + d.info.name;
    return out + ", default";
}

}  // namespace

const std::vector<device_entry> & list_devices() { return state().devices; }
const std::vector<std::string> & registry_notes() { return state().notes; }

std::string default_backend_name() {
    if (const char * env = std::getenv("KVCOMP_BACKEND"); env && *env && std::string(env) != "default")
        return env;
    const auto & devs = list_devices();
    for (const auto & d : devs)
        if (d.info.api == "CUDA") return d.info.name;
    for (const auto & d : devs)
        if (d.info.api == "OpenCL" && d.info.is_gpu) return d.info.name;
    for (const auto & d : devs)
        if (d.info.api == "OpenCL") return d.info.name;
    return "cpu";
}

std::string resolve_backend_name(const std::string & requested) {
    std::string name = requested.empty() || requested == "default" ? default_backend_name() : requested;
    if (name == "cuda") name = "cuda:0";
    if (name == "opencl") {
        // The best OpenCL device: the first GPU, else device 0 (a host may list PoCL's CPU first).
        name = "opencl:0";
        for (const auto & d : list_devices())
            if (d.info.api == "OpenCL" && d.info.is_gpu) {
                name = d.info.name;
                break;
            }
    }
    return name;
}

std::unique_ptr<backend> create_backend(const std::string & requested) {
    const std::string name = resolve_backend_name(requested);
    for (const auto & d : list_devices())
        if (d.info.name == name) return d.create();
    std::string why;
    for (const auto & n : registry_notes()) why += "; " + n;
    KVCOMP_THROW(status::backend_unavailable, "unknown or unavailable backend '", name,
                 "'; valid choices: ", valid_names(), why);
}

}  // namespace kvcomp
