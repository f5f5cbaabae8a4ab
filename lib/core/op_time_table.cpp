// op_time_table: see op_time_table.h.
#include "core/op_time_table.h"

#include <cstdio>

namespace kvcomp {

void op_time_table::start() {
    if (!started_) wall_start_ = std::chrono::steady_clock::now(), started_ = true;
}

void op_time_table::print(const std::string & device_name, const std::string & extra) const {
    const double wall =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - wall_start_).count();
    double sum = 0.0;
    for (const auto & kv : totals_) sum += kv.second.ms;
    std::fprintf(stderr, "KVCOMP_PROFILE_OPS %s: wall %.1f ms from the first op, ops %.1f ms (%.1f%%)%s\n",
                 device_name.c_str(), wall, sum, wall > 0 ? 100.0 * sum / wall : 0.0, extra.c_str());
    std::fprintf(stderr, "  %-22s %10s %12s %10s %7s\n", "op", "count", "total ms", "mean us", "share");
    for (const auto & kv : totals_)
        std::fprintf(stderr, "  %-22s %10lld %12.2f %10.2f %6.1f%%\n", kv.first.c_str(), kv.second.count,
                     kv.second.ms, kv.second.count ? 1000.0 * kv.second.ms / double(kv.second.count) : 0.0,
                     sum > 0 ? 100.0 * kv.second.ms / sum : 0.0);
}

bool op_time_table::report(const std::string & device_name, const std::function<void()> & finish,
                           const std::string & extra) noexcept {
    if (!started_) return false;
    try {
        finish();
    } catch (...) {
        std::fprintf(stderr, "KVCOMP_PROFILE_OPS: %s: events could not be read (device fault?)\n",
                     device_name.c_str());
        return false;
    }
    print(device_name, extra);
    return true;
}

}  // namespace kvcomp
