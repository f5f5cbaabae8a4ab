// Program cache: in-memory programs per context plus device binaries on disk (see program_cache.h).
#include "opencl/program_cache.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <thread>
#include <vector>

#include "opencl/cl_common.h"
#include "opencl/cl_sources.h"

namespace kvcomp::cl {

namespace {

constexpr char kMagic[8] = {'K', 'V', 'C', 'O', 'M', 'P', 'C', 'L'};
constexpr uint64_t kSecondBasis = 0x6c62272e07bb0142ull;  // another FNV basis for the confirm hash

struct file_header {
    char magic[8];
    uint32_t format;
    uint32_t reserved;
    uint64_t key_hash;
    uint64_t key_hash2;
    uint64_t binary_size;
    uint64_t binary_hash;
};

// Disk-cache directory: resolved from the environment once (the only place these variables are
// read), replaceable by set_disk_cache_dir().
struct disk_dir_state {
    std::mutex mutex;
    bool resolved = false;
    std::string dir;
};

disk_dir_state & disk_state() {
    static disk_dir_state s;
    return s;
}

std::string resolve_disk_dir_from_env() {
    auto env = [](const char * name) -> std::string {
        const char * v = std::getenv(name);
        return v ? v : "";
    };
    const std::string explicit_dir = env("KVCOMP_CL_CACHE_DIR");
    if (explicit_dir == "off" || explicit_dir == "OFF" || explicit_dir == "0") return "";
    if (!explicit_dir.empty()) return explicit_dir;
    const std::string xdg = env("XDG_CACHE_HOME");
    if (!xdg.empty()) return xdg + "/kvcomp/cl";
    const std::string home = env("HOME");
    if (!home.empty()) return home + "/.cache/kvcomp/cl";
    return "";
}

std::string hex16(uint64_t v) {
    char buf[17];
    std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(v));
    return buf;
}

// A temporary name unique across threads and processes sharing the directory.
std::string temp_name(const std::string & path) {
    static std::atomic<uint64_t> counter{0};
    const uint64_t t = uint64_t(std::chrono::steady_clock::now().time_since_epoch().count());
    const uint64_t id = std::hash<std::thread::id>{}(std::this_thread::get_id());
    return path + ".tmp." + hex16(t ^ (id << 1) ^ (counter.fetch_add(1) << 48));
}

std::string build_log(cl_program program, cl_device_id device) {
    size_t n = 0;
    if (clGetProgramBuildInfo(program, device, CL_PROGRAM_BUILD_LOG, 0, nullptr, &n) != CL_SUCCESS || n == 0)
        return "(no build log)";
    std::string log(n, '\0');
    if (clGetProgramBuildInfo(program, device, CL_PROGRAM_BUILD_LOG, n, log.data(), nullptr) != CL_SUCCESS)
        return "(no build log)";
    while (!log.empty() && (log.back() == '\0' || log.back() == '\n')) log.pop_back();
    return log.empty() ? "(empty build log)" : log;
}

// KVCOMP_CL_BUILD_LOG=1: every program a process builds or loads prints its build log to stderr. With
// KVCOMP_CL_BUILD_OPTIONS=-cl-nv-verbose, NVIDIA's driver puts ptxas' registers and spills per kernel there,
// the one way to see them through OpenCL.
bool build_log_wanted() {
    static const bool wanted = [] {
        const char * v = std::getenv("KVCOMP_CL_BUILD_LOG");
        return v && std::strcmp(v, "1") == 0;
    }();
    return wanted;
}

}  // namespace

std::string disk_cache_dir() {
    disk_dir_state & s = disk_state();
    std::lock_guard<std::mutex> lock(s.mutex);
    if (!s.resolved) {
        s.dir = resolve_disk_dir_from_env();
        s.resolved = true;
    }
    return s.dir;
}

void set_disk_cache_dir(const std::string & dir) {
    disk_dir_state & s = disk_state();
    std::lock_guard<std::mutex> lock(s.mutex);
    s.dir = dir == "off" ? "" : dir;
    s.resolved = true;
}

