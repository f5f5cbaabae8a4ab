// kvcomp ratesearch: the largest KV compression of a low-rank method (zack, fdc, palu) that keeps at
// least --keep (0.99) of the uncompressed score on a validation split of an eval task. This is the
// papers' "binary search for the maximum p that achieves 99 % of the baseline accuracy" (digest
// research/zack_fdc.md, Z§6.3 / F§6.4), except that the papers search on the evaluation data itself
// and we tune on a split the reports do not use (digest §10: "tune r on a held-out split").
//
// Grid: every compression the calibration file can realise at --rank-multiple
// (achievable_compressions; no other value exists, so no tolerance is involved), optionally limited
// to [--min, --max] and thinned to --max-points. Search: search_compression_for_accuracy, about
// log2(points) + 2 probes; its answer is always a probed point that passed. Each probe builds an
// engine for the method at that grid step and scores the task with kvcomp eval's code (score_point);
// method none is scored once on the same examples and is the baseline of every probe.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/engine_options.h"
#include "cli/eval_tasks.h"
#include "cli/lowrank_ranks.h"
#include "cli/progress.h"
#include "cli/results_csv.h"
#include "engine/calibrate.h"
#include "engine/kv_method.h"
#include "host/lowrank/calibration_file.h"
#include "host/lowrank/rate_search.h"
#include "host/model/tokenizer_factory.h"

