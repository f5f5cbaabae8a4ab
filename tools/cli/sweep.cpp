// kvcomp sweep: a grid of methods x settings x tasks x contexts (x needle depths), one CSV row per
// point (the schema of kvcomp eval). Re-running with the same --csv resumes: points already in the file are skipped.
// A bad setting (unknown method, invalid option) or a failing point is reported and the rest of the
// grid still runs; the exit code is then 1. When "none" is in the grid, its rows of this run serve
// as the "none" columns of the other methods' rows of the same point (same examples, same backend;
// the tasks are deterministic), so the uncompressed cache is not run again for every method
// (greedy_agreement excepted: it compares tokens, not scores).
#include <algorithm>
#include <cstdio>
#include <map>
#include <set>
#include <sstream>

#include "cli/commands.h"
#include "cli/engine_options.h"
#include "cli/eval_tasks.h"
#include "cli/progress.h"
#include "cli/results_csv.h"
#include "host/eval/needle.h"
#include "host/model/tokenizer_factory.h"

namespace kvcomp::cli {

namespace {

struct method_spec {
    std::string text;  // as given, for messages
    std::string name;
    engine::method_options opts;
};

// "none;window:window=64,foo=1" -> specs. Throws invalid_argument on a malformed item.
std::vector<method_spec> parse_methods(const std::string & s) {
    std::vector<method_spec> out;
    std::stringstream ss(s);
    std::string item;
    while (std::getline(ss, item, ';')) {
        if (item.empty()) continue;
        method_spec m;
        m.text = item;
        const auto colon = item.find(':');
        m.name = item.substr(0, colon);
        if (colon != std::string::npos) {
            std::stringstream os(item.substr(colon + 1));
            std::string kv;
            while (std::getline(os, kv, ',')) {
                const auto eq = kv.find('=');
                KVCOMP_CHECK_ARG(eq != std::string::npos && eq > 0, "--methods: '", item, "': option '", kv,
                                 "' is not KEY=VALUE");
                m.opts[kv.substr(0, eq)] = kv.substr(eq + 1);
            }
        }
        out.push_back(m);
    }
    KVCOMP_CHECK_ARG(!out.empty(), "--methods: empty list");
    return out;
}


}  // namespace

int run_sweep(int argc, char ** argv) {
    po::options_description desc("options");
    add_engine_options(desc);
    desc.add_options()("methods", po::value<std::vector<std::string>>()->composing(),
                       "a method NAME[:KEY=VALUE,...], repeatable (or ';'-separated), e.g. --methods none "
                       "--methods window:window=64 (default: none)")(
        "tasks", po::value<std::string>()->default_value("line_retrieval"), "comma-separated tasks")(
        "contexts", po::value<std::string>()->default_value("512,1024"), "comma-separated context lengths")(
        "examples", po::value<long>()->default_value(50), "examples per point")(
        "gen", po::value<long>()->default_value(32), "greedy_agreement: tokens per example")(
        "depths", po::value<std::string>()->default_value("0,0.25,0.5,0.75,1"), "needle: depths of the key line in [0, 1]")(
        "haystack", po::value<std::string>()->default_value("keys"),
        "needle: keys (distractor records) or text (lines of the text file)")(
        "text-file", po::value<std::string>(),
        "text for greedy_agreement / perplexity and needle --haystack text (default MODEL/heldout.txt)")(
        "seed", po::value<unsigned long>()->default_value(1), "task data seed")(
        "csv", po::value<std::string>(), "the CSV to append to and resume from (required)")(
        "commit", po::value<std::string>()->default_value("unknown"), "commit id recorded in the CSV");
    po::variables_map vm;
    if (auto rc = parse_options(argc, argv, desc,
                                "usage: kvcomp sweep --model DIR --csv FILE [--methods none --methods window:window=64]\n"
                                "                    [--tasks line_retrieval,perplexity] [--contexts 512,1024]\n\n"
                                "Runs every method x task x context with kvcomp eval's scoring (each point next to\n"
                                "the uncompressed cache of the same run) and appends one row per point. Points\n"
                                "already in the CSV are skipped, so an interrupted sweep resumes where it stopped.",
                                vm))
        return *rc;
    try {
        KVCOMP_CHECK_ARG(vm.count("csv"), "--csv FILE is required (it is also what a sweep resumes from)");
        KVCOMP_CHECK_ARG(vm["method"].defaulted() && !vm.count("method-opt"),
                         "sweep takes --methods \"NAME[:K=V,...];...\", not --method / --method-opt");
        engine::engine_config cfg = engine_config_from(vm);
        std::string joined = "none";
        if (vm.count("methods")) {
            joined.clear();
            for (const auto & m : vm["methods"].as<std::vector<std::string>>()) joined += m + ";";
        }
        const auto methods = parse_methods(joined);
        const auto tasks = split_list(vm["tasks"].as<std::string>());
        for (const auto & t : tasks) check_task(t);
        const auto contexts = parse_positive_list(vm["contexts"].as<std::string>(), "--contexts");
        const auto depths = host::parse_depths(vm["depths"].as<std::string>(), "--depths");
        eval_point proto;
        proto.examples = vm["examples"].as<long>(), proto.gen = vm["gen"].as<long>();
        proto.seed = vm["seed"].as<unsigned long>(), proto.haystack = vm["haystack"].as<std::string>();
        KVCOMP_CHECK_ARG(proto.examples > 0 && proto.gen > 0, "--examples and --gen must be positive");
        proto.text_file = vm.count("text-file") ? vm["text-file"].as<std::string>() : cfg.model_dir + "/heldout.txt";
        cfg.max_context = std::max<int64_t>(cfg.max_context, *std::max_element(contexts.begin(), contexts.end()) +
                                                                 proto.gen + 8);
        cfg.max_batch = std::min<int64_t>(cfg.max_batch, proto.examples);
        const auto tok = host::load_tokenizer(cfg.model_dir);
        const std::string csv = vm["csv"].as<std::string>();
        const std::set<std::string> finished = finished_row_keys(csv);
        result_rows rows(csv, vm["commit"].as<std::string>());

        std::vector<eval_point> points;
        for (const auto & task : tasks) {
            eval_point p = proto;
            p.task = task;
            for (const auto & tp : task_points(p, contexts, depths)) points.push_back(tp);
        }
        std::unique_ptr<engine::engine> base;  // "none", shared by every method's points
        std::map<std::string, result_row> none_rows;  // by point_key: "none"'s rows of this run
        const long total = long(methods.size() * points.size());
        progress_bar bar(total);
        long done = 0, written = 0, skipped = 0, failed = 0;
        for (const auto & m : methods) {
            engine::engine_config mc = cfg;
            mc.method = m.name, mc.method_opts = m.opts;
            std::unique_ptr<engine::engine> eng;
            try {
                eng = std::make_unique<engine::engine>(mc);
                if (!base && m.name != "none") {
                    engine::engine_config bc = cfg;
                    bc.method = "none";
                    base = std::make_unique<engine::engine>(bc);
                }
            } catch (const std::exception & e) {
                bar.done();
                std::fprintf(stderr, "kvcomp sweep: method '%s': %s; skipping its %zu points\n", m.text.c_str(),
                             e.what(), points.size());
                failed += long(points.size());
                done += long(points.size());
                continue;
            }
            for (const eval_point & pt : points) {
                const std::string where = concat(m.text, " ", pt.task, pt.task == "needle" ? concat(" depth ", pt.depth) : "",
                                                 " @ ", pt.context);
                bar.update(done++, where);
                result_row row = rows.start(*eng, mc, pt.task, pt.context);
                row.examples = proto.examples, row.seed = proto.seed, row.task_opts = task_opts(pt);
                if (finished.count(row_key(row))) {
                    ++skipped;
                    continue;
                }
                const std::string point = concat(pt.task, '|', row.task_opts, '|', pt.context, '|', pt.examples, '|', pt.seed);
                const auto known = pt.task == "greedy_agreement" ? none_rows.end() : none_rows.find(point);
                try {
                    if (m.name == "none") {
                        score_point(pt, *eng, nullptr, *tok, row);
                        none_rows[point] = row;
                    } else if (known != none_rows.end()) {
                        score_point(pt, *eng, nullptr, *tok, row);  // the method alone ...
                        row.baseline_value = known->second.value;    // ... next to none's row of this run
                        row.kv_bytes_baseline = known->second.kv_bytes;
                    } else {
                        score_point(pt, *eng, base.get(), *tok, row);
                    }
                    bar.done();
                    rows.finish(row, false);
                    ++written;
                } catch (const std::exception & e) {
                    bar.done();
                    std::fprintf(stderr, "kvcomp sweep: %s: %s\n", where.c_str(), e.what());
                    ++failed;
                }
            }
        }
        bar.done();
        std::fprintf(stderr, "kvcomp sweep: %ld rows written, %ld already in %s (resumed), %ld failed\n", written,
                     skipped, csv.c_str(), failed);
        return failed ? 1 : 0;
    } catch (const std::exception & e) {
        std::fprintf(stderr, "kvcomp sweep: %s\n", e.what());
        return 1;
    }
}

}  // namespace kvcomp::cli
