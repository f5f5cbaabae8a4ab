// test_backend_ops: every op on every available backend against the CPU reference, after ggml's
// test-backend-ops.
//
//   test_backend_ops [test|perf|support] [-b NAME] [-o OPS] [-p REGEX] [--seed N] [--smoke]
//
// test (default): each case of the list runs on the backend and on the CPU reference with the same
//   host bytes uploaded to both; outputs are compared (NMSE per op, bit-exact for integer outputs
//   and KV pools), every output element must be written, guards around every view must stay
//   intact, inputs must stay unmodified. Then the bad-input checks ("errors"): malformed ops throw
//   invalid_argument naming the op and the value, unsupported ops throw unsupported, a bad backend
//   name lists the valid ones. Unsupported cases are reported as skipped, not failed.
// perf: median device time of each case (perf-sized list) and GB/s from bytes().
// support: op x backend matrix.
//
// Backends: by default every non-CPU device; `-b cpu` compares the reference with itself (a
// harness self-check). A requested API without a device prints "<api>: not available" and counts
// as skipped (exit 0) unless KVCOMP_TEST_REQUIRE names it ("cuda", "cuda,opencl"), then exit 1.
// The last line is "N passed, M failed, K skipped"; the exit status is 1 if anything failed.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iostream>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "backend_ops_cases.h"
#include "core/registry.h"

using namespace kvcomp;
using namespace kvcomp::test;

