// OpenCL-specific entry points that callers outside lib/opencl may use (tests, `kvcomp info`,
// benchmarks). This header includes no OpenCL header.
//
// Program cache (lib/opencl/program_cache.cpp): every kernel program is compiled lazily on the first
// use of a (kernel file, #define preamble) pair, cached in memory per OpenCL context and on disk as
// device binaries. The disk directory is $KVCOMP_CL_CACHE_DIR, else $XDG_CACHE_HOME/kvcomp/cl, else
// $HOME/.cache/kvcomp/cl; KVCOMP_CL_CACHE_DIR=off disables it. Extra build options come from
// $KVCOMP_CL_BUILD_OPTIONS. Each variable is read once per process, in program_cache.cpp.
#pragma once

#include <cstdint>
#include <string>

#include "core/backend.h"
#include "core/op.h"
#include "core/qblock.h"

namespace kvcomp::cl {

// Counters of one device's program cache (shared by every backend on that device).
struct program_cache_stats {
    uint64_t builds = 0;               // programs compiled from source (clBuildProgram on source)
    uint64_t disk_loads = 0;           // programs created from a cached binary
    uint64_t memory_hits = 0;          // lookups served by the in-memory cache
    uint64_t disk_rejects = 0;         // cache files ignored (corrupt, foreign, or refused by the driver)
    uint64_t disk_write_failures = 0;  // binaries that could not be written (never fatal)
};

// True when `be` is an OpenCL backend.
bool is_opencl_backend(const backend & be);

// Compiles `source` as a whole program (no preamble, no common.cl) on be's device through the
// program cache, exactly like a kernel file. Throws kernel_build_failed with `label`, the build
// options and the full CL_PROGRAM_BUILD_LOG when it does not compile; invalid_argument when `be` is
// not an OpenCL backend.
void compile_for_test(backend & be, const std::string & source, const std::string & label = "test.cl");

program_cache_stats cache_stats(const backend & be);

// Whether be's device runs NVIDIA's tensor-core instruction mma.sync (m16n8k16, f16 in, f32 out)
// written as inline PTX in OpenCL C, with the fragment layout of the PTX ISA (nv_mma_probe.cpp):
// yes, or no with the reason (not NVIDIA's driver, the build log, or the first wrong value).
// Compiles and runs a one-warp kernel each call. invalid_argument when `be` is not OpenCL.
support inline_ptx_mma(backend & be);

// The kernel that attn_decode_quant runs for blocks of layout q on be's device (window rows 32-bit
// aligned, as the engine's): "kvc_adq_warps (bulk copies)", "kvc_adq_warps" (attn_decode_quant_mma.cl) or
// "kvc_adq_split" (attn_decode_quant.cl), by the launcher's own rules and environment switches. For tests
// and diagnostics; invalid_argument when `be` is not OpenCL.
std::string attn_decode_quant_kernel(backend & be, const qblock_layout & q);

// The kernel that attn_decode runs for p on be's device (K / V views 16-byte aligned, as the engine's):
// "kvc_attn_decode_warps" (attn_decode_warps.cl) or "kvc_attn_decode_split" (attn_decode.cl), by the launcher's
// own rules and environment switches. For tests and diagnostics; invalid_argument when `be` is not OpenCL.
std::string attn_decode_kernel(backend & be, const attn_decode_params & p);

// The kernel that attn_decode_ragged runs for p on be's device: "kvc_adr_warps" (attn_decode_ragged_mma.cl),
// "kvc_attn_decode_ragged" (attn_decode_ragged.cl) or "kvc_attn_decode_ragged_q4" (4-bit pages), by the
// launcher's own rules and environment switches. For tests and diagnostics; invalid_argument when `be` is
// not OpenCL.
std::string attn_decode_ragged_kernel(backend & be, const attn_decode_ragged_params & p);

// The kernel that attn_decode_palu runs for p on be's device: "kvc_adp_warps" (attn_decode_palu_mma.cl) or
// "kvc_attn_decode_palu" (attn_decode_palu.cl), by the launcher's own rules and environment switches. For
// tests and diagnostics; invalid_argument when `be` is not OpenCL.
std::string attn_decode_palu_kernel(backend & be, const attn_decode_palu_params & p);

// Drops the in-memory programs of be's device so the next lookup goes to the disk cache, as a new
// process would. Kernels already created keep their programs alive.
void clear_memory_cache(backend & be);

// The disk-cache directory in use ("" when disabled). set_disk_cache_dir() replaces it for the rest
// of the process ("" or "off" disables): tests point it at a private directory.
std::string disk_cache_dir();
void set_disk_cache_dir(const std::string & dir);

}  // namespace kvcomp::cl
