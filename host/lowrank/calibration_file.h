// The low-rank calibration file (ZACK / FDC / Palu): per (layer, KV head) the K basis (for ZACK and
// FDC the post-RoPE basis shared by Q and K; for Palu the basis of W_K) and the V basis, each with
// its singular values, plus a JSON header recording how they were made.
//
// Layout: one safetensors file (host/model/safetensors.h).
//   tensors, F32, for every layer l < num_layers and KV head c < num_kv_heads:
//     layers.<l>.kv_heads.<c>.k_basis  [head_dim, cols]  leading columns of R, row-major
//     layers.<l>.kv_heads.<c>.k_sigma  [head_dim]        all singular values, descending
//     layers.<l>.kv_heads.<c>.v_basis  [head_dim, cols]
//     layers.<l>.kv_heads.<c>.v_sigma  [head_dim]
//   cols = head_dim for a full file (ranks can be re-chosen at load: slicing costs nothing, digest
//   §10.11), or the head's rank for a truncated one (what the runtime needs, R_k only).
//   __metadata__ {"kvcomp_lowrank": "<JSON object>"} with the fields
//     format_version (1), method ("zack" | "fdc" | "palu"), model_hash (model_fingerprint.h),
//     kvcomp_version (the library that wrote it), removal_rate (r, number), rank_multiple,
//     num_layers, num_kv_heads, head_dim, truncated (bool),
//     ranks: {"k": [[rank per kv head] per layer], "v": [[...] per layer]}.
//
// The ranks are stored, not recomputed from sigma and r: they may have been set another way (a
// uniform-rank ablation, a hand override), so the reader checks their range, not their origin.
//
// read_calibration rejects, with invalid_argument naming the file and the field or tensor:
// a missing or non-JSON header, an unknown format_version, a wrong method or model hash (when the
// caller states what it expects), a header field missing or of the wrong type, num_layers /
// num_kv_heads / head_dim that disagree with the caller's model, ranks of the wrong count or outside
// [1, head_dim], rank_multiple < 1, removal_rate outside [0, 1], a missing or unexpected tensor, a
// tensor of the wrong shape or a non-float dtype, and singular values that are negative, not finite
// or increasing. Unreadable or truncated files are io_error (from the safetensors reader).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "host/lowrank/rank_selection.h"

namespace kvcomp::host::lowrank {

enum class lowrank_method { zack, fdc, palu };
const char * lowrank_method_name(lowrank_method m);  // "zack", "fdc", "palu"
// false when unknown.
bool lowrank_method_from_name(const std::string & name, lowrank_method & out);

// One side (K or V) of one (layer, KV head).
struct head_basis {
    int64_t cols = 0;           // stored columns: head_dim, or the rank when truncated
    std::vector<double> basis;  // head_dim x cols, row-major: the leading cols columns of R
    std::vector<double> sigma;  // head_dim singular values, descending
};

struct calibration {
    lowrank_method method = lowrank_method::fdc;
    std::string model_hash;
    // Set by read_calibration to the version that wrote the file; write_calibration ignores it and
    // records the running library's version (kvcomp_library_version()).
    std::string kvcomp_version;
    double removal_rate = 0.0;
    int64_t rank_multiple = 16;
    bool truncated = false;
    kv_ranks ranks;             // carries num_layers, num_kv_heads, head_dim
    std::vector<head_basis> k;  // [layer * num_kv_heads + kv_head]
    std::vector<head_basis> v;

    // Throws invalid_argument naming the first inconsistent field (see the list at the top).
    void validate() const;
    // The singular values as kv_spectra, for re-running rate selection.
    kv_spectra spectra() const;
};

// The version string written into calibration files (the CMake project version).
const char * kvcomp_library_version();

// Validates `c`, then writes it (F32 tensors) with write_safetensors (atomic: PATH.tmp, rename).
void write_calibration(const std::string & path, const calibration & c);

// What the caller's model requires; empty / 0 / nullopt fields are not checked.
struct calibration_expectation {
    std::optional<lowrank_method> method;
    std::string model_hash;
    int64_t num_layers = 0;
    int64_t num_kv_heads = 0;
    int64_t head_dim = 0;
};

calibration read_calibration(const std::string & path, const calibration_expectation & expect = {});

}  // namespace kvcomp::host::lowrank