namespace {

struct options {
    std::string mode = "test";
    std::vector<std::string> backends;  // empty: every non-CPU device
    std::set<std::string> ops;          // empty: all (plus "errors")
    std::string pattern;
    uint64_t seed = 42;
    bool smoke = false;
    bool verbose = false;  // -v: seconds per case
    int reps = 10, warmup = 2;
};

struct counters {
    int passed = 0, failed = 0, skipped = 0;
};

void usage() {
    std::printf(
        "usage: test_backend_ops [test|perf|support] [options]\n"
        "  test      compare every op on the backend with the CPU reference (default)\n"
        "  perf      time every op (perf-sized cases), median of --reps after --warmup\n"
        "  support   print which backend supports which op\n"
        "options:\n"
        "  -b NAME       backend(s), comma list: cpu, opencl, cuda or a device (opencl:1);\n"
        "                default every non-CPU device\n"
        "  -o OPS        ops, comma list (op names, and 'errors' for the bad-input checks)\n"
        "  -p REGEX      only cases whose parameters (vars) match REGEX\n"
        "  --seed N      data seed (default 42)\n"
        "  --smoke       a small subset of the cases\n"
        "  -v            test: print the seconds each case took (both backends, incl. kernel builds)\n"
        "  --reps N      perf: timed runs per case (default 10)\n"
        "  --warmup N    perf: untimed runs first (default 2)\n"
        "  -h, --help    this text\n"
        "environment: KVCOMP_TEST_REQUIRE=api[,api]  fail (exit 1) instead of skipping when a\n"
        "             requested api (cuda, opencl) has no device\n");
}

std::vector<std::string> split_list(const std::string & s) {
    std::vector<std::string> out;
    std::string cur;
    for (char c : s + ",") {
        if (c == ',' || c == ' ') {
            if (!cur.empty()) out.push_back(cur);
            cur.clear();
        } else {
            cur += char(std::tolower(static_cast<unsigned char>(c)));
        }
    }
    return out;
}

// The one place KVCOMP_TEST_REQUIRE is read.
std::set<std::string> required_apis() {
    const char * env = std::getenv("KVCOMP_TEST_REQUIRE");
    const auto v = split_list(env ? env : "");
    return {v.begin(), v.end()};
}

std::string lower(std::string s) {
    for (auto & c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
    return s;
}

// "opencl:1" -> "opencl"; "cpu" -> "cpu".
std::string api_of(const std::string & name) {
    return name.substr(0, name.find(':'));
}

bool parse(int argc, char ** argv, options & o, int & exit_code) {
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        auto value = [&]() -> std::string {
            if (i + 1 >= argc) throw std::invalid_argument(a + " needs a value");
            return argv[++i];
        };
        if (a == "-h" || a == "--help") {
            usage();
            exit_code = 0;
            return false;
        } else if (a == "test" || a == "perf" || a == "support") {
            o.mode = a;
        } else if (a == "-b") {
            for (const auto & b : split_list(value())) o.backends.push_back(b);
        } else if (a == "-o") {
            for (const auto & op : split_list(value())) o.ops.insert(op);
        } else if (a == "-p") {
            o.pattern = value();
            std::regex check(o.pattern);  // throws std::regex_error on a bad pattern
        } else if (a == "--seed") {
            o.seed = std::stoull(value());
        } else if (a == "--smoke") {
            o.smoke = true;
        } else if (a == "-v") {
            o.verbose = true;
        } else if (a == "--reps") {
            o.reps = std::max(1, std::stoi(value()));
        } else if (a == "--warmup") {
            o.warmup = std::max(0, std::stoi(value()));
        } else {
            std::fprintf(stderr, "test_backend_ops: unknown argument '%s'\n", a.c_str());
            usage();
            exit_code = 1;
            return false;
        }
    }
    std::set<std::string> valid{"errors"};
    for (int t = 0; t < int(op_type::count); ++t) valid.insert(op_name(op_type(t)));
    for (const auto & op : o.ops)
        if (!valid.count(op)) {
            std::string all;
            for (const auto & v : valid) all += " " + v;
            std::fprintf(stderr, "test_backend_ops: unknown op '%s'; valid:%s\n", op.c_str(), all.c_str());
            exit_code = 1;
            return false;
        }
    return true;
}

// ---------------------------------------------------------------------------------------------
// Bad-input checks, run on each backend under test.

struct check_result {
    int outcome = 0;  // 0 ok, 1 fail, 2 skipped
    std::string detail;
};

// Runs fn, which must throw kvcomp::error with `code` and a message containing every `needle`.
check_result expect_error(const std::function<void()> & fn, status code,
                          const std::vector<std::string> & needles) {
    try {
        fn();
    } catch (const error & e) {
        if (e.code() != code)
            return {1, std::string("threw ") + status_name(e.code()) + " instead of " + status_name(code) +
                           ": " + e.what()};
        const std::string msg = e.what();
        for (const auto & n : needles)
            if (msg.find(n) == std::string::npos) return {1, "message lacks '" + n + "': " + msg};
        return {0, std::string(status_name(code)) + ": " + msg};
    } catch (const std::exception & e) {
        return {1, std::string("threw a non-kvcomp exception: ") + e.what()};
    }
    return {1, std::string("no error; expected ") + status_name(code)};
}

tensor view(buffer & b, dtype t, std::initializer_list<int64_t> shape, size_t offset = 0) {
    return make_tensor(&b, t, shape, offset);
}

std::vector<std::pair<std::string, check_result>> run_error_checks(backend & be, backend & other) {
    std::vector<std::pair<std::string, check_result>> out;
    const dtype f32 = dtype::f32, f16 = dtype::f16, i32 = dtype::i32;

    {  // wrong element count; the failed op must not have touched its output
        auto a = be.alloc(40), b = be.alloc(36), d = be.alloc(40);
        const std::vector<uint32_t> poison(10, 0x7fa5a5a5u);
        be.upload(*d, 0, poison.data(), 40);
        const op_desc op =
            make_op(add_params{10}, {view(*a, f32, {10}), view(*b, f32, {9})}, {view(*d, f32, {10})});
        check_result r = expect_error([&] { be.run(op); }, status::invalid_argument, {"add(", "9"});
        std::vector<uint32_t> after(10);
        be.download(*d, 0, after.data(), 40);
        if (r.outcome == 0 && after != poison) r = {1, "the rejected op wrote its output"};
        out.push_back({"wrong element count", r});
    }
    {  // wrong dtype
        auto x = be.alloc(2 * 12), w = be.alloc(4 * 4), d = be.alloc(4 * 12);
        const op_desc op = make_op(rms_norm_params{3, 4, 1e-6f}, {view(*x, f16, {3, 4}), view(*w, f32, {4})},
                                   {view(*d, f32, {3, 4})});
        out.push_back({"wrong dtype",
                       expect_error([&] { be.run(op); }, status::invalid_argument, {"rms_norm(", "f16"})});
    }
    {  // GQA: q heads not a multiple of kv heads
        attn_decode_params p;
        p.kv = {2, 4, 16, 64};
        p.batch = 1;
        p.n_q_heads = 6;
        p.nnz_pages = 1;
        p.max_seq_len = 1;
        const int64_t pool = 2 * 4 * 16 * 64;
        auto q = be.alloc(4 * 6 * 64), k = be.alloc(2 * pool), v = be.alloc(2 * pool), ip = be.alloc(8),
             ix = be.alloc(4), lp = be.alloc(4), o = be.alloc(4 * 6 * 64);
        const op_desc op =
            make_op(p,
                    {view(*q, f32, {1, 6, 64}), view(*k, f16, {2, 4, 16, 64}), view(*v, f16, {2, 4, 16, 64}),
                     view(*ip, i32, {2}), view(*ix, i32, {1}), view(*lp, i32, {1})},
                    {view(*o, f32, {1, 6, 64})});
        out.push_back({"n_q_heads not a multiple of n_kv_heads",
                       expect_error([&] { be.run(op); }, status::invalid_argument,
                                    {"attn_decode(", "q_heads=6", "n_kv_heads"})});
    }
    {  // a view that overruns its buffer
        auto s = be.alloc(400), d = be.alloc(400);
        const op_desc op = make_op(copy_params{100}, {view(*s, f32, {100}, 8)}, {view(*d, f32, {100})});
        out.push_back(
            {"view overrunning its buffer",
             expect_error([&] { be.run(op); }, status::invalid_argument, {"copy(", "overruns", "400"})});
    }
    {  // a buffer of another backend
        auto s = other.alloc(64), d = be.alloc(64);
        const op_desc op = make_op(copy_params{16}, {view(*s, f32, {16})}, {view(*d, f32, {16})});
        out.push_back(
            {"buffer of another backend",
             expect_error([&] { be.run(op); }, status::invalid_argument, {"copy(", "belongs to backend"})});
    }
    // A bad backend name lists the valid ones (including this backend).
    out.push_back(
        {"bad backend name", expect_error([] { create_backend("nosuch:7"); }, status::backend_unavailable,
                                          {"nosuch:7", "cpu", be.name()})});

    {  // Unsupported shapes: probe what this backend's supports() refuses; run() must then throw
       // unsupported naming the op. A backend that refuses none of the probes skips this check.
        std::vector<case_ptr> probes;
        for (int64_t hd : {96, 80, 256, 40, 66, 512})
            probes.push_back(make_attn_decode_case(decode_spec{8, 2, hd, 16, {17, 1}, 0, 1}));
        probes.push_back(make_attn_decode_case(decode_spec{12, 4, 128, 16, {5}, 0, 1}));  // GQA 3
        probes.push_back(make_attn_decode_case(decode_spec{8, 8, 128, 7, {20}, 0, 1}));   // page 7
        probes.push_back(make_attn_decode_case(decode_spec{8, 2, 128, 16, {40}, 1000, 1}));
        probes.push_back(make_copy_case(dtype::bf16, dtype::bf16, 7));
        int refused = 0;
        check_result r;
        for (auto & pc : probes) {
            const support s = case_support(*pc, be);
            if (s.ok) continue;
            ++refused;
            r = expect_error([&] { run_case(*pc, be, 1); }, status::unsupported,
                             {std::string(op_name(pc->op())) + "(", "not supported", be.name()});
            if (r.outcome != 0) break;
        }
        if (refused == 0)
            r = {2,
                 "supports() accepts every probe (attn_decode hd 96/80/256/40/66/512, GQA 3, page 7, "
                 "1000 splits; copy bf16)"};
        out.push_back({"unsupported op or shape", r});
    }
    return out;
}

// ---------------------------------------------------------------------------------------------

std::vector<case_ptr> selected_cases(const options & o, case_set set) {
    std::vector<case_ptr> all = make_test_cases(set), keep;
    const std::regex re(o.pattern.empty() ? ".*" : o.pattern);
    for (auto & c : all) {
        if (!o.ops.empty() && !o.ops.count(op_name(c->op()))) continue;
        if (!o.pattern.empty() && !std::regex_search(c->vars(), re)) continue;
        keep.push_back(std::move(c));
    }
    return keep;
}

void print_device(const device_info & d) {
    std::printf("Backend %s: %s (%s, %s, driver %s, %.1f GiB)\n", d.name.c_str(), d.device_name.c_str(),
                d.api.c_str(), d.platform.c_str(), d.driver_version.c_str(),
                double(d.global_mem_bytes) / (1 << 30));
}

void run_test_mode(const device_entry & dev, const options & o, counters & cnt) {
    print_device(dev.info);
    std::unique_ptr<backend> target = dev.create();
    std::unique_ptr<backend> reference = cpu::create_backend();
    for (auto & tc : selected_cases(o, o.smoke ? case_set::smoke : case_set::full)) {
        std::string name = tc->name();
        try {
            const auto c0 = std::chrono::steady_clock::now();
            const compare_result r = compare_backends(*tc, *target, *reference, o.seed);
            if (o.verbose) {
                const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - c0).count();
                name = "[" + std::to_string(s).substr(0, 5) + " s] " + name;
            }
            switch (r.result) {
                case compare_result::outcome::ok:
                    std::printf("  %s: OK (%s)\n", name.c_str(), r.detail.c_str());
                    ++cnt.passed;
                    break;
                case compare_result::outcome::fail:
                    std::printf("  %s: FAIL (%s)\n", name.c_str(), r.detail.c_str());
                    ++cnt.failed;
                    break;
                case compare_result::outcome::unsupported:
                    std::printf("  %s: not supported (%s)\n", name.c_str(), r.detail.c_str());
                    ++cnt.skipped;
                    break;
            }
        } catch (const error & e) {
            std::printf("  %s: FAIL (%s: %s)\n", name.c_str(), status_name(e.code()), e.what());
            ++cnt.failed;
        } catch (const std::exception & e) {
            std::printf("  %s: FAIL (exception: %s)\n", name.c_str(), e.what());
            ++cnt.failed;
        }
        std::fflush(stdout);
    }
    if (!o.ops.empty() && !o.ops.count("errors")) return;
    if (!o.pattern.empty() && !std::regex_search("errors", std::regex(o.pattern))) return;
    try {
        for (const auto & [what, r] : run_error_checks(*target, *reference)) {
            const char * tag = r.outcome == 0 ? "OK" : r.outcome == 1 ? "FAIL" : "skipped";
            std::printf("  errors(%s): %s (%s)\n", what.c_str(), tag, r.detail.c_str());
            (r.outcome == 0 ? cnt.passed : r.outcome == 1 ? cnt.failed : cnt.skipped)++;
        }
    } catch (const std::exception & e) {
        std::printf("  errors: FAIL (unexpected exception: %s)\n", e.what());
        ++cnt.failed;
    }
}

