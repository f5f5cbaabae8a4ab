// Program cache of one OpenCL context: lazily compiled programs, kept in memory and on disk.
//
// Program source = `#define` preamble + cl_kernels/common.cl + cl_kernels/<file>, each part preceded
// by a #line directive so build logs point into the right file. Build options are
// "-cl-std=CL1.2" plus $KVCOMP_CL_BUILD_OPTIONS, plus per-program options a launcher asks for (e.g.
// kv_quantize's -cl-fp32-correctly-rounded-divide-sqrt); the options are part of every cache key.
//
// In memory: one cl_program per (source, options), owned by the cache until clear_memory() or exit.
// Lookup key = FNV-1a 64 of the source and options, confirmed by comparing the full strings.
//
// On disk (unless disabled, see backend_opencl.h for the directory): one file per program,
//   <dir>/<16 hex digits>.clbin
// named by the FNV-1a 64 of the key text
//   "kvcomp-cl-program v<format>" | CL_DEVICE_NAME | CL_DRIVER_VERSION | CL_PLATFORM_VERSION |
//   options | source
// and holding a header {magic "KVCOMPCL", format version, key hash, second key hash (other FNV basis),
// binary size, FNV-1a 64 of the binary} followed by the device binary from CL_PROGRAM_BINARIES.
// Files are written to a unique temporary name in the same directory, then renamed, so readers never
// see a partial file and concurrent writers of the same program are harmless. A file whose header,
// hashes or size disagree, or that the driver refuses (clCreateProgramWithBinary/clBuildProgram
// fail), is counted in disk_rejects, ignored and overwritten by a fresh build: never fatal.
// Bump kFormatVersion when the file layout or the meaning of the key changes.
//
// Thread safety: all methods lock one mutex; builds of one context are serialized.
#pragma once

#include <CL/cl.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include "opencl/backend_opencl.h"

namespace kvcomp::cl {

class program_cache {
  public:
    static constexpr uint32_t kFormatVersion = 1;

    // device_key: CL_DEVICE_NAME, CL_DRIVER_VERSION and CL_PLATFORM_VERSION joined (disk-cache key).
    program_cache(cl_context context, cl_device_id device, std::string device_key);
    ~program_cache();
    program_cache(const program_cache &) = delete;
    program_cache & operator=(const program_cache &) = delete;

    // The program for cl_kernels/<file> after `preamble`, built with build_options() followed by
    // `extra_options`; built on first use. Throws kernel_build_failed (with the log) or io_error
    // (missing source).
    cl_program get(const std::string & file, const std::string & preamble, const std::string & extra_options = "");

    // The program for an arbitrary complete source; `label` names it in errors.
    cl_program get_source(const std::string & label, const std::string & source);

    program_cache_stats stats() const;
    void clear_memory();

    // "-cl-std=CL1.2" + $KVCOMP_CL_BUILD_OPTIONS.
    static const std::string & build_options();

  private:
    struct entry {
        std::string source, options;
        cl_program program = nullptr;
    };

    cl_program lookup_locked(const std::string & label, const std::string & source, const std::string & options);
    cl_program load_binary(const std::string & path, uint64_t key_hash, uint64_t key_hash2,
                           const std::string & options);
    void store_binary(cl_program program, const std::string & path, uint64_t key_hash, uint64_t key_hash2);
    cl_program build_source(const std::string & label, const std::string & source, const std::string & options);

    cl_context context_;
    cl_device_id device_;
    std::string device_key_;
    mutable std::mutex mutex_;
    std::multimap<uint64_t, entry> programs_;
    program_cache_stats stats_;
};

}  // namespace kvcomp::cl
