// Method "window": the sliding-window baseline — an fp16 cache truncated to the most recent N
// tokens of each request (option window=N, required, N > 0). It stores exactly what "none" stores
// per token, but only for a window, so it must visibly lose anything older (line retrieval).
//
// Semantics:
//  - prefill attends over the whole prompt exactly like "none" (causal attn_prefill on the prompt's
//    own K/V, converted to fp16); only the last min(prompt, N) tokens are then written to the cache;
//  - each decode step first appends its new token, then attends over that token plus at most the N
//    most recent cached tokens (positions max(0, p - N) .. p for a token at position p);
//  - K is rotated (RoPE) before it is cached, so keys keep their absolute positions; nothing is
//    re-rotated when older tokens fall out of the window.
//
// Storage (real, not simulated): per layer one K and one V pool, f16 [pool_pages, n_kv_heads,
// page_size, head_dim] like "none", with its own host page pool. A request owns a ring of
// S = N + 1 token slots (the N kept tokens plus the one being appended) held in
// ceil(S / page_size) pages, which it takes lazily as the ring fills (a short request holds only
// the pages its tokens need). Token position p lives at ring slot p mod S: page ring[slot /
// page_size], row slot % page_size. Slots fill in order 0..S-1 before the ring wraps, so at any
// time the live tokens occupy slots 0..min(len, S)-1 — whole pages plus a prefix of the last one —
// which is exactly what the paged attn_decode reads from an ordinary page table (indices = the
// ring's pages in order, last_page_len = the prefix). The window start is never page-aligned, so a
// ring of page-aligned capacity (slot p mod pages*page_size) could not be expressed that way;
// S = N + 1 slots can. Softmax does not care that keys are out of position order.
//
// Ring tables (indptr / indices / last_page_len and the ring slots used as kv_append positions)
// are built on the host once per step, when layer 0 is attended, and uploaded in one transfer;
// every layer reuses them. Prefill writes each request's kept tokens with one kv_append per
// request (a view of the request's last rows of k/v), so no two tokens of a step share a slot.
// Rings are returned to the pool by release(seq), which the engine calls when a request ends.
//
// Accounting: bytes_allocated() is the pool; bytes_for_tokens(t) is ceil(min(t, S) / page_size)
// pages in every layer, K and V, fp16. The pool holds min(engine pages, max_requests * ring pages)
// pages: a ring never needs more pages than the engine's own table holds for the same request.
#include <algorithm>
#include <map>
#include <memory>

#include "engine/kv_method.h"
#include "engine/prompt_attention.h"
#include "host/paged/page_pool.h"

namespace kvcomp::engine {

namespace {

class kv_method_window : public kv_method {
  public:
    explicit kv_method_window(int64_t window) : window_(window), slots_(window + 1) {}

    std::string name() const override { return "window"; }

    void allocate(backend & be, const kv_shape & shape) override {
        KVCOMP_CHECK_ARG(shape.n_pages > 0 && shape.page_size > 0 && shape.max_requests > 0,
                         "method window: bad cache shape (n_pages ", shape.n_pages, ", page_size ",
                         shape.page_size, ", max_requests ", shape.max_requests, ")");
        shape_ = shape;
        ring_pages_ = (slots_ + shape.page_size - 1) / shape.page_size;
        pool_pages_ = std::min(shape.n_pages, shape.max_requests * ring_pages_);
        const size_t bytes = size_t(page_elems() * pool_pages_) * 2;
        for (int64_t l = 0; l < shape.n_layers; ++l) {
            k_.push_back(be.alloc(bytes));
            v_.push_back(be.alloc(bytes));
        }
        pool_ = std::make_unique<host::page_pool>(int32_t(pool_pages_));
        bytes_ = uint64_t(bytes) * 2 * uint64_t(shape.n_layers);
    }

    uint64_t bytes_allocated() const override { return bytes_; }

    uint64_t bytes_for_tokens(int64_t tokens) const override {
        const int64_t kept = std::min(std::max<int64_t>(tokens, 0), slots_);
        const int64_t pages = (kept + shape_.page_size - 1) / shape_.page_size;
        return uint64_t(pages * page_elems()) * 2 /*bytes*/ * 2 /*K and V*/ * uint64_t(shape_.n_layers);
    }

    int64_t pages_in_use() const override { return pool_ ? pool_->used_pages() : 0; }

    void release(int64_t seq) override {
        auto it = rings_.find(seq);
        if (it == rings_.end()) return;
        pool_->release(it->second);
        rings_.erase(it);
    }

