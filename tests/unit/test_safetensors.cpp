// Safetensors reader, shard sets and writer (host/model/safetensors.h): round trips in every float
// dtype, sharded directories, and one test per kind of bad file checking the status and that the
// message names the file / tensor / value.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "core/error.h"
#include "support/expect_error.h"
#include "host/model/safetensors.h"

namespace fs = std::filesystem;
using namespace kvcomp;
using kvcomp::test::expect_error;
using namespace kvcomp::host;

namespace {


class safetensors_test : public ::testing::Test {
  protected:
    void SetUp() override {
        const auto * info = ::testing::UnitTest::GetInstance()->current_test_info();
        dir_ = fs::temp_directory_path() /
               ("kvcomp_st_" + std::to_string(std::chrono::steady_clock::now().time_since_epoch().count()) +
                "_" + info->name());
        fs::remove_all(dir_);
        fs::create_directories(dir_);
    }
    void TearDown() override { fs::remove_all(dir_); }
    std::string path(const std::string & name) const { return (dir_ / name).string(); }

    // A file with a hand-written header and `data_bytes` bytes of data.
    std::string write_raw(const std::string & name, const std::string & header, size_t data_bytes,
                          int64_t length_override = -1) {
        const std::string p = path(name);
        std::ofstream out(p, std::ios::binary);
        const uint64_t n = length_override >= 0 ? uint64_t(length_override) : header.size();
        for (int i = 0; i < 8; ++i) out.put(char(n >> (8 * i)));
        out << header;
        out << std::string(data_bytes, '\0');
        return p;
    }

    fs::path dir_;
};

std::vector<float> ramp(size_t n, float scale) {
    std::vector<float> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = scale * (float(i) - float(n) / 3.0f) + 0.001f * float(i * i % 7);
    return v;
}

}  // namespace

TEST_F(safetensors_test, round_trip_all_float_dtypes_and_metadata) {
    const std::vector<float> a = ramp(6, 0.37f), b = ramp(12, -1.3f), c = ramp(5, 1e3f);
    const std::vector<int32_t> idx = {7, -3, 1 << 30};
    const auto a16 = encode_floats(a, st_dtype::f16);
    const auto b16 = encode_floats(b, st_dtype::bf16);
    const auto c32 = encode_floats(c, st_dtype::f32);
    std::vector<st_write_tensor> ts = {
        {"layer.a", st_dtype::f16, {2, 3}, a16.data(), a16.size()},
        {"layer.b", st_dtype::bf16, {3, 2, 2}, b16.data(), b16.size()},
        {"c", st_dtype::f32, {5}, c32.data(), c32.size()},
        {"idx", st_dtype::i32, {3}, idx.data(), idx.size() * 4},
        {"empty", st_dtype::f32, {0, 4}, nullptr, 0},
    };
    write_safetensors(path("x.safetensors"), ts, {{"format", "pt"}, {"kvcomp.method", "zack"}});
    EXPECT_FALSE(fs::exists(path("x.safetensors.tmp")));

    auto f = safetensors_file::open(path("x.safetensors"));
    EXPECT_EQ(f->metadata().at("kvcomp.method"), "zack");
    EXPECT_EQ(f->names().size(), 5u);
    const st_view va = f->get("layer.a");
    EXPECT_EQ(va.type, st_dtype::f16);
    EXPECT_EQ(va.shape, (std::vector<int64_t>{2, 3}));
    const std::vector<float> ra = to_float_vector(va), rb = to_float_vector(f->get("layer.b")),
                             rc = to_float_vector(f->get("c"));
    for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(ra[i], half_to_float(float_to_half(a[i])));
    for (size_t i = 0; i < b.size(); ++i) EXPECT_EQ(rb[i], bf16_to_float(float_to_bf16(b[i])));
    EXPECT_EQ(rc, c);
    const st_view vi = f->get("idx");
    std::vector<int32_t> ri(3);
    std::memcpy(ri.data(), vi.data, 12);
    EXPECT_EQ(ri, idx);
    EXPECT_EQ(f->get("empty").numel(), 0);
    // The writer keeps every tensor aligned to its element size (data start is 8-aligned).
    for (const std::string & n : f->names()) {
        const st_view v = f->get(n);
        EXPECT_EQ(reinterpret_cast<uintptr_t>(v.data) % st_dtype_size(v.type), 0u) << n;
    }
    dtype kd;
    EXPECT_TRUE(st_dtype_to_kvcomp(st_dtype::bf16, kd));
    EXPECT_EQ(kd, dtype::bf16);
    EXPECT_FALSE(st_dtype_to_kvcomp(st_dtype::f64, kd));
}

