#include "cli/lowrank_ranks.h"

#include <algorithm>
#include <cstdio>
#include <numeric>
#include <vector>

#include "core/error.h"

namespace kvcomp::cli {

void print_ranks(const host::lowrank::kv_ranks & r) {
    std::printf("ranks (K/V per KV head, head_dim %lld):\n", (long long)r.head_dim);
    for (int64_t l = 0; l < r.num_layers; ++l) {
        std::printf("  layer %2lld:", (long long)l);
        for (int64_t h = 0; h < r.num_kv_heads; ++h) {
            const size_t i = size_t(l * r.num_kv_heads + h);
            std::printf(" %lld/%lld", (long long)r.k[i], (long long)r.v[i]);
        }
        std::printf("\n");
    }
}

std::string ranks_range(const host::lowrank::kv_ranks & r) {
    auto side = [](const char * name, const std::vector<int64_t> & v) {
        if (v.empty()) return concat(name, " ranks: none");
        const auto [lo, hi] = std::minmax_element(v.begin(), v.end());
        char mean[32];
        std::snprintf(mean, sizeof mean, "%.1f",
                      double(std::accumulate(v.begin(), v.end(), int64_t(0))) / double(v.size()));
        return concat(name, " ranks ", *lo, "..", *hi, " (mean ", mean, ")");
    };
    return concat(side("K", r.k), ", ", side("V", r.v), " of head_dim ", r.head_dim);
}

nlohmann::json ranks_json(const host::lowrank::kv_ranks & r) {
    nlohmann::json j = {{"k", nlohmann::json::array()}, {"v", nlohmann::json::array()}};
    for (int64_t l = 0; l < r.num_layers; ++l) {
        const auto b = r.k.begin() + l * r.num_kv_heads, bv = r.v.begin() + l * r.num_kv_heads;
        j["k"].push_back(std::vector<int64_t>(b, b + r.num_kv_heads));
        j["v"].push_back(std::vector<int64_t>(bv, bv + r.num_kv_heads));
    }
    return j;
}

}  // namespace kvcomp::cli
