// OpenCL C sources of the kernels (cl_kernels/*.cl), embedded or read from disk.
//
// With KVCOMP_OPENCL_EMBED_KERNELS=ON (default) the build embeds every cl_kernels/*.cl into the
// library (tools/cmake/kvcomp_embed.cmake writes the table embedded_sources[]). With OFF, the files
// are read at run time from the source tree's cl_kernels/ (baked in at configure time) or from
// $KVCOMP_CL_KERNEL_DIR when set (read in cl_sources.cpp and nowhere else), so kernel edits need
// no rebuild.
//
// Ownership: find_source() returns a pointer into static storage (embedded) or into a
// process-lifetime cache (disk); it stays valid until exit. Thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace kvcomp::cl {

// FNV-1a 64 of a byte string. constexpr so the generated table's hashes are compile-time constants.
constexpr uint64_t fnv1a64(const char * text, size_t n, uint64_t hash = 0xcbf29ce484222325ull) {
    for (size_t i = 0; i < n; ++i) {
        hash ^= static_cast<unsigned char>(text[i]);
        hash *= 0x100000001b3ull;
    }
    return hash;
}

inline uint64_t fnv1a64(const std::string & s, uint64_t hash = 0xcbf29ce484222325ull) {
    return fnv1a64(s.data(), s.size(), hash);
}

struct cl_source {
    const char * name;  // file name inside cl_kernels/, e.g. "attn_decode.cl"
    const char * text;  // exact file contents (not NUL-terminated in general: use length)
    size_t length;      // bytes
    uint64_t hash;      // fnv1a64(text, length)
};

// The source named `name` ("copy.cl"). Throws kvcomp::error(io_error) when the file is missing
// (disk mode) or unknown (embedded mode).
const cl_source & find_source(const std::string & name);

// "embedded" or the directory the sources are read from (for `kvcomp info` and messages).
std::string source_origin();

}  // namespace kvcomp::cl
