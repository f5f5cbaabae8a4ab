// kvcomp calibrate: per-head bases and ranks of the low-rank KV methods (ZACK, FDC, the Palu
// baseline) into a calibration file (host/lowrank/calibration_file.h). The work is in
// lib/engine/calibrate.h; this file reads options, makes the calibration tokens and prints.
//
// Calibration tokens: zack = the first --tokens tokens of --text-file (default MODEL/heldout.txt,
// the default model's held-out text) encoded by the model's tokenizer; fdc = --tokens random
// ordinary vocabulary ids (seeded by --seed; uniform over the vocabulary when DIR has no
// tokenizer); palu = none (weights only). Tokens are cut into
// prompts of at most --chunk tokens (default: the model's context), each starting with the
// tokenizer's BOS when it has one. --random-weights calibrates the random-weight model of
// kvcomp bench (the file records a hash of config.json and the weight seed).
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <random>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/lowrank_ranks.h"
#include "cli/options.h"
#include "core/error.h"
#include "engine/calibrate.h"
#include "host/eval/task_text.h"
#include "host/model/model_config.h"
#include "host/model/tokenizer_factory.h"

namespace kvcomp::cli {

namespace {

using host::lowrank::calibration;

void print_summary(const calibration & c, const std::string & out, int64_t tokens, int64_t prompts, bool json) {
    const auto & r = c.ranks;
    if (json) {
        nlohmann::json j;
        j["file"] = out, j["method"] = host::lowrank::lowrank_method_name(c.method);
        j["model_hash"] = c.model_hash, j["tokens"] = tokens, j["prompts"] = prompts;
        j["removal_rate"] = c.removal_rate, j["rank_multiple"] = c.rank_multiple;
        j["compression"] = r.compression(), j["kept_dims"] = r.kept_dims(), j["full_dims"] = r.full_dims();
        j["ranks"] = ranks_json(r);
        std::printf("%s\n", j.dump(2).c_str());
        return;
    }
    std::printf("%s calibration of %s: %lld tokens in %lld prompts, removal rate %.6g, ranks multiple of %lld\n",
                host::lowrank::lowrank_method_name(c.method), c.model_hash.c_str(), (long long)tokens,
                (long long)prompts, c.removal_rate, (long long)c.rank_multiple);
    print_ranks(r);
    std::printf("KV dims kept %lld of %lld: compression %.4f (KV cache x%.3f smaller)\nwrote %s\n",
                (long long)r.kept_dims(), (long long)r.full_dims(), r.compression(), 1.0 / r.kept_fraction(),
                out.c_str());
}

// Tokens per calibration prompt: --chunk, at most the model's context (sliding-window models: the
// window, less the slot a prompt leaves).
int64_t calibration_chunk(const host::model_config & mc, int64_t chunk_opt) {
    int64_t chunk = chunk_opt > 0 ? std::min<int64_t>(chunk_opt, mc.max_position_embeddings)
                                  : mc.max_position_embeddings;
    if (mc.sliding_window > 0) chunk = std::min<int64_t>(chunk, mc.sliding_window - 1);
    return chunk;
}

bool has_tokenizer(const std::string & dir) {
    std::error_code ec;
    const std::filesystem::path d(dir);
    return std::filesystem::exists(d / "tokenizer.json", ec) || std::filesystem::exists(d / "kvcomp_tokenizer.json", ec);
}

// FDC's random vocabulary tokens for a model directory without a tokenizer (config.json only).
std::vector<int32_t> uniform_token_ids(int64_t vocab, int64_t n, uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::uniform_int_distribution<int32_t> pick(0, int32_t(vocab - 1));
    std::vector<int32_t> ids(static_cast<size_t>(n));
    for (int32_t & id : ids) id = pick(rng);
    return ids;
}

}  // namespace

int run_calibrate(int argc, char ** argv) {
    po::options_description desc("options");
    desc.add_options()("model,m", po::value<std::string>(), "model directory (config.json + *.safetensors + tokenizer)")(
        "method", po::value<std::string>(), "zack, fdc or palu (plain SVD of W_K / W_V)")(
        "out,o", po::value<std::string>(), "calibration file to write (safetensors)")(
        "text-file", po::value<std::string>(), "zack: calibration text (default: MODEL/heldout.txt)")(
        "tokens", po::value<long>()->default_value(8192), "calibration tokens (zack: the text's first N)")(
        "chunk", po::value<long>()->default_value(0), "tokens per prompt (0: the model's context)")(
        "seed", po::value<unsigned long>()->default_value(1),
        "fdc: seed of the random token ids (uniform over the vocabulary when DIR has no tokenizer)")(
        "random-weights", "read only config.json and calibrate the random-weight model kvcomp bench runs "
                          "(with no tokenizer in DIR, zack and fdc draw ids uniformly from the whole vocabulary)")(
        "weight-seed", po::value<unsigned long>()->default_value(1), "seed of --random-weights")(
        "removal-rate", po::value<double>(), "singular-value removal rate r in [0, 1] (default 0.1)")(
        "compression", po::value<double>(), "overall KV compression target in [0, 1) instead of a removal rate")(
        "rank-multiple", po::value<long>()->default_value(16), "ranks are rounded up to a multiple of this")(
        "backend,b", po::value<std::string>()->default_value("default"),
        "where the capture forward runs: cpu, opencl[:N], cuda[:N] or default")(
        "json", "print the summary as JSON");
    po::variables_map vm;
    if (auto rc = parse_options(argc, argv, desc,
                                "usage: kvcomp calibrate --model DIR --method zack|fdc|palu --out FILE [--text-file F]\n"
                                "                        [--random-weights [--weight-seed N]]\n"
                                "                        [--tokens N] [--removal-rate r | --compression c]\n"
                                "                        [--rank-multiple 16] [--backend NAME] [--json]\n\n"
                                "Runs the model over calibration tokens (zack: text, fdc: random ids; palu: weights\n"
                                "only), computes per-(layer, KV head) K and V bases by SVD, picks ranks and writes\n"
                                "the calibration file.",
                                vm))
        return *rc;
    try {
        KVCOMP_CHECK_ARG(vm.count("model"), "--model DIR is required");
        KVCOMP_CHECK_ARG(vm.count("method"), "--method zack|fdc|palu is required");
        KVCOMP_CHECK_ARG(vm.count("out"), "--out FILE is required");
        engine::calibrate_config cfg;
        cfg.model_dir = vm["model"].as<std::string>();
        const std::string mname = vm["method"].as<std::string>();
        KVCOMP_CHECK_ARG(host::lowrank::lowrank_method_from_name(mname, cfg.method), "unknown method '", mname,
                         "'; valid methods: zack, fdc, palu");
        cfg.backend = vm["backend"].as<std::string>();
        cfg.random_weights = vm.count("random-weights") > 0;
        cfg.weight_seed = vm["weight-seed"].as<unsigned long>();
        KVCOMP_CHECK_ARG(!(vm.count("removal-rate") && vm.count("compression")),
                         "give --removal-rate or --compression, not both");
        if (vm.count("compression")) cfg.compression = vm["compression"].as<double>();
        else cfg.removal_rate = vm.count("removal-rate") ? vm["removal-rate"].as<double>() : 0.1;
        if (cfg.removal_rate)
            KVCOMP_CHECK_ARG(*cfg.removal_rate >= 0.0 && *cfg.removal_rate <= 1.0, "--removal-rate ",
                             *cfg.removal_rate, " is outside [0, 1]");
        if (cfg.compression)
            KVCOMP_CHECK_ARG(*cfg.compression >= 0.0 && *cfg.compression < 1.0, "--compression ", *cfg.compression,
                             " is outside [0, 1)");
        cfg.rank_multiple = vm["rank-multiple"].as<long>();
        const long n = vm["tokens"].as<long>(), chunk_opt = vm["chunk"].as<long>();
        KVCOMP_CHECK_ARG(n > 0, "--tokens must be positive, got ", n);
        KVCOMP_CHECK_ARG(chunk_opt >= 0, "--chunk must be >= 0, got ", chunk_opt);
        const host::model_config mc = host::load_model_config(cfg.model_dir);
        // Random weights carry no language, so text has nothing to teach them: without a tokenizer
        // both capture methods calibrate on uniform ids (what the speed benchmarks need). FDC's
        // tokens are random ids anyway: without a tokenizer to name the special ones, uniform ids
        // over the whole vocabulary (e.g. a random checkpoint written by transformers).
        const bool uniform = cfg.method == host::lowrank::lowrank_method::fdc || cfg.random_weights;
        if (cfg.method != host::lowrank::lowrank_method::palu && uniform && !has_tokenizer(cfg.model_dir)) {
            const auto ids = uniform_token_ids(mc.vocab_size, n, vm["seed"].as<unsigned long>());
            cfg.prompts = engine::chunk_prompts(ids, calibration_chunk(mc, chunk_opt), -1);
        } else if (cfg.method != host::lowrank::lowrank_method::palu) {
            const auto tok = host::load_tokenizer(cfg.model_dir);
            std::vector<int32_t> ids;
            if (cfg.method == host::lowrank::lowrank_method::zack) {
                const std::string text_file =
                    vm.count("text-file") ? vm["text-file"].as<std::string>() : cfg.model_dir + "/heldout.txt";
                host::encode_options eo;
                eo.add_special = false;
                ids = tok->encode(host::read_task_text(text_file), eo);
                if (int64_t(ids.size()) > n) ids.resize(static_cast<size_t>(n));
            } else {
                ids = engine::random_calibration_tokens(*tok, mc.vocab_size, n, vm["seed"].as<unsigned long>());
            }
            cfg.prompts = engine::chunk_prompts(ids, calibration_chunk(mc, chunk_opt), tok->bos_id());
            KVCOMP_CHECK_ARG(!cfg.prompts.empty(), "no calibration prompt (", ids.size(), " tokens)");
        }
        const auto res = engine::run_calibration(cfg);
        const std::string out = vm["out"].as<std::string>();
        host::lowrank::write_calibration(out, res.calib);
        print_summary(res.calib, out, res.tokens_captured, int64_t(cfg.prompts.size()), vm.count("json") > 0);
        return 0;
    } catch (const std::exception & e) {
        std::fprintf(stderr, "kvcomp calibrate: %s\n", e.what());
        return 1;
    }
}

}  // namespace kvcomp::cli
