// Options shared by the subcommands that run the engine (generate, compare, bench): model,
// backend, method, weights, paging. They fill an engine_config.
#pragma once

#include <string>

#include "cli/options.h"
#include "engine/engine.h"

namespace kvcomp::cli {

// Adds --model, --backend, --method, --method-opt, --weights, --page-size, --kv-pages, --max-batch,
// --max-context to desc.
void add_engine_options(po::options_description & desc);

// Builds the config from parsed options; throws kvcomp::error(invalid_argument) naming a bad value.
engine::engine_config engine_config_from(const po::variables_map & vm);

}  // namespace kvcomp::cli
