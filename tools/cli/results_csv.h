// Result rows of `kvcomp eval`: one per (task, context), printed and appended to a CSV whose
// schema is the header below (the report generator reads it).
#pragma once

#include <cstdint>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/engine.h"

namespace kvcomp::cli {

struct result_row {
    std::string date, commit, device, backend, model, method, method_opts, task, metric;
    int64_t context = 0, examples = 0;
    uint64_t seed = 0;
    double value = 0.0, baseline_value = 0.0;        // the method's score and "none"'s in the same run
    double kv_bytes = 0.0, kv_bytes_baseline = 0.0;  // per request, as allocated
};

class result_rows {
public:
    // csv_path empty: no file.
    result_rows(const std::string & csv_path, const std::string & commit);
    result_row start(engine::engine & eng, const engine::engine_config & cfg, const std::string & task,
                     int64_t context) const;
    void finish(const result_row & row, bool json);  // prints (table or JSON) and appends to the CSV
    void close(bool json);

private:
    std::string commit_;
    std::ofstream csv_;
    nlohmann::json json_rows_ = nlohmann::json::array();
    bool header_printed_ = false;
};

// Identity of a row for resuming a sweep: method, options, task, context, examples, seed, backend.
std::string row_key(const result_row & row);
// Keys of the rows already in a CSV of this schema (empty when the file does not exist).
std::set<std::string> finished_row_keys(const std::string & csv_path);

// "a,b,,c" -> {"a", "b", "c"} (empty items dropped), for list-valued options.
std::vector<std::string> split_list(const std::string & s);

// "512,1024" -> {512, 1024}; throws invalid_argument naming the option and the bad item.
std::vector<int64_t> parse_positive_list(const std::string & s, const char * option);

}  // namespace kvcomp::cli