namespace kvcomp::cli {

namespace {

namespace hl = host::lowrank;

// Reports (eval, sweep) default to seed 1; the validation split must not share their examples.
constexpr unsigned long k_validation_seed = 1000003;

const char * const k_usage =
    "usage: kvcomp ratesearch -m DIR --method zack|fdc|palu --calib FILE [--task line_retrieval]\n"
    "                         [--context 1024] [--examples 50] [--keep 0.99] [--rank-multiple 16]\n"
    "                         [--min P] [--max P] [--max-points N] [-b BACKEND] [--seed 1000003]\n"
    "                         [--csv FILE --commit C] [--json]\n\n"
    "Finds the largest overall KV compression p (the fraction of K and V dims removed) of a low-rank\n"
    "method whose task score is at least --keep times the uncompressed score (method none, the same\n"
    "examples). The candidates are the compressions the calibration file can realise: ranks re-chosen\n"
    "from its singular values at one shared removal rate r, rounded up to --rank-multiple, as\n"
    "--method-opt removal_rate=r / compression=p choose them at load. Bisection probes about\n"
    "log2(candidates) + 2 of them, each a full run of the task; the answer is always a probed point\n"
    "that passed. Assumes the score does not rise with compression (up to noise); otherwise the answer\n"
    "is a local boundary. Other method options (schedule, prefill_balance) pass through --method-opt;\n"
    "calib, removal_rate, compression and rank_multiple are the search's.\n\n"
    "Score (higher is better): line_retrieval / needle exact match, greedy_agreement prefix agreement\n"
    "with none, perplexity 1/perplexity. A baseline of 0 is an error: there is nothing to keep.\n\n"
    "Validation split: the synthetic tasks (line_retrieval, needle) draw their examples with --seed,\n"
    "default 1000003, where eval / sweep reports use 1; text tasks (perplexity, greedy_agreement) do not\n"
    "depend on the seed, so their windows start half a window stride later than eval's (stride =\n"
    "(text tokens - context) / examples): disjoint from eval's windows of the same --examples when\n"
    "context <= stride / 2, otherwise overlapping in part (give --text-file other text for a strict\n"
    "split). kvcomp eval --split validation --seed S rescores a probe on the same data.\n\n"
    "Output: one line per probe (compression, removal rate, metric, score, pass, KV bytes ratio to none),\n"
    "then the chosen compression, its removal rate, the per-head ranks and the --method-opt that select\n"
    "it. --csv appends one row per probe in kvcomp eval's schema (task options \"split=validation\";\n"
    "method options with the probe's removal_rate); the chosen one is the largest passing compression\n"
    "of the run's rows. Exit code 1 also when not even the smallest candidate passes.";

// Higher is better for the search.
double search_score(const result_row & r) {
    return r.metric == "perplexity" ? 1.0 / r.value : r.value;
}

// A double as text that reads back to the same double (the grid step's exact removal rate).
std::string exact(double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.17g", v);
    return buf;
}

// At most max_points steps, evenly spaced by index, the first and the last kept: the search decides
// "nothing passes" at the first and takes the last when it passes.
std::vector<hl::rate_step> thin_grid(const std::vector<hl::rate_step> & g, size_t max_points) {
    if (max_points == 0 || g.size() <= max_points) return g;
    std::vector<hl::rate_step> out;
    for (size_t i = 0; i < max_points; ++i)
        out.push_back(g[size_t(std::llround(double(i) * double(g.size() - 1) / double(max_points - 1)))]);
    return out;
}

// The engine of one probe: the method at the grid step's removal rate. removal_rate, not
// compression=p: r is the step's exact key and gives the same ranks, and the first step
// (compression 0) is no value the compression option takes.
engine::engine_config probe_config(const engine::engine_config & cfg, const std::string & calib,
                                   const hl::rate_step & step, long rank_multiple) {
    engine::engine_config pc = cfg;
    pc.method_opts["calib"] = calib, pc.method_opts["removal_rate"] = exact(step.removal_rate);
    pc.method_opts["rank_multiple"] = std::to_string(rank_multiple);
    return pc;
}

struct probe_record {
    hl::rate_step step;
    result_row row;
    double score = 0.0;
    bool passed = false;
};

double kv_ratio(const result_row & r) {
    return r.kv_bytes > 0 && r.kv_bytes_baseline > 0 ? r.kv_bytes_baseline / r.kv_bytes : std::nan("");
}

nlohmann::json probe_json(const probe_record & p) {
    return {{"compression", p.step.compression},
            {"removal_rate", p.step.removal_rate},
            {"kept_dims", p.step.kept_dims},
            {"value", p.row.value},
            {"score", p.score},
            {"passed", p.passed},
            {"kv_bytes", p.row.kv_bytes},
            {"kv_ratio", kv_ratio(p.row)}};
}

}  // namespace

int run_ratesearch(int argc, char ** argv) {
    po::options_description desc("options");
    add_engine_options(desc);
    desc.add_options()("calib", po::value<std::string>(),
                       "calibration file of --method for this model (kvcomp calibrate)")(
        "task,t", po::value<std::string>()->default_value("line_retrieval"),
        "line_retrieval, needle, greedy_agreement or perplexity")(
        "context", po::value<long>()->default_value(1024), "context length (tokens)")(
        "examples", po::value<long>()->default_value(50), "examples (windows for text tasks) per probe")(
        "keep", po::value<double>()->default_value(0.99, "0.99"),
        "fraction of the uncompressed score to keep, in (0, 1]")(
        "rank-multiple", po::value<long>()->default_value(16), "ranks are rounded up to a multiple of this")(
        "min", po::value<double>()->default_value(0.0), "smallest compression to consider, in [0, 1]")(
        "max", po::value<double>()->default_value(1.0), "largest compression to consider, in [0, 1]")(
        "max-points", po::value<long>()->default_value(0),
        "at most this many candidates, evenly spaced, ends kept (0: every achievable compression)")(
        "seed", po::value<unsigned long>()->default_value(k_validation_seed),
        "task data seed of the validation split (reports use 1; keep them apart)")(
        "gen", po::value<long>()->default_value(32), "greedy_agreement: tokens generated per example")(
        "depth", po::value<double>()->default_value(0.5), "needle: depth of the key line in [0, 1]")(
        "haystack", po::value<std::string>()->default_value("keys"), "needle: keys or text")(
        "text-file", po::value<std::string>(),
        "perplexity / greedy_agreement windows, needle --haystack text (default: MODEL/heldout.txt)")(
        "csv", po::value<std::string>(), "append one row per probe to this CSV (kvcomp eval's schema)")(
        "commit", po::value<std::string>()->default_value("unknown"), "commit id recorded in the CSV")(
        "json", "print the probes and the answer as one JSON object");
    po::variables_map vm;
    if (auto rc = parse_options(argc, argv, desc, k_usage, vm)) return *rc;
    try {
        engine::engine_config cfg = engine_config_from(vm);
        hl::lowrank_method method{};
        KVCOMP_CHECK_ARG(!vm["method"].defaulted(), "--method zack|fdc|palu is required");
        KVCOMP_CHECK_ARG(hl::lowrank_method_from_name(cfg.method, method), "unknown method '", cfg.method,
                         "' for ratesearch; valid methods: zack, fdc, palu");
        KVCOMP_CHECK_ARG(vm.count("calib"), "--calib FILE is required (kvcomp calibrate --method ",
                         cfg.method, ")");
        for (const char * key : {"calib", "removal_rate", "compression", "rank_multiple"})
            KVCOMP_CHECK_ARG(!cfg.method_opts.count(key), "--method-opt ", key,
                             ": ratesearch sets it for each probe (use --calib and --rank-multiple)");
        const std::string calib_path = vm["calib"].as<std::string>();
        const double keep = vm["keep"].as<double>(), lo = vm["min"].as<double>(), hi = vm["max"].as<double>();
        KVCOMP_CHECK_ARG(keep > 0.0 && keep <= 1.0, "--keep ", keep, " is outside (0, 1]");
        KVCOMP_CHECK_ARG(lo >= 0.0 && lo <= 1.0 && hi >= 0.0 && hi <= 1.0 && lo <= hi, "--min ", lo,
                         " and --max ", hi, " must satisfy 0 <= min <= max <= 1");
        const long n = vm["examples"].as<long>(), context = vm["context"].as<long>(),
                   gen = vm["gen"].as<long>();
        const long max_points = vm["max-points"].as<long>(), rank_multiple = vm["rank-multiple"].as<long>();
        KVCOMP_CHECK_ARG(n >= 1, "--examples must be >= 1, got ", n);
        KVCOMP_CHECK_ARG(context >= 1, "--context must be >= 1, got ", context);
        KVCOMP_CHECK_ARG(gen >= 1, "--gen must be >= 1, got ", gen);
        KVCOMP_CHECK_ARG(max_points == 0 || max_points >= 2, "--max-points must be 0 (all) or >= 2, got ",
                         max_points);
        const double depth = vm["depth"].as<double>();
        KVCOMP_CHECK_ARG(depth >= 0.0 && depth <= 1.0, "--depth ", depth, " is outside [0, 1]");
        eval_point pt;
        pt.task = vm["task"].as<std::string>();
        check_task(pt.task);
        pt.context = context, pt.examples = n, pt.gen = gen, pt.seed = vm["seed"].as<unsigned long>();
        pt.depth = depth, pt.haystack = vm["haystack"].as<std::string>(), pt.validation = true;
        pt.text_file =
            vm.count("text-file") ? vm["text-file"].as<std::string>() : cfg.model_dir + "/heldout.txt";
        task_points(pt, {context}, {depth});  // checks the haystack

        // The file must be of this method and this checkpoint (the engine would refuse it too, but
        // only after the baseline run).
        hl::calibration_expectation expect;
        expect.method = method;
        expect.model_hash = engine::engine_model_hash(cfg.model_dir, cfg.random_weights, cfg.weight_seed);
        const hl::calibration calib = hl::read_calibration(calib_path, expect);
        const hl::kv_spectra spectra = calib.spectra();
        const auto all_steps = hl::achievable_compressions(spectra, rank_multiple);
        std::vector<hl::rate_step> in_range;
        for (const auto & s : all_steps)
            if (s.compression >= lo && s.compression <= hi) in_range.push_back(s);
        KVCOMP_CHECK_ARG(!in_range.empty(), "no achievable compression in [--min ", lo, ", --max ", hi,
                         "]; with --rank-multiple ", rank_multiple, " the file gives ", all_steps.size(),
                         " from ", all_steps.front().compression, " to ", all_steps.back().compression);
        const std::vector<hl::rate_step> steps = thin_grid(in_range, size_t(max_points));
        std::vector<double> grid;
        for (const auto & s : steps) grid.push_back(s.compression);

        // Bad --method-opt values fail here, not at the first probe after the baseline run.
        engine::create_kv_method(cfg.method,
                                 probe_config(cfg, calib_path, steps.front(), rank_multiple).method_opts);

        const auto tok = host::load_tokenizer(cfg.model_dir);
        cfg.max_context = std::max<int64_t>(cfg.max_context, context + gen + 8);
        cfg.max_batch = std::min<int64_t>(cfg.max_batch, n);
        const bool json = vm.count("json") > 0;
        const bool greedy = pt.task == "greedy_agreement";  // compares tokens with none's: needs it per probe
        result_rows rows(vm.count("csv") ? vm["csv"].as<std::string>() : "", vm["commit"].as<std::string>());
        const std::string where = concat(pt.task, " @ ", context, " tokens, ", n,
                                         " examples, validation split (seed ", pt.seed, ")");
        if (!json)
            std::printf(
                "ratesearch %s: %s\ncandidates: %zu of the %zu compressions %s reaches (%.4f .. %.4f, rank "
                "multiple %ld)\n",
                cfg.method.c_str(), where.c_str(), steps.size(), all_steps.size(), calib_path.c_str(),
                grid.front(), grid.back(), rank_multiple);

        // Baseline: none on the same examples, once.
        progress_bar bar(long(std::ceil(std::log2(double(grid.size()) + 1.0))) + 2);
        long done = 0;
        engine::engine_config base_cfg = cfg;
        base_cfg.method = "none", base_cfg.method_opts.clear();
        bar.update(done++, "none (baseline)");
        auto base = std::make_unique<engine::engine>(base_cfg);
        result_row none_row = rows.start(*base, base_cfg, pt.task, context);
        score_point(pt, *base, nullptr, *tok, none_row);
        bar.done();
        if (!greedy) base.reset();
        const double baseline = search_score(none_row);
        KVCOMP_CHECK_ARG(
            std::isfinite(baseline) && baseline > 0.0, "method none scores ", none_row.value, " (",
            none_row.metric, ") on ", where,
            ": there is no score to keep; pick a task, context or model the uncompressed cache solves");
        if (!json)
            std::printf(
                "none: %s %.6g (score %.6g); a probe passes with score >= %.6g (keep %g)\n%12s %14s %12s "
                "%10s %5s %9s\n",
                none_row.metric.c_str(), none_row.value, baseline, keep * baseline, keep, "compression",
                "removal_rate", none_row.metric.substr(0, 12).c_str(), "score", "pass", "KV_ratio");

        std::vector<probe_record> probes;
        const auto score_at = [&](double p) {
            const size_t i = size_t(std::lower_bound(grid.begin(), grid.end(), p) - grid.begin());
            probe_record rec;
            rec.step = steps.at(i);
            bar.update(done++, concat(cfg.method, " compression ", p));
            const engine::engine_config pc = probe_config(cfg, calib_path, rec.step, rank_multiple);
            engine::engine eng(pc);
            rec.row = rows.start(eng, pc, pt.task, context);
            rec.row.examples = n, rec.row.seed = pt.seed;
            score_point(pt, eng, greedy ? base.get() : nullptr, *tok, rec.row);
            if (!greedy)
                rec.row.baseline_value = none_row.value, rec.row.kv_bytes_baseline = none_row.kv_bytes;
            rec.score = search_score(rec.row);
            rec.passed = rec.score >= keep * baseline;  // the search's own test, for the printout
            bar.done();
            rows.append_csv(rec.row);
            if (!json)
                std::printf("%12.6f %14.8g %12.6g %10.6g %5s %9.3f\n", p, rec.step.removal_rate,
                            rec.row.value, rec.score, rec.passed ? "yes" : "no", kv_ratio(rec.row)),
                    std::fflush(stdout);
            probes.push_back(rec);
            return rec.score;
        };
        hl::accuracy_search_options so;
        so.keep_fraction = keep;
        const auto res = hl::search_compression_for_accuracy(grid, score_at, baseline, so);
        bar.done();
        for (size_t i = 0; i < probes.size(); ++i)
            probes[i].passed = res.probes[i].passed;  // the search's verdicts

        const probe_record * chosen = nullptr;
        for (const auto & p : probes)
            if (res.found && p.step.compression == res.compression) chosen = &p;
        const hl::kv_ranks ranks =
            chosen ? hl::ranks_for_removal_rate(spectra, chosen->step.removal_rate, rank_multiple)
                   : hl::kv_ranks{};
        const std::string use = chosen
                                    ? concat("--method ", cfg.method, " --method-opt calib=", calib_path,
                                             " --method-opt removal_rate=", exact(chosen->step.removal_rate),
                                             " --method-opt rank_multiple=", rank_multiple)
                                    : std::string();
        if (json) {
            nlohmann::json j = {{"method", cfg.method},
                                {"calib", calib_path},
                                {"task", pt.task},
                                {"task_opts", task_opts(pt)},
                                {"context", context},
                                {"examples", n},
                                {"seed", pt.seed},
                                {"keep", keep},
                                {"metric", none_row.metric},
                                {"rank_multiple", rank_multiple},
                                {"candidates", grid.size()},
                                {"achievable", all_steps.size()},
                                {"backend", none_row.backend}};
            j["baseline"] = {{"value", none_row.value}, {"score", baseline}, {"kv_bytes", none_row.kv_bytes}};
            j["threshold"] = res.threshold, j["found"] = res.found;
            j["probes"] = nlohmann::json::array();
            for (const auto & p : probes) j["probes"].push_back(probe_json(p));
            if (chosen) {
                j["chosen"] = probe_json(*chosen);
                j["chosen"]["ranks"] = ranks_json(ranks), j["chosen"]["options"] = use;
            }
            std::printf("%s\n", j.dump(2).c_str());
        } else if (chosen) {
            std::printf(
                "chosen: compression %.6f (removal rate %s), %s %.6g, score %.6g >= %.6g; KV bytes x%.3f "
                "smaller than none\n%s\n",
                chosen->step.compression, exact(chosen->step.removal_rate).c_str(),
                chosen->row.metric.c_str(), chosen->row.value, chosen->score, res.threshold,
                kv_ratio(chosen->row), ranks_range(ranks).c_str());
            print_ranks(ranks);
            std::printf("use it with: %s\n", use.c_str());
        }
        rows.close(false);
        if (!res.found) {
            std::fprintf(
                stderr,
                "kvcomp ratesearch: no candidate keeps %g of none's score %.6g: the smallest compression "
                "%.6f scores %.6g\n",
                keep, baseline, grid.front(), probes.empty() ? std::nan("") : probes.front().score);
            return 1;
        }
        return 0;
    } catch (const std::exception & e) {
        std::fprintf(stderr, "kvcomp ratesearch: %s\n", e.what());
        return 1;
    }
}

}  // namespace kvcomp::cli
