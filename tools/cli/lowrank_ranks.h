// Per-(layer, KV head) ranks of a low-rank method (ZACK / FDC / Palu) as kvcomp calibrate and
// kvcomp ratesearch print them, so both commands show ranks the same way.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "host/lowrank/rank_selection.h"

namespace kvcomp::cli {

// "ranks (K/V per KV head, head_dim 64):" then one line per layer, "  layer  0: 48/32 64/16", to stdout.
void print_ranks(const host::lowrank::kv_ranks & r);

// "K ranks 16..64 (mean 41.3), V ranks 16..48 (mean 30.7) of head_dim 64": one line for any model size.
std::string ranks_range(const host::lowrank::kv_ranks & r);

// {"k": [[rank per KV head] per layer], "v": [...]}, the layout of the calibration file's header.
nlohmann::json ranks_json(const host::lowrank::kv_ranks & r);

}  // namespace kvcomp::cli