const std::string & program_cache::build_options() {
    static const std::string options = [] {
        std::string o = "-cl-std=CL1.2";
        if (const char * extra = std::getenv("KVCOMP_CL_BUILD_OPTIONS"); extra && *extra)
            o += std::string(" ") + extra;
        return o;
    }();
    return options;
}

program_cache::program_cache(cl_context context, cl_device_id device, std::string device_key)
    : context_(context), device_(device), device_key_(std::move(device_key)) {}

program_cache::~program_cache() {
    clear_memory();
}

cl_program program_cache::get(const std::string & file, const std::string & preamble,
                              const std::string & extra_options) {
    const cl_source & common = find_source("common.cl");
    const cl_source & body = find_source(file);
    std::string source;
    source.reserve(preamble.size() + common.length + body.length + 64);
    source += preamble;
    source += "#line 1 \"common.cl\"\n";
    source.append(common.text, common.length);
    source += "\n#line 1 \"" + file + "\"\n";
    source.append(body.text, body.length);
    std::lock_guard<std::mutex> lock(mutex_);
    // The label carries the defines so a build log can be matched to its variant.
    std::string label = file;
    if (!preamble.empty()) {
        std::string defs = preamble;
        for (char & c : defs)
            if (c == '\n') c = ';';
        label += " with [" + defs + "]";
    }
    return lookup_locked(label, source, extra_options.empty() ? build_options() : build_options() + ' ' + extra_options);
}

cl_program program_cache::get_source(const std::string & label, const std::string & source) {
    std::lock_guard<std::mutex> lock(mutex_);
    return lookup_locked(label, source, build_options());
}

program_cache_stats program_cache::stats() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return stats_;
}

void program_cache::clear_memory() {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto & kv : programs_) clReleaseProgram(kv.second.program);
    programs_.clear();
}

cl_program program_cache::lookup_locked(const std::string & label, const std::string & source,
                                        const std::string & options) {
    const uint64_t mem_hash = fnv1a64(source, fnv1a64(options));
    auto range = programs_.equal_range(mem_hash);
    for (auto it = range.first; it != range.second; ++it)
        if (it->second.source == source && it->second.options == options) {
            ++stats_.memory_hits;
            return it->second.program;
        }

    cl_program program = nullptr;
    const std::string dir = disk_cache_dir();
    std::string path;
    uint64_t key_hash = 0, key_hash2 = 0;
    if (!dir.empty()) {
        std::string key = "kvcomp-cl-program v" + std::to_string(kFormatVersion) + '\n' + device_key_ + '\n' +
                          options + '\n';
        key += source;
        key_hash = fnv1a64(key);
        key_hash2 = fnv1a64(key, kSecondBasis);
        path = dir + "/" + hex16(key_hash) + ".clbin";
        program = load_binary(path, key_hash, key_hash2, options);
    }
    const bool from_disk = program != nullptr;
    if (!program) {
        program = build_source(label, source, options);
        if (!path.empty()) store_binary(program, path, key_hash, key_hash2);
    }
    if (build_log_wanted())
        std::fprintf(stderr, "kvcomp: OpenCL program %s (%s; options %s):\n%s\n", label.c_str(),
                     from_disk ? "from the disk cache" : "built from source", options.c_str(),
                     build_log(program, device_).c_str());
    programs_.emplace(mem_hash, entry{source, options, program});
    return program;
}