void run_perf_mode(const device_entry & dev, const options & o, counters & cnt) {
    print_device(dev.info);
    std::unique_ptr<backend> be = dev.create();
    const case_set set = o.smoke ? case_set::smoke : dev.info.is_gpu ? case_set::perf : case_set::perf_cpu;
    for (auto & tc : selected_cases(o, set)) {
        const std::string name = tc->name();
        try {
            if (dev.info.global_mem_bytes && tc->device_bytes() > dev.info.global_mem_bytes * 8 / 10) {
                std::printf("  %s: skipped (needs %.1f GiB)\n", name.c_str(),
                            double(tc->device_bytes()) / (1 << 30));
                ++cnt.skipped;
                continue;
            }
            const perf_result r = time_case(*tc, *be, o.warmup, o.reps, o.seed);
            if (!r.supported) {
                std::printf("  %s: not supported (%s)\n", name.c_str(), r.reason.c_str());
                ++cnt.skipped;
                continue;
            }
            std::printf("  %s: %.4f ms (median of %d, min %.4f), %.2f GB/s", name.c_str(), r.median_ms,
                        r.reps, r.min_ms, r.gbps);
            if (r.gflops > 0) std::printf(", %.1f GFLOP/s", r.gflops);
            std::printf("\n");
            ++cnt.passed;
        } catch (const std::exception & e) {
            std::printf("  %s: FAIL (%s)\n", name.c_str(), e.what());
            ++cnt.failed;
        }
        std::fflush(stdout);
    }
}