    void attend(backend & be, int64_t layer, const kv_step & s, const tensor & q, const tensor & k,
                const tensor & v, const tensor & out, float scale) override {
        KVCOMP_CHECK_ARG(pool_, "method window: attend before allocate");
        if (layer == 0) plan(be, s);
        KVCOMP_CHECK_ARG(planned_, "method window: a step must start at layer 0 (got layer ", layer, ")");
        const kv_layout kv{pool_pages_, shape_.n_kv_heads, shape_.page_size, shape_.head_dim};
        const tensor kp = pool(*k_[size_t(layer)]), vp = pool(*v_[size_t(layer)]);
        const int64_t row = shape_.n_kv_heads * shape_.head_dim;  // elements per token of k/v
        for (const append_call & a : appends_) {
            const tensor kr = make_tensor(k.buf, dtype::f32, {a.n, shape_.n_kv_heads, shape_.head_dim},
                                          k.offset + size_t(a.row0 * row) * 4);
            const tensor vr = make_tensor(v.buf, dtype::f32, {a.n, shape_.n_kv_heads, shape_.head_dim},
                                          v.offset + size_t(a.row0 * row) * 4);
            be.run(make_op(kv_append_params{kv, a.n, a.batch, a.nnz},
                           {kr, vr, table(a.batch_idx, a.n), table(a.positions, a.n),
                            table(a.indptr, a.batch + 1), table(a.indices, a.nnz)},
                           {kp, vp}));
        }
        if (s.prefill) {
            attend_prompt(be, scratch_, shape_, s, q, k, v, out, scale);  // exactly "none"
        } else {
            attn_decode_params p;
            p.kv = kv, p.batch = s.batch, p.n_q_heads = shape_.n_q_heads, p.nnz_pages = att_nnz_;
            p.max_seq_len = att_max_len_, p.scale = scale;
            be.run(make_op(p,
                           {q, kp, vp, table(att_indptr_, s.batch + 1), table(att_indices_, att_nnz_),
                            table(att_last_, s.batch)},
                           {out}));
        }
    }

    void maintain(backend & /*be*/, const kv_step & /*step*/) override { planned_ = false; }

  private:
    // One kv_append: rows [row0, row0 + n) of the step's k/v; the other fields are offsets (in
    // elements) of its arrays in the uploaded table buffer.
    struct append_call {
        int64_t row0 = 0, n = 0, batch = 0, nnz = 0;
        size_t batch_idx = 0, positions = 0, indptr = 0, indices = 0;
    };

    int64_t page_elems() const { return shape_.n_kv_heads * shape_.page_size * shape_.head_dim; }
    tensor pool(buffer & b) const {
        return make_tensor(&b, dtype::f16,
                           {pool_pages_, shape_.n_kv_heads, shape_.page_size, shape_.head_dim});
    }
    tensor table(size_t offset, int64_t n) const {
        return make_tensor(tables_.get(), dtype::i32, {std::max<int64_t>(n, 1)}, offset * 4);
    }

    size_t put(const std::vector<int32_t> & v) {
        const size_t off = host_.size();
        host_.insert(host_.end(), v.begin(), v.end());
        return off;
    }

    // The ring of `seq`, grown to cover slots [0, min(len, S)); creates it when `create`.
    std::vector<int32_t> & ring_for(int64_t seq, int64_t len, bool create) {
        auto it = rings_.find(seq);
        if (it == rings_.end()) {
            KVCOMP_CHECK_ARG(create, "method window: sequence ", seq,
                             " has no cached tokens; a request must be prefilled before it decodes");
            it = rings_.emplace(seq, std::vector<int32_t>{}).first;
        }
        std::vector<int32_t> & ring = it->second;
        const int64_t need = (std::min(len, slots_) + shape_.page_size - 1) / shape_.page_size;
        if (int64_t(ring.size()) < need && !pool_->allocate(int32_t(need - int64_t(ring.size())), ring)) {
            if (ring.empty()) rings_.erase(it);
            KVCOMP_THROW(status::out_of_memory, "method window(window=", window_, "): ring pool exhausted (",
                         pool_->used_pages(), " of ", pool_->capacity(), " pages in use, sequence ", seq,
                         " needs ", need, ")");
        }
        return ring;
    }