cl_program program_cache::load_binary(const std::string & path, uint64_t key_hash, uint64_t key_hash2,
                                      const std::string & options) {
    std::ifstream in(path, std::ios::binary);
    if (!in) return nullptr;  // not cached yet: not a reject
    file_header h{};
    std::vector<unsigned char> binary;
    bool ok = bool(in.read(reinterpret_cast<char *>(&h), sizeof(h))) &&
              std::memcmp(h.magic, kMagic, sizeof(kMagic)) == 0 && h.format == kFormatVersion &&
              h.key_hash == key_hash && h.key_hash2 == key_hash2 && h.binary_size > 0 &&
              h.binary_size < (uint64_t(1) << 32);
    if (ok) {
        binary.resize(size_t(h.binary_size));
        ok = bool(in.read(reinterpret_cast<char *>(binary.data()), std::streamsize(binary.size()))) &&
             in.peek() == std::char_traits<char>::eof() &&
             fnv1a64(reinterpret_cast<const char *>(binary.data()), binary.size()) == h.binary_hash;
    }
    cl_program program = nullptr;
    if (ok) {
        const unsigned char * ptr = binary.data();
        const size_t size = binary.size();
        cl_int bin_status = CL_SUCCESS, err = CL_SUCCESS;
        program = clCreateProgramWithBinary(context_, 1, &device_, &size, &ptr, &bin_status, &err);
        if (err != CL_SUCCESS || bin_status != CL_SUCCESS) {
            if (program) clReleaseProgram(program);
            program = nullptr;
        } else if (clBuildProgram(program, 1, &device_, options.c_str(), nullptr, nullptr) !=
                   CL_SUCCESS) {
            clReleaseProgram(program);
            program = nullptr;
        }
    }
    if (!program) {
        ++stats_.disk_rejects;
        return nullptr;
    }
    ++stats_.disk_loads;
    return program;
}

void program_cache::store_binary(cl_program program, const std::string & path, uint64_t key_hash,
                                 uint64_t key_hash2) {
    // Any failure only costs a rebuild in the next process: count it and carry on.
    size_t size = 0;
    if (clGetProgramInfo(program, CL_PROGRAM_BINARY_SIZES, sizeof(size), &size, nullptr) != CL_SUCCESS ||
        size == 0) {
        ++stats_.disk_write_failures;
        return;
    }
    std::vector<unsigned char> binary(size);
    unsigned char * ptr = binary.data();
    if (clGetProgramInfo(program, CL_PROGRAM_BINARIES, sizeof(ptr), &ptr, nullptr) != CL_SUCCESS) {
        ++stats_.disk_write_failures;
        return;
    }
    file_header h{};
    std::memcpy(h.magic, kMagic, sizeof(kMagic));
    h.format = kFormatVersion;
    h.key_hash = key_hash;
    h.key_hash2 = key_hash2;
    h.binary_size = size;
    h.binary_hash = fnv1a64(reinterpret_cast<const char *>(binary.data()), size);
    std::error_code ec;
    const std::filesystem::path target(path);
    std::filesystem::create_directories(target.parent_path(), ec);
    const std::string tmp = temp_name(path);
    {
        std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
        out.write(reinterpret_cast<const char *>(&h), sizeof(h));
        out.write(reinterpret_cast<const char *>(binary.data()), std::streamsize(size));
        out.close();
        if (!out) {
            std::filesystem::remove(tmp, ec);
            ++stats_.disk_write_failures;
            return;
        }
    }
    std::filesystem::rename(tmp, target, ec);
    if (ec) {
        std::filesystem::remove(tmp, ec);
        ++stats_.disk_write_failures;
    }
}

cl_program program_cache::build_source(const std::string & label, const std::string & source,
                                       const std::string & options) {
    const char * text = source.c_str();
    const size_t length = source.size();
    cl_int err = CL_SUCCESS;
    cl_program program = clCreateProgramWithSource(context_, 1, &text, &length, &err);
    KVCOMP_CL_CHECK(err);
    const cl_int build = clBuildProgram(program, 1, &device_, options.c_str(), nullptr, nullptr);
    if (build != CL_SUCCESS) {
        const std::string log = build_log(program, device_);
        clReleaseProgram(program);
        KVCOMP_THROW(status::kernel_build_failed, "OpenCL build of ", label, " failed with ",
                     error_name(build), " (options: ", options, "). Build log:\n", log);
    }
    ++stats_.builds;
    return program;
}

}  // namespace kvcomp::cl
