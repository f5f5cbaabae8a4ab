// Safetensors reader (mmap), multi-shard tensor set and writer. See safetensors.h for the format
// and the checks.
#include "host/model/safetensors.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>

#include <nlohmann/json.hpp>

#include "core/error.h"

#if defined(__unix__) || defined(__APPLE__)
#define KVCOMP_HAVE_MMAP 1
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#endif

namespace kvcomp::host {

using json = nlohmann::json;

namespace {

// The reference reader refuses headers above 100 MB; a larger one is a corrupt length field.
constexpr uint64_t k_max_header_bytes = 100ull << 20;

struct dtype_info {
    st_dtype type;
    const char * name;
    size_t size;
    bool is_float;
};
const dtype_info k_dtypes[] = {
    {st_dtype::f64, "F64", 8, true},         {st_dtype::f32, "F32", 4, true},
    {st_dtype::f16, "F16", 2, true},         {st_dtype::bf16, "BF16", 2, true},
    {st_dtype::f8_e4m3, "F8_E4M3", 1, true}, {st_dtype::f8_e5m2, "F8_E5M2", 1, true},
    {st_dtype::i64, "I64", 8, false},        {st_dtype::i32, "I32", 4, false},
    {st_dtype::i16, "I16", 2, false},        {st_dtype::i8, "I8", 1, false},
    {st_dtype::u64, "U64", 8, false},        {st_dtype::u32, "U32", 4, false},
    {st_dtype::u16, "U16", 2, false},        {st_dtype::u8, "U8", 1, false},
    {st_dtype::boolean, "BOOL", 1, false},
};
const dtype_info & info(st_dtype t) {
    for (const auto & d : k_dtypes)
        if (d.type == t) return d;
    KVCOMP_THROW(status::internal, "unknown st_dtype ", int(t));
}

bool host_is_little_endian() {
    const uint16_t one = 1;
    uint8_t b;
    std::memcpy(&b, &one, 1);
    return b == 1;
}

// numel * elem with overflow detection; false on overflow or a negative dim.
bool checked_nbytes(const std::vector<int64_t> & shape, size_t elem, size_t & out) {
    uint64_t n = 1;
    for (int64_t d : shape) {
        if (d < 0) return false;
        if (d != 0 && n > std::numeric_limits<uint64_t>::max() / uint64_t(d)) return false;
        n *= uint64_t(d);
    }
    if (n > std::numeric_limits<uint64_t>::max() / elem) return false;
    out = size_t(n * elem);
    return true;
}

// OCP FP8 E4M3FN: bias 7, no infinities, S.1111.111 is NaN.
float f8_e4m3_to_float(uint8_t b) {
    const bool neg = b & 0x80;
    const int e = (b >> 3) & 0xf, m = b & 7;
    float v;
    if (e == 15 && m == 7)
        v = std::numeric_limits<float>::quiet_NaN();
    else if (e == 0)
        v = std::ldexp(float(m), -9);
    else
        v = std::ldexp(1.0f + float(m) / 8.0f, e - 7);
    return neg ? -v : v;
}

template <typename T>
T load(const uint8_t * p) {
    T v;
    std::memcpy(&v, p, sizeof(T));
    return v;
}

bool file_exists(const std::string & path) {
    std::error_code ec;
    return std::filesystem::is_regular_file(path, ec);
}

}  // namespace

size_t st_dtype_size(st_dtype t) {
    return info(t).size;
}
const char * st_dtype_name(st_dtype t) {
    return info(t).name;
}
bool st_dtype_is_float(st_dtype t) {
    return info(t).is_float;
}

bool st_dtype_from_name(const std::string & name, st_dtype & out) {
    for (const auto & d : k_dtypes) {
        if (name == d.name) {
            out = d.type;
            return true;
        }
    }
    return false;
}

bool st_dtype_to_kvcomp(st_dtype t, dtype & out) {
    switch (t) {
        case st_dtype::f32:
            out = dtype::f32;
            return true;
        case st_dtype::f16:
            out = dtype::f16;
            return true;
        case st_dtype::bf16:
            out = dtype::bf16;
            return true;
        case st_dtype::i32:
            out = dtype::i32;
            return true;
        case st_dtype::u8:
            out = dtype::u8;
            return true;
        default:
            return false;
    }
}

st_dtype st_dtype_from_kvcomp(dtype t) {
    switch (t) {
        case dtype::f32:
            return st_dtype::f32;
        case dtype::f16:
            return st_dtype::f16;
        case dtype::bf16:
            return st_dtype::bf16;
        case dtype::i32:
            return st_dtype::i32;
        case dtype::u8:
            return st_dtype::u8;
    }
    KVCOMP_THROW(status::internal, "unknown kvcomp dtype ", int(t));
}

std::string shape_to_string(const std::vector<int64_t> & shape) {
    std::string s = "[";
    for (size_t i = 0; i < shape.size(); ++i) s += (i ? "," : "") + std::to_string(shape[i]);
    return s + "]";
}

int64_t st_view::numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
}

