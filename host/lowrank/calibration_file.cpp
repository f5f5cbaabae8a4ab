// Low-rank calibration file: writer and validating reader. See calibration_file.h for the layout.
#include "host/lowrank/calibration_file.h"

#include <cmath>
#include <set>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "host/model/safetensors.h"

#ifndef KVCOMP_VERSION_STRING
#error "KVCOMP_VERSION_STRING must be defined by host/CMakeLists.txt"
#endif

namespace kvcomp::host::lowrank {

using json = nlohmann::json;

namespace {

constexpr const char * k_meta_key = "kvcomp_lowrank";
constexpr int64_t k_format_version = 1;

std::string tensor_name(int64_t layer, int64_t head, const char * what) {
    return concat("layers.", layer, ".kv_heads.", head, ".", what);
}

json ranks_to_json(const std::vector<int64_t> & r, int64_t layers, int64_t heads) {
    json out = json::array();
    for (int64_t l = 0; l < layers; ++l) {
        json row = json::array();
        for (int64_t h = 0; h < heads; ++h) row.push_back(r[size_t(l * heads + h)]);
        out.push_back(row);
    }
    return out;
}

// Header field access with messages that name the file and the field.
class header_reader {
  public:
    header_reader(const json & j, const std::string & file) : j_(j), file_(file) {}

    const json & field(const std::string & name) const {
        const auto it = j_.find(name);
        KVCOMP_CHECK_ARG(it != j_.end(), file_, ": calibration header lacks field '", name, "'");
        return *it;
    }
    int64_t integer(const std::string & name) const {
        const json & v = field(name);
        KVCOMP_CHECK_ARG(v.is_number_integer(), file_, ": calibration header field '", name, "' is ",
                         v.dump(), ", expected an integer");
        return v.get<int64_t>();
    }
    double number(const std::string & name) const {
        const json & v = field(name);
        KVCOMP_CHECK_ARG(v.is_number(), file_, ": calibration header field '", name, "' is ", v.dump(),
                         ", expected a number");
        return v.get<double>();
    }
    std::string string(const std::string & name) const {
        const json & v = field(name);
        KVCOMP_CHECK_ARG(v.is_string(), file_, ": calibration header field '", name, "' is ", v.dump(),
                         ", expected a string");
        return v.get<std::string>();
    }
    bool boolean(const std::string & name) const {
        const json & v = field(name);
        KVCOMP_CHECK_ARG(v.is_boolean(), file_, ": calibration header field '", name, "' is ", v.dump(),
                         ", expected true or false");
        return v.get<bool>();
    }
    // ranks.<part>: num_layers lists of num_kv_heads integers.
    std::vector<int64_t> ranks(const json & ranks, const char * part, int64_t layers, int64_t heads) const {
        const std::string name = concat("ranks.", part);
        const auto it = ranks.find(part);
        KVCOMP_CHECK_ARG(it != ranks.end(), file_, ": calibration header lacks field '", name, "'");
        KVCOMP_CHECK_ARG(it->is_array() && int64_t(it->size()) == layers, file_,
                         ": calibration header field '", name, "' must be a list of num_layers = ", layers,
                         " lists, got ", it->dump().substr(0, 80));
        std::vector<int64_t> out;
        for (int64_t l = 0; l < layers; ++l) {
            const json & row = (*it)[size_t(l)];
            KVCOMP_CHECK_ARG(row.is_array() && int64_t(row.size()) == heads, file_,
                             ": calibration header field '", name, "[", l,
                             "]' must list num_kv_heads = ", heads, " ranks, got ", row.dump());
            for (int64_t h = 0; h < heads; ++h) {
                const json & x = row[size_t(h)];
                KVCOMP_CHECK_ARG(x.is_number_integer(), file_, ": calibration header field '", name, "[", l,
                                 "][", h, "]' is ", x.dump(), ", expected an integer");
                out.push_back(x.get<int64_t>());
            }
        }
        return out;
    }

