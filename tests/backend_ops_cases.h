// Case machinery shared by tests/test_backend_ops and bench/bench_ops.
//
// A test_case is one op with fixed parameters (after ggml's test-backend-ops). Its constructor
// declares the host tensors the op uses (name, dtype, shape, role); prepare(rng) allocates their
// host bytes, poisons the outputs and calls init(rng) to fill the inputs; build(views) turns
// device views of those tensors (same order as declared) into an op descriptor. The evaluators
// upload the same host bytes to every backend, so the reference and the backend under test see
// identical inputs.
//
// Device memory layout of each tensor: one buffer per tensor, the view at byte offset pad_bytes()
// and pad_bytes() of guard bytes (0xa5) after it; the guards catch writes outside a view.
//
// Poison: output tensors start as a NaN bit pattern (f32 0x7fa5a5a5, f16 0x7ea5, bf16 0x7fa5;
// i32 0xa5a5a5a5). An output element still poisoned after the reference ran was not written by
// contract (gemm stride gaps, untouched KV pages); elsewhere the backend must have written it.
//
// Case sets: full (the `test` list), smoke (a few seconds on the CPU reference), perf (GPU-sized
// shapes for `perf` mode and bench_ops) and perf_cpu (the perf list shrunk for CPU devices).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/op.h"

namespace kvcomp::test {

// Deterministic generator (splitmix64), identical on every platform, unlike std::normal_distribution.
class test_rng {
  public:
    explicit test_rng(uint64_t seed) : state_(seed) {}
    uint64_t next();
    double uniform();          // [0, 1)
    int64_t below(int64_t n);  // [0, n)
    float normal();            // standard normal (Box-Muller)

  private:
    uint64_t state_;
    bool have_spare_ = false;
    float spare_ = 0.0f;
};

// 64-bit FNV-1a, for per-case seeds that do not depend on which cases are selected.
uint64_t hash_string(const std::string & s);

enum class tensor_role { input, output, inout };
enum class compare_kind { nmse, exact };  // exact: bit for bit

struct host_tensor {
    std::string name;
    dtype type = dtype::f32;
    std::vector<int64_t> shape;
    tensor_role role = tensor_role::input;
    compare_kind cmp = compare_kind::nmse;
    // Oracle self-check for poisoned outputs: how many elements the reference must have written
    // (-1: all of them). A reference that writes nothing cannot then pass against itself.
    int64_t expect_written = -1;
    std::vector<uint8_t> data;  // host bytes; filled by prepare()

    int64_t numel() const;
    size_t nbytes() const { return size_t(numel()) * dtype_size(type); }
    template <typename T>
    T * as() {
        return reinterpret_cast<T *>(data.data());
    }
};

// Runs fn(i, rng_i) for i < n_items on the host's threads, each item with its own generator seeded
// from rng in item order: the result does not depend on the number of threads. fn must only write
// what item i owns.
void for_each_seeded(int64_t n_items, test_rng & rng, const std::function<void(int64_t, test_rng &)> & fn);
// Fillers for a host tensor of dtype f32 / f16 / bf16 (normal * scale), large tensors in parallel
// but deterministically (fixed chunks, one seed per chunk).
void fill_normal(host_tensor & t, test_rng & rng, float scale = 1.0f);
void set_float(host_tensor & t, int64_t i, float v);  // stores with the tensor's dtype
float get_float(const host_tensor & t, int64_t i);    // f32 / f16 / bf16 / i32 as float
bool is_poison(const host_tensor & t, int64_t i);

class test_case {
  public:
    virtual ~test_case() = default;

    virtual op_type op() const = 0;
    virtual std::string vars() const = 0;  // "name=value,..." (matched by -p)
    std::string name() const { return std::string(op_name(op())) + "(" + vars() + ")"; }

    // Largest NMSE accepted for float outputs compared with compare_kind::nmse (table in
    // backend_ops_cases.cpp).
    virtual double max_nmse() const = 0;

    // Bytes the op must move (read + written) and its floating-point operations, for perf mode.
    // Default bytes: every declared tensor once (outputs and inouts twice when read and written).
    virtual uint64_t bytes() const;
    virtual uint64_t flops() const { return 0; }

    // Allocates the host tensors, poisons outputs, fills inputs (init).
    void prepare(test_rng & rng);
    // Builds the op from one view per declared tensor (an invalid view for an absent optional).
    virtual op_desc build(const std::vector<tensor> & views) const = 0;

    std::vector<host_tensor> & tensors() { return tensors_; }
    const std::vector<host_tensor> & tensors() const { return tensors_; }
    size_t pad_bytes() const { return pad_bytes_; }
    // Device memory the case allocates (views plus guards), to skip sizes a device cannot hold.
    uint64_t device_bytes() const;
    void release_host() {
        for (auto & t : tensors_) std::vector<uint8_t>().swap(t.data);
    }

