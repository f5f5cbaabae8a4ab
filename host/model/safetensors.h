// Safetensors files: a read-only memory-mapped reader, a multi-shard tensor set and a writer.
//
// File format (https://huggingface.co/docs/safetensors): 8 bytes little-endian uint64 N, then N
// bytes of UTF-8 JSON (may be right-padded with spaces), then the data buffer. The JSON maps each
// tensor name to {"dtype": "F16", "shape": [d0, d1, ...], "data_offsets": [begin, end]} with offsets
// in bytes relative to the start of the data buffer; the optional key "__metadata__" maps strings to
// strings. Tensors are row-major (C order), shape[0] outermost, little-endian.
//
// Validation (every failure is a kvcomp::error naming the file and, where it applies, the tensor):
//   io_error          the file cannot be opened/mapped, is shorter than 8 bytes, its header length
//                     runs past the end of the file, or the data buffer is shorter than the tensors
//                     need (a truncated download);
//   invalid_argument  the header is not a JSON object, a field is missing or has the wrong type, a
//                     dtype is unknown, end-begin != numel * dtype size, a tensor overlaps another,
//                     the tensors leave a hole in the buffer or bytes after the last tensor (the format
//                     forbids both, as the reference reader does), or metadata values are not strings.
//
// Ownership: a safetensors_file owns its mapping; st_view pointers stay valid while the file (or the
// tensor_set holding it) is alive. Views point straight into the mapping, so data may be unaligned
// for its dtype: read it with memcpy (to_float_vector does). Reading is thread-safe; nothing mutates.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/dtype.h"

namespace kvcomp::host {

// Every dtype string the safetensors format defines that kvcomp can at least carry around.
// to_float_vector converts the float ones (f64, f32, f16, bf16, f8_e4m3, f8_e5m2).
enum class st_dtype : int32_t {
    f64,
    f32,
    f16,
    bf16,
    f8_e4m3,
    f8_e5m2,
    i64,
    i32,
    i16,
    i8,
    u64,
    u32,
    u16,
    u8,
    boolean
};

size_t st_dtype_size(st_dtype t);
const char * st_dtype_name(st_dtype t);  // the file's spelling: "F32", "BF16", "BOOL", ...
bool st_dtype_from_name(const std::string & name, st_dtype & out);  // false when unknown
bool st_dtype_is_float(st_dtype t);
// kvcomp's element type for the dtypes backends store (f32, f16, bf16, i32, u8); false otherwise.
bool st_dtype_to_kvcomp(st_dtype t, dtype & out);
st_dtype st_dtype_from_kvcomp(dtype t);

// "[512,2048]" for messages.
std::string shape_to_string(const std::vector<int64_t> & shape);

// A tensor inside a mapped file. Does not own data.
struct st_view {
    const std::string * name = nullptr;  // points into the owning file's table
    st_dtype type = st_dtype::f32;
    std::vector<int64_t> shape;      // outermost first; empty = scalar (numel 1)
    const uint8_t * data = nullptr;  // may be unaligned
    size_t nbytes = 0;
    const std::string * file = nullptr;  // path of the file holding it, for messages

    int64_t numel() const;
};

// Converts a float tensor (f64/f32/f16/bf16/f8) to fp32 values, row-major. Throws invalid_argument
// naming the tensor and its dtype for integer/bool tensors.
std::vector<float> to_float_vector(const st_view & v);

// One memory-mapped .safetensors file.
class safetensors_file {
  public:
    // Maps and validates `path`; throws as described at the top of this file.
    static std::shared_ptr<safetensors_file> open(const std::string & path);
    ~safetensors_file();
    safetensors_file(const safetensors_file &) = delete;
    safetensors_file & operator=(const safetensors_file &) = delete;

    const std::string & path() const { return path_; }
    const std::map<std::string, std::string> & metadata() const { return metadata_; }
    // Tensor names in the order of their data offsets.
    const std::vector<std::string> & names() const { return names_; }
    bool contains(const std::string & name) const { return index_.count(name) != 0; }
    // Throws invalid_argument naming the tensor and the file when absent.
    st_view get(const std::string & name) const;
    // Total size of the mapping in bytes.
    size_t file_size() const { return size_; }

  private:
    safetensors_file() = default;
    struct entry {
        st_dtype type;
        std::vector<int64_t> shape;
        size_t begin, end;  // relative to the data buffer
    };
    void parse_header();

    std::string path_;
    const uint8_t * base_ = nullptr;  // whole file
    size_t size_ = 0;
    size_t data_start_ = 0;  // 8 + header length
    bool mapped_ = false;    // false: base_ points into heap_ (no mmap on this platform)
    std::vector<uint8_t> heap_;
    std::map<std::string, std::string> metadata_;
    std::vector<std::string> names_;
    std::unordered_map<std::string, entry> index_;
};

// All tensors of a model directory: either DIR/model.safetensors or the shards listed by
// DIR/model.safetensors.index.json ({"weight_map": {"tensor name": "shard file name", ...}}).
// When both exist the single file wins (as Hugging Face transformers does).
// Checks: every shard exists and parses, every weight_map entry is present in the shard it names,
// no tensor name is in two shards, shard names are plain file names inside the directory.
class tensor_set {
  public:
    // Opens a model directory (see above) or a single .safetensors file.
    static tensor_set open(const std::string & path);

    const std::string & source() const { return source_; }  // the directory or file opened
    bool contains(const std::string & name) const { return where_.count(name) != 0; }
    // Throws invalid_argument "tensor 'NAME' not found in DIR (N tensors in K files)" when absent.
    st_view get(const std::string & name) const;
    std::vector<float> get_floats(const std::string & name) const { return to_float_vector(get(name)); }
    std::vector<std::string> names() const;  // sorted
    size_t size() const { return where_.size(); }
    const std::vector<std::shared_ptr<safetensors_file>> & files() const { return files_; }
    // __metadata__ of the first file (for a calibration file: its JSON header fields).
    const std::map<std::string, std::string> & metadata() const;

  private:
    std::string source_;
    std::vector<std::shared_ptr<safetensors_file>> files_;
    std::unordered_map<std::string, size_t> where_;  // tensor name -> index in files_
};

// A tensor to write: `data` holds numel(shape) * st_dtype_size(type) bytes, row-major,
// little-endian. The writer copies nothing: data must stay valid during the call.
struct st_write_tensor {
    std::string name;
    st_dtype type = st_dtype::f32;
    std::vector<int64_t> shape;
    const void * data = nullptr;
    size_t nbytes = 0;
};

// Writes a safetensors file readable by the reference implementation: tensors ordered by dtype size
// (largest first) then name so every tensor starts aligned to its element size, the header padded
// with spaces to a multiple of 8 bytes. Writes PATH.tmp then renames it over PATH, so a crash never
// leaves a half-written file under the final name. Throws invalid_argument for duplicate/empty
// names, a name "__metadata__", negative dims or nbytes that disagree with shape x dtype; io_error
// when the file cannot be written.
void write_safetensors(const std::string & path, const std::vector<st_write_tensor> & tensors,
                       const std::map<std::string, std::string> & metadata = {});

// Encodes fp32 values in `type` (f32, f16, bf16; round to nearest even) as little-endian bytes, for
// building st_write_tensor data. Throws invalid_argument for other dtypes.
std::vector<uint8_t> encode_floats(const std::vector<float> & values, st_dtype type);

}  // namespace kvcomp::host
