// Low-rank calibration files (host/lowrank/calibration_file.h) and the model hash
// (host/lowrank/model_fingerprint.h): full and truncated round trips, and one test per rejection,
// each checking that the message names the file and the offending field or tensor.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "host/lowrank/calibration_file.h"
#include "host/lowrank/model_fingerprint.h"
#include "host/lowrank/svd_basis.h"
#include "host/model/safetensors.h"
#include "support/expect_error.h"

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace kvcomp;
using namespace kvcomp::host;
using namespace kvcomp::host::lowrank;
using kvcomp::test::expect_error;

namespace {

// 2 layers x 2 KV heads, head_dim 8: bases from the SVD of random data, ranks from r = 0.2.
calibration make_calibration(bool truncated) {
    const int64_t layers = 2, heads = 2, d = 8;
    calibration c;
    c.method = lowrank_method::fdc;
    c.model_hash = "fnv1a64:0123456789abcdef";
    c.removal_rate = 0.2;
    c.rank_multiple = 2;
    c.truncated = truncated;
    std::mt19937 rng(5);
    std::normal_distribution<double> g;
    kv_spectra s;
    s.num_layers = layers;
    s.num_kv_heads = heads;
    s.head_dim = d;
    std::vector<svd_basis> kb, vb;
    for (int64_t i = 0; i < layers * heads * 2; ++i) {
        std::vector<double> x(size_t(40 * d));
        for (size_t t = 0; t < x.size(); ++t) x[t] = g(rng) / double(1 + t % size_t(d));
        const svd_basis b = stacked_svd({mat_view::of(x, 40, d)}, "calib");
        (i % 2 ? vb : kb).push_back(b);
        (i % 2 ? s.sigma_v : s.sigma_k).push_back(b.sigma);
    }
    c.ranks = ranks_for_removal_rate(s, c.removal_rate, c.rank_multiple);
    for (int part = 0; part < 2; ++part) {
        for (size_t i = 0; i < kb.size(); ++i) {
            const svd_basis & b = part == 0 ? kb[i] : vb[i];
            head_basis h;
            h.cols = truncated ? (part == 0 ? c.ranks.k[i] : c.ranks.v[i]) : d;
            for (int64_t r = 0; r < d; ++r)
                for (int64_t col = 0; col < h.cols; ++col) h.basis.push_back(b.at(r, col));
            // Round to what the file stores so round trips compare exactly.
            for (double & v : h.basis) v = double(float(v));
            for (double sv : b.sigma) h.sigma.push_back(double(float(sv)));
            (part == 0 ? c.k : c.v).push_back(h);
        }
    }
    return c;
}

class lowrank_calibration_file : public ::testing::Test {
  protected:
    void SetUp() override {
        const auto * info = ::testing::UnitTest::GetInstance()->current_test_info();
        dir_ =
            fs::temp_directory_path() /
            ("kvcomp_lowrank_" + std::to_string(std::chrono::steady_clock::now().time_since_epoch().count()) +
             "_" + info->name());
        fs::create_directories(dir_);
        path_ = (dir_ / "calib.safetensors").string();
    }
    void TearDown() override { fs::remove_all(dir_); }

    // Rewrites the file at path_ after letting the test edit its header JSON and its tensors
    // (name -> (shape, values)).
    using tensor_map = std::map<std::string, std::pair<std::vector<int64_t>, std::vector<float>>>;
    void rewrite(const std::function<void(json &)> & edit_header,
                 const std::function<void(tensor_map &)> & edit_tensors = {}) {
        tensor_map tensors;
        std::map<std::string, std::string> meta;
        {
            const auto f = safetensors_file::open(path_);
            meta = f->metadata();
            for (const std::string & n : f->names()) {
                const st_view v = f->get(n);
                tensors[n] = {v.shape, to_float_vector(v)};
            }
        }
        json h = json::parse(meta.at("kvcomp_lowrank"));
        edit_header(h);
        meta["kvcomp_lowrank"] = h.dump();
        if (edit_tensors) edit_tensors(tensors);
        std::vector<std::vector<uint8_t>> bytes;
        std::vector<st_write_tensor> out;
        bytes.reserve(tensors.size());
        for (const auto & [name, t] : tensors) {
            bytes.push_back(encode_floats(t.second, st_dtype::f32));
            out.push_back({name, st_dtype::f32, t.first, bytes.back().data(), bytes.back().size()});
        }
        write_safetensors(path_, out, meta);
    }