std::vector<float> to_float_vector(const st_view & v) {
    const size_t n = size_t(v.numel());
    const size_t es = st_dtype_size(v.type);
    KVCOMP_ASSERT(n * es == v.nbytes);
    std::vector<float> out(n);
    const uint8_t * p = v.data;
    switch (v.type) {
        case st_dtype::f64:
            for (size_t i = 0; i < n; ++i) out[i] = float(load<double>(p + 8 * i));
            break;
        case st_dtype::f32:
            if (n) std::memcpy(out.data(), p, n * 4);
            break;
        case st_dtype::f16:
            for (size_t i = 0; i < n; ++i) out[i] = half_to_float(load<uint16_t>(p + 2 * i));
            break;
        case st_dtype::bf16:
            for (size_t i = 0; i < n; ++i) out[i] = bf16_to_float(load<uint16_t>(p + 2 * i));
            break;
        case st_dtype::f8_e4m3:
            for (size_t i = 0; i < n; ++i) out[i] = f8_e4m3_to_float(p[i]);
            break;
        case st_dtype::f8_e5m2:  // the top byte of an IEEE half
            for (size_t i = 0; i < n; ++i) out[i] = half_to_float(uint16_t(p[i]) << 8);
            break;
        default:
            KVCOMP_THROW(status::invalid_argument, "tensor '", v.name ? *v.name : std::string("?"), "' in ",
                         v.file ? *v.file : std::string("?"), " has dtype ", st_dtype_name(v.type),
                         ", not a float dtype (F64, F32, F16, BF16, F8_E4M3, F8_E5M2)");
    }
    return out;
}

std::vector<uint8_t> encode_floats(const std::vector<float> & values, st_dtype type) {
    std::vector<uint8_t> out(values.size() * (type == st_dtype::f32 ? 4 : 2));
    switch (type) {
        case st_dtype::f32:
            if (!values.empty()) std::memcpy(out.data(), values.data(), out.size());
            break;
        case st_dtype::f16:
        case st_dtype::bf16:
            for (size_t i = 0; i < values.size(); ++i) {
                const uint16_t h =
                    type == st_dtype::f16 ? float_to_half(values[i]) : float_to_bf16(values[i]);
                std::memcpy(out.data() + 2 * i, &h, 2);
            }
            break;
        default:
            KVCOMP_THROW(status::invalid_argument, "encode_floats: dtype ", st_dtype_name(type),
                         " is not one of F32, F16, BF16");
    }
    return out;
}

// ---------------------------------------------------------------------------------------------
// safetensors_file

std::shared_ptr<safetensors_file> safetensors_file::open(const std::string & path) {
    if (!host_is_little_endian())
        KVCOMP_THROW(status::unsupported, path,
                     ": safetensors data is little-endian; big-endian hosts are not supported");
    std::shared_ptr<safetensors_file> f(new safetensors_file());
    f->path_ = path;
#if KVCOMP_HAVE_MMAP
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) KVCOMP_THROW(status::io_error, path, ": cannot open: ", std::strerror(errno));
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
        const int err = errno;
        ::close(fd);
        KVCOMP_THROW(status::io_error, path, ": cannot stat: ", std::strerror(err));
    }
    if (!S_ISREG(st.st_mode)) {
        ::close(fd);
        KVCOMP_THROW(status::io_error, path, ": not a regular file");
    }
    f->size_ = size_t(st.st_size);
    if (f->size_ > 0) {
        void * p = ::mmap(nullptr, f->size_, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            const int err = errno;
            ::close(fd);
            KVCOMP_THROW(status::io_error, path, ": cannot mmap ", f->size_, " bytes: ", std::strerror(err));
        }
        f->base_ = static_cast<const uint8_t *>(p);
        f->mapped_ = true;
    }
    ::close(fd);  // the mapping keeps the file referenced
#else
    std::ifstream in(path, std::ios::binary);
    if (!in) KVCOMP_THROW(status::io_error, path, ": cannot open");
    f->heap_.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    f->size_ = f->heap_.size();
    f->base_ = f->heap_.data();
