// kvcomp bench: end-to-end speed of the engine — time to first token, time between tokens,
// decode tokens/s and KV bytes — for grids of batch sizes and prompt lengths, next to the
// device's copy bandwidth measured in the same run (the floor of a decode step is the bytes of
// the weights plus the KV cache over that bandwidth).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>

#include "cli/commands.h"
#include "cli/engine_options.h"
#include "cli/progress.h"
#include "cli/results_csv.h"

#include <nlohmann/json.hpp>

namespace kvcomp::cli {

namespace {


// Device copy bandwidth (bytes read + written per second) with the backend's own copy op.
double copy_bandwidth_gbps(backend & be, size_t bytes) {
    const int64_t n = int64_t(bytes / 4);
    auto a = be.alloc(size_t(n) * 4), b = be.alloc(size_t(n) * 4);
    std::vector<float> init(size_t(n), 1.0f);
    be.upload(*a, 0, init.data(), init.size() * 4);
    const op_desc op = make_op(copy_params{n}, {make_tensor(a.get(), dtype::f32, {n})},
                               {make_tensor(b.get(), dtype::f32, {n})});
    be.run(op);
    std::vector<double> ms;
    for (int i = 0; i < 10; ++i) {
        be.timer_start();
        be.run(op);
        ms.push_back(be.timer_stop_ms());
    }
    std::sort(ms.begin(), ms.end());
    return 2.0 * double(n) * 4 / (ms[ms.size() / 2] * 1e-3) / 1e9;
}

double median(std::vector<double> v) {
    if (v.empty()) return 0.0;
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

}  // namespace

int run_bench(int argc, char ** argv) {
    po::options_description desc("options");
    add_engine_options(desc);
    desc.add_options()("random-weights", "read only config.json and use random weights (e.g. Llama-3-8B shapes)")(
        "batches", po::value<std::string>()->default_value("1"), "comma-separated batch sizes")(
        "prompts", po::value<std::string>()->default_value("512"), "comma-separated prompt lengths (tokens)")(
        "gen", po::value<long>()->default_value(32), "tokens generated per request")(
        "max-kv-gib", po::value<double>()->default_value(40.0),
        "skip grid points whose uncompressed (fp16) KV cache would exceed this many GiB (a compressing "
        "method holds less)")(
        "prefill-tokens", po::value<long>()->default_value(0),
        "most prompt tokens prefilled in one step; 0 (default): all of a point's prompts at once. Lower it "
        "when a point's prefill activations (which grow with the tokens of one step) do not fit the device "
        "next to its KV cache: the prompts are then prefilled a few at a time, and TBT is still taken from "
        "the last request, whose gaps are steps of the full batch but its last few (one per group after "
        "the first; the median is unaffected while --gen is at least twice the number of groups; --json "
        "gives each point's prefill_steps)")(
        "copy-mib", po::value<long>()->default_value(1024), "size of the copy-bandwidth measurement")(
        "warmup", po::value<long>()->default_value(1),
        "untimed runs of the first grid point before measuring (first use of kernels, workspaces)")(
        "csv", po::value<std::string>(), "append rows to this CSV (the schema of kvcomp eval, task \"bench\")")(
        "commit", po::value<std::string>()->default_value("unknown"), "commit id recorded in the CSV")(
        "json", "print the results as one JSON object instead of a table");
    po::variables_map vm;
    if (auto rc = parse_options(argc, argv, desc,
                                "usage: kvcomp bench --model DIR [--random-weights] [--batches 1,16] [--prompts 4096]\n"
                                "                    [--gen 32] [--backend NAME] [--method NAME] [--csv FILE]\n\n"
                                "For each batch size x prompt length: TTFT (until every request of the batch has\n"
                                "its first token), median time between tokens, decode tokens/s, KV bytes, and the\n"
                                "decode floor (weights + KV bytes) / copy bandwidth measured in the same run.",
                                vm))
        return *rc;
    try {
        engine::engine_config cfg = engine_config_from(vm);
        cfg.random_weights = vm.count("random-weights") > 0;
        const auto batches = parse_positive_list(vm["batches"].as<std::string>(), "--batches");
        const auto prompts = parse_positive_list(vm["prompts"].as<std::string>(), "--prompts");
        const long gen = vm["gen"].as<long>();
        KVCOMP_CHECK_ARG(gen >= 2, "--gen must be >= 2 to measure time between tokens");
        const long warmup = vm["warmup"].as<long>();
        KVCOMP_CHECK_ARG(warmup >= 0, "--warmup must be >= 0, got ", warmup);
        const long prefill_cap = vm["prefill-tokens"].as<long>();
        KVCOMP_CHECK_ARG(prefill_cap >= 0, "--prefill-tokens must be >= 0, got ", prefill_cap);
        const host::model_config mc = host::load_model_config(cfg.model_dir);
        const double kv_token_bytes = double(mc.num_hidden_layers * mc.kv_dim()) * 2 * 2;  // fp16 K and V
        const double max_kv = vm["max-kv-gib"].as<double>() * double(1ull << 30);

        struct point {
            long batch, prompt;
        };
        std::vector<point> grid;
        int64_t pages = 0;
        for (int64_t b : batches)
            for (int64_t p : prompts) {
                const double kv = double(b) * double(p + gen) * kv_token_bytes;
                if (kv > max_kv) {
                    std::fprintf(stderr, "skip batch %ld x prompt %ld: fp16 KV cache %.1f GiB > --max-kv-gib\n", b, p,
                                 kv / double(1ull << 30));
                    continue;
                }
                grid.push_back({b, p});
                pages = std::max<int64_t>(pages, b * ((p + gen + cfg.page_size - 1) / cfg.page_size));
            }
        KVCOMP_CHECK_ARG(!grid.empty(), "no grid point fits --max-kv-gib");
        cfg.max_batch = *std::max_element(batches.begin(), batches.end());
        cfg.max_context = *std::max_element(prompts.begin(), prompts.end()) + gen;
        cfg.kv_pages = pages;
        // Every request of a point is prefilled in one step, so decode runs at the full batch from
        // its first step (as transformers does); otherwise early requests would finish while later
        // ones are still being admitted and the measured gaps would be at a smaller batch. Under
        // --prefill-tokens the prompts go in groups, each followed by a decode step of those admitted;
        // the last group's gaps are then at the full batch but its last few: the first group finishes
        // (groups - 1) steps earlier, and the batch shrinks group by group.
        int64_t most_tokens = 0;
        for (const point & pt : grid) most_tokens = std::max(most_tokens, pt.batch * pt.prompt);
        if (prefill_cap > 0) {
            for (const point & pt : grid)
                KVCOMP_CHECK_ARG(pt.prompt <= prefill_cap, "--prefill-tokens ", prefill_cap,
                                 " is shorter than the prompts of ", pt.prompt, " tokens");
            cfg.max_prefill_tokens = std::min<int64_t>(most_tokens, prefill_cap);
        } else {
            cfg.max_prefill_tokens = std::max<int64_t>(cfg.max_prefill_tokens, most_tokens);
        }
        engine::engine eng(cfg);
        backend & be = eng.device();
        const double copy_gbps = copy_bandwidth_gbps(be, size_t(vm["copy-mib"].as<long>()) << 20);
        const uint64_t weight_bytes = eng.stats().weight_bytes;
        const bool json = vm.count("json") > 0;
        nlohmann::json jrows = nlohmann::json::array();
        if (!json) std::printf("bench on %s (%s), method %s, weights %s (%.2f GiB), copy bandwidth %.0f GB/s\n",
                    be.name().c_str(), be.info().device_name.c_str(), cfg.method.c_str(), dtype_name(cfg.matrix_type),
                    double(weight_bytes) / double(1ull << 30), copy_gbps);
        if (!json) std::printf("%6s %8s %10s %10s %12s %12s %12s %8s\n", "batch", "prompt", "TTFT_ms", "TBT_ms", "decode_tok/s",
                    "KV_MiB", "floor_ms", "TBT/floor");
        result_rows rows(vm.count("csv") ? vm["csv"].as<std::string>() : "", vm["commit"].as<std::string>());
        const uint64_t prompt_seed = 7;  // random prompt tokens; speed does not depend on them
        std::mt19937 rng(prompt_seed);
        // Warm-up: the first grid point, untimed. Its first run would otherwise also pay one-time
        // costs (lazily loaded kernels, workspace growth, library heuristics) in its TTFT.
        std::mt19937 warm_rng(prompt_seed + 1);
        for (long w = 0; w < warmup; ++w) {
            for (long b = 0; b < grid.front().batch; ++b) {
                engine::generation_request r;
                for (long i = 0; i < grid.front().prompt; ++i)
                    r.prompt.push_back(int32_t(warm_rng() % uint32_t(mc.vocab_size)));
                r.max_new_tokens = 2;
                r.stop_at_eos = false;
                eng.submit(r);
            }
            eng.run();
        }
        progress_bar bar(long(grid.size()));
        long done_points = 0;
        for (const point & pt : grid) {
            bar.update(done_points++, concat("batch ", pt.batch, " x prompt ", pt.prompt));
            std::vector<int64_t> ids;
            for (long b = 0; b < pt.batch; ++b) {
                engine::generation_request r;
                for (long i = 0; i < pt.prompt; ++i) r.prompt.push_back(int32_t(rng() % uint32_t(mc.vocab_size)));
                r.max_new_tokens = gen;
                r.stop_at_eos = false;
                ids.push_back(eng.submit(r));
            }
            const int64_t prefill_steps_before = eng.stats().prefill_steps;
            eng.run();
            const int64_t prefill_steps = eng.stats().prefill_steps - prefill_steps_before;
            double ttft = 0;
            std::vector<double> gaps;
            for (int64_t id : ids) {
                const auto & res = eng.result(id);
                KVCOMP_CHECK_ARG(res.finish_reason != "error", "bench: request failed: ", res.error);
                ttft = std::max(ttft, res.ttft_ms);
            }
            // Decode steps after every request was admitted: each step's gap is the same for all
            // requests, so the last request's gaps are the steady-state decode steps.
            gaps = eng.result(ids.back()).tbt_ms;
            const double tbt = median(gaps);
            // KV bytes the method holds for the batch halfway through decoding (its own accounting,
            // pages included), so compressed methods are charged what they really store.
            const double kv_bytes = double(pt.batch) * double(eng.kv_bytes_for_tokens(pt.prompt + gen / 2));
            const double floor_ms = (double(weight_bytes) + kv_bytes) / (copy_gbps * 1e9) * 1e3;
            bar.done();
            if (json)
                jrows.push_back({{"batch", pt.batch}, {"prompt", pt.prompt}, {"gen", gen}, {"ttft_ms", ttft},
                                 {"tbt_ms", tbt}, {"decode_tok_s", double(pt.batch) / tbt * 1e3},
                                 {"kv_bytes", uint64_t(kv_bytes)}, {"floor_ms", floor_ms},
                                 {"tbt_over_floor", tbt / floor_ms}, {"prefill_steps", prefill_steps}});
            else
                std::printf("%6ld %8ld %10.1f %10.3f %12.1f %12.1f %12.3f %8.2f\n", pt.batch, pt.prompt, ttft, tbt,
                            double(pt.batch) / tbt * 1e3, kv_bytes / 1048576.0, floor_ms, tbt / floor_ms);
            std::fflush(stdout);
            // One row per metric. kv_bytes is per request at its last decode step, as eval counts it;
            // the "none" columns are filled only when the method is none (bench runs one method).
            result_row row = rows.start(eng, cfg, "bench", pt.prompt);
            row.batch = pt.batch, row.examples = pt.batch, row.seed = prompt_seed;
            row.task_opts = concat("gen=", gen, ";weights=", dtype_name(cfg.matrix_type),
                                   cfg.random_weights ? ";random_weights" : "");
            row.kv_bytes = double(eng.result(ids.back()).kv_bytes_peak);
            row.kv_bytes_baseline = cfg.method == "none" ? row.kv_bytes : std::nan("");
            row.baseline_value = std::nan("");
            const std::pair<const char *, double> metrics[] = {
                {"ttft_ms", ttft},           {"tbt_ms", tbt},
                {"decode_tokens_per_s", double(pt.batch) / tbt * 1e3},
                {"kv_bytes_batch", kv_bytes}, {"floor_ms", floor_ms},
                {"tbt_over_floor", tbt / floor_ms},
                {"copy_gbps", copy_gbps},     {"weight_bytes", double(weight_bytes)}};
            for (const auto & [metric, value] : metrics) {
                row.metric = metric, row.value = value;
                if (cfg.method == "none") row.baseline_value = value;
                rows.append_csv(row);
            }
        }
        if (json)
            std::printf("%s\n", nlohmann::json({{"device", be.info().device_name},
                                                {"backend", be.name()},
                                                {"method", cfg.method},
                                                {"weights", dtype_name(cfg.matrix_type)},
                                                {"weight_bytes", weight_bytes},
                                                {"copy_gbps", copy_gbps},
                                                {"results", jrows}})
                                    .dump(2)
                                    .c_str());
        return 0;
    } catch (const std::exception & e) {
        std::fprintf(stderr, "kvcomp bench: %s\n", e.what());
        return 1;
    }
}

}  // namespace kvcomp::cli
