// kvcomp eval: a task's score with a KV method next to the uncompressed score of the same run,
// with the KV bytes the method actually allocates and the resulting compression ratio.
//
// Tasks: line_retrieval (exact match of the greedy answer, LongEval style, host/eval), needle
// (the same question about one key line hidden at --depths of a filler text, host/eval/needle.h),
// greedy_agreement (how many of N greedy tokens match the uncompressed run before the first
// difference, on windows of a text file) and perplexity (per token over the second half of each
// window, fed by teacher forcing through the method's decode path). Each (task, context[, depth]) gives one row; rows go to stdout,
// and with --csv to a file in the schema of docs/data (see tools/cli/results_csv.h).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/engine_options.h"
#include "cli/progress.h"
#include "cli/eval_tasks.h"
#include "cli/results_csv.h"
#include "host/eval/needle.h"
#include "host/model/tokenizer_factory.h"

namespace kvcomp::cli {

int run_eval(int argc, char ** argv) {
    po::options_description desc("options");
    add_engine_options(desc);
    desc.add_options()("task,t", po::value<std::string>()->default_value("line_retrieval"),
                       "line_retrieval, needle, greedy_agreement or perplexity (per token, on the text file)")(
        "contexts", po::value<std::string>()->default_value("1024"), "comma-separated context lengths (tokens)")(
        "examples", po::value<long>()->default_value(50), "examples per context")(
        "gen", po::value<long>()->default_value(32), "greedy_agreement: tokens generated per example")(
        "depths", po::value<std::string>()->default_value("0,0.25,0.5,0.75,1"),
        "needle: comma-separated depths of the key line in [0, 1] (one row each)")(
        "haystack", po::value<std::string>()->default_value("keys"),
        "needle: keys (distractor records) or text (lines of the text file)")(
        "text-file", po::value<std::string>(),
        "greedy_agreement / perplexity: text to cut windows from; needle --haystack text: the haystack\n(default: MODEL/heldout.txt)")(
        "seed", po::value<unsigned long>()->default_value(1), "task data seed")(
        "split", po::value<std::string>()->default_value("report"),
        "report, or validation: the split kvcomp ratesearch tunes on (text windows half a stride later;\n"
        "pass its --seed too, 1000003 by default, to rescore one of its probes)")(
        "csv", po::value<std::string>(), "append one row per context to this CSV")(
        "commit", po::value<std::string>()->default_value("unknown"), "commit id recorded in the CSV")(
        "json", "print the rows as JSON");
    po::variables_map vm;
    if (auto rc = parse_options(argc, argv, desc,
                                "usage: kvcomp eval --model DIR --method NAME [--method-opt K=V] [--task line_retrieval]\n"
                                "                   [--contexts 512,1024] [--examples 50] [--backend NAME] [--csv FILE]\n\n"
                                "Scores the method on the task and, in the same run, the uncompressed cache (method\n"
                                "none); reports both with the KV bytes per request each allocates and the ratio.",
                                vm))
        return *rc;
    try {
        engine::engine_config cfg = engine_config_from(vm);
        const std::string task = vm["task"].as<std::string>();
        check_task(task);
        const std::string split = vm["split"].as<std::string>();
        KVCOMP_CHECK_ARG(split == "report" || split == "validation", "--split: unknown split '", split,
                         "'; valid: report, validation");
        const auto contexts = parse_positive_list(vm["contexts"].as<std::string>(), "--contexts");
        const auto depths = host::parse_depths(vm["depths"].as<std::string>(), "--depths");
        const long n = vm["examples"].as<long>(), gen = vm["gen"].as<long>();
        KVCOMP_CHECK_ARG(n > 0 && gen > 0, "--examples and --gen must be positive");
        const auto tok = host::load_tokenizer(cfg.model_dir);
        const std::string text_file =
            vm.count("text-file") ? vm["text-file"].as<std::string>() : cfg.model_dir + "/heldout.txt";
        const int64_t max_ctx = *std::max_element(contexts.begin(), contexts.end());
        cfg.max_context = std::max<int64_t>(cfg.max_context, max_ctx + gen + 8);
        cfg.max_batch = std::min<int64_t>(cfg.max_batch, n);

        engine::engine_config base_cfg = cfg;
        base_cfg.method = "none";
        base_cfg.method_opts.clear();
        engine::engine eng(cfg);
        std::unique_ptr<engine::engine> base;
        if (cfg.method != "none") base = std::make_unique<engine::engine>(base_cfg);

        result_rows rows(vm.count("csv") ? vm["csv"].as<std::string>() : "", vm["commit"].as<std::string>());
        eval_point proto;
        proto.task = task, proto.examples = n, proto.gen = gen, proto.seed = vm["seed"].as<unsigned long>();
        proto.text_file = text_file, proto.haystack = vm["haystack"].as<std::string>();
        proto.validation = split == "validation";
        const auto points = task_points(proto, contexts, depths);
        progress_bar bar(long(points.size()));
        long done = 0;
        for (const eval_point & pt : points) {
            bar.update(done++, concat(task, " @ ", pt.context, task == "needle" ? concat(" depth ", pt.depth) : ""));
            result_row row = rows.start(eng, cfg, task, pt.context);
            row.examples = n, row.seed = pt.seed;
            score_point(pt, eng, base.get(), *tok, row);
            bar.done();
            rows.finish(row, vm.count("json") > 0);
        }
        bar.done();
        rows.close(vm.count("json") > 0);
        return 0;
    } catch (const std::exception & e) {
        std::fprintf(stderr, "kvcomp eval: %s\n", e.what());
        return 1;
    }
}

}  // namespace kvcomp::cli
