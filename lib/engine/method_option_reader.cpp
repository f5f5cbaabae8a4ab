#include "engine/method_option_reader.h"

#include <cstdlib>

namespace kvcomp::engine {

int64_t option_reader::integer(const std::string & key, int64_t def, int64_t lo, int64_t hi) {
    seen_.insert(key);
    auto it = opts_.find(key);
    if (it == opts_.end()) return def;
    char * end = nullptr;
    const long long v = std::strtoll(it->second.c_str(), &end, 10);
    KVCOMP_CHECK_ARG(!it->second.empty() && *end == '\0' && v >= lo && v <= hi, "method ", method_,
                     ": option ", key, "=", it->second, " must be an integer in [", lo, ", ", hi, "]");
    return v;
}

double option_reader::real(const std::string & key, double def, double lo, double hi) {
    seen_.insert(key);
    auto it = opts_.find(key);
    if (it == opts_.end()) return def;
    char * end = nullptr;
    const double v = std::strtod(it->second.c_str(), &end);
    KVCOMP_CHECK_ARG(!it->second.empty() && *end == '\0' && v >= lo && v <= hi, "method ", method_,
                     ": option ", key, "=", it->second, " must be a number in [", lo, ", ", hi, "]");
    return v;
}

std::string option_reader::word(const std::string & key, const std::string & def,
                                const std::set<std::string> & allowed) {
    seen_.insert(key);
    auto it = opts_.find(key);
    if (it == opts_.end()) return def;
    std::string valid;
    for (const auto & a : allowed) valid += (valid.empty() ? "" : ", ") + a;
    KVCOMP_CHECK_ARG(allowed.count(it->second), "method ", method_, ": option ", key, "=", it->second,
                     " is not one of the allowed values (", valid, ")");
    return it->second;
}

std::string option_reader::text(const std::string & key, const std::string & def) {
    seen_.insert(key);
    auto it = opts_.find(key);
    if (it == opts_.end()) return def;
    KVCOMP_CHECK_ARG(!it->second.empty(), "method ", method_, ": option ", key, " is empty");
    return it->second;
}

std::optional<int64_t> option_reader::auto_or_integer(const std::string & key, int64_t lo, int64_t hi) {
    const std::string v = text(key, "auto");
    if (v == "auto") return std::nullopt;
    char * end = nullptr;
    const long long n = std::strtoll(v.c_str(), &end, 10);
    KVCOMP_CHECK_ARG(*end == '\0' && n >= lo && n <= hi, "method ", method_, ": option ", key, "=", v,
                     " must be auto or an integer in [", lo, ", ", hi, "]");
    return n;
}

void option_reader::finish() const {
    for (const auto & kv : opts_) {
        if (seen_.count(kv.first)) continue;
        std::string known;
        for (const auto & k : seen_) known += (known.empty() ? "" : ", ") + k;
        KVCOMP_THROW(status::invalid_argument, "method ", method_, ": unknown option '", kv.first,
                     "' (options: ", known, ")");
    }
}

}  // namespace kvcomp::engine
