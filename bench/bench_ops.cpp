// bench_ops: kernel benchmarks over the test_backend_ops case machinery.
//
// For each selected device, in one run:
//   1. copy bandwidth: the `copy` op f32 -> f32 over --copy-mib MiB (default 1 GiB on GPUs, 64 MiB
//      on CPU devices); bytes = read + written. Every other speed is also given as a fraction of it.
//   2. the perf case list of test_backend_ops (perf-sized shapes; shrunk on CPU devices).
//   3. paged fp16 decode attention, 32 query heads / 8 KV heads / head_dim 128 / page 16, for every
//      batch x context of --batches and --contexts; GB/s counts the KV bytes read plus q and out.
//   3c. low-rank decode attention (ZACK/FDC, Palu) on uneven per-head ranks at 50% and 70% KV
//      compression: the plain and the balanced schedule of attn_decode_ragged, and Palu's decode
//      (latent K reconstructed with RoPE each step) at the same ranks; bytes = the compressed K/V.
//   4. causal prefill attention (q f32, K/V f16), 32 query heads / 8 KV heads / head_dim 128, for
//      every batch x prompt length of --prefill; TFLOP/s counts 4 * head_dim * n_q_heads flops
//      per visible (query, key) pair, i.e. the causal half: sum over b of L_b (L_b + 1) / 2.
// Times are the median of --reps runs after --warmup runs, each timed with the backend's device
// timer (OpenCL profiling events, CUDA events, wall clock on the CPU); with --cold, each timed run
// is queued behind an untimed device copy (tests/backend_ops_cases.h, cache_flush). Sizes that do not fit in
// 80% of the device memory are skipped. A table goes to stdout and, with --csv, rows to a CSV
// file (header written when the file is new) with the device, driver, backend and git SHA.
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <regex>
#include <set>
#include <string>

#include "backend_ops_cases.h"
#include "backend_ops_lowrank_cases.h"
#include "backend_ops_quant_cases.h"
#include "core/registry.h"

using namespace kvcomp;
using namespace kvcomp::test;

