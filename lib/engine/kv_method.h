// The KV-cache method interface: the only way the engine reaches the KV cache.
//
// A method decides how K/V are stored (its pages, metadata and their exact byte accounting), how
// new tokens are appended, how attention reads them, and what maintenance runs between steps
// (e.g. recompressing a full fp16 window). The fp16 paged cache is the method "none"; compression
// methods add files that implement this interface and register a name in kv_method.cpp, without
// touching the engine.
//
// Per step, the engine gives the method the projected and RoPE-rotated q/k/v of every new token
// (f32, token-major) plus the page-table arrays it built on the host (kv_step). The method appends
// the new K/V of that layer and writes the attention output. On a layer without RoPE
// (model_config::uses_rope, e.g. SmolLM3's NoPE layers) q and k arrive as the projections made them.
//
// Methods that change the attention's projections (ZACK / FDC / Palu fold their bases into W_V and
// W_O, and on layers without RoPE into W_Q and W_K) do so at load time in prepare(), into weights
// they own, and describe each layer's projections with projection(layer); llama_forward reads that
// description and sizes its activations by it.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/backend.h"
#include "engine/model_weights.h"
#include "host/model/model_config.h"

namespace kvcomp::engine {

// What prepare() may read about the loaded model.
struct model_context {
    const host::model_config & config;
    // On the backend prepare() receives. A method may release the matrices its projections replace
    // (resetting the buffer and taking its bytes off weights.bytes), so they take no device memory.
    model_weights & weights;
    std::string model_dir;          // the checkpoint directory (config.json only for random weights)
    bool random_weights = false;    // weights made up from config.json (benchmarks)
    uint64_t weight_seed = 1;       // their seed (random weights of another seed are another model)
};

// One layer's attention projections as a method replaced them (kv_method::projection). Weights are
// [out, in] like model_weights' matrices, in model_weights::matrix_type; biases f32 [out].
//   q:  q = x W_q^T, q_width values per token (replaces q_proj and its bias; null w_q keeps them);
//   k:  k = x W_k^T, k_width values per token (replaces k_proj and its bias; null w_k keeps them).
//       Only on a layer without RoPE: RoPE would have to rotate the full head_dim q and k, which
//       a replaced projection no longer produces (the forward refuses it otherwise);
//   v:  v = x W_v^T (+ b_v), v_width values per token (replaces v_proj; null w_v keeps v_proj);
//   o:  the attention output (o_width values per token) times W_o^T, accumulated into the residual
//       (replaces o_proj; null w_o keeps o_proj);
//   k_pre_rope: k reaches attend() before RoPE (the method applies RoPE itself, e.g. Palu).
struct layer_projection {
    buffer * w_q = nullptr;
    int64_t q_width = 0;
    buffer * w_k = nullptr;
    int64_t k_width = 0;
    buffer * w_v = nullptr;
    buffer * b_v = nullptr;
    int64_t v_width = 0;
    buffer * w_o = nullptr;
    int64_t o_width = 0;
    bool k_pre_rope = false;
};

// Shapes the method needs, from the model config.
struct kv_shape {
    int64_t n_layers = 0, n_q_heads = 0, n_kv_heads = 0, head_dim = 0;
    int64_t n_pages = 0;  // pages per layer in the pool
    int32_t page_size = 16;
    int64_t max_requests = 1;  // requests holding KV at once (methods with their own page pools size them by it)
};

// What one engine step asks of the method (all i32 device arrays live on the step's backend).
struct kv_step {
    bool prefill = false;        // true: each request's whole prompt (seq_indptr valid); false: one token each
    int64_t batch = 0;           // requests in the step
    int64_t n_tokens = 0;        // new tokens in the step
    int64_t nnz_pages = 0;       // length of indices
    int64_t max_seq_len = 0;     // longest request after this step's tokens are appended
    tensor indptr, indices, last_page_len;  // page table after the append (FlashInfer layout)
    tensor batch_idx, positions;            // [n_tokens]: request and position of each new token
    tensor seq_indptr;                      // prefill only: [batch+1] token ranges of the requests
    // Host copies, for methods that keep their own page tables (e.g. "window"):
    std::vector<int32_t> seq_ids;         // [batch] stable id of each request (the engine's sequence id)
    std::vector<int32_t> host_positions;  // [n_tokens] as positions
    std::vector<int32_t> host_batch_idx;  // [n_tokens] as batch_idx
    std::vector<int32_t> host_seq_indptr; // prefill only: as seq_indptr
};

// Options of a method, from the command line ("--method-opt key=value"); each method documents
// and validates its own keys.
using method_options = std::map<std::string, std::string>;

class kv_method {
public:
    virtual ~kv_method() = default;

