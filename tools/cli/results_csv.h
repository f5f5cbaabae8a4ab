// Result rows of `kvcomp eval`, `kvcomp sweep` and `kvcomp bench`: one per (task, task options,
// context, batch, metric), printed and appended to a CSV of one schema (k_results_header), so
// speed and accuracy of the same setting sit in one table (tools/report reads it).
#pragma once

#include <cstdint>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/engine.h"

namespace kvcomp::cli {

// The CSV header; finished_row_keys() refuses files with other columns.
extern const char * const k_results_header;

struct result_row {
    std::string date, commit, device, backend, model, method, method_opts, metric;
    std::string task;       // line_retrieval, needle, perplexity, greedy_agreement, bench
    std::string task_opts;  // "K=V;..." that change the task's data, e.g. "depth=0.25;text=heldout.txt"
    int64_t context = 0;    // tokens per request (bench: prompt tokens)
    int64_t batch = 0;      // requests decoding at once (eval: the engine's max_batch)
    int64_t examples = 0;   // requests scored (bench: = batch)
    uint64_t seed = 0;
    // The method's value and "none"'s in the same run; NaN (an empty CSV cell) when not measured,
    // e.g. bench runs only the named method.
    double value = 0.0, baseline_value = 0.0;
    double kv_bytes = 0.0, kv_bytes_baseline = 0.0;  // per request as allocated (bench: the batch), NaN: unknown
};

class result_rows {
public:
    // csv_path empty: no file.
    result_rows(const std::string & csv_path, const std::string & commit);
    result_row start(engine::engine & eng, const engine::engine_config & cfg, const std::string & task,
                     int64_t context) const;
    void finish(const result_row & row, bool json);  // prints (table or JSON) and appends to the CSV
    void append_csv(const result_row & row);         // only appends (bench prints its own table)
    void close(bool json);

private:
    std::string commit_;
    std::ofstream csv_;
    nlohmann::json json_rows_ = nlohmann::json::array();
    bool header_printed_ = false;
};

// Identity of a row for resuming a sweep: method, options, task, task options, context, batch,
// examples, seed, backend.
std::string row_key(const result_row & row);
// Keys of the rows already in a CSV of this schema (empty when the file does not exist).
std::set<std::string> finished_row_keys(const std::string & csv_path);

// "a,b,,c" -> {"a", "b", "c"} (empty items dropped), for list-valued options.
std::vector<std::string> split_list(const std::string & s);

// "512,1024" -> {512, 1024}; throws invalid_argument naming the option and the bad item.
std::vector<int64_t> parse_positive_list(const std::string & s, const char * option);

}  // namespace kvcomp::cli