TEST_F(safetensors_test, reads_f8_and_f64) {
    // F8_E4M3: 0x38 = 1.0, 0xC4 = -3.0 (e=8,m=4: 1.5*2), 0x7E = 448 (max), 0x01 = 2^-9.
    // F8_E5M2: 0x3C = 1.0, 0xC2 = -3.0. F64: 0.1 -> float(0.1).
    const std::string h = R"({"e4":{"dtype":"F8_E4M3","shape":[4],"data_offsets":[0,4]},)"
                          R"("e5":{"dtype":"F8_E5M2","shape":[2],"data_offsets":[4,6]},)"
                          R"("d":{"dtype":"F64","shape":[1],"data_offsets":[6,14]}})";
    const std::string p = path("f8.safetensors");
    {
        std::ofstream out(p, std::ios::binary);
        const uint64_t n = h.size();
        for (int i = 0; i < 8; ++i) out.put(char(n >> (8 * i)));
        out << h;
        const unsigned char bytes[6] = {0x38, 0xC4, 0x7E, 0x01, 0x3C, 0xC2};
        out.write(reinterpret_cast<const char *>(bytes), 6);
        const double d = 0.1;
        out.write(reinterpret_cast<const char *>(&d), 8);
    }
    auto f = safetensors_file::open(p);
    EXPECT_EQ(to_float_vector(f->get("e4")), (std::vector<float>{1.0f, -3.0f, 448.0f, std::ldexp(1.0f, -9)}));
    EXPECT_EQ(to_float_vector(f->get("e5")), (std::vector<float>{1.0f, -3.0f}));
    EXPECT_EQ(to_float_vector(f->get("d")), (std::vector<float>{0.1f}));
}

TEST_F(safetensors_test, sharded_directory_with_index) {
    const std::vector<float> w0 = ramp(8, 0.5f), w1 = ramp(4, 2.0f), w2 = ramp(6, -0.25f);
    const auto b0 = encode_floats(w0, st_dtype::bf16), b1 = encode_floats(w1, st_dtype::f16),
               b2 = encode_floats(w2, st_dtype::f32);
    write_safetensors(path("model-00001-of-00002.safetensors"),
                      {{"model.embed_tokens.weight", st_dtype::bf16, {2, 4}, b0.data(), b0.size()},
                       {"model.norm.weight", st_dtype::f16, {4}, b1.data(), b1.size()}});
    write_safetensors(path("model-00002-of-00002.safetensors"),
                      {{"lm_head.weight", st_dtype::f32, {3, 2}, b2.data(), b2.size()}});
    std::ofstream(path("model.safetensors.index.json")) << R"({"metadata": {"total_size": 44}, "weight_map": {
        "model.embed_tokens.weight": "model-00001-of-00002.safetensors",
        "model.norm.weight": "model-00001-of-00002.safetensors",
        "lm_head.weight": "model-00002-of-00002.safetensors"}})";

    const tensor_set s = tensor_set::open(dir_.string());
    EXPECT_EQ(s.size(), 3u);
    EXPECT_EQ(s.files().size(), 2u);
    EXPECT_EQ(s.names(),
              (std::vector<std::string>{"lm_head.weight", "model.embed_tokens.weight", "model.norm.weight"}));
    EXPECT_EQ(s.get_floats("lm_head.weight"), w2);
    const std::vector<float> e = s.get_floats("model.embed_tokens.weight");
    for (size_t i = 0; i < w0.size(); ++i) EXPECT_EQ(e[i], bf16_to_float(float_to_bf16(w0[i])));
    EXPECT_EQ(s.get("model.norm.weight").type, st_dtype::f16);

    expect_error([&] { s.get("model.layers.0.mlp.up_proj.weight"); }, status::invalid_argument,
                 {"model.layers.0.mlp.up_proj.weight", dir_.string()});
}