#endif
    f->parse_header();
    return f;
}

safetensors_file::~safetensors_file() {
#if KVCOMP_HAVE_MMAP
    if (mapped_ && base_) ::munmap(const_cast<uint8_t *>(base_), size_);
#endif
}

void safetensors_file::parse_header() {
    const std::string & p = path_;
    if (size_ < 8)
        KVCOMP_THROW(status::io_error, p, ": file is ", size_,
                     " bytes, shorter than the 8-byte header length "
                     "(truncated or not a safetensors file)");
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | base_[i];
    if (n > size_ - 8)
        KVCOMP_THROW(status::io_error, p, ": header length ", n, " runs past the end of the file (", size_,
                     " bytes; truncated or not a safetensors file)");
    if (n > k_max_header_bytes)
        KVCOMP_THROW(status::invalid_argument, p, ": header length ", n, " exceeds the 100 MiB limit");
    if (n < 2 || base_[8] != '{')
        KVCOMP_THROW(status::invalid_argument, p,
                     ": header does not start with '{' (not a safetensors file)");
    data_start_ = size_t(8 + n);
    const size_t data_size = size_ - data_start_;

    json h;
    try {
        h = json::parse(base_ + 8, base_ + data_start_);
    } catch (const json::exception & e) {
        KVCOMP_THROW(status::invalid_argument, p, ": header is not valid JSON: ", e.what());
    }
    if (!h.is_object()) KVCOMP_THROW(status::invalid_argument, p, ": header is not a JSON object");

    struct span {
        size_t begin, end;
        const std::string * name;
    };
    std::vector<span> spans;
    for (auto it = h.begin(); it != h.end(); ++it) {
        const std::string & name = it.key();
        const json & t = it.value();
        if (name == "__metadata__") {
            if (!t.is_object()) KVCOMP_THROW(status::invalid_argument, p, ": __metadata__ is not an object");
            for (auto m = t.begin(); m != t.end(); ++m) {
                if (!m.value().is_string())
                    KVCOMP_THROW(status::invalid_argument, p, ": __metadata__ value of '", m.key(),
                                 "' is not a string");
                metadata_[m.key()] = m.value().get<std::string>();
            }
            continue;
        }
        const std::string where = p + ": tensor '" + name + "'";
        if (!t.is_object()) KVCOMP_THROW(status::invalid_argument, where, ": entry is not an object");
        if (!t.contains("dtype") || !t["dtype"].is_string())
            KVCOMP_THROW(status::invalid_argument, where, ": missing or non-string 'dtype'");
        entry e{};
        const std::string dt = t["dtype"].get<std::string>();
        if (!st_dtype_from_name(dt, e.type))
            KVCOMP_THROW(status::invalid_argument, where, ": unknown dtype '", dt, "'");
        if (!t.contains("shape") || !t["shape"].is_array())
            KVCOMP_THROW(status::invalid_argument, where, ": missing or non-array 'shape'");
        for (const json & d : t["shape"]) {
            if (!d.is_number_unsigned() || d.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max()))
                KVCOMP_THROW(status::invalid_argument, where, ": shape ", t["shape"].dump(),
                             " has an entry that is not a non-negative integer");
            e.shape.push_back(d.get<int64_t>());
        }
        const json & off = t.contains("data_offsets") ? t["data_offsets"] : json();
        if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() ||
            !off[1].is_number_unsigned())
            KVCOMP_THROW(status::invalid_argument, where,
                         ": 'data_offsets' must be [begin, end] non-negative integers, got ", off.dump());
        const uint64_t b = off[0].get<uint64_t>(), en = off[1].get<uint64_t>();
        if (b > en)
            KVCOMP_THROW(status::invalid_argument, where, ": data_offsets [", b, ",", en,
                         "] has begin > end");
        size_t need = 0;
        if (!checked_nbytes(e.shape, info(e.type).size, need))
            KVCOMP_THROW(status::invalid_argument, where, ": shape ", shape_to_string(e.shape), " overflows");
        if (en - b != need)
            KVCOMP_THROW(status::invalid_argument, where, ": data_offsets [", b, ",", en, "] span ", en - b,
                         " bytes but shape ", shape_to_string(e.shape), " x ", dt, " needs ", need);
        if (en > data_size)
            KVCOMP_THROW(status::io_error, where, ": data_offsets [", b, ",", en,
                         "] run past the data buffer (", data_size, " bytes; file truncated?)");
        e.begin = size_t(b);
        e.end = size_t(en);
        auto ins = index_.emplace(name, std::move(e));
        spans.push_back({size_t(b), size_t(en), &ins.first->first});
    }

    // Tensors must tile the buffer exactly: sorted by begin, each starts where the previous ended.
    std::sort(spans.begin(), spans.end(), [](const span & a, const span & b) {
        return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
    });
    size_t pos = 0;
    const std::string * prev = nullptr;
    for (const span & s : spans) {
        if (s.begin < pos)
            KVCOMP_THROW(status::invalid_argument, p, ": tensor '", *s.name, "' (bytes ", s.begin, "..",
                         s.end, ") overlaps tensor '", *prev, "' (ending at ", pos, ")");
        if (s.begin > pos)
            KVCOMP_THROW(status::invalid_argument, p, ": hole of ", s.begin - pos, " bytes before tensor '",
                         *s.name, "' (bytes ", pos, "..", s.begin, " belong to no tensor)");
        pos = s.end;
        prev = s.name;
        names_.push_back(*s.name);
    }
    if (pos != data_size)
        KVCOMP_THROW(status::invalid_argument, p, ": data buffer is ", data_size,
                     " bytes but the tensors cover ", pos, " (", data_size - pos, " trailing bytes)");
}

