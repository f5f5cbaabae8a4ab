// kvcomp public API (C++17). Every function returns a kvcomp_status and never throws; on failure
// kvcomp_last_error() holds the message. The backend layer itself (lib/core) is internal.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kvcomp/status.h"

namespace kvcomp {

struct device_info;  // lib/core/backend.h

// One backend device as `kvcomp info` shows it.
struct device_summary {
    std::string name;            // selection name: cpu, opencl:N, cuda:N
    std::string api;             // CPU, OpenCL, CUDA
    std::string device_name;
    std::string vendor;
    std::string platform;
    std::string driver_version;
    std::string api_version;
    bool is_gpu = false;
    int compute_units = 0;
    uint64_t global_mem_bytes = 0;
    bool fp16_arith = false;
    bool int8_dot = false;
    std::vector<std::string> ops_supported;  // op names this device runs for its test shapes
    std::vector<std::string> ops_missing;    // "op: reason"
};

// Every device of every compiled-in backend, plus notes on what could not be enumerated.
// The default backend name ($KVCOMP_BACKEND or the best available) goes to default_name.
kvcomp_status list_devices(std::vector<device_summary> & devices, std::vector<std::string> & notes,
                           std::string & default_name);

// Result of selfcheck(): paged fp16 decode attention on `backend` against the CPU reference.
struct selfcheck_report {
    std::string backend;      // the backend actually used
    std::string device_name;
    std::string shape;        // the op as run, e.g. attn_decode(batch=3,q_heads=32,...)
    double nmse = 0.0;        // ||out - ref||^2 / ||ref||^2
    double threshold = 0.0;   // passes when nmse <= threshold
    double backend_ms = 0.0;  // device time of the op on the backend (median of runs)
    bool passed = false;
};

// Runs paged decode attention (GQA 4, head_dim 128, page size 16, three requests of
// different lengths incl. one not a multiple of the page size) on `backend` ("" or "default" for the
// default) and compares it with the CPU reference. Returns success when the check ran; see
// report.passed for the verdict.
kvcomp_status selfcheck(const std::string & backend, selfcheck_report & report);

}  // namespace kvcomp