namespace {

struct options {
    std::vector<std::string> backends;
    std::string set = "perf";  // perf | smoke | none
    std::set<std::string> ops;
    std::string pattern;
    std::vector<int64_t> contexts{4096, 32768, 131072};
    std::vector<int64_t> batches{1, 16};
    std::vector<std::pair<int64_t, int64_t>> prefill{{1, 4096}, {16, 4096}, {1, 32768}};  // batch x length
    // Low-rank decode schedules: for compute_units x each; 0 = auto (the backend's concurrent tasks,
    // what the engine's default workers=auto plans for).
    std::vector<int64_t> worker_scales{0};
    std::vector<int64_t> waves{4};  // ... and the balanced search's largest wave counts
    std::vector<int64_t> token_costs{-1};  // ... and its per-token cost; -1: the engine's default
    std::vector<int64_t> task_costs{-1};   // ... and its per-task cost; -1: the engine's default
    std::vector<int64_t> tails{-1};        // ... and its tail percent; -1: the engine's default
    std::vector<int64_t> page_sizes{16};   // pages of the fp16 and low-rank decode sweeps
    std::vector<bool> shuffle_pages{true};  // ... and their order (false: each request's pages contiguous)
    std::set<std::string> sweeps{"fp16", "quant", "lowrank"};  // decode sweeps to run
    std::vector<int64_t> quant_dims{128};                       // head widths of the quant sweep
    std::string sweep_rows;                                     // regex over their row names
    int reps = 20, warmup = 3;
    int64_t cold_mib = 0;  // --cold: the evicting copy before each timed run (cache_flush)
    int64_t copy_mib = 0;  // 0: by device kind
    std::string csv, commit = KVCOMP_GIT_SHA;
    uint64_t seed = 42;
};

void usage() {
    std::printf(
        "usage: bench_ops [options]\n"
        "  -b NAMES          backends, comma list (cpu, opencl, cuda, opencl:1); default every non-CPU\n"
        "                    device (the CPU reference only when asked)\n"
        "  --set S           op cases: perf (default), smoke or none\n"
        "  -o OPS, -p REGEX  filter the op cases by op name / by parameters\n"
        "  --contexts LIST   decode contexts, comma list, K = 1024 (default 4K,32K,128K; 'none' to skip)\n"
        "  --batches LIST    decode batches (default 1,16)\n"
        "  --prefill LIST    causal prefill shapes BATCHxLENGTH, comma list, K = 1024\n"
        "                    (default 1x4K,16x4K,1x32K; 'none' to skip)\n"
        "  --worker-scales L low-rank decode: schedules for compute_units x each, or auto (default):\n"
        "                    the decode tasks the backend runs at once (backend::concurrent_workgroups,\n"
        "                    as the engine's workers=auto); rows of scale s are named\n"
        "                    decode_lowrank_*_xS_*, auto rows have no suffix; each profile also\n"
        "                    runs decode_lowrank_q4_balanced_* (kv_bits=4 pages, core/ragged_q4.h;\n"
        "                    bytes = the q4 rows read)\n"
        "  --waves LIST      low-rank balanced decode: the schedule search's largest wave counts\n"
        "                    (default 4; rows of w != 4 end in _wW before the profile)\n"
        "  --token-costs L   low-rank balanced decodes: the schedule's per-token cost c, tasks costing\n"
        "                    s_kv * (k_width + v_width + c), or auto (default): the engine's\n"
        "                    (default_token_cost: 1 for f16 pages, 64 for q4); rows of a given c end in\n"
        "                    _tcC before the profile\n"
        "  --task-costs L    low-rank balanced decodes: the schedule's per-task cost t (a task costs t more,\n"
        "                    whatever its length; decode_schedule.h), or auto (default): the engine's\n"
        "                    (backend::decode_task_cost); rows of a given t end in _tkT before the profile\n"
        "  --tails L         low-rank balanced decodes: the schedule's tail percent (decode_schedule.h,\n"
        "                    0-50), or auto (default): the engine's (backend::decode_tail_percent); rows\n"
        "                    of a given N end in _tlN\n"
        "  --page-sizes L    page sizes in tokens of the fp16 and low-rank decode sweeps (default 16);\n"
        "                    rows of another size end in _pgN (decode_fp16_pgN, "
        "decode_lowrank_*_pgN_<profile>)\n"
        "  --page-order L    shuffled (default: pool pages in random order, as an engine's end up) and/or\n"
        "                    sequential (each request's pages contiguous); sequential rows end in _seq\n"
        "  --sweeps LIST     decode sweeps over --batches x --contexts: fp16, quant (zipcache, kivi2\n"
        "                    and kivi4 blocks), lowrank (plain, balanced, palu, q4 pages), or none\n"
        "                    (default fp16,quant,lowrank)\n"
        "  --quant-dims LIST head widths of the quant sweep (default 128; others are the reduced caches\n"
        "                    of kivi / zipcache with lowrank=, rank=R: rows decode_<layout>_d<W>, KIVI's\n"
        "                    groups 16 where 32 does not divide W)\n"
        "  --sweep-rows RE   only the sweep rows whose name matches RE (e.g. 'fp16|balanced_p50')\n"
        "  --reps N          timed runs per case (default 20), median reported\n"
        "  --warmup N        untimed runs first (default 3)\n"
        "  --cold [MIB]      queue each timed run behind an untimed device copy of MIB MiB (default 256):\n"
        "                    the case's data leaves the caches, and the device is busy while the host\n"
        "                    launches the run, so CUDA times exclude the host's launch latency (as\n"
        "                    OpenCL's profiling events always do); the CSV's commit gets '+cold'\n"
        "  --copy-mib N      copy-bandwidth source size in MiB (default 1024 on GPUs, 64 on CPU devices)\n"
        "  --csv FILE        append rows to FILE (header if new)\n"
        "  --commit SHA      git SHA for the CSV (default: baked in at configure time: %s)\n"
        "  --seed N          data seed\n"
        "  -h, --help        this text\n",
        KVCOMP_GIT_SHA);
}

std::vector<std::string> split(const std::string & s) {
    std::vector<std::string> out;
    std::string cur;
    for (char c : s + ",") {
        if (c == ',') {
            if (!cur.empty()) out.push_back(cur);
            cur.clear();
        } else if (c != ' ') {
            cur += char(std::tolower(static_cast<unsigned char>(c)));
        }
    }
    return out;
}

// A comma list of counts, K = 1024; sizes must be positive, costs (zero_ok) may be 0.
std::vector<int64_t> parse_sizes(const std::string & s, bool zero_ok = false) {
    std::vector<int64_t> out;
    if (s == "none") return out;
    for (const auto & v : split(s)) {
        size_t used = 0;
        int64_t n = std::stoll(v, &used);
        if (used < v.size() && v[used] == 'k')
            n *= 1024;
        else if (used != v.size())
            throw std::invalid_argument("bad size '" + v + "'");
        if (n < 0 || (n == 0 && !zero_ok))
            throw std::invalid_argument(std::string(zero_ok ? "costs must be >= 0" : "sizes must be positive") +
                                        ", got '" + v + "'");
        out.push_back(n);
    }
    return out;
}

// "1x4k,16x4k" -> {(1, 4096), (16, 4096)}; "none" -> {}.
std::vector<std::pair<int64_t, int64_t>> parse_prefill(const std::string & s) {
    std::vector<std::pair<int64_t, int64_t>> out;
    if (s == "none") return out;
    for (const auto & v : split(s)) {
        const size_t x = v.find('x');
        if (x == std::string::npos || x == 0 || x + 1 == v.size())
            throw std::invalid_argument("bad prefill shape '" + v + "' (expected BATCHxLENGTH, e.g. 16x4k)");
        const auto b = parse_sizes(v.substr(0, x)), l = parse_sizes(v.substr(x + 1));
        if (b.size() != 1 || l.size() != 1) throw std::invalid_argument("bad prefill shape '" + v + "'");
        out.emplace_back(b[0], l[0]);
    }
    return out;
}

// The decode op of a ragged decode case of this spec, as the engine asks the backend about it (the
// kernel choice depends on the widest head, the page format and the group, OpenCL's count on the batch
// too; not on lengths). Palu: attn_decode_palu.
op_params decode_params(const test::ragged_spec & rs, bool palu) {
    ragged_layout kv;
    kv.n_kv_heads = int64_t(rs.k_widths.size());
    kv.page_size = rs.page_size;
    for (size_t c = 0; c < rs.k_widths.size(); ++c) {
        kv.k_total += rs.k_widths[c], kv.v_total += rs.v_widths[c];
        kv.max_width = std::max({kv.max_width, rs.k_widths[c], rs.v_widths[c]});
        kv.max_k_width = std::max(kv.max_k_width, rs.k_widths[c]);
        kv.max_v_width = std::max(kv.max_v_width, rs.v_widths[c]);
    }
    kv.bits = rs.bits;
    if (palu) {
        attn_decode_palu_params p;
        p.kv = kv, p.n_q_heads = kv.n_kv_heads * rs.group, p.head_dim = rs.head_dim, p.rot_dim = rs.rot_dim;
        p.batch = int64_t(rs.lens.size());
        return p;
    }
    attn_decode_ragged_params p;
    p.kv = kv, p.n_q_heads = kv.n_kv_heads * rs.group, p.batch = int64_t(rs.lens.size());
    return p;
}

// The decode tasks the backend runs at once for such a case, its per-task cost and tail (the engine's
// workers=auto, task_cost=auto and tail=auto).
int64_t concurrent_decode_tasks(const backend & be, const test::ragged_spec & rs, bool palu) {
    return be.concurrent_workgroups(decode_params(rs, palu));
}
int64_t decode_task_cost(const backend & be, const test::ragged_spec & rs, bool palu) {
    return be.decode_task_cost(decode_params(rs, palu));
}
int64_t decode_tail_percent(const backend & be, const test::ragged_spec & rs, bool palu) {
    return be.decode_tail_percent(decode_params(rs, palu));
}

bool parse(int argc, char ** argv, options & o) {
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        auto value = [&]() -> std::string {
            if (i + 1 >= argc) throw std::invalid_argument(a + " needs a value");
            return argv[++i];
        };
        if (a == "-h" || a == "--help") {
            usage();
            return false;
        } else if (a == "-b") {
            for (const auto & b : split(value())) o.backends.push_back(b);
        } else if (a == "--set") {
            o.set = value();
            if (o.set != "perf" && o.set != "smoke" && o.set != "none")
                throw std::invalid_argument("--set must be perf, smoke or none");
        } else if (a == "-o") {
            for (const auto & op : split(value())) o.ops.insert(op);
        } else if (a == "-p") {
            o.pattern = value();
            std::regex check(o.pattern);  // throws std::regex_error on a bad pattern
        } else if (a == "--contexts") {
            o.contexts = parse_sizes(value());
        } else if (a == "--batches") {
            o.batches = parse_sizes(value());
        } else if (a == "--prefill") {
            o.prefill = parse_prefill(value());
        } else if (a == "--worker-scales") {
            o.worker_scales.clear();
            for (const auto & v : split(value())) {
                if (v == "auto") o.worker_scales.push_back(0);
                else for (int64_t n : parse_sizes(v)) o.worker_scales.push_back(n);
            }
        } else if (a == "--waves") {
            o.waves = parse_sizes(value());
        } else if (a == "--page-sizes") {
            o.page_sizes = parse_sizes(value());
        } else if (a == "--page-order") {
            o.shuffle_pages.clear();
            for (const auto & v : split(value())) {
                if (v != "shuffled" && v != "sequential")
                    throw std::invalid_argument("--page-order takes shuffled and/or sequential, got '" + v +
                                                "'");
                o.shuffle_pages.push_back(v == "shuffled");
            }
        } else if (a == "--token-costs") {
            o.token_costs.clear();
            for (const auto & v : split(value())) {
                if (v == "auto") o.token_costs.push_back(-1);
                else for (int64_t n : parse_sizes(v, true)) o.token_costs.push_back(n);
            }
        } else if (a == "--task-costs") {
            o.task_costs.clear();
            for (const auto & v : split(value())) {
                if (v == "auto") o.task_costs.push_back(-1);
                else for (int64_t n : parse_sizes(v, true)) o.task_costs.push_back(n);
            }
        } else if (a == "--tails") {
            o.tails.clear();
            for (const auto & v : split(value())) {
                if (v == "auto") o.tails.push_back(-1);
                else for (int64_t n : parse_sizes(v, true)) o.tails.push_back(n);
            }
        } else if (a == "--quant-dims") {
            o.quant_dims = parse_sizes(value());
            for (int64_t d : o.quant_dims)
                if (d < 16 || d % 16 != 0)
                    throw std::invalid_argument("--quant-dims: " + std::to_string(d) +
                                                " is not a positive multiple of 16");
        } else if (a == "--sweep-rows") {
            o.sweep_rows = value();
            std::regex check(o.sweep_rows);  // throws std::regex_error on a bad pattern
        } else if (a == "--sweeps") {
            o.sweeps.clear();
            for (const auto & sw : split(value())) {
                if (sw != "fp16" && sw != "quant" && sw != "lowrank" && sw != "none")
                    throw std::invalid_argument("--sweeps: unknown sweep '" + sw + "' (fp16, quant, lowrank, none)");
                if (sw != "none") o.sweeps.insert(sw);
            }
        } else if (a == "--reps") {
            o.reps = std::max(1, std::stoi(value()));
        } else if (a == "--warmup") {
            o.warmup = std::max(0, std::stoi(value()));
        } else if (a == "--cold") {
            o.cold_mib = 256;
            if (i + 1 < argc && std::isdigit(static_cast<unsigned char>(argv[i + 1][0])))
                o.cold_mib = std::max<int64_t>(1, std::stoll(argv[++i]));
        } else if (a == "--copy-mib") {
            o.copy_mib = std::max<int64_t>(1, std::stoll(value()));
        } else if (a == "--csv") {
            o.csv = value();
        } else if (a == "--commit") {
            o.commit = value();
        } else if (a == "--seed") {
            o.seed = std::stoull(value());
        } else {
            throw std::invalid_argument("unknown argument '" + a + "' (see --help)");
        }
    }
    if (o.cold_mib > 0) o.commit += "+cold";  // the timing mode travels with the rows
    return true;
}