st_view safetensors_file::get(const std::string & name) const {
    auto it = index_.find(name);
    if (it == index_.end()) KVCOMP_THROW(status::invalid_argument, path_, ": tensor '", name, "' not found");
    st_view v;
    v.name = &it->first;
    v.type = it->second.type;
    v.shape = it->second.shape;
    v.data = base_ + data_start_ + it->second.begin;
    v.nbytes = it->second.end - it->second.begin;
    v.file = &path_;
    return v;
}

// ---------------------------------------------------------------------------------------------
// tensor_set

tensor_set tensor_set::open(const std::string & path) {
    tensor_set s;
    s.source_ = path;
    std::error_code ec;
    const bool is_dir = std::filesystem::is_directory(path, ec);
    if (!is_dir) {
        s.files_.push_back(safetensors_file::open(path));
        for (const std::string & n : s.files_[0]->names()) s.where_.emplace(n, 0);
        return s;
    }
    const std::string single = path + "/model.safetensors";
    const std::string index = path + "/model.safetensors.index.json";
    if (file_exists(single)) {
        s.files_.push_back(safetensors_file::open(single));
        for (const std::string & n : s.files_[0]->names()) s.where_.emplace(n, 0);
        return s;
    }
    if (!file_exists(index))
        KVCOMP_THROW(status::io_error, path,
                     ": neither model.safetensors nor model.safetensors.index.json found");

    json j;
    try {
        std::ifstream in(index);
        j = json::parse(in);
    } catch (const json::exception & e) {
        KVCOMP_THROW(status::invalid_argument, index, ": not valid JSON: ", e.what());
    }
    if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
        KVCOMP_THROW(status::invalid_argument, index, ": missing object 'weight_map'");
    std::map<std::string, size_t> shard_ids;  // shard file name -> index in files_
    for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
        if (!it.value().is_string())
            KVCOMP_THROW(status::invalid_argument, index, ": weight_map entry '", it.key(),
                         "' is not a string");
        const std::string shard = it.value().get<std::string>();
        // Shards are plain file names next to the index; refuse paths that leave the directory.
        if (shard.empty() || shard.find('/') != std::string::npos || shard.find('\\') != std::string::npos ||
            shard == "." || shard == "..")
            KVCOMP_THROW(status::invalid_argument, index, ": weight_map entry '", it.key(), "' names shard '",
                         shard, "', which is not a plain file name");
        auto found = shard_ids.find(shard);
        if (found == shard_ids.end()) {
            found = shard_ids.emplace(shard, s.files_.size()).first;
            s.files_.push_back(safetensors_file::open(path + "/" + shard));
        }
        if (!s.files_[found->second]->contains(it.key()))
            KVCOMP_THROW(status::invalid_argument, index, ": weight_map puts tensor '", it.key(), "' in ",
                         shard, ", which does not contain it");
    }
    if (s.files_.empty()) KVCOMP_THROW(status::invalid_argument, index, ": weight_map is empty");
    // Index every tensor of every shard (a shard may hold tensors the map does not list, e.g. buffers).
    for (size_t i = 0; i < s.files_.size(); ++i) {
        for (const std::string & n : s.files_[i]->names()) {
            auto ins = s.where_.emplace(n, i);
            if (!ins.second)
                KVCOMP_THROW(status::invalid_argument, path, ": tensor '", n,
                             "' is in two shards: ", s.files_[ins.first->second]->path(), " and ",
                             s.files_[i]->path());
        }
    }
    return s;
}

