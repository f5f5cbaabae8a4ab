// kvcomp generate: text generation on one backend with one KV method, streaming to stdout.
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/commands.h"
#include "cli/engine_options.h"
#include "host/model/tokenizer_factory.h"

namespace kvcomp::cli {

namespace {

std::vector<int32_t> parse_token_list(const std::string & s) {
    std::vector<int32_t> ids;
    std::stringstream ss(s);
    std::string item;
    while (std::getline(ss, item, ',')) {
        size_t used = 0;
        long v = 0;
        try {
            v = std::stol(item, &used);
        } catch (const std::exception &) {
            used = 0;
        }
        KVCOMP_CHECK_ARG(used == item.size() && !item.empty(), "--tokens: '", item, "' is not a token id");
        ids.push_back(int32_t(v));
    }
    return ids;
}

std::string read_file(const std::string & path) {
    std::ifstream f(path, std::ios::binary);
    KVCOMP_CHECK_ARG(f.good(), "--prompt-file: cannot read '", path, "'");
    std::ostringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

}  // namespace

int run_generate(int argc, char ** argv) {
    po::options_description desc("options");
    add_engine_options(desc);
    desc.add_options()("prompt,p", po::value<std::string>(), "prompt text")(
        "prompt-file,f", po::value<std::string>(), "read the prompt from a file")(
        "tokens", po::value<std::string>(), "prompt as comma-separated token ids instead of text")(
        "max-tokens,n", po::value<long>()->default_value(64), "tokens to generate at most")(
        "temperature", po::value<float>()->default_value(0.0f), "0: greedy (default)")(
        "top-k", po::value<int>()->default_value(0), "sample from the k most likely tokens (0: all)")(
        "top-p", po::value<float>()->default_value(1.0f), "nucleus sampling mass (1: off)")(
        "seed", po::value<unsigned long>()->default_value(0), "sampling seed")(
        "no-bos", "do not prepend the tokenizer's begin-of-sequence token (added by default, as transformers does)")(
        "ignore-eos", "keep generating after an end-of-sequence token")(
        "stats", "print timings and KV usage to stderr")("json", "print one JSON object instead of streaming text");
    po::variables_map vm;
    if (auto rc = parse_options(argc, argv, desc,
                                "usage: kvcomp generate --model DIR (--prompt TEXT | --prompt-file F | --tokens IDS)\n"
                                "                       [--backend NAME] [--method NAME] [--max-tokens N] ...\n\n"
                                "Generates a continuation and streams only the generated text to stdout (greedy\n"
                                "unless --temperature is set). Errors go to stderr with exit code 1 (2 for usage).",
                                vm))
        return *rc;
    try {
        engine::engine_config cfg = engine_config_from(vm);
        const int sources = int(vm.count("prompt") + vm.count("prompt-file") + vm.count("tokens"));
        KVCOMP_CHECK_ARG(sources == 1, "give exactly one of --prompt, --prompt-file, --tokens");
        const auto tok = host::load_tokenizer(cfg.model_dir);
        engine::generation_request req;
        if (vm.count("tokens")) {
            req.prompt = parse_token_list(vm["tokens"].as<std::string>());
        } else {
            const std::string text = vm.count("prompt") ? vm["prompt"].as<std::string>()
                                                        : read_file(vm["prompt-file"].as<std::string>());
            host::encode_options eo;
            eo.add_special = vm.count("no-bos") == 0;
            req.prompt = tok->encode(text, eo);
        }
        req.max_new_tokens = vm["max-tokens"].as<long>();
        req.sampling.temperature = vm["temperature"].as<float>();
        req.sampling.top_k = vm["top-k"].as<int>();
        req.sampling.top_p = vm["top-p"].as<float>();
        req.sampling.seed = vm["seed"].as<unsigned long>();
        req.stop_at_eos = vm.count("ignore-eos") == 0;

        engine::engine eng(cfg);
        const int64_t id = eng.submit(req);
        const bool json = vm.count("json") > 0;
        host::stream_decoder dec(*tok, /*skip_special=*/true);
        eng.run([&](int64_t, int32_t t) {
            if (json || t >= tok->vocab_size()) return;  // padded ids have no text
            const std::string piece = dec.push(t);
            std::fwrite(piece.data(), 1, piece.size(), stdout);
            std::fflush(stdout);
        });
        const auto & res = eng.result(id);
        if (res.finish_reason == "error") {
            std::fprintf(stderr, "kvcomp generate: %s\n", res.error.c_str());
            return 1;
        }
        const auto st = eng.stats();
        double tbt = 0;
        for (double t : res.tbt_ms) tbt += t;
        if (!res.tbt_ms.empty()) tbt /= double(res.tbt_ms.size());
        if (json) {
            std::vector<int32_t> shown;
            for (int32_t t : res.tokens)
                if (t < tok->vocab_size()) shown.push_back(t);
            nlohmann::json j = {{"text", host::utf8_sanitize(tok->decode(shown, true))},
                                {"tokens", res.tokens},
                                {"prompt_tokens", req.prompt.size()},
                                {"finish_reason", res.finish_reason},
                                {"backend", eng.device().name()},
                                {"method", cfg.method},
                                {"ttft_ms", res.ttft_ms},
                                {"mean_tbt_ms", tbt},
                                {"kv_bytes_allocated", st.kv_bytes_allocated},
                                {"kv_bytes_peak", st.kv_bytes_peak}};
            std::printf("%s\n", j.dump(2).c_str());
        } else {
            const std::string rest = dec.finish();
            std::fwrite(rest.data(), 1, rest.size(), stdout);
            if (isatty(fileno(stdout))) std::printf("\n");
        }
        if (vm.count("stats"))
            std::fprintf(stderr,
                         "[%s, method %s] prompt %zu tokens, generated %zu (%s); TTFT %.2f ms, mean TBT %.3f ms; "
                         "KV allocated %.2f MiB, peak used %.3f MiB\n",
                         eng.device().name().c_str(), cfg.method.c_str(), req.prompt.size(), res.tokens.size(),
                         res.finish_reason.c_str(), res.ttft_ms, tbt, double(st.kv_bytes_allocated) / 1048576.0,
                         double(st.kv_bytes_peak) / 1048576.0);
        return 0;
    } catch (const std::exception & e) {
        std::fprintf(stderr, "kvcomp generate: %s\n", e.what());
        return 1;
    }
}

}  // namespace kvcomp::cli