std::string csv_field(const std::string & s) {
    if (s.find_first_of(",\"\n") == std::string::npos) return s;
    std::string q = "\"";
    for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
    return q + "\"";
}

std::string utc_now() {
    char buf[32];
    const std::time_t t = std::time(nullptr);
    std::tm tm{};
    gmtime_r(&t, &tm);
    std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
    return buf;
}

struct row {
    std::string op, shape;
    int64_t batch = -1, context = -1;  // -1: not applicable
    perf_result r;
    std::string note;  // "skipped: ..." / "not supported: ..." / "error: ..."
};

class reporter {
  public:
    reporter(const options & o, const device_info & dev) : o_(o), dev_(dev), date_(utc_now()) {
        if (o.csv.empty()) return;
        const bool fresh = !std::ifstream(o.csv).good();
        csv_.open(o.csv, std::ios::app);
        if (!csv_) throw std::runtime_error("cannot open " + o.csv + " for writing");
        if (fresh)
            csv_ << "date,commit,build_type,device,backend,api,driver,op,shape,batch,context,time_ms,min_ms,"
                    "reps,gbps,"
                    "gflops,copy_gbps,fraction_of_copy,note\n";
    }
    double copy_gbps = 0.0;

    void header() const {
        std::printf("\n%s: %s (%s %s, driver %s, %.1f GiB)\n", dev_.name.c_str(), dev_.device_name.c_str(),
                    dev_.api.c_str(), dev_.platform.c_str(), dev_.driver_version.c_str(),
                    double(dev_.global_mem_bytes) / (1 << 30));
        std::printf("%-12s %-64s %6s %8s %11s %10s %8s %9s\n", "op", "shape", "batch", "context", "time_ms",
                    "GB/s", "%copy", "TFLOP/s");
    }
    void emit(const row & w) {
        const double frac = copy_gbps > 0 && w.r.gbps > 0 ? w.r.gbps / copy_gbps : 0.0;
        const std::string b = w.batch < 0 ? "" : std::to_string(w.batch);
        const std::string c = w.context < 0 ? "" : std::to_string(w.context);
        std::string shape = w.shape.size() > 64 ? w.shape.substr(0, 61) + "..." : w.shape;
        if (!w.note.empty())
            std::printf("%-12s %-64s %6s %8s  %s\n", w.op.c_str(), shape.c_str(), b.c_str(), c.c_str(),
                        w.note.c_str());
        else if (w.r.gflops > 0)
            std::printf("%-12s %-64s %6s %8s %11.4f %10.2f %7.1f%% %9.2f\n", w.op.c_str(), shape.c_str(), b.c_str(),
                        c.c_str(), w.r.median_ms, w.r.gbps, 100.0 * frac, w.r.gflops / 1000.0);
        else
            std::printf("%-12s %-64s %6s %8s %11.4f %10.2f %7.1f%%\n", w.op.c_str(), shape.c_str(), b.c_str(),
                        c.c_str(), w.r.median_ms, w.r.gbps, 100.0 * frac);
        std::fflush(stdout);
        if (!csv_.is_open()) return;
        csv_ << date_ << ',' << csv_field(o_.commit) << ',' << KVCOMP_BUILD_TYPE << ','
             << csv_field(dev_.device_name) << ',' << csv_field(dev_.name) << ',' << dev_.api << ','
             << csv_field(dev_.driver_version) << ',' << w.op << ',' << csv_field(w.shape) << ',' << b << ','
             << c << ',';
        if (w.note.empty())
            csv_ << w.r.median_ms << ',' << w.r.min_ms << ',' << w.r.reps << ',' << w.r.gbps << ','
                 << w.r.gflops << ',' << copy_gbps << ',' << frac << ",\n";
        else
            csv_ << ",,,,," << copy_gbps << ",," << csv_field(w.note) << '\n';
        csv_.flush();
    }