TEST_F(safetensors_test, single_file_directory_and_missing_files) {
    expect_error([&] { tensor_set::open(dir_.string()); }, status::io_error,
                 {"model.safetensors", "model.safetensors.index.json", dir_.string()});
    const auto b = encode_floats({1, 2}, st_dtype::f32);
    write_safetensors(path("model.safetensors"), {{"w", st_dtype::f32, {2}, b.data(), b.size()}});
    const tensor_set s = tensor_set::open(dir_.string());
    EXPECT_EQ(s.get_floats("w"), (std::vector<float>{1, 2}));
    expect_error([&] { safetensors_file::open(path("nope.safetensors")); }, status::io_error,
                 {"nope.safetensors"});
}

TEST_F(safetensors_test, index_errors_name_tensor_and_shard) {
    const auto b = encode_floats({1, 2}, st_dtype::f32);
    write_safetensors(path("a.safetensors"), {{"w", st_dtype::f32, {2}, b.data(), b.size()}});
    write_safetensors(path("b.safetensors"), {{"w", st_dtype::f32, {2}, b.data(), b.size()}});
    // Shard file missing.
    std::ofstream(path("model.safetensors.index.json")) << R"({"weight_map": {"w": "gone.safetensors"}})";
    expect_error([&] { tensor_set::open(dir_.string()); }, status::io_error, {"gone.safetensors"});
    // Map puts a tensor in a shard that lacks it.
    std::ofstream(path("model.safetensors.index.json"))
        << R"({"weight_map": {"w": "a.safetensors", "v": "a.safetensors"}})";
    expect_error([&] { tensor_set::open(dir_.string()); }, status::invalid_argument,
                 {"'v'", "a.safetensors"});
    // Same tensor in two shards.
    std::ofstream(path("model.safetensors.index.json"))
        << R"({"weight_map": {"w": "a.safetensors", "x": "b.safetensors"}})";
    expect_error([&] { tensor_set::open(dir_.string()); }, status::invalid_argument,
                 {"'x'", "b.safetensors"});
    std::ofstream(path("model.safetensors.index.json")) << R"({"weight_map": {"w": "../a.safetensors"}})";
    expect_error([&] { tensor_set::open(dir_.string()); }, status::invalid_argument, {"../a.safetensors"});
    std::ofstream(path("model.safetensors.index.json")) << R"({"weight_map": [)";
    expect_error([&] { tensor_set::open(dir_.string()); }, status::invalid_argument, {"index.json", "JSON"});
}

TEST_F(safetensors_test, truncated_files_are_io_errors) {
    const auto b = encode_floats(ramp(64, 1.0f), st_dtype::f32);
    write_safetensors(path("full.safetensors"), {{"big.weight", st_dtype::f32, {8, 8}, b.data(), b.size()}});
    const auto size = fs::file_size(path("full.safetensors"));
    fs::copy_file(path("full.safetensors"), path("cut.safetensors"));
    fs::resize_file(path("cut.safetensors"), size - 10);
    expect_error([&] { safetensors_file::open(path("cut.safetensors")); }, status::io_error,
                 {"cut.safetensors", "big.weight", "past the data buffer"});
    // Cut inside the header: the header length now runs past the end of the file.
    fs::resize_file(path("cut.safetensors"), 30);
    expect_error([&] { safetensors_file::open(path("cut.safetensors")); }, status::io_error,
                 {"cut.safetensors", "header length"});
    fs::resize_file(path("cut.safetensors"), 5);
    expect_error([&] { safetensors_file::open(path("cut.safetensors")); }, status::io_error, {"5 bytes"});
    // A length field far beyond the file.
    const std::string p = write_raw("huge.safetensors", "{}", 0, int64_t(1) << 40);
    expect_error([&] { safetensors_file::open(p); }, status::io_error, {"1099511627776", "runs past"});
}