void run_support_mode(const std::vector<const device_entry *> & devs, const options & o) {
    // Per op and backend: yes (every case), no (none) or partial, with the first reason seen.
    std::vector<std::unique_ptr<backend>> bes;
    for (const auto * d : devs) bes.push_back(d->create());
    std::map<std::string, std::vector<std::pair<int, int>>> count;  // op -> per backend (ok, total)
    std::map<std::string, std::vector<std::string>> reason;
    std::vector<std::string> order;
    for (auto & tc : selected_cases(o, o.smoke ? case_set::smoke : case_set::full)) {
        const std::string op = op_name(tc->op());
        if (!count.count(op)) {
            order.push_back(op);
            count[op].assign(bes.size(), {0, 0});
            reason[op].assign(bes.size(), "");
        }
        for (size_t i = 0; i < bes.size(); ++i) {
            support s;
            try {
                s = case_support(*tc, *bes[i]);
            } catch (const std::exception & e) {
                s = support::no(std::string("error: ") + e.what());
            }
            count[op][i].second++;
            if (s.ok)
                count[op][i].first++;
            else if (reason[op][i].empty())
                reason[op][i] = tc->vars() + ": " + s.reason;
        }
    }
    std::printf("%-14s", "op");
    for (const auto * d : devs) std::printf(" | %-12s", d->info.name.c_str());
    std::printf("\n");
    for (const auto & op : order) {
        std::printf("%-14s", op.c_str());
        std::vector<std::string> notes;
        for (size_t i = 0; i < bes.size(); ++i) {
            const auto [ok, total] = count[op][i];
            const std::string cell = ok == total ? "yes"
                                     : ok == 0
                                         ? "no"
                                         : "partial " + std::to_string(ok) + "/" + std::to_string(total);
            std::printf(" | %-12s", cell.c_str());
            if (ok != total) notes.push_back(devs[i]->info.name + ": " + reason[op][i]);
        }
        std::printf("\n");
        for (const auto & n : notes) std::printf("    %s\n", n.c_str());
    }
}

}  // namespace