  private:
    const options & o_;
    const device_info & dev_;
    std::string date_;
    std::ofstream csv_;
};

// Times one case, or explains why not; returns false on an error (not on unsupported / too big).
bool bench_case(test_case & tc, backend & be, const device_info & dev, const options & o, cache_flush * cold,
                row & w) {
    w.op = op_name(tc.op());
    w.shape = tc.vars();
    const uint64_t need = tc.device_bytes();
    if (dev.global_mem_bytes && need > dev.global_mem_bytes / 10 * 8) {
        w.note = "skipped: needs " + std::to_string(need >> 20) + " MiB of device memory";
        return true;
    }
    try {
        w.r = time_case(tc, be, o.warmup, o.reps, o.seed, cold);
        if (!w.r.supported) w.note = "not supported: " + w.r.reason;
        return true;
    } catch (const std::exception & e) {
        w.note = std::string("error: ") + e.what();
        return false;
    }
}

bool bench_device(const device_entry & dev, const options & o) {
    bool ok = true;
    reporter rep(o, dev.info);
    rep.header();
    std::unique_ptr<backend> be = dev.create();
    std::unique_ptr<cache_flush> cold;
    if (o.cold_mib > 0) cold = std::make_unique<cache_flush>(*be, o.cold_mib, o.seed);

    // 1. Copy bandwidth: the reference every other number is compared with.
    {
        const int64_t mib = o.copy_mib ? o.copy_mib : dev.info.is_gpu ? 1024 : 64;
        case_ptr c = make_copy_case(dtype::f32, dtype::f32, mib * (int64_t(1) << 20) / 4);
        row w;
        ok = bench_case(*c, *be, dev.info, o, cold.get(), w) && ok;
        w.op = "copy_bw";
        if (w.note.empty()) rep.copy_gbps = w.r.gbps;
        rep.emit(w);
    }
    // 2. The perf case list.
    if (o.set != "none") {
        const case_set set = o.set == "smoke"  ? case_set::smoke
                             : dev.info.is_gpu ? case_set::perf
                                               : case_set::perf_cpu;
        const std::regex re(o.pattern.empty() ? ".*" : o.pattern);
        for (auto & tc : make_test_cases(set)) {
            if (!o.ops.empty() && !o.ops.count(op_name(tc->op()))) continue;
            if (!o.pattern.empty() && !std::regex_search(tc->vars(), re)) continue;
            row w;
            ok = bench_case(*tc, *be, dev.info, o, cold.get(), w) && ok;
            rep.emit(w);
        }
    }
    // 3. Paged fp16 decode attention sweep (the uncompressed baseline of every method).
    const auto sweep = [&](const char * name) { return o.sweeps.count(name) > 0; };
    const std::regex rows_re(o.sweep_rows.empty() ? ".*" : o.sweep_rows);
    const auto sweep_row = [&](const std::string & name) { return std::regex_search(name, rows_re); };
    // Times one sweep case and reports it as row `name` at (batch, context).
    const auto sweep_point = [&](const case_ptr & c, const std::string & name, int64_t batch, int64_t ctx) {
        row w;
        ok = bench_case(*c, *be, dev.info, o, cold.get(), w) && ok;
        w.op = name;
        w.batch = batch;
        w.context = ctx;
        rep.emit(w);
    };
    // Rows at a page size other than 16 (the engine's default) carry it in their name.
    const auto page_suffix = [](int64_t ps, bool shuffled) {
        return (ps == 16 ? std::string() : "_pg" + std::to_string(ps)) + (shuffled ? "" : "_seq");
    };
    for (int64_t ps : o.page_sizes)
        for (bool shuffled : o.shuffle_pages) {
            const std::string name = "decode_fp16" + page_suffix(ps, shuffled);
            for (int64_t batch : sweep("fp16") && sweep_row(name) ? o.batches : std::vector<int64_t>{})
                for (int64_t ctx : o.contexts) {
                    decode_spec s;
                    s.lens.assign(size_t(batch), ctx);
                    s.extra_pages = 0;
                    s.page_size = ps;
                    s.shuffle_pages = shuffled;
                    sweep_point(make_attn_decode_case(s), name, batch, ctx);
                }
        }
    // 3b. The same sweep over quantized blocks (ZipCache, KIVI-2 and KIVI-4 layouts): bytes are the
    // blocks and window tokens actually read, so fraction_of_copy is against the compressed size.
    // Other head widths (--quant-dims) are rows decode_<layout>_d<W>.
    for (int64_t dim : o.quant_dims)
        for (const char * layout : {"zipcache", "kivi2", "kivi4"}) {
            const std::string name =
                std::string("decode_") + layout + (dim == 128 ? "" : "_d" + std::to_string(dim));
            for (int64_t batch : sweep("quant") && sweep_row(name) ? o.batches : std::vector<int64_t>{})
                for (int64_t ctx : o.contexts)
                    sweep_point(make_attn_decode_quant_case(layout, batch, ctx, dim), name, batch, ctx);
        }
    // 3c. Low-rank decode on uneven ranks (per KV head, Llama-3-8B: 8 KV heads of 128, GQA 4). The
    // profiles keep 50% / ~30% of the KV dims with the spread of widths adaptive ranks give.
    struct rank_profile {
        const char * name;
        std::vector<int64_t> k, v;
    };
    const rank_profile profiles[] = {{"p50", {32, 48, 64, 64, 80, 96, 112, 128}, {16, 32, 32, 48, 64, 64, 64, 80}},
                                     {"p70", {16, 16, 32, 32, 48, 48, 64, 80}, {16, 16, 16, 32, 32, 48, 48, 64}}};
    // More tasks than compute units (scale > 1) lets several work-groups share a unit: what the
    // fp16 kernels do to keep enough loads in flight.
    // One row per (profile, worker scale, page size and order, waves, token cost, kernel kind).
    struct lowrank_row {
        const rank_profile * prof;
        int64_t scale, page_size;
        bool shuffled;
        int64_t waves, token_cost, task_cost, tail;
        int kind;  // plain, balanced, palu, balanced on q4 pages (kv_bits=4)
    };
    std::vector<lowrank_row> lowrank_rows;
    for (const auto & prof : profiles)
        for (int64_t scale : sweep("lowrank") ? o.worker_scales : std::vector<int64_t>{})
            for (int64_t ps : o.page_sizes)
                for (bool shuffled : o.shuffle_pages)
                    for (int64_t waves : o.waves)
                        for (int64_t token_cost : o.token_costs)
                            for (int64_t task_cost : o.task_costs)
                                for (int64_t tail : o.tails)
                                    for (int kind = 0; kind < 4; ++kind)
                                        lowrank_rows.push_back(
                                            {&prof, scale, ps, shuffled, waves, token_cost, task_cost, tail, kind});
    for (const lowrank_row & r : lowrank_rows) {
        static const char * const names[] = {"decode_lowrank_plain_", "decode_lowrank_balanced_",
                                             "decode_palu_", "decode_lowrank_q4_balanced_"};
        const std::string name =
            std::string(names[r.kind]) + (r.scale > 0 ? "x" + std::to_string(r.scale) + "_" : "") +
            (r.waves != 4 ? "w" + std::to_string(r.waves) + "_" : "") +
            (r.token_cost >= 0 ? "tc" + std::to_string(r.token_cost) + "_" : "") +
            (r.task_cost >= 0 ? "tk" + std::to_string(r.task_cost) + "_" : "") +
            (r.tail >= 0 ? "tl" + std::to_string(r.tail) + "_" : "") +
            (r.page_size != 16 || !r.shuffled ? page_suffix(r.page_size, r.shuffled).substr(1) + "_" : "") +
            r.prof->name;
        // Token and task costs and the tail are the balanced search's: no plain or Palu rows of them.
        if (((r.token_cost >= 0 || r.task_cost >= 0 || r.tail >= 0) && (r.kind == 0 || r.kind == 2)) ||
            !sweep_row(name))
            continue;
        for (int64_t batch : o.batches)
            for (int64_t ctx : o.contexts) {
                ragged_spec rs;
                rs.k_widths = r.prof->k, rs.v_widths = r.prof->v, rs.group = 4;
                rs.lens.assign(size_t(batch), ctx);
                rs.extra_pages = 0;
                rs.page_size = r.page_size;
                rs.shuffle_pages = r.shuffled;
                rs.waves = r.waves;
                if (r.kind == 3) rs.bits = 4;
                // After the page format is set: auto is the engine's cost for it (64 for q4).
                rs.token_cost = r.token_cost >= 0 ? r.token_cost : host::lowrank::default_token_cost(rs.bits);
                rs.task_cost = r.task_cost >= 0 ? r.task_cost : decode_task_cost(*be, rs, r.kind == 2);
                rs.tail_percent = r.tail >= 0 ? r.tail : decode_tail_percent(*be, rs, r.kind == 2);
                rs.workers = r.scale > 0 ? std::max<int64_t>(1, dev.info.compute_units) * r.scale
                                         : concurrent_decode_tasks(*be, rs, r.kind == 2);
                rs.policy = r.kind == 0 ? host::lowrank::decode_policy::plain
                                        : host::lowrank::decode_policy::balanced;
                sweep_point(make_ragged_decode_case(rs, r.kind == 2), name, batch, ctx);
            }
    }
    // 4. Causal prefill attention (time to first token's attention part), Llama-3-8B head shapes;
    // then the low-rank prefill on the 50% profile, row blocks balanced per head and plain.
    for (const auto & [batch, len] : o.prefill) {
        case_ptr c = make_attn_prefill_case(std::vector<int64_t>(size_t(batch), len), 32, 8, 128);
        row w;
        ok = bench_case(*c, *be, dev.info, o, cold.get(), w) && ok;
        w.op = "prefill_fp16";
        w.batch = batch;
        w.context = len;
        rep.emit(w);
        for (bool balanced : {false, true}) {
            ragged_spec rs;
            rs.k_widths = profiles[0].k, rs.v_widths = profiles[0].v, rs.group = 4;
            rs.lens.assign(size_t(batch), len);
            rs.balanced_prefill = balanced;
            case_ptr cr = make_attn_prefill_ragged_case(rs);
            row wr;
            ok = bench_case(*cr, *be, dev.info, o, cold.get(), wr) && ok;
            wr.op = std::string("prefill_lowrank_") + (balanced ? "balanced_" : "plain_") + profiles[0].name;
            wr.batch = batch;
            wr.context = len;
            rep.emit(wr);
        }
    }
    return ok;
}

}  // namespace