TEST_F(safetensors_test, bad_headers_are_invalid_argument) {
    expect_error(
        [&] { safetensors_file::open(write_raw("a", R"({"w": {"dtype": "F32", "shape": [2], )", 8)); },
        status::invalid_argument, {"JSON"});
    expect_error([&] { safetensors_file::open(write_raw("b", R"([1,2])", 0)); }, status::invalid_argument,
                 {"not a safetensors file"});
    expect_error(
        [&] {
            safetensors_file::open(
                write_raw("c", R"({"w":{"dtype":"F17","shape":[2],"data_offsets":[0,8]}})", 8));
        },
        status::invalid_argument, {"'w'", "F17"});
    // Offsets span the wrong number of bytes for shape x dtype.
    expect_error(
        [&] {
            safetensors_file::open(
                write_raw("d", R"({"w":{"dtype":"F16","shape":[3],"data_offsets":[0,8]}})", 8));
        },
        status::invalid_argument, {"'w'", "[0,8]", "needs 6"});
    // Offsets beyond the data buffer (the file is long enough to hold the header only).
    expect_error(
        [&] {
            safetensors_file::open(
                write_raw("e", R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[8,24]}})", 8));
        },
        status::io_error, {"'w'", "[8,24]"});
    // Overlapping tensors.
    expect_error(
        [&] {
            safetensors_file::open(write_raw("f",
                                             R"({"u":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                             R"("v":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                                             12));
        },
        status::invalid_argument, {"overlaps"});
    // A hole, and trailing bytes after the last tensor.
    expect_error(
        [&] {
            safetensors_file::open(
                write_raw("g", R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 8));
        },
        status::invalid_argument, {"hole", "'w'"});
    expect_error(
        [&] {
            safetensors_file::open(
                write_raw("h", R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 8));
        },
        status::invalid_argument, {"trailing"});
    expect_error(
        [&] {
            safetensors_file::open(
                write_raw("i", R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4));
        },
        status::invalid_argument, {"'w'", "shape"});
    expect_error([&] { safetensors_file::open(write_raw("j", R"({"__metadata__":{"k":1}})", 0)); },
                 status::invalid_argument, {"__metadata__", "'k'"});
}

TEST_F(safetensors_test, conversions_and_writer_checks) {
    const std::vector<int32_t> idx = {1, 2};
    write_safetensors(path("i.safetensors"), {{"ids", st_dtype::i32, {2}, idx.data(), 8}});
    auto f = safetensors_file::open(path("i.safetensors"));
    expect_error([&] { to_float_vector(f->get("ids")); }, status::invalid_argument, {"'ids'", "I32"});
    expect_error([&] { f->get("missing"); }, status::invalid_argument, {"'missing'", "i.safetensors"});

    const float one = 1.0f;
    expect_error(
        [&] {
            write_safetensors(path("w"), {{"a", st_dtype::f32, {2}, &one, 4}});
        },
        status::invalid_argument, {"'a'", "needs 8"});
    expect_error(
        [&] {
            write_safetensors(path("w"),
                              {{"a", st_dtype::f32, {1}, &one, 4}, {"a", st_dtype::f32, {1}, &one, 4}});
        },
        status::invalid_argument, {"duplicate", "'a'"});
    expect_error(
        [&] {
            write_safetensors(path("w"), {{"__metadata__", st_dtype::f32, {1}, &one, 4}});
        },
        status::invalid_argument, {"__metadata__"});
    expect_error([&] { write_safetensors((dir_ / "no_such_dir" / "x").string(), {}); }, status::io_error,
                 {"no_such_dir"});
    expect_error([&] { encode_floats({1.0f}, st_dtype::i8); }, status::invalid_argument, {"I8"});
}