int main(int argc, char ** argv) {
    options o;
    int exit_code = 0;
    try {
        if (!parse(argc, argv, o, exit_code)) return exit_code;
    } catch (const std::exception & e) {
        std::fprintf(stderr, "test_backend_ops: %s\n", e.what());
        return 1;
    }
    const auto t0 = std::chrono::steady_clock::now();
    const auto & devices = list_devices();
    const std::set<std::string> required = required_apis();
    counters cnt;
    bool missing_required = false;

    // Resolve -b into devices; a known API without a device is "not available".
    std::vector<const device_entry *> selected;
    std::set<std::string> requested_apis;
    if (o.backends.empty()) {
        for (const auto & d : devices)
            if (o.mode == "support" || lower(d.info.api) != "cpu") selected.push_back(&d);
        requested_apis = {"opencl", "cuda"};
        for (const auto & api : requested_apis) {
            const bool found = std::any_of(devices.begin(), devices.end(),
                                           [&](const device_entry & d) { return lower(d.info.api) == api; });
            if (!found && required.count(api)) {
                std::printf("%s: not available, and KVCOMP_TEST_REQUIRE requires it\n", api.c_str());
                missing_required = true;
            }
        }
        if (selected.empty())
            std::printf("no non-CPU device available; use -b cpu for a self-check of the harness\n");
    } else {
        for (const auto & b : o.backends) {
            std::vector<const device_entry *> match;
            for (const auto & d : devices)
                if (lower(d.info.name) == b || lower(d.info.api) == b) match.push_back(&d);
            if (match.empty()) {
                const std::string api = api_of(b);
                if (api != "opencl" && api != "cuda" && api != "cpu") {
                    try {
                        create_backend(b);  // throws, listing the valid names
                    } catch (const error & e) {
                        std::fprintf(stderr, "test_backend_ops: %s\n", e.what());
                    }
                    return 1;
                }
                std::printf("%s: not available\n", b.c_str());
                for (const auto & n : registry_notes()) std::printf("  %s\n", n.c_str());
                if (required.count(api)) {
                    std::printf("%s is required by KVCOMP_TEST_REQUIRE: failing\n", api.c_str());
                    missing_required = true;
                } else {
                    ++cnt.skipped;
                }
            }
            for (const auto * m : match)
                if (std::find(selected.begin(), selected.end(), m) == selected.end()) selected.push_back(m);
        }
    }

    if (o.mode == "support") {
        if (!selected.empty()) run_support_mode(selected, o);
    } else {
        for (const auto * d : selected) {
            try {
                if (o.mode == "perf")
                    run_perf_mode(*d, o, cnt);
                else
                    run_test_mode(*d, o, cnt);
            } catch (const std::exception & e) {  // e.g. the backend could not be created
                std::printf("Backend %s: FAIL (%s)\n", d->info.name.c_str(), e.what());
                ++cnt.failed;
            }
        }
    }
    if (missing_required) ++cnt.failed;
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("%s mode finished in %.1f s\n", o.mode.c_str(), secs);
    std::printf("%d passed, %d failed, %d skipped\n", cnt.passed, cnt.failed, cnt.skipped);
    return cnt.failed ? 1 : 0;
}
