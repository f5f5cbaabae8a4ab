// cl_residency: how many work-groups an OpenCL driver keeps resident per compute unit, by local memory per
// work-group. NVIDIA's driver gives OpenCL no occupancy query and no shared-memory carveout setting, and the
// per-warp decodes (cl_kernels/*_warps.cl) size their cp.async rings for CUDA's residency (4 blocks of 128
// threads per SM); this measures what the driver does instead of assuming it.
//
// Each work-group of WG work-items allocates LOCAL bytes of local memory, touches them, reads the SM id and
// the global timer (inline PTX), spins for --spin-us, and records (SM, start, end). Per SM, the largest
// number of work-groups whose [start, end) intervals overlap is the residency. The kernel uses a handful of
// registers, so the limit seen is the local memory's (and the threads' / blocks' per SM); a decode kernel at
// 128 registers and 128 work-items is also register-limited to 4 per SM.
//
//   cl_residency [-d N] [--wg 128] [--local LIST] [--groups-per-cu 16] [--spin-us 50]
// Prints one line per local size: work-groups resident per compute unit (min / max over the SMs seen).
// NVIDIA's OpenCL driver only (inline PTX); other devices are refused with a message.
#include <CL/cl.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

namespace {

const char * kSource = R"CLC(
ulong kvc_now(void) {
    ulong t;
    __asm__ volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
uint kvc_smid(void) {
    uint s;
    __asm__ volatile("mov.u32 %0, %%smid;" : "=r"(s));
    return s;
}
kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void kvc_residency(global ulong * out, ulong spin_ns) {
    local uint4 area[LOCAL_V4];
    const int lid = get_local_id(0);
    for (int i = lid; i < LOCAL_V4; i += WG) area[i] = (uint4)(i, lid, 0, 0);  // the whole allocation, touched
    barrier(CLK_LOCAL_MEM_FENCE);
    const ulong t0 = kvc_now();
    ulong t = t0;
    while (t - t0 < spin_ns) t = kvc_now();
    // The area's words feed the output (zero here), so the compiler keeps the allocation.
    const uint keep = area[(lid * 7 + 1) % LOCAL_V4].z;
    if (lid == 0) {
        global ulong * r = out + 3 * get_group_id(0);
        r[0] = kvc_smid() + keep;
        r[1] = t0;
        r[2] = t;
    }
}
)CLC";

void die(const std::string & what, cl_int err = CL_SUCCESS) {
    std::fprintf(stderr, "cl_residency: %s%s\n", what.c_str(),
                 err == CL_SUCCESS ? "" : (" (OpenCL error " + std::to_string(err) + ")").c_str());
    std::exit(1);
}

// A whole decimal number (or, for `real`, a number) of option `name`, else a message naming it.
double parse_number(const std::string & name, const std::string & v, bool real = false) {
    char * end = nullptr;
    const double x = real ? std::strtod(v.c_str(), &end) : double(std::strtol(v.c_str(), &end, 10));
    if (v.empty() || end != v.c_str() + v.size()) die(name + " takes a number, got '" + v + "'");
    return x;
}

void check(cl_int err, const char * what) {
    if (err != CL_SUCCESS) die(what, err);
}

std::string device_string(cl_device_id d, cl_device_info what) {
    size_t n = 0;
    clGetDeviceInfo(d, what, 0, nullptr, &n);
    std::string s(n, '\0');
    clGetDeviceInfo(d, what, n, s.data(), nullptr);
    while (!s.empty() && s.back() == '\0') s.pop_back();
    return s;
}

// The GPU devices of every platform, in platform order (the numbering of -d).
std::vector<cl_device_id> gpu_devices() {
    cl_uint np = 0;
    check(clGetPlatformIDs(0, nullptr, &np), "clGetPlatformIDs");
    std::vector<cl_platform_id> platforms(np);
    check(clGetPlatformIDs(np, platforms.data(), nullptr), "clGetPlatformIDs");
    std::vector<cl_device_id> out;
    for (cl_platform_id p : platforms) {
        cl_uint nd = 0;
        if (clGetDeviceIDs(p, CL_DEVICE_TYPE_GPU, 0, nullptr, &nd) != CL_SUCCESS || nd == 0) continue;
        std::vector<cl_device_id> ds(nd);
        clGetDeviceIDs(p, CL_DEVICE_TYPE_GPU, nd, ds.data(), nullptr);
        out.insert(out.end(), ds.begin(), ds.end());
    }
    return out;
}

// Per SM, the most work-groups whose [start, end) overlap: a sweep over the sorted interval ends.
std::map<uint64_t, int> residency(const std::vector<uint64_t> & rec, size_t groups) {
    std::map<uint64_t, std::vector<std::pair<uint64_t, int>>> events;
    for (size_t g = 0; g < groups; ++g) {
        events[rec[3 * g]].push_back({rec[3 * g + 1], +1});
        events[rec[3 * g]].push_back({rec[3 * g + 2], -1});
    }
    std::map<uint64_t, int> out;
    for (auto & [sm, ev] : events) {
        // At equal times the end (-1) sorts first: intervals that only touch do not overlap.
        std::sort(ev.begin(), ev.end());
        int now = 0, most = 0;
        for (const auto & e : ev) most = std::max(most, now += e.second);
        out[sm] = most;
    }
    return out;
}

}  // namespace