st_view tensor_set::get(const std::string & name) const {
    auto it = where_.find(name);
    if (it == where_.end())
        KVCOMP_THROW(status::invalid_argument, "tensor '", name, "' not found in ", source_, " (",
                     where_.size(), " tensors in ", files_.size(), files_.size() == 1 ? " file)" : " files)");
    return files_[it->second]->get(name);
}

std::vector<std::string> tensor_set::names() const {
    std::vector<std::string> out;
    out.reserve(where_.size());
    for (const auto & kv : where_) out.push_back(kv.first);
    std::sort(out.begin(), out.end());
    return out;
}

const std::map<std::string, std::string> & tensor_set::metadata() const {
    static const std::map<std::string, std::string> empty;
    return files_.empty() ? empty : files_[0]->metadata();
}

// ---------------------------------------------------------------------------------------------
// writer

void write_safetensors(const std::string & path, const std::vector<st_write_tensor> & tensors,
                       const std::map<std::string, std::string> & metadata) {
    std::vector<const st_write_tensor *> order;
    std::set<std::string> seen;
    for (const st_write_tensor & t : tensors) {
        KVCOMP_CHECK_ARG(!t.name.empty(), "write_safetensors(", path, "): empty tensor name");
        KVCOMP_CHECK_ARG(t.name != "__metadata__", "write_safetensors(", path,
                         "): '__metadata__' is reserved");
        KVCOMP_CHECK_ARG(seen.insert(t.name).second, "write_safetensors(", path, "): duplicate tensor '",
                         t.name, "'");
        size_t need = 0;
        KVCOMP_CHECK_ARG(checked_nbytes(t.shape, st_dtype_size(t.type), need), "write_safetensors(", path,
                         "): tensor '", t.name, "' has invalid shape ", shape_to_string(t.shape));
        KVCOMP_CHECK_ARG(t.nbytes == need, "write_safetensors(", path, "): tensor '", t.name, "' has ",
                         t.nbytes, " bytes but shape ", shape_to_string(t.shape), " x ",
                         st_dtype_name(t.type), " needs ", need);
        KVCOMP_CHECK_ARG(t.data != nullptr || need == 0, "write_safetensors(", path, "): tensor '", t.name,
                         "' has no data");
        order.push_back(&t);
    }
    // Largest elements first keeps every tensor aligned to its element size, given the 8-aligned
    // data start; the name breaks ties so output is deterministic.
    std::sort(order.begin(), order.end(), [](const st_write_tensor * a, const st_write_tensor * b) {
        const size_t sa = st_dtype_size(a->type), sb = st_dtype_size(b->type);
        return sa != sb ? sa > sb : a->name < b->name;
    });
    json h = json::object();
    if (!metadata.empty()) {
        json m = json::object();
        for (const auto & kv : metadata) m[kv.first] = kv.second;
        h["__metadata__"] = m;
    }
    size_t off = 0;
    for (const st_write_tensor * t : order) {
        h[t->name] = {
            {"dtype", st_dtype_name(t->type)}, {"shape", t->shape}, {"data_offsets", {off, off + t->nbytes}}};
        off += t->nbytes;
    }
    std::string header = h.dump();
    header.append((8 - header.size() % 8) % 8, ' ');

    const std::string tmp = path + ".tmp";
    {
        std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
        if (!out)
            KVCOMP_THROW(status::io_error, "write_safetensors: cannot create ", tmp, ": ",
                         std::strerror(errno));
        uint8_t len[8];
        const uint64_t n = header.size();
        for (int i = 0; i < 8; ++i) len[i] = uint8_t(n >> (8 * i));
        out.write(reinterpret_cast<const char *>(len), 8);
        out.write(header.data(), std::streamsize(header.size()));
        for (const st_write_tensor * t : order)
            if (t->nbytes) out.write(static_cast<const char *>(t->data), std::streamsize(t->nbytes));
        out.flush();
        if (!out) {
            std::remove(tmp.c_str());
            KVCOMP_THROW(status::io_error, "write_safetensors: writing ", tmp, " failed (disk full?)");
        }
    }
    if (std::rename(tmp.c_str(), path.c_str()) != 0) {
        const int err = errno;
        std::remove(tmp.c_str());
        KVCOMP_THROW(status::io_error, "write_safetensors: cannot rename ", tmp, " to ", path, ": ",
                     std::strerror(err));
    }
}

}  // namespace kvcomp::host