    fs::path dir_;
    std::string path_;
};

void expect_same(const calibration & a, const calibration & b) {
    EXPECT_EQ(a.method, b.method);
    EXPECT_EQ(a.model_hash, b.model_hash);
    EXPECT_EQ(a.removal_rate, b.removal_rate);
    EXPECT_EQ(a.rank_multiple, b.rank_multiple);
    EXPECT_EQ(a.truncated, b.truncated);
    EXPECT_EQ(a.ranks.num_layers, b.ranks.num_layers);
    EXPECT_EQ(a.ranks.num_kv_heads, b.ranks.num_kv_heads);
    EXPECT_EQ(a.ranks.head_dim, b.ranks.head_dim);
    EXPECT_EQ(a.ranks.k, b.ranks.k);
    EXPECT_EQ(a.ranks.v, b.ranks.v);
    ASSERT_EQ(a.k.size(), b.k.size());
    for (size_t i = 0; i < a.k.size(); ++i) {
        EXPECT_EQ(a.k[i].cols, b.k[i].cols);
        EXPECT_EQ(a.k[i].basis, b.k[i].basis);
        EXPECT_EQ(a.k[i].sigma, b.k[i].sigma);
        EXPECT_EQ(a.v[i].cols, b.v[i].cols);
        EXPECT_EQ(a.v[i].basis, b.v[i].basis);
        EXPECT_EQ(a.v[i].sigma, b.v[i].sigma);
    }
}

TEST_F(lowrank_calibration_file, full_round_trip) {
    const calibration c = make_calibration(false);
    write_calibration(path_, c);
    calibration_expectation e;
    e.method = lowrank_method::fdc;
    e.model_hash = c.model_hash;
    e.num_layers = 2;
    e.num_kv_heads = 2;
    e.head_dim = 8;
    const calibration back = read_calibration(path_, e);
    expect_same(c, back);
    EXPECT_EQ(back.kvcomp_version, kvcomp_library_version());
    EXPECT_FALSE(back.kvcomp_version.empty());
    // The spectra re-select the same ranks.
    EXPECT_EQ(ranks_for_removal_rate(back.spectra(), back.removal_rate, back.rank_multiple).k, c.ranks.k);
}

TEST_F(lowrank_calibration_file, truncated_round_trip_stores_only_rank_columns) {
    const calibration c = make_calibration(true);
    write_calibration(path_, c);
    const calibration back = read_calibration(path_);
    expect_same(c, back);
    const auto f = safetensors_file::open(path_);
    EXPECT_EQ(f->get("layers.1.kv_heads.0.k_basis").shape, (std::vector<int64_t>{8, c.ranks.k[2]}));
    EXPECT_EQ(f->names().size(), 16u);
}

TEST_F(lowrank_calibration_file, rejects_wrong_method_hash_and_model_shape) {
    write_calibration(path_, make_calibration(false));
    calibration_expectation e;
    e.method = lowrank_method::zack;
    expect_error([&] { read_calibration(path_, e); }, status::invalid_argument,
                 {path_, "'method' is 'fdc', expected 'zack'"});
    e = {};
    e.model_hash = "fnv1a64:ffffffffffffffff";
    expect_error([&] { read_calibration(path_, e); }, status::invalid_argument,
                 {"'model_hash' is 'fnv1a64:0123456789abcdef'", "fnv1a64:ffffffffffffffff"});
    e = {};
    e.num_kv_heads = 4;
    expect_error([&] { read_calibration(path_, e); }, status::invalid_argument,
                 {"'num_kv_heads' is 2, the model has 4"});
    e = {};
    e.head_dim = 128;
    expect_error([&] { read_calibration(path_, e); }, status::invalid_argument,
                 {"'head_dim' is 8, the model has 128"});
}

TEST_F(lowrank_calibration_file, rejects_bad_header_fields) {
    const calibration c = make_calibration(false);
    const auto expect_header_error = [&](const std::function<void(json &)> & edit,
                                         const std::vector<std::string> & needles) {
        write_calibration(path_, c);
        rewrite(edit);
        std::vector<std::string> n = needles;
        n.push_back(path_);
        expect_error([&] { read_calibration(path_); }, status::invalid_argument, n);
    };
    expect_header_error([](json & h) { h["method"] = "gear"; }, {"'method' is 'gear'", "zack, fdc or palu"});
    expect_header_error([](json & h) { h.erase("rank_multiple"); }, {"lacks field 'rank_multiple'"});
    expect_header_error([](json & h) { h["rank_multiple"] = "16"; },
                        {"'rank_multiple' is \"16\"", "integer"});
    expect_header_error([](json & h) { h["rank_multiple"] = 0; }, {"'rank_multiple' is 0"});
    expect_header_error([](json & h) { h["removal_rate"] = 1.5; }, {"'removal_rate' is 1.5"});
    expect_header_error([](json & h) { h["format_version"] = 2; }, {"'format_version' is 2"});
    expect_header_error([](json & h) { h["truncated"] = 1; }, {"'truncated' is 1", "true or false"});
    expect_header_error([](json & h) { h["ranks"]["k"][1][0] = 9; },
                        {"'ranks.k[1][0]' is 9", "head_dim = 8"});
    expect_header_error([](json & h) { h["ranks"]["v"][0][1] = 0; }, {"'ranks.v[0][1]' is 0"});
    expect_header_error([](json & h) { h["ranks"]["v"][1] = json::array({2}); },
                        {"'ranks.v[1]'", "num_kv_heads = 2"});
    expect_header_error([](json & h) { h["ranks"].erase("k"); }, {"lacks field 'ranks.k'"});
    expect_header_error([](json & h) { h["num_layers"] = 3; },
                        {"'ranks.k' must be a list of num_layers = 3"});
}

TEST_F(lowrank_calibration_file, rejects_missing_extra_and_misshapen_tensors) {
    const calibration c = make_calibration(false);
    write_calibration(path_, c);
    rewrite([](json &) {}, [](tensor_map & t) { t.erase("layers.1.kv_heads.0.v_basis"); });
    expect_error([&] { read_calibration(path_); }, status::invalid_argument,
                 {path_, "tensor 'layers.1.kv_heads.0.v_basis' missing"});

    write_calibration(path_, c);
    rewrite([](json &) {}, [](tensor_map & t) { t["layers.0.kv_heads.7.k_basis"] = {{1}, {1.0f}}; });
    expect_error([&] { read_calibration(path_); }, status::invalid_argument,
                 {"unexpected tensor 'layers.0.kv_heads.7.k_basis'"});

    write_calibration(path_, c);
    rewrite([](json &) {},
            [](tensor_map & t) {
                auto & b = t["layers.0.kv_heads.1.k_basis"];
                b.first = {8, 7};
                b.second.resize(56);
            });
    expect_error([&] { read_calibration(path_); }, status::invalid_argument,
                 {"'layers.0.kv_heads.1.k_basis' has shape [8,7], expected [8,8]"});

    // Truncated file whose header rank disagrees with the stored columns.
    const calibration t = make_calibration(true);
    write_calibration(path_, t);
    const int64_t other = t.ranks.v[3] == 8 ? 6 : 8;
    rewrite([&](json & h) { h["ranks"]["v"][1][1] = other; });
    expect_error([&] { read_calibration(path_); }, status::invalid_argument,
                 {"'layers.1.kv_heads.1.v_basis' has shape", "expected [8," + std::to_string(other) + "]"});

    write_calibration(path_, c);
    rewrite([](json &) {},
            [](tensor_map & m) {
                std::swap(m["layers.1.kv_heads.1.k_sigma"].second[0],
                          m["layers.1.kv_heads.1.k_sigma"].second[1]);
            });
    expect_error([&] { read_calibration(path_); }, status::invalid_argument,
                 {path_, "layer 1 kv_head 1 K sigma[1]", "non-increasing"});
}

TEST_F(lowrank_calibration_file, rejects_files_that_are_not_calibrations) {
    const std::vector<float> x = {1.0f};
    const auto b = encode_floats(x, st_dtype::f32);
    write_safetensors(path_, {{"w", st_dtype::f32, {1}, b.data(), b.size()}});
    expect_error([&] { read_calibration(path_); }, status::invalid_argument,
                 {path_, "lacks 'kvcomp_lowrank'"});
    write_safetensors(path_, {{"w", st_dtype::f32, {1}, b.data(), b.size()}},
                      {{"kvcomp_lowrank", "{not json"}});
    expect_error([&] { read_calibration(path_); }, status::invalid_argument, {"header is not valid JSON"});
    expect_error([&] { read_calibration((dir_ / "absent.safetensors").string()); }, status::io_error,
                 {"absent.safetensors"});
}

TEST_F(lowrank_calibration_file, writer_validates_first) {
    calibration c = make_calibration(false);
    c.ranks.k[1] = 0;
    expect_error([&] { write_calibration(path_, c); }, status::invalid_argument,
                 {"layer 0 kv_head 1 K: rank 0"});
    c = make_calibration(false);
    c.v[2].cols = 4;
    expect_error([&] { write_calibration(path_, c); }, status::invalid_argument,
                 {"layer 1 kv_head 0 V: basis has 4 columns"});
    EXPECT_FALSE(fs::exists(path_));
}

TEST(lowrank_model_hash, stable_under_formatting_and_order_sensitive_to_content) {
    const std::vector<tensor_shape> t = {{"a.weight", {4, 8}}, {"b.weight", {8}}};
    const std::vector<tensor_shape> t_swapped = {t[1], t[0]};
    const std::string h = model_hash(R"({"hidden_size": 8, "num_hidden_layers": 2})", t);
    EXPECT_EQ(h.rfind("fnv1a64:", 0), 0u);
    EXPECT_EQ(h.size(), 8u + 16u);
    EXPECT_EQ(h, model_hash("{\n  \"num_hidden_layers\":2,\n  \"hidden_size\":8\n}\n", t_swapped));
    EXPECT_NE(h, model_hash(R"({"hidden_size": 8, "num_hidden_layers": 3})", t));
    EXPECT_NE(h, model_hash(R"({"hidden_size": 8, "num_hidden_layers": 2})", {{"a.weight", {8, 4}}, t[1]}));
    EXPECT_NE(h, model_hash(R"({"hidden_size": 8, "num_hidden_layers": 2})", {t[0]}));
    expect_error([] { model_hash("{", {}, "cfg.json"); }, status::invalid_argument,
                 {"cfg.json", "not valid JSON"});
}

TEST(lowrank_model_hash, of_the_default_model_directory) {
    const std::string dir = std::string(KVCOMP_SOURCE_DIR) + "/tools/model/default";
    const std::string h = model_hash_of_dir(dir);
    EXPECT_EQ(h, model_hash_of_dir(dir));
    EXPECT_EQ(h.rfind("fnv1a64:", 0), 0u);
    expect_error([] { model_hash_of_dir("/nonexistent_kvcomp_model"); }, status::io_error,
                 {"/nonexistent_kvcomp_model/config.json"});
}

}  // namespace