int main(int argc, char ** argv) {
    int dev_index = 0, wg = 128, groups_per_cu = 16;
    double spin_us = 50.0;
    std::vector<int> local_kib = {0, 8, 16, 24, 32, 40, 48, 56, 64, 72, 96, 112};
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        auto value = [&]() -> std::string {
            if (i + 1 >= argc) die("missing value after " + a);
            return argv[++i];
        };
        if (a == "-d")
            dev_index = int(parse_number(a, value()));
        else if (a == "--wg")
            wg = int(parse_number(a, value()));
        else if (a == "--groups-per-cu")
            groups_per_cu = int(parse_number(a, value()));
        else if (a == "--spin-us")
            spin_us = parse_number(a, value(), true);
        else if (a == "--local") {
            local_kib.clear();
            const std::string v = value();
            for (size_t p = 0; p <= v.size();) {
                const size_t c = std::min(v.find(',', p), v.size());
                const int kib = int(parse_number(a, v.substr(p, c - p)));
                if (kib < 0) die("--local sizes must be >= 0 KiB, got " + std::to_string(kib));
                local_kib.push_back(kib);
                p = c + 1;
            }
        } else if (a == "-h" || a == "--help") {
            std::printf(
                "usage: cl_residency [-d N] [--wg 128] [--local KIB,KIB,...] [--groups-per-cu 16] [--spin-us "
                "50]\n"
                "Work-groups an OpenCL GPU keeps resident per compute unit, by local memory per work-group\n"
                "(NVIDIA's driver: inline PTX reads the SM id and the global timer). -d: the N-th GPU "
                "device.\n");
            return 0;
        } else {
            die("unknown option " + a + " (see --help)");
        }
    }
    if (wg <= 0 || groups_per_cu <= 0 || spin_us <= 0.0)
        die("--wg, --groups-per-cu and --spin-us must be positive");
    const std::vector<cl_device_id> devs = gpu_devices();
    if (dev_index < 0 || size_t(dev_index) >= devs.size())
        die("no GPU device " + std::to_string(dev_index) + " (" + std::to_string(devs.size()) + " found)");
    cl_device_id dev = devs[size_t(dev_index)];
    const std::string vendor = device_string(dev, CL_DEVICE_VENDOR),
                      name = device_string(dev, CL_DEVICE_NAME);
    if (vendor.find("NVIDIA") == std::string::npos)
        die("device '" + name + "' is not NVIDIA's: no inline PTX");
    cl_uint cus = 0;
    cl_ulong local_max = 0;
    clGetDeviceInfo(dev, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof(cus), &cus, nullptr);
    clGetDeviceInfo(dev, CL_DEVICE_LOCAL_MEM_SIZE, sizeof(local_max), &local_max, nullptr);
    std::printf("device: %s (%s), %u compute units, CL_DEVICE_LOCAL_MEM_SIZE %llu bytes; work-groups of %d\n",
                name.c_str(), device_string(dev, CL_DRIVER_VERSION).c_str(), cus,
                (unsigned long long)local_max, wg);

    cl_int err = CL_SUCCESS;
    cl_context ctx = clCreateContext(nullptr, 1, &dev, nullptr, nullptr, &err);
    check(err, "clCreateContext");
    cl_command_queue queue = clCreateCommandQueue(ctx, dev, 0, &err);
    check(err, "clCreateCommandQueue");
    const size_t groups = size_t(cus) * size_t(groups_per_cu);
    cl_mem out = clCreateBuffer(ctx, CL_MEM_WRITE_ONLY, groups * 3 * sizeof(cl_ulong), nullptr, &err);
    check(err, "clCreateBuffer");
    std::vector<uint64_t> rec(groups * 3);
    std::printf("local KiB | resident work-groups per CU (min / max over SMs) | SMs seen\n");
    for (int kib : local_kib) {
        const size_t bytes = std::max<size_t>(16, size_t(kib) * 1024);
        if (bytes > local_max) {
            std::printf("%9d | over CL_DEVICE_LOCAL_MEM_SIZE\n", kib);
            continue;
        }
        const std::string options =
            "-cl-std=CL1.2 -DWG=" + std::to_string(wg) + " -DLOCAL_V4=" + std::to_string(bytes / 16);
        cl_program prog = clCreateProgramWithSource(ctx, 1, &kSource, nullptr, &err);
        check(err, "clCreateProgramWithSource");
        if (clBuildProgram(prog, 1, &dev, options.c_str(), nullptr, nullptr) != CL_SUCCESS) {
            size_t n = 0;
            clGetProgramBuildInfo(prog, dev, CL_PROGRAM_BUILD_LOG, 0, nullptr, &n);
            std::string log(n, '\0');
            clGetProgramBuildInfo(prog, dev, CL_PROGRAM_BUILD_LOG, n, log.data(), nullptr);
            die("build failed: " + log);
        }
        cl_kernel k = clCreateKernel(prog, "kvc_residency", &err);
        check(err, "clCreateKernel");
        const cl_ulong spin_ns = cl_ulong(spin_us * 1000.0);
        check(clSetKernelArg(k, 0, sizeof(cl_mem), &out), "clSetKernelArg");
        check(clSetKernelArg(k, 1, sizeof(cl_ulong), &spin_ns), "clSetKernelArg");
        const size_t global = groups * size_t(wg), local = size_t(wg);
        for (int run = 0; run < 2; ++run)  // the first run warms up (program load, clocks)
            check(clEnqueueNDRangeKernel(queue, k, 1, nullptr, &global, &local, 0, nullptr, nullptr),
                  "launch");
        check(clEnqueueReadBuffer(queue, out, CL_TRUE, 0, rec.size() * sizeof(uint64_t), rec.data(), 0,
                                  nullptr, nullptr),
              "clEnqueueReadBuffer");
        const std::map<uint64_t, int> r = residency(rec, groups);
        int lo = 1 << 30, hi = 0;
        for (const auto & [sm, n] : r) lo = std::min(lo, n), hi = std::max(hi, n);
        std::printf("%9d | %d / %d | %zu\n", kib, lo, hi, r.size());
        clReleaseKernel(k);
        clReleaseProgram(prog);
    }
    clReleaseMemObject(out);
    clReleaseCommandQueue(queue);
    clReleaseContext(ctx);
    return 0;
}
