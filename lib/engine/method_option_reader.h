// Reading a KV method's options ("--method-opt key=value"): each key once, typed, range-checked,
// and unknown keys rejected, every message naming the method and the option.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>

#include "engine/kv_method.h"

namespace kvcomp::engine {

class option_reader {
  public:
    option_reader(std::string method, const method_options & o) : method_(std::move(method)), opts_(o) {}

    // Whether the key was given. Counts the key as one of the method's options (finish lists them), so
    // read it too when it was given.
    bool has(const std::string & key) {
        seen_.insert(key);
        return opts_.count(key) > 0;
    }
    // An integer in [lo, hi], or def when the key is absent.
    int64_t integer(const std::string & key, int64_t def, int64_t lo, int64_t hi);
    // A number in [lo, hi], or def when the key is absent.
    double real(const std::string & key, double def, double lo, double hi);
    // One of `allowed`, or def when the key is absent.
    std::string word(const std::string & key, const std::string & def, const std::set<std::string> & allowed);
    // Any non-empty text, or def when the key is absent.
    std::string text(const std::string & key, const std::string & def);
    // "auto" or an integer in [lo, hi]: nothing for auto and when the key is absent.
    std::optional<int64_t> auto_or_integer(const std::string & key, int64_t lo, int64_t hi);
    // Throws invalid_argument for a key none of the calls above read, listing the method's options.
    void finish() const;

  private:
    std::string method_;
    const method_options & opts_;
    std::set<std::string> seen_;
};

}  // namespace kvcomp::engine
