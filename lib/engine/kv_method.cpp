// The registry of KV methods: name -> factory. Adding a method adds one line here.
#include "engine/kv_method.h"

#include <functional>
#include <utility>

namespace kvcomp::engine {

std::unique_ptr<kv_method> make_kv_method_none(const method_options & options);
std::unique_ptr<kv_method> make_kv_method_window(const method_options & options);
std::unique_ptr<kv_method> make_kv_method_kivi(const method_options & options);
std::unique_ptr<kv_method> make_kv_method_zipcache(const method_options & options);
std::unique_ptr<kv_method> make_kv_method_zack(const method_options & options);
std::unique_ptr<kv_method> make_kv_method_fdc(const method_options & options);
std::unique_ptr<kv_method> make_kv_method_palu(const method_options & options);

namespace {

using factory = std::unique_ptr<kv_method> (*)(const method_options &);

const std::vector<std::pair<std::string, factory>> & methods() {
    static const std::vector<std::pair<std::string, factory>> m = {
        {"none", &make_kv_method_none},
        {"window", &make_kv_method_window},
        {"kivi", &make_kv_method_kivi},
        {"zipcache", &make_kv_method_zipcache},
        {"zack", &make_kv_method_zack},
        {"fdc", &make_kv_method_fdc},
        {"palu", &make_kv_method_palu},
    };
    return m;
}

}  // namespace

std::vector<std::string> kv_method_names() {
    std::vector<std::string> names;
    for (const auto & m : methods()) names.push_back(m.first);
    return names;
}

std::unique_ptr<kv_method> create_kv_method(const std::string & name, const method_options & options) {
    for (const auto & m : methods())
        if (m.first == name) return m.second(options);
    std::string valid;
    for (const auto & n : kv_method_names()) valid += (valid.empty() ? "" : ", ") + n;
    KVCOMP_THROW(status::invalid_argument, "unknown KV method '", name, "'; valid methods: ", valid);
}

}  // namespace kvcomp::engine