    // Builds this step's ring tables on the host (growing rings as needed) and uploads them.
    void plan(backend & be, const kv_step & s) {
        planned_ = false;
        KVCOMP_CHECK_ARG(
            int64_t(s.seq_ids.size()) == s.batch && int64_t(s.host_positions.size()) == s.n_tokens &&
                int64_t(s.host_batch_idx.size()) == s.n_tokens,
            "method window: the step lacks host arrays (seq_ids ", s.seq_ids.size(), ", positions ",
            s.host_positions.size(), ", batch ", s.batch, ", tokens ", s.n_tokens, ")");
        host_.clear();
        appends_.clear();
        const int32_t P = shape_.page_size;
        if (s.prefill) {
            KVCOMP_CHECK_ARG(int64_t(s.host_seq_indptr.size()) == s.batch + 1,
                             "method window: prefill step without seq_indptr");
            for (int64_t b = 0; b < s.batch; ++b) {
                const int32_t lo = s.host_seq_indptr[size_t(b)], hi = s.host_seq_indptr[size_t(b) + 1];
                if (hi <= lo) continue;
                const int64_t len = int64_t(s.host_positions[size_t(hi) - 1]) + 1;
                const std::vector<int32_t> & ring = ring_for(s.seq_ids[size_t(b)], len, true);
                // Only the tokens that stay in the window are written (distinct ring slots).
                const int64_t keep = std::min<int64_t>(hi - lo, window_);
                append_call a;
                a.row0 = hi - keep, a.n = keep, a.batch = 1, a.nnz = int64_t(ring.size());
                std::vector<int32_t> slot;
                for (int64_t t = a.row0; t < hi; ++t)
                    slot.push_back(int32_t(s.host_positions[size_t(t)] % slots_));
                a.batch_idx = put(std::vector<int32_t>(size_t(keep), 0));
                a.positions = put(slot);
                a.indptr = put({0, int32_t(ring.size())});
                a.indices = put(ring);
                appends_.push_back(a);
            }
        } else {
            KVCOMP_CHECK_ARG(s.n_tokens == s.batch,
                             "method window: a decode step has one token per request (", s.n_tokens,
                             " tokens, batch ", s.batch, ")");
            std::vector<int32_t> indptr{0}, indices, last, slot;
            att_max_len_ = 0;
            for (int64_t b = 0; b < s.batch; ++b) {
                KVCOMP_CHECK_ARG(s.host_batch_idx[size_t(b)] == b, "method window: decode token ", b,
                                 " belongs to request ", s.host_batch_idx[size_t(b)]);
                const int64_t pos = s.host_positions[size_t(b)];
                const std::vector<int32_t> & ring = ring_for(s.seq_ids[size_t(b)], pos + 1, false);
                // The new token plus the N before it: slots [0, live) of the ring, all written.
                const int64_t live = std::min(pos + 1, slots_);
                const int64_t pages = (live + P - 1) / P;
                indices.insert(indices.end(), ring.begin(), ring.begin() + pages);
                indptr.push_back(int32_t(indices.size()));
                last.push_back(int32_t(live - (pages - 1) * P));
                slot.push_back(int32_t(pos % slots_));
                att_max_len_ = std::max(att_max_len_, live);
            }
            att_nnz_ = int64_t(indices.size());
            att_indptr_ = put(indptr), att_indices_ = put(indices), att_last_ = put(last);
            // The slot of the new token is < live, so the attention table covers the append.
            append_call a;
            a.row0 = 0, a.n = s.batch, a.batch = s.batch, a.nnz = att_nnz_;
            a.batch_idx = put(s.host_batch_idx), a.positions = put(slot), a.indptr = att_indptr_;
            a.indices = att_indices_;
            appends_.push_back(a);
        }
        if (host_.empty()) host_.push_back(0);
        if (!tables_ || tables_->size() < host_.size() * 4) tables_ = be.alloc(host_.size() * 4 * 2);
        be.upload(*tables_, 0, host_.data(), host_.size() * 4);
        planned_ = true;
    }

    const int64_t window_, slots_;
    kv_shape shape_;
    int64_t ring_pages_ = 0, pool_pages_ = 0;
    std::vector<buffer_ptr> k_, v_;
    buffer_ptr scratch_, tables_;
    std::unique_ptr<host::page_pool> pool_;
    std::map<int64_t, std::vector<int32_t>> rings_;  // sequence id -> its pages in ring order
    uint64_t bytes_ = 0;

    // This step's plan (valid from layer 0 until maintain()).
    bool planned_ = false;
    std::vector<int32_t> host_;
    std::vector<append_call> appends_;
    size_t att_indptr_ = 0, att_indices_ = 0, att_last_ = 0;
    int64_t att_nnz_ = 0, att_max_len_ = 0;
};

}  // namespace

std::unique_ptr<kv_method> make_kv_method_window(const method_options & options) {
    int64_t window = 0;
    for (const auto & kv : options) {
        KVCOMP_CHECK_ARG(kv.first == "window", "method window: unknown option '", kv.first, "' (value '",
                         kv.second, "'); it takes window=N (tokens kept per request, N > 0)");
        // Digits only (no sign, blanks or suffix), at most 10 of them so the value cannot overflow.
        const std::string & text = kv.second;
        const bool digits =
            !text.empty() && text.size() <= 10 &&
            std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
        const int64_t n = digits ? std::stoll(text) : 0;
        KVCOMP_CHECK_ARG(n > 0 && n <= (int64_t(1) << 30), "method window: option window='", kv.second,
                         "' must be a positive integer (tokens, at most ", int64_t(1) << 30, ")");
        window = n;
    }
    KVCOMP_CHECK_ARG(window > 0, "method window: option window=N (tokens kept per request) is required");
    return std::make_unique<kv_method_window>(window);
}

}  // namespace kvcomp::engine
