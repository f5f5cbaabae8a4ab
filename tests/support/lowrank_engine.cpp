// Low-rank engine test support: see lowrank_engine.h.
#include "support/lowrank_engine.h"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <stdexcept>

#include "engine/calibrate.h"
#include "host/lowrank/calibration_file.h"

namespace kvcomp::test::lowrank {

namespace hl = host::lowrank;

const tiny_model_spec & spec() {
    static const tiny_model_spec s;
    return s;
}

const std::string & tiny_dir() {
    static const std::string dir = write_tiny_model(spec(), "kv_lowrank");
    return dir;
}

std::vector<int32_t> random_tokens(size_t n, uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::uniform_int_distribution<int32_t> d(0, int32_t(spec().vocab) - 1);
    std::vector<int32_t> t(n);
    for (auto & x : t) x = d(rng);
    return t;
}

std::string calib_file(const std::string & method, const std::string & dir) {
    static std::map<std::string, std::string> made;
    const std::string key = method + "|" + dir;
    auto it = made.find(key);
    if (it != made.end()) return it->second;
    engine::calibrate_config cfg;
    cfg.model_dir = dir, cfg.backend = "cpu", cfg.f32_weights = true;
    EXPECT_TRUE(hl::lowrank_method_from_name(method, cfg.method));
    cfg.prompts = {random_tokens(96, 11), random_tokens(80, 12)};
    cfg.removal_rate = 0.0;
    const auto res = engine::run_calibration(cfg);
    const std::string file = scratch_path("lowrank_" + method + "_" + std::to_string(made.size()) + ".safetensors");
    hl::write_calibration(file, res.calib);
    made[key] = file;
    return file;
}

engine::engine_config config(const std::string & backend, const std::string & method, engine::method_options o) {
    auto c = tiny_engine_config(tiny_dir(), backend);
    c.method = method;
    if (method != "none" && !o.count("calib")) o["calib"] = calib_file(method);
    c.method_opts = o;
    return c;
}

bool engine_runs(const engine::engine_config & cfg, size_t prompt_len, std::string & why) {
    try {
        engine::engine e(cfg);
        const auto prompt = random_tokens(prompt_len, 1);
        e.prompt_logits(prompt);
        engine::generation_request r;
        r.prompt = prompt;
        r.max_new_tokens = 2;
        r.stop_at_eos = false;
        const int64_t id = e.submit(r);
        e.run();
        if (e.result(id).finish_reason != "error") return true;
        why = e.result(id).error;
    } catch (const error & err) {
        if (err.code() != status::unsupported) throw;
        why = err.what();
    }
    if (cfg.backend == "cpu" || why.find("not supported") == std::string::npos)
        ADD_FAILURE() << cfg.backend << " must run " << cfg.method << ": " << why;
    return false;
}

std::vector<double> forced_logprobs(engine::engine & e, const std::vector<int32_t> & prompt,
                                    const std::vector<int32_t> & forced) {
    engine::generation_request r;
    r.prompt = prompt;
    r.forced_tokens = forced;
    const int64_t id = e.submit(r);
    e.run();
    const auto & res = e.result(id);
    if (res.finish_reason == "error") throw std::runtime_error("forced run failed: " + res.error);
    return res.token_logprobs;
}

}  // namespace kvcomp::test::lowrank