  protected:
    virtual void init(test_rng & rng) = 0;
    host_tensor & add_tensor(const std::string & name, dtype type, std::vector<int64_t> shape,
                             tensor_role role, compare_kind cmp = compare_kind::nmse);
    host_tensor & tensor_named(const std::string & name);

    std::vector<host_tensor> tensors_;
    size_t pad_bytes_ = 256;
};

using case_ptr = std::unique_ptr<test_case>;

enum class case_set { full, smoke, perf, perf_cpu };
std::vector<case_ptr> make_test_cases(case_set set);

// Cases bench_ops builds with its own parameters.
case_ptr make_copy_case(dtype src, dtype dst, int64_t n);
struct decode_spec {
    int64_t n_q_heads = 32, n_kv_heads = 8, head_dim = 128, page_size = 16;
    std::vector<int64_t> lens;  // one per request; 0 allowed
    int32_t n_splits = 0;
    int64_t extra_pages = 3;  // unused pages in the pool besides the requests' pages
    // > 0: channel 0 of every query is 2 and channel 0 of the key at request position p gets
    // key_ramp * p added, so each row's scores climb along its keys (2 key_ramp scale log2(e) log2
    // units per key): steep enough, a kernel whose running maximum stopped moving after its first
    // tile overflows (exp2 of more than 128) instead of passing.
    float key_ramp = 0.0f;
    bool shuffle_pages = true;  // build_page_table's shuffle
};
case_ptr make_attn_decode_case(const decode_spec & spec);
// KV bytes a decode case reads (the K and V of every cached token).
uint64_t decode_kv_bytes(const decode_spec & spec);
// Causal prefill over a ragged batch of prompts of lengths seqs (q f32, K/V f16). Its flops()
// counts 4 * head_dim * n_q_heads per visible (query, key) pair, sum over b of L_b (L_b + 1) / 2.
case_ptr make_attn_prefill_case(const std::vector<int64_t> & seqs, int64_t n_q_heads, int64_t n_kv_heads,
                                int64_t head_dim);

// Page tables after FlashInfer: request b gets ceil(len/page_size) pages drawn from a shuffled pool
// of n_pages, so that kernels must really follow indices[]; shuffle = false hands out the pool in order
// (each request's pages contiguous: bench_ops --page-order sequential, a locality comparison).
struct page_table_arrays {
    std::vector<int32_t> indptr, indices, last_page_len;
    int64_t max_seq_len = 0;
};
int64_t pages_needed(const std::vector<int64_t> & lens, int64_t page_size);
page_table_arrays build_page_table(const std::vector<int64_t> & lens, int64_t page_size, int64_t n_pages,
                                   test_rng & rng, bool shuffle = true);

// ---------------------------------------------------------------------------------------------
// Evaluation.

struct compare_result {
    enum class outcome { ok, fail, unsupported } result = outcome::ok;
    std::string detail;  // "nmse=1.2e-09 <= 1e-06", the failure, or the unsupported reason
};

// Runs the case on `target` and on `reference` with identical inputs and compares every output
// (and the guards, the untouched inputs, and the oracle's written-element counts).
compare_result compare_backends(test_case & tc, backend & target, backend & reference, uint64_t seed);

struct perf_result {
    bool supported = true;
    std::string reason;
    double median_ms = 0.0, min_ms = 0.0;
    double gbps = 0.0, gflops = 0.0;
    int reps = 0;
};

// A device copy of `mib` MiB (f32 to f32) kept on a backend to run before timed runs (time_case's
// cold mode): it evicts a case's data from the device's caches and keeps the device busy while the
// host enqueues the timed run, so the time excludes the host's launch latency (CUDA events
// otherwise include it; OpenCL's profiling events never do). 256 MiB is about 120 us of copying
// on an H200 and five times its L2 cache.
class cache_flush {
  public:
    cache_flush(backend & be, int64_t mib, uint64_t seed);
    ~cache_flush();
    void enqueue();  // asynchronous where the backend is

  private:
    backend & be_;
    case_ptr copy_;
    std::vector<buffer_ptr> bufs_;
    op_desc op_;
};

// Uploads once, runs `warmup` times, then times `reps` runs one by one with the backend's device
// timer and reports the median. With `cold`, each timed run follows cold->enqueue() (untimed).
perf_result time_case(test_case & tc, backend & be, int warmup, int reps, uint64_t seed, cache_flush * cold = nullptr);

// Prepares and runs the case on `be` alone (no comparison); throws what backend::run throws.
void run_case(test_case & tc, backend & be, uint64_t seed);

// Whether the backend would run this case (allocates the case's buffers, uninitialised).
support case_support(test_case & tc, backend & be);

}  // namespace kvcomp::test