int main(int argc, char ** argv) {
    options o;
    try {
        if (!parse(argc, argv, o)) return 0;
    } catch (const std::exception & e) {
        std::fprintf(stderr, "bench_ops: %s\n", e.what());
        return 1;
    }
    std::vector<const device_entry *> selected;
    const auto & devices = list_devices();
    if (o.backends.empty()) {
        for (const auto & d : devices)
            if (d.info.api != "CPU") selected.push_back(&d);
        if (selected.empty()) {
            std::printf("bench_ops: no non-CPU device (use -b cpu to benchmark the reference)\n");
            for (const auto & n : registry_notes()) std::printf("  %s\n", n.c_str());
            return 0;
        }
    } else {
        for (const auto & b : o.backends) {
            size_t before = selected.size();
            for (const auto & d : devices) {
                std::string api = d.info.api;
                for (auto & ch : api) ch = char(std::tolower(static_cast<unsigned char>(ch)));
                if (d.info.name == b || api == b) selected.push_back(&d);
            }
            if (selected.size() == before) {
                try {
                    create_backend(b);
                } catch (const std::exception & e) {
                    std::fprintf(stderr, "bench_ops: %s\n", e.what());
                }
                return 1;
            }
        }
    }
    std::printf("bench_ops: commit %s, %s build, median of %d after %d warm-up runs%s\n", o.commit.c_str(),
                KVCOMP_BUILD_TYPE, o.reps, o.warmup,
                o.cold_mib > 0 ? (", each behind a " + std::to_string(o.cold_mib) + " MiB device copy").c_str() : "");
    bool ok = true;
    for (const auto * d : selected) {
        try {
            ok = bench_device(*d, o) && ok;
        } catch (const std::exception & e) {
            std::fprintf(stderr, "bench_ops: %s: %s\n", d->info.name.c_str(), e.what());
            ok = false;
        }
    }
    return ok ? 0 : 1;
}
