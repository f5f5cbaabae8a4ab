#include "cli/engine_options.h"

#include "engine/kv_method.h"

namespace kvcomp::cli {

void add_engine_options(po::options_description & desc) {
    std::string methods;
    for (const auto & m : engine::kv_method_names()) methods += (methods.empty() ? "" : ", ") + m;
    desc.add_options()("model,m", po::value<std::string>(), "model directory (config.json + *.safetensors + tokenizer)")(
        "backend,b", po::value<std::string>()->default_value("default"),
        "cpu, opencl[:N], cuda[:N] or default ($KVCOMP_BACKEND, else the best available; see kvcomp info)")(
        "method", po::value<std::string>()->default_value("none"), ("KV cache method: " + methods + " (kvcomp methods describes them)").c_str())(
        "method-opt", po::value<std::vector<std::string>>()->composing(),
        "method option KEY=VALUE (repeatable; kvcomp methods NAME lists a method's options and defaults)")(
        "weights", po::value<std::string>()->default_value("f16"),
        "storage of the linear layers' weights on the device: f16 or f32")(
        "activations", po::value<std::string>()->default_value("f16"),
        "inputs of the weight matmuls with f16 weights: f16 (rounded, one fp16 GEMM, as fp16 inference in "
        "transformers) or f32 (exact mixed products; on CUDA the weights are read twice)")(
        "page-size", po::value<int>()->default_value(16), "KV page size in tokens")(
        "kv-pages", po::value<long>()->default_value(0), "KV pages per layer (0: max-batch full contexts)")(
        "max-batch", po::value<long>()->default_value(16), "requests decoded together")(
        "max-context", po::value<long>()->default_value(0),
        "tokens per request, prompt + generated (0: the model's max_position_embeddings)");
}

engine::engine_config engine_config_from(const po::variables_map & vm) {
    engine::engine_config c;
    KVCOMP_CHECK_ARG(vm.count("model"), "--model DIR is required");
    c.model_dir = vm["model"].as<std::string>();
    c.backend = vm["backend"].as<std::string>();
    c.method = vm["method"].as<std::string>();
    if (vm.count("method-opt"))
        for (const auto & kv : vm["method-opt"].as<std::vector<std::string>>()) {
            const auto eq = kv.find('=');
            KVCOMP_CHECK_ARG(eq != std::string::npos && eq > 0, "--method-opt '", kv, "': expected KEY=VALUE");
            c.method_opts[kv.substr(0, eq)] = kv.substr(eq + 1);
        }
    const std::string w = vm["weights"].as<std::string>();
    KVCOMP_CHECK_ARG(w == "f16" || w == "f32", "--weights must be f16 or f32, got '", w, "'");
    c.matrix_type = w == "f16" ? dtype::f16 : dtype::f32;
    const std::string a = vm["activations"].as<std::string>();
    KVCOMP_CHECK_ARG(a == "f16" || a == "f32", "--activations must be f16 or f32, got '", a, "'");
    c.f16_activations = a == "f16";
    c.page_size = vm["page-size"].as<int>();
    c.kv_pages = vm["kv-pages"].as<long>();
    c.max_batch = vm["max-batch"].as<long>();
    c.max_context = vm["max-context"].as<long>();
    KVCOMP_CHECK_ARG(c.page_size > 0, "--page-size must be positive, got ", c.page_size);
    KVCOMP_CHECK_ARG(c.kv_pages >= 0, "--kv-pages must be >= 0, got ", c.kv_pages);
    KVCOMP_CHECK_ARG(c.max_batch > 0, "--max-batch must be positive, got ", c.max_batch);
    KVCOMP_CHECK_ARG(c.max_context >= 0, "--max-context must be >= 0, got ", c.max_context);
    return c;
}

}  // namespace kvcomp::cli
