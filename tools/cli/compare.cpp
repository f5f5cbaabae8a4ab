// kvcomp compare: the same prompt on several backends; do greedy tokens agree, how close are
// the logits? The first backend is the reference.
#include <cmath>
#include <cstring>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/commands.h"
#include "cli/engine_options.h"
#include "cli/results_csv.h"
#include "core/registry.h"
#include "host/model/safetensors.h"
#include "host/model/tokenizer_factory.h"

namespace kvcomp::cli {

int run_compare(int argc, char ** argv) {
    po::options_description desc("options");
    add_engine_options(desc);
    desc.add_options()("backends", po::value<std::string>(),
                       "comma-separated backends; the first is the reference (default: every device, cpu first)")(
        "prompt,p", po::value<std::string>()->default_value("In the beginning God created the heaven and the earth."),
        "prompt text")("no-bos", "do not prepend the begin-of-sequence token")("max-tokens,n", po::value<long>()->default_value(32), "greedy tokens to compare")(
        "max-nmse", po::value<double>()->default_value(1e-3), "logits NMSE above which a backend fails")(
        "reference", po::value<std::string>(),
        "safetensors file with the expected outputs (tokens i32 [n], logits f32 [n,vocab], greedy i32 [steps]), e.g.\n"
        "from tools/gpu_host/hf_oracle.py: every backend is compared with it instead of with the first backend")(
        "json", "machine-readable output");
    po::variables_map vm;
    if (auto rc = parse_options(argc, argv, desc,
                                "usage: kvcomp compare --model DIR [--backends cpu,opencl:0,cuda:0] [--prompt TEXT]\n\n"
                                "Runs the prompt on each backend: logits of every prompt position (NMSE against the\n"
                                "first backend) and greedy generation (first position where the tokens differ).\n"
                                "Exit code 1 when a backend's NMSE exceeds --max-nmse or its tokens differ.",
                                vm))
        return *rc;
    try {
        engine::engine_config cfg = engine_config_from(vm);
        std::vector<std::string> names;
        if (vm.count("backends")) {
            names = split_list(vm["backends"].as<std::string>());
        } else {
            for (const auto & d : list_devices()) names.push_back(d.info.name);
        }
        const bool external = vm.count("reference") > 0;
        KVCOMP_CHECK_ARG(names.size() >= (external ? 1u : 2u), "compare needs at least ", external ? 1 : 2,
                         " backends, got ", names.size());
        std::vector<int32_t> prompt, ref_tokens;
        std::vector<float> ref_logits;
        long n_new = vm["max-tokens"].as<long>();
        if (external) {
            // The reference run (e.g. Hugging Face transformers) fixes the prompt and the step count.
            const auto ref = host::tensor_set::open(vm["reference"].as<std::string>());
            auto ints = [&](const char * name) {
                const auto v = ref.get(name);
                KVCOMP_CHECK_ARG(v.type == host::st_dtype::i32, "--reference: tensor ", name, " must be I32");
                std::vector<int32_t> out(size_t(v.numel()));
                std::memcpy(out.data(), v.data, out.size() * 4);
                return out;
            };
            prompt = ints("tokens");
            ref_tokens = ints("greedy");
            ref_logits = ref.get_floats("logits");
            n_new = long(ref_tokens.size());
        } else {
            host::encode_options eo;
            eo.add_special = vm.count("no-bos") == 0;
            prompt = host::load_tokenizer(cfg.model_dir)->encode(vm["prompt"].as<std::string>(), eo);
        }
        const double max_nmse = vm["max-nmse"].as<double>();
        nlohmann::json rows = nlohmann::json::array();
        bool all_ok = true;
        for (size_t i = 0; i < names.size(); ++i) {
            cfg.backend = names[i];
            engine::engine eng(cfg);
            const auto logits = eng.prompt_logits(prompt);
            engine::generation_request req;
            req.prompt = prompt, req.max_new_tokens = n_new, req.stop_at_eos = false;
            const int64_t id = eng.submit(req);
            eng.run();
            const auto & tokens = eng.result(id).tokens;
            if (i == 0 && !external) {
                ref_logits = logits, ref_tokens = tokens;
            }
            KVCOMP_CHECK_ARG(logits.size() == ref_logits.size(), "reference logits have ", ref_logits.size(),
                             " values, the model gives ", logits.size());
            double num = 0, den = 0;
            for (size_t j = 0; j < logits.size(); ++j) {
                num += (double(logits[j]) - ref_logits[j]) * (double(logits[j]) - ref_logits[j]);
                den += double(ref_logits[j]) * ref_logits[j];
            }
            const double nmse = den > 0 ? num / den : num;
            long diverge = -1;
            for (size_t j = 0; j < tokens.size(); ++j)
                if (j >= ref_tokens.size() || tokens[j] != ref_tokens[j]) {
                    diverge = long(j);
                    break;
                }
            const bool is_ref = i == 0 && !external;
            const bool ok = is_ref || (nmse <= max_nmse && diverge < 0 && std::isfinite(nmse));
            all_ok = all_ok && ok;
            rows.push_back({{"backend", eng.device().name()},
                            {"device", eng.device().info().device_name},
                            {"logits_nmse", nmse},
                            {"tokens_agree", diverge < 0},
                            {"first_difference", diverge},
                            {"ok", ok}});
            if (!vm.count("json"))
                std::printf("%-10s %-30.30s logits NMSE %.3g  greedy %ld tokens %s%s\n", eng.device().name().c_str(),
                            eng.device().info().device_name.c_str(), nmse, n_new,
                            is_ref ? "(reference)" : diverge < 0 ? "agree" : "DIFFER at ",
                            is_ref || diverge < 0 ? "" : std::to_string(diverge).c_str());
        }
        if (vm.count("json"))
            std::printf("%s\n", nlohmann::json({{"prompt_tokens", prompt.size()}, {"results", rows}}).dump(2).c_str());
        return all_ok ? 0 : 1;
    } catch (const std::exception & e) {
        std::fprintf(stderr, "kvcomp compare: %s\n", e.what());
        return 1;
    }
}

}  // namespace kvcomp::cli