    virtual std::string name() const = 0;

    // Called once after the weights are loaded and before allocate(): a method that folds bases into
    // the projections builds its own weights here (on the device, with the backend's ops).
    virtual void prepare(backend & /*be*/, const model_context & /*model*/) {}

    // The projections of `layer` when the method replaced them, null when the model's own are used.
    // Valid after prepare(), for the method's lifetime.
    virtual const layer_projection * projection(int64_t /*layer*/) const { return nullptr; }

    // Device bytes of the weights the method owns (folded projections, bases), next to the model's.
    virtual uint64_t weight_bytes() const { return 0; }

    // Allocates the cache for `shape` on `be` (called once, before the first step).
    virtual void allocate(backend & be, const kv_shape & shape) = 0;

    // Device bytes held by the cache: codes, scales, zero points, sums, outliers, factors, fp16
    // windows, everything (the compression ratio is computed from this).
    virtual uint64_t bytes_allocated() const = 0;

    // Bytes the cache needs for `tokens` cached tokens of one request in every layer (pages
    // rounded up), for peak-usage accounting.
    virtual uint64_t bytes_for_tokens(int64_t tokens) const = 0;

    // Appends this layer's new k/v (f32 [n_tokens, n_kv_heads, head_dim]) and writes attention of
    // q (f32 [n_tokens, n_q_heads, head_dim]) over each request's cached tokens to out (same shape
    // as q). Scale is 1/sqrt(head_dim) of the model. With a projection(layer), q has q_width values
    // per token, k k_width, v v_width, out o_width (each where the method replaced it), and k is
    // pre-RoPE when k_pre_rope. q and k are rotated only on layers that use RoPE.
    virtual void attend(backend & be, int64_t layer, const kv_step & step, const tensor & q, const tensor & k,
                        const tensor & v, const tensor & out, float scale) = 0;

    // Bytes request `seq` holds now, with `tokens` cached tokens (what its pages, blocks and
    // windows take in every layer). Methods whose footprint depends on more than the token count
    // (e.g. how many tokens were prefilled) override it.
    virtual uint64_t bytes_held(int64_t /*seq*/, int64_t tokens) const { return bytes_for_tokens(tokens); }

    // Called once per step after every layer ran (streaming recompression and the like).
    virtual void maintain(backend & be, const kv_step & step) {}

    // Called by the engine when sequence `seq` (kv_step::seq_ids) finished: a method that keeps
    // per-request state returns it (an unknown id is a no-op).
    virtual void release(int64_t /*seq*/) {}

    // Pages of the method's own pool held now (0 for methods that use the engine's page table).
    virtual int64_t pages_in_use() const { return 0; }
};

// A method that keeps its KV in another method's cache and changes only what reaches it (the
// calibration capture over none; kivi / zipcache on the reduced cache of zack / fdc): the cache's
// byte accounting, maintenance, release and page count are the inner method's.
class kv_method_over : public kv_method {
public:
    explicit kv_method_over(std::unique_ptr<kv_method> inner) : inner_(std::move(inner)) {}

    uint64_t bytes_allocated() const override { return inner_->bytes_allocated(); }
    uint64_t bytes_for_tokens(int64_t tokens) const override { return inner_->bytes_for_tokens(tokens); }
    uint64_t bytes_held(int64_t seq, int64_t tokens) const override { return inner_->bytes_held(seq, tokens); }
    void maintain(backend & be, const kv_step & step) override { inner_->maintain(be, step); }
    void release(int64_t seq) override { inner_->release(seq); }
    int64_t pages_in_use() const override { return inner_->pages_in_use(); }

protected:
    kv_method & inner() { return *inner_; }
    const kv_method & inner() const { return *inner_; }

private:
    std::unique_ptr<kv_method> inner_;
};

// Creates a method by name; throws invalid_argument naming the valid methods for an unknown name
// or an option the method does not know.
std::unique_ptr<kv_method> create_kv_method(const std::string & name, const method_options & options);
std::vector<std::string> kv_method_names();
// The method in a sentence and its options with their defaults (kvcomp methods); throws
// invalid_argument naming the valid methods for an unknown name.
std::string kv_method_help(const std::string & name);

}  // namespace kvcomp::engine