  private:
    const json & j_;
    const std::string & file_;
};

// Reads one tensor of the expected shape into doubles.
std::vector<double> read_tensor(const safetensors_file & f, const std::string & name,
                                const std::vector<int64_t> & shape) {
    KVCOMP_CHECK_ARG(f.contains(name), f.path(), ": calibration tensor '", name, "' missing");
    const st_view v = f.get(name);
    KVCOMP_CHECK_ARG(st_dtype_is_float(v.type), f.path(), ": calibration tensor '", name, "' has dtype ",
                     st_dtype_name(v.type), ", expected a float type");
    KVCOMP_CHECK_ARG(v.shape == shape, f.path(), ": calibration tensor '", name, "' has shape ",
                     shape_to_string(v.shape), ", expected ", shape_to_string(shape));
    const std::vector<float> x = to_float_vector(v);
    return std::vector<double>(x.begin(), x.end());
}

}  // namespace

const char * lowrank_method_name(lowrank_method m) {
    switch (m) {
        case lowrank_method::zack:
            return "zack";
        case lowrank_method::fdc:
            return "fdc";
        case lowrank_method::palu:
            return "palu";
    }
    return "?";
}

bool lowrank_method_from_name(const std::string & name, lowrank_method & out) {
    for (lowrank_method m : {lowrank_method::zack, lowrank_method::fdc, lowrank_method::palu}) {
        if (name == lowrank_method_name(m)) {
            out = m;
            return true;
        }
    }
    return false;
}

const char * kvcomp_library_version() {
    return KVCOMP_VERSION_STRING;
}

void calibration::validate() const {
    const int64_t layers = ranks.num_layers, heads = ranks.num_kv_heads, d = ranks.head_dim;
    KVCOMP_CHECK_ARG(layers > 0 && heads > 0 && d > 0, "calibration: num_layers (", layers,
                     "), num_kv_heads (", heads, ") and head_dim (", d, ") must be > 0");
    KVCOMP_CHECK_ARG(rank_multiple >= 1, "calibration: rank_multiple ", rank_multiple, " must be >= 1");
    KVCOMP_CHECK_ARG(removal_rate >= 0.0 && removal_rate <= 1.0, "calibration: removal_rate ", removal_rate,
                     " must be in [0, 1]");
    const size_t n = size_t(layers * heads);
    KVCOMP_CHECK_ARG(ranks.k.size() == n && ranks.v.size() == n, "calibration: ranks has ", ranks.k.size(),
                     " K and ", ranks.v.size(), " V entries, expected num_layers * num_kv_heads = ", n);
    KVCOMP_CHECK_ARG(k.size() == n && v.size() == n, "calibration: ", k.size(), " K and ", v.size(),
                     " V bases, expected num_layers * num_kv_heads = ", n);
    for (size_t i = 0; i < n; ++i) {
        for (int part = 0; part < 2; ++part) {
            const int64_t rank = part == 0 ? ranks.k[i] : ranks.v[i];
            const head_basis & b = part == 0 ? k[i] : v[i];
            const std::string where = concat("calibration layer ", int64_t(i) / heads, " kv_head ",
                                             int64_t(i) % heads, part == 0 ? " K" : " V");
            KVCOMP_CHECK_ARG(rank >= 1 && rank <= d, where, ": rank ", rank, " outside [1, head_dim = ", d,
                             "]");
            const int64_t cols = truncated ? rank : d;
            KVCOMP_CHECK_ARG(b.cols == cols, where, ": basis has ", b.cols, " columns, expected ", cols,
                             truncated ? " (truncated file: the rank)" : " (full file: head_dim)");
            KVCOMP_CHECK_ARG(int64_t(b.basis.size()) == d * cols, where, ": basis holds ", b.basis.size(),
                             " values, expected head_dim * cols = ", d * cols);
            for (double x : b.basis)
                KVCOMP_CHECK_ARG(std::isfinite(x), where, ": basis has a non-finite value");
        }
    }
    spectra().validate();  // sigma lengths, order, sign, finiteness
}

kv_spectra calibration::spectra() const {
    kv_spectra s;
    s.num_layers = ranks.num_layers;
    s.num_kv_heads = ranks.num_kv_heads;
    s.head_dim = ranks.head_dim;
    for (const head_basis & b : k) s.sigma_k.push_back(b.sigma);
    for (const head_basis & b : v) s.sigma_v.push_back(b.sigma);
    return s;
}

void write_calibration(const std::string & path, const calibration & c) {
    c.validate();
    const int64_t layers = c.ranks.num_layers, heads = c.ranks.num_kv_heads, d = c.ranks.head_dim;
    json h;
    h["format_version"] = k_format_version;
    h["method"] = lowrank_method_name(c.method);
    h["model_hash"] = c.model_hash;
    h["kvcomp_version"] = kvcomp_library_version();
    h["removal_rate"] = c.removal_rate;
    h["rank_multiple"] = c.rank_multiple;
    h["num_layers"] = layers;
    h["num_kv_heads"] = heads;
    h["head_dim"] = d;
    h["truncated"] = c.truncated;
    h["ranks"] = {{"k", ranks_to_json(c.ranks.k, layers, heads)},
                  {"v", ranks_to_json(c.ranks.v, layers, heads)}};

    // Encoded bytes must outlive the write call: keep them all, then point the tensors at them.
    std::vector<std::vector<uint8_t>> bytes;
    std::vector<st_write_tensor> tensors;
    bytes.reserve(size_t(4 * layers * heads));
    const auto add = [&](const std::string & name, const std::vector<double> & x,
                         std::vector<int64_t> shape) {
        bytes.push_back(encode_floats(std::vector<float>(x.begin(), x.end()), st_dtype::f32));
        tensors.push_back({name, st_dtype::f32, std::move(shape), bytes.back().data(), bytes.back().size()});
    };
    for (int64_t l = 0; l < layers; ++l) {
        for (int64_t hd = 0; hd < heads; ++hd) {
            const size_t i = size_t(l * heads + hd);
            add(tensor_name(l, hd, "k_basis"), c.k[i].basis, {d, c.k[i].cols});
            add(tensor_name(l, hd, "k_sigma"), c.k[i].sigma, {d});
            add(tensor_name(l, hd, "v_basis"), c.v[i].basis, {d, c.v[i].cols});
            add(tensor_name(l, hd, "v_sigma"), c.v[i].sigma, {d});
        }
    }
    write_safetensors(path, tensors, {{k_meta_key, h.dump()}});
}

calibration read_calibration(const std::string & path, const calibration_expectation & expect) {
    const auto file = safetensors_file::open(path);
    const std::string & p = file->path();
    const auto meta = file->metadata().find(k_meta_key);
    KVCOMP_CHECK_ARG(meta != file->metadata().end(), p,
                     ": not a kvcomp low-rank calibration file (__metadata__ lacks '", k_meta_key, "')");
    json h;
    try {
        h = json::parse(meta->second);
    } catch (const json::exception & e) {
        KVCOMP_THROW(status::invalid_argument, p, ": calibration header is not valid JSON: ", e.what());
    }
    KVCOMP_CHECK_ARG(h.is_object(), p, ": calibration header is not a JSON object");
    const header_reader r(h, p);

    const int64_t version = r.integer("format_version");
    KVCOMP_CHECK_ARG(version == k_format_version, p, ": calibration header field 'format_version' is ",
                     version, "; this kvcomp reads version ", k_format_version);
    calibration c;
    const std::string method = r.string("method");
    KVCOMP_CHECK_ARG(lowrank_method_from_name(method, c.method), p,
                     ": calibration header field 'method' is '", method, "', expected zack, fdc or palu");
    KVCOMP_CHECK_ARG(!expect.method || *expect.method == c.method, p,
                     ": calibration header field 'method' is '", method, "', expected '",
                     lowrank_method_name(expect.method.value_or(c.method)), "'");
    c.model_hash = r.string("model_hash");
    KVCOMP_CHECK_ARG(expect.model_hash.empty() || expect.model_hash == c.model_hash, p,
                     ": calibration header field 'model_hash' is '", c.model_hash, "' but the model's is '",
                     expect.model_hash, "' (the file was made for a different checkpoint or config)");
    c.kvcomp_version = r.string("kvcomp_version");
    c.removal_rate = r.number("removal_rate");
    c.rank_multiple = r.integer("rank_multiple");
    c.truncated = r.boolean("truncated");
    const int64_t layers = r.integer("num_layers"), heads = r.integer("num_kv_heads"),
                  d = r.integer("head_dim");
    const auto check_dim = [&](const char * field, int64_t got, int64_t want) {
        KVCOMP_CHECK_ARG(got > 0, p, ": calibration header field '", field, "' is ", got, ", must be > 0");
        KVCOMP_CHECK_ARG(want == 0 || got == want, p, ": calibration header field '", field, "' is ", got,
                         ", the model has ", want);
    };
    check_dim("num_layers", layers, expect.num_layers);
    check_dim("num_kv_heads", heads, expect.num_kv_heads);
    check_dim("head_dim", d, expect.head_dim);
    KVCOMP_CHECK_ARG(c.rank_multiple >= 1, p, ": calibration header field 'rank_multiple' is ",
                     c.rank_multiple, ", must be >= 1");
    KVCOMP_CHECK_ARG(c.removal_rate >= 0.0 && c.removal_rate <= 1.0, p,
                     ": calibration header field 'removal_rate' is ", c.removal_rate, ", must be in [0, 1]");

    const json & ranks = r.field("ranks");
    KVCOMP_CHECK_ARG(ranks.is_object(), p,
                     ": calibration header field 'ranks' must be an object {\"k\":..., \"v\":...}");
    c.ranks.num_layers = layers;
    c.ranks.num_kv_heads = heads;
    c.ranks.head_dim = d;
    c.ranks.k = r.ranks(ranks, "k", layers, heads);
    c.ranks.v = r.ranks(ranks, "v", layers, heads);
    for (int part = 0; part < 2; ++part) {
        const auto & rk = part == 0 ? c.ranks.k : c.ranks.v;
        for (size_t i = 0; i < rk.size(); ++i)
            KVCOMP_CHECK_ARG(rk[i] >= 1 && rk[i] <= d, p, ": calibration header field 'ranks.",
                             part == 0 ? "k" : "v", "[", int64_t(i) / heads, "][", int64_t(i) % heads,
                             "]' is ", rk[i], ", outside [1, head_dim = ", d, "]");
    }

    std::set<std::string> expected;
    for (int64_t l = 0; l < layers; ++l) {
        for (int64_t hd = 0; hd < heads; ++hd) {
            const size_t i = size_t(l * heads + hd);
            for (int part = 0; part < 2; ++part) {
                const int64_t cols = c.truncated ? (part == 0 ? c.ranks.k[i] : c.ranks.v[i]) : d;
                head_basis b;
                b.cols = cols;
                const std::string bn = tensor_name(l, hd, part == 0 ? "k_basis" : "v_basis");
                const std::string sn = tensor_name(l, hd, part == 0 ? "k_sigma" : "v_sigma");
                b.basis = read_tensor(*file, bn, {d, cols});
                b.sigma = read_tensor(*file, sn, {d});
                expected.insert(bn);
                expected.insert(sn);
                (part == 0 ? c.k : c.v).push_back(std::move(b));
            }
        }
    }
    for (const std::string & name : file->names())
        KVCOMP_CHECK_ARG(expected.count(name), p, ": unexpected tensor '", name,
                         "' in a calibration file of ", layers, " layers x ", heads, " KV heads");
    try {
        c.validate();
    } catch (const error & e) {
        KVCOMP_THROW(e.code(), p, ": ", e.what());
    }
    return c;
}

}  // namespace kvcomp::host::lowrank
