#include "cli/results_csv.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iomanip>
#include <ctime>
#include <sstream>

namespace kvcomp::cli {

const char * const k_results_header =
    "date,commit,device,backend,model,method,method_opts,task,task_opts,context,batch,examples,seed,metric,value,"
    "baseline_value,kv_bytes,kv_bytes_baseline,compression_ratio";

namespace {

std::string quoted(const std::string & s) {
    std::string out = "\"";
    for (char c : s) out += c == '"' ? std::string("\"\"") : std::string(1, c);
    return out + "\"";
}

// Splits one CSV line (quoted fields with "" escapes, as this file writes them).
std::vector<std::string> split_csv_line(const std::string & line) {
    std::vector<std::string> out(1);
    bool quoted_field = false;
    for (size_t i = 0; i < line.size(); ++i) {
        const char c = line[i];
        if (quoted_field) {
            if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') out.back() += '"', ++i;
            else if (c == '"') quoted_field = false;
            else out.back() += c;
        } else if (c == '"') {
            quoted_field = true;
        } else if (c == ',') {
            out.emplace_back();
        } else {
            out.back() += c;
        }
    }
    return out;
}

// The columns that identify a point (everything but when, where from, and what was measured).
const char * const k_key_columns[] = {"method", "method_opts", "task", "task_opts", "context",
                                      "batch",  "examples",    "seed", "backend"};

std::string join_key(const std::vector<std::string> & parts) {
    std::string k;
    for (const auto & p : parts) k += p + '|';
    return k;
}

// NaN -> empty cell, so "not measured" never reads as a number.
struct cell {
    double v;
};
std::ostream & operator<<(std::ostream & os, cell c) {
    if (!std::isnan(c.v)) os << c.v;
    return os;
}

}  // namespace

std::string row_key(const result_row & r) {
    return join_key({r.method, r.method_opts, r.task, r.task_opts, std::to_string(r.context), std::to_string(r.batch),
                     std::to_string(r.examples), std::to_string(r.seed), r.backend});
}

std::set<std::string> finished_row_keys(const std::string & csv_path) {
    std::set<std::string> keys;
    std::ifstream f(csv_path);
    std::string line;
    if (!f.good() || !std::getline(f, line)) return keys;
    const auto header = split_csv_line(line);
    KVCOMP_CHECK_ARG(line == k_results_header, "--csv '", csv_path,
                     "' has other columns than kvcomp eval writes (an older schema?); use a new file");
    std::vector<size_t> cols;
    for (const char * name : k_key_columns)
        cols.push_back(size_t(std::find(header.begin(), header.end(), name) - header.begin()));
    while (std::getline(f, line)) {
        const auto v = split_csv_line(line);
        if (v.size() != header.size()) continue;  // a line cut by an interruption: its point runs again
        std::vector<std::string> parts;
        for (size_t c : cols) parts.push_back(v[c]);
        keys.insert(join_key(parts));
    }
    return keys;
}

std::vector<std::string> split_list(const std::string & s) {
    std::vector<std::string> out;
    std::stringstream ss(s);
    std::string item;
    while (std::getline(ss, item, ','))
        if (!item.empty()) out.push_back(item);
    return out;
}

std::vector<int64_t> parse_positive_list(const std::string & s, const char * option) {
    std::vector<int64_t> out;
    std::stringstream ss(s);
    std::string item;
    while (std::getline(ss, item, ',')) {
        char * end = nullptr;
        const long long v = std::strtoll(item.c_str(), &end, 10);
        KVCOMP_CHECK_ARG(!item.empty() && *end == 0 && v > 0, option, ": '", item, "' is not a positive integer");
        out.push_back(v);
    }
    KVCOMP_CHECK_ARG(!out.empty(), option, ": empty list");
    return out;
}

result_rows::result_rows(const std::string & csv_path, const std::string & commit) : commit_(commit) {
    if (csv_path.empty()) return;
    std::ifstream existing(csv_path);
    const bool fresh = !existing.good();
    std::string first;
    // Appending to a file of another schema would leave a CSV no tool can read.
    if (!fresh && std::getline(existing, first))
        KVCOMP_CHECK_ARG(first == k_results_header, "--csv '", csv_path,
                         "' has other columns than kvcomp writes (an older schema?); use a new file");
    csv_.open(csv_path, std::ios::app);
    KVCOMP_CHECK_ARG(csv_.good(), "--csv: cannot write '", csv_path, "'");
    if (fresh || first.empty()) csv_ << k_results_header << '\n';
    csv_.precision(12);  // byte counts and scores exactly, not the stream's default 6 digits
}

result_row result_rows::start(engine::engine & eng, const engine::engine_config & cfg, const std::string & task,
                              int64_t context) const {
    result_row r;
    char date[32];
    const std::time_t now = std::time(nullptr);
    std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
    r.date = date, r.commit = commit_, r.device = eng.device().info().device_name, r.backend = eng.device().name();
    r.model = cfg.model_dir, r.method = cfg.method, r.task = task, r.context = context, r.batch = cfg.max_batch;
    for (const auto & kv : cfg.method_opts) r.method_opts += (r.method_opts.empty() ? "" : ";") + kv.first + "=" + kv.second;
    return r;
}

namespace {
double ratio_of(const result_row & r) {
    return r.kv_bytes > 0 && r.kv_bytes_baseline > 0 ? r.kv_bytes_baseline / r.kv_bytes : std::nan("");
}
}  // namespace

void result_rows::finish(const result_row & r, bool json) {
    const double ratio = ratio_of(r);
    if (json) {
        json_rows_.push_back({{"task", r.task}, {"task_opts", r.task_opts}, {"context", r.context}, {"method", r.method},
                              {"method_opts", r.method_opts}, {"metric", r.metric}, {"value", r.value},
                              {"baseline_value", r.baseline_value}, {"kv_bytes", r.kv_bytes},
                              {"kv_bytes_baseline", r.kv_bytes_baseline}, {"compression_ratio", ratio},
                              {"examples", r.examples}, {"backend", r.backend}, {"device", r.device}});
    } else {
        if (!header_printed_)
            std::printf("%-28s %8s %-14s %-24s %8s %8s %12s %12s %7s\n", "task", "context", "method", "metric", "value",
                        "none", "KV_bytes", "none_bytes", "ratio");
        header_printed_ = true;
        const std::string task = r.task + (r.task_opts.empty() ? "" : ":" + r.task_opts);
        std::printf("%-28s %8lld %-14s %-24s %8.4f %8.4f %12.0f %12.0f %7.2f\n", task.c_str(), (long long)r.context,
                    (r.method + (r.method_opts.empty() ? "" : ":" + r.method_opts)).c_str(), r.metric.c_str(), r.value,
                    r.baseline_value, r.kv_bytes, r.kv_bytes_baseline, ratio);
        std::fflush(stdout);
    }
    append_csv(r);
}

void result_rows::append_csv(const result_row & r) {
    if (!csv_.is_open()) return;
    csv_ << r.date << ',' << r.commit << ',' << quoted(r.device) << ',' << r.backend << ',' << quoted(r.model) << ','
         << r.method << ',' << quoted(r.method_opts) << ',' << r.task << ',' << quoted(r.task_opts) << ',' << r.context
         << ',' << r.batch << ',' << r.examples << ',' << r.seed << ',' << r.metric << ',' << cell{r.value} << ','
         << cell{r.baseline_value} << ',' << cell{r.kv_bytes} << ',' << cell{r.kv_bytes_baseline} << ','
         << cell{ratio_of(r)} << '\n';
    csv_.flush();  // a killed sweep loses at most the row being written (resume reruns it)
}

void result_rows::close(bool json) {
    if (json) std::printf("%s\n", json_rows_.dump(2).c_str());
}

}  // namespace kvcomp::cli
