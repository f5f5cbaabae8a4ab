// Tokenizer selection for a model directory. See tokenizer_factory.h.
#include "host/model/tokenizer_factory.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "host/model/bpe_tokenizer.h"

namespace kvcomp::host {

using json = nlohmann::json;

namespace {

bool read_file(const std::string & path, std::string & out) {
    std::error_code ec;
    if (!std::filesystem::is_regular_file(path, ec)) return false;
    std::ifstream in(path, std::ios::binary);
    if (!in) KVCOMP_THROW(status::io_error, path, ": cannot open");
    std::ostringstream ss;
    ss << in.rdbuf();
    if (in.bad()) KVCOMP_THROW(status::io_error, path, ": read failed");
    out = ss.str();
    return true;
}

// Parses an optional JSON file; null json when absent.
json read_optional_json(const std::string & path) {
    std::string text;
    if (!read_file(path, text)) return json();
    try {
        return json::parse(text);
    } catch (const json::exception & e) {
        KVCOMP_THROW(status::invalid_argument, path, ": not valid JSON: ", e.what());
    }
}

// tokenizer_config.json token fields are a string or {"content": "..."}.
std::string token_string(const json & cfg, const char * key, const std::string & source) {
    if (!cfg.is_object() || !cfg.contains(key) || cfg[key].is_null()) return "";
    const json & v = cfg[key];
    if (v.is_string()) return v.get<std::string>();
    if (v.is_object() && v.contains("content") && v["content"].is_string())
        return v["content"].get<std::string>();
    KVCOMP_THROW(status::invalid_argument, source, ": field '", key,
                 "' must be a string or {\"content\": ...}, got ", v.dump());
}

std::vector<int32_t> id_list(const json & cfg, const char * key, const std::string & source) {
    std::vector<int32_t> out;
    if (!cfg.is_object() || !cfg.contains(key) || cfg[key].is_null()) return out;
    const json & v = cfg[key];
    auto bad = [&] {
        KVCOMP_THROW(status::invalid_argument, source, ": field '", key,
                     "' must be an integer or a list of integers, got ", v.dump());
    };
    if (v.is_number_integer())
        out.push_back(v.get<int32_t>());
    else if (v.is_array())
        for (const json & e : v) {
            if (!e.is_number_integer()) bad();
            out.push_back(e.get<int32_t>());
        }
    else
        bad();
    return out;
}

int32_t id_of(const bpe_tokenizer & t, const std::string & token, const std::string & source,
              const char * key) {
    if (token.empty()) return -1;
    const int32_t id = t.token_to_id(token);
    if (id < 0)
        KVCOMP_THROW(status::invalid_argument, source, ": ", key, " '", token,
                     "' is not a token of tokenizer.json");
    return id;
}

}  // namespace

std::unique_ptr<tokenizer> parse_kvcomp_tokenizer(const std::string & json_text, const std::string & source) {
    json j;
    try {
        j = json::parse(json_text);
    } catch (const json::exception & e) {
        KVCOMP_THROW(status::invalid_argument, source, ": not valid JSON: ", e.what());
    }
    if (!j.is_object() || !j.contains("type") || !j["type"].is_string())
        KVCOMP_THROW(status::invalid_argument, source, ": field 'type' is missing or not a string");
    const std::string type = j["type"].get<std::string>();
    if (type != "byte")
        KVCOMP_THROW(status::invalid_argument, source, ": field 'type' = '", type,
                     "' is not supported (only \"byte\")");
    auto id = [&](const char * key, int32_t def) {
        if (!j.contains(key)) return def;
        if (!j[key].is_number_integer())
            KVCOMP_THROW(status::invalid_argument, source, ": field '", key, "' must be an integer, got ",
                         j[key].dump());
        return j[key].get<int32_t>();
    };
    const int32_t bos = id("bos_token_id", 256), eos = id("eos_token_id", 257), pad = id("pad_token_id", 258);
    try {
        return std::make_unique<byte_tokenizer>(bos, eos, pad);
    } catch (const error & e) {
        KVCOMP_THROW(e.code(), source, ": ", e.what());
    }
}

std::unique_ptr<tokenizer> load_tokenizer(const std::string & dir) {
    std::string text;
    const std::string kv_path = dir + "/kvcomp_tokenizer.json";
    if (read_file(kv_path, text)) return parse_kvcomp_tokenizer(text, kv_path);

    const std::string hf_path = dir + "/tokenizer.json";
    if (!read_file(hf_path, text))
        KVCOMP_THROW(status::io_error, dir,
                     ": no tokenizer found (looked for kvcomp_tokenizer.json and tokenizer.json)");
    std::unique_ptr<bpe_tokenizer> t = bpe_tokenizer::from_json(text, hf_path);

    const std::string tc_path = dir + "/tokenizer_config.json", c_path = dir + "/config.json",
                      g_path = dir + "/generation_config.json";
    const json tc = read_optional_json(tc_path), cfg = read_optional_json(c_path),
               gen = read_optional_json(g_path);

    int32_t bos = id_of(*t, token_string(tc, "bos_token", tc_path), tc_path, "bos_token");
    if (bos < 0) {
        const std::vector<int32_t> b = id_list(cfg, "bos_token_id", c_path);
        if (!b.empty())
            bos = b[0];
        else if (!t->template_prefix().empty())
            bos = t->template_prefix()[0];
    }
    std::vector<int32_t> eos;
    auto add_eos = [&](int32_t e) {
        if (e >= 0 && std::find(eos.begin(), eos.end(), e) == eos.end()) eos.push_back(e);
    };
    add_eos(id_of(*t, token_string(tc, "eos_token", tc_path), tc_path, "eos_token"));
    for (int32_t e : id_list(cfg, "eos_token_id", c_path)) add_eos(e);
    for (int32_t e : id_list(gen, "eos_token_id", g_path)) add_eos(e);
    const int32_t pad = id_of(*t, token_string(tc, "pad_token", tc_path), tc_path, "pad_token");
    try {
        t->set_special_ids(bos, eos, pad);
    } catch (const error & e) {
        KVCOMP_THROW(e.code(), dir,
                     ": special token ids from tokenizer_config.json / config.json / "
                     "generation_config.json: ",
                     e.what());
    }
    return t;
}

void check_tokenizer_vocab(const tokenizer & tok, int64_t model_vocab_size) {
    KVCOMP_CHECK_ARG(tok.vocab_size() <= model_vocab_size, "tokenizer (", tok.kind(), ") has ",
                     tok.vocab_size(), " ids but config.json vocab_size is ", model_vocab_size,
                     ": the model cannot embed ids >= ", model_vocab_size);
}

}  // namespace kvcomp::host
