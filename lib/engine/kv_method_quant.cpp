// Quantized-block KV methods: see kv_method_quant.h.
#include "engine/kv_method_quant.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <random>

#include "engine/index_tables.h"
#include "engine/kv_method_requant.h"
#include "engine/prompt_attention.h"
#include "engine/window_pages.h"
#include "host/paged/page_pool.h"
#include "host/util/parallel_for.h"

namespace kvcomp::engine {

namespace {

namespace hq = host::quant;

// One request's cache: its block slots (same numbers in every layer) and its fp16 window.
struct request_state {
    std::vector<int32_t> slots;
    std::vector<int32_t> win_pages;  // its window's pages, in slot order (same numbers in every layer)
    int32_t row = -1;         // window row (the probe buffers' index), -1 until the first window token
    int32_t win_len = 0;      // tokens in the window
    int32_t win_start = 0;    // position of the window's first token
    std::mt19937_64 rng;      // decode probe draws
    std::vector<int32_t> probe_pos;  // positions of this window's probe steps (decode)
    bool probe_now = false;          // the current decode step is a probe
};

class quant_method : public kv_method {
  public:
    explicit quant_method(const quant_method_config & c) : c_(c) {}

    std::string name() const override { return c_.name; }

    void allocate(backend & be, const kv_shape & shape) override {
        KVCOMP_CHECK_ARG(shape.n_pages > 0 && shape.page_size > 0 && shape.max_requests > 0,
                         "method ", c_.name, ": bad cache shape");
        shape_ = shape;
        q_.n_kv_heads = shape.n_kv_heads, q_.head_dim = shape.head_dim;
        q_.lo_tokens = int32_t(hq::regular_count(c_.block, c_.ratio));
        q_.hi_tokens = c_.block - q_.lo_tokens;
        q_.hi_bits = c_.hi_bits, q_.lo_bits = c_.lo_bits;
        q_.v_group = c_.v_group > 0 ? c_.v_group : int32_t(shape.head_dim);
        q_.channel_scale = c_.channel_scale;
        KVCOMP_CHECK_ARG(shape.head_dim % 16 == 0 && shape.head_dim % q_.v_group == 0, "method ", c_.name,
                         ": head_dim ", shape.head_dim, " must be a multiple of 16 and of the value group ",
                         q_.v_group);
        // Every cached token fits in the engine's pages. A prompt of n tokens takes blocks_for(n)
        // <= rate * n + 2 blocks, rate = max(r / hi_tokens, (1 - r) / lo_tokens) >= 1 / block (the
        // segment that fills first binds when r * block is not whole); a decode window takes 1 /
        // block per token. Summed over requests: <= rate * tokens + 2 per request, and rate * tokens
        // <= blocks_for(tokens) + 1 (the floor in regular_count), the + 1 only for a split ratio.
        const int64_t tokens = shape.n_pages * shape.page_size;
        n_slots_ = blocks_for(tokens) + (c_.ratio > 0.0 && c_.ratio < 1.0 ? 1 : 0) + 2 * shape.max_requests;
        const size_t pool = size_t(n_slots_ * q_.slot_bytes());
        // Window pages: as many as every request's full window needs (taken as windows fill).
        win_ppr_ = (c_.window + shape.page_size - 1) / shape.page_size;
        win_ = window_pool_shape{shape.max_requests * win_ppr_, shape.n_kv_heads, shape.page_size,
                                 shape.head_dim};
        const size_t win = size_t(win_.token_rows() * win_.head_dim) * 2;
        for (int64_t l = 0; l < shape.n_layers; ++l) {
            pool_.push_back(be.alloc(pool));
            wk_.push_back(be.alloc(win));
            wv_.push_back(be.alloc(win));
        }
        slots_ = std::make_unique<host::page_pool>(int32_t(n_slots_));
        rows_ = std::make_unique<host::page_pool>(int32_t(shape.max_requests));
        win_pool_ = std::make_unique<host::page_pool>(int32_t(win_.n_pages));
        bytes_ = (uint64_t(pool) + 2 * uint64_t(win)) * uint64_t(shape.n_layers);
        probe_cap_ = c_.saliency ? c_.decode_probe_recent + int32_t(std::ceil(c_.decode_probe_p * c_.window * 3)) + 4 : 0;
        if (probe_cap_ > 0)
            for (int64_t l = 0; l < shape.n_layers; ++l) {
                // The decode window's probe queries and their row denominators: state held across
                // steps until the window is flushed, so counted in bytes_allocated.
                const size_t pq = size_t(shape.max_requests * probe_cap_ * q_row()) * 4;
                const size_t pl = size_t(shape.max_requests * probe_cap_ * shape.n_q_heads) * 4;
                probe_q_.push_back(be.alloc(pq));
                probe_lse_.push_back(be.alloc(pl));
                bytes_ += uint64_t(pq + pl);
            }
    }

    uint64_t bytes_allocated() const override { return bytes_; }

    uint64_t bytes_for_tokens(int64_t t) const override {
        t = std::max<int64_t>(t, 0);
        const int64_t windowed = c_.quantize_whole_prompt ? 0 : t % c_.window;
        return uint64_t(blocks_for(t - windowed)) * slot_layers() +
               uint64_t(pages_for(windowed)) * page_layers();
    }

    uint64_t bytes_held(int64_t seq, int64_t tokens) const override {
        auto it = reqs_.find(seq);
        if (it == reqs_.end()) return bytes_for_tokens(tokens);
        return uint64_t(it->second.slots.size()) * slot_layers() +
               uint64_t(it->second.win_pages.size()) * page_layers();
    }

    int64_t pages_in_use() const override {
        return slots_ ? slots_->used_pages() + win_pool_->used_pages() : 0;
    }

    void release(int64_t seq) override {
        auto it = reqs_.find(seq);
        if (it == reqs_.end()) return;
        slots_->release(it->second.slots);
        win_pool_->release(it->second.win_pages);
        if (it->second.row >= 0) rows_->release({it->second.row});
        reqs_.erase(it);
    }

    void attend(backend & be, int64_t layer, const kv_step & s, const tensor & q, const tensor & k, const tensor & v,
                const tensor & out, float scale) override {
        KVCOMP_CHECK_ARG(slots_, "method ", c_.name, ": attend before allocate");
        if (s.prefill) {
            // With saliency the prefill attention also returns every row's log-denominator: the
            // probe rows' then need no second pass over their keys (probe_scores' use_lse).
            tensor lse;
            if (c_.saliency) {
                const size_t bytes = size_t(s.n_tokens * shape_.n_q_heads) * 4;
                if (!prompt_lse_ || prompt_lse_->size() < bytes) prompt_lse_ = be.alloc(bytes);
                lse = make_tensor(prompt_lse_.get(), dtype::f32, {s.n_tokens, shape_.n_q_heads});
            }
            if (!attend_prompt(be, scratch_, shape_, s, q, k, v, out, scale, lse)) lse = tensor{};
            if (layer == 0) plan_prefill(be, s);
            store_prefill(be, layer, s, q, k, v, scale, lse);
        } else {
            if (layer == 0) plan_decode(be, s);
            decode(be, layer, s, q, k, v, out, scale);
        }
    }

    void maintain(backend & be, const kv_step & s) override {
        if (s.prefill) return;
        std::vector<request_state *> full;
        for (int32_t seq : s.seq_ids) {
            request_state & r = reqs_.at(seq);
            if (r.win_len >= c_.window) full.push_back(&r);
        }
        if (full.empty()) return;
        if (c_.recompress_all)
            requant_windows(be, full);
        else
            flush_windows(be, full);
    }

  private:
    // --- sizes -----------------------------------------------------------------------------
    int64_t q_row() const { return shape_.n_q_heads * shape_.head_dim; }
    uint64_t slot_layers() const { return uint64_t(q_.slot_bytes()) * uint64_t(shape_.n_layers); }
    // One window page in every layer, K and V, fp16.
    uint64_t page_layers() const {
        return uint64_t(win_.n_kv_heads * win_.page_tokens * win_.head_dim) * 2 * 2 *
               uint64_t(shape_.n_layers);
    }
    int64_t pages_for(int64_t window_tokens) const {
        return (window_tokens + win_.page_tokens - 1) / win_.page_tokens;
    }
    // Blocks for n quantized tokens of one prompt: the hi and lo segments fill in parallel.
    int64_t blocks_for(int64_t n) const {
        if (n <= 0) return 0;
        const int64_t lo = hq::regular_count(n, c_.ratio), hi = n - lo;
        const auto cdiv = [](int64_t a, int64_t b) { return b > 0 ? (a + b - 1) / b : 0; };
        return std::max(cdiv(hi, q_.hi_tokens), cdiv(lo, q_.lo_tokens));
    }

    // --- device views ----------------------------------------------------------------------
    tensor window_pool(std::vector<buffer_ptr> & pools, int64_t layer) const {
        return make_tensor(pools[size_t(layer)].get(), dtype::f16,
                           {win_.n_pages, win_.n_kv_heads, win_.page_tokens, win_.head_dim});
    }
    kv_layout window_layout() const {
        return {win_.n_pages, win_.n_kv_heads, win_.page_tokens, win_.head_dim};
    }
    tensor block_pool(int64_t layer) const {
        return make_tensor(pool_[size_t(layer)].get(), dtype::u8, {n_slots_ * q_.slot_bytes()});
    }
    std::vector<int32_t> take_slots(int64_t n) {
        std::vector<int32_t> out;
        KVCOMP_CHECK_ARG(n == 0 || slots_->allocate(int32_t(n), out), "method ", c_.name, ": block pool exhausted (",
                         slots_->used_pages(), " of ", slots_->capacity(), " slots in use)");
        return out;
    }
    int32_t take_row() {
        std::vector<int32_t> out;
        KVCOMP_CHECK_ARG(rows_->allocate(1, out), "method ", c_.name, ": no free window row");
        return out[0];
    }
    // Grows r's window pages to cover slots [0, n).
    void cover_window(request_state & r, int64_t n) {
        const int64_t need = pages_for(n) - int64_t(r.win_pages.size());
        if (need <= 0) return;
        std::vector<int32_t> out;
        KVCOMP_CHECK_ARG(win_pool_->allocate(int32_t(need), out), "method ", c_.name,
                         ": window pages exhausted (", win_pool_->used_pages(), " of ", win_pool_->capacity(),
                         " in use)");
        r.win_pages.insert(r.win_pages.end(), out.begin(), out.end());
    }

    // --- prefill ---------------------------------------------------------------------------
    struct prompt_plan {
        int32_t seq, first_row, len, quantized;  // token rows [first_row, first_row + len) of the step
        int32_t first_block = 0;                 // its first block in the step's plan
        std::vector<int32_t> new_slots;          // blocks of the quantized tokens
        std::vector<int32_t> probes;             // probe indices within the prompt (saliency)
    };

    // Views of the step's tables (prefill_views_), uploaded once per prefill step by plan_prefill.
    enum prefill_table : size_t {
        t_plan,          // kv_quantize's plan (slot, n_hi, n_lo) of every block of the step
        t_probe_rows,    // step rows of the probes (saliency only, as every table below)
        t_probe_pos,     // their positions within their prompts
        t_key_pos,       // every step row's position within its prompt
        t_probe_indptr,  // probes of prompt b: [probe_indptr[b], probe_indptr[b+1])
        t_seq_indptr,    // keys of prompt b (the step's seq_indptr)
        t_count,         // select_salient's normalization count of every step row
        t_prompts,       // select_salient's (first_row, quantized, n_hi, first_block) per ranked prompt
        n_prefill_tables
    };

    void plan_prefill(backend & be, const kv_step & s) {
        plans_.clear();
        plan_.clear();
        for (int64_t b = 0; b < s.batch; ++b) {
            prompt_plan p;
            p.seq = s.seq_ids[size_t(b)];
            p.first_row = s.host_seq_indptr[size_t(b)];
            p.len = s.host_seq_indptr[size_t(b) + 1] - p.first_row;
            p.quantized = c_.quantize_whole_prompt ? p.len : p.len - p.len % c_.window;
            request_state & r = reqs_[p.seq];
            r = request_state{};
            r.rng.seed(c_.seed * 0x9E3779B97F4A7C15ull + uint64_t(p.seq));
            r.win_start = p.quantized;
            r.win_len = p.len - p.quantized;
            p.new_slots = take_slots(blocks_for(p.quantized));
            r.slots = p.new_slots;
            if (r.win_len > 0) r.row = take_row(), cover_window(r, r.win_len);
            if (c_.saliency) p.probes = hq::prompt_probes(p.len, c_.probe_recent, c_.probe_random, c_.seed + uint64_t(p.seq));
            // The plan: block bi of the prompt takes the next hi_tokens of its salient tokens and
            // the next lo_tokens of its regular ones (the segments fill in parallel).
            p.first_block = int32_t(plan_.size() / 3);
            const int64_t n_lo = hq::regular_count(p.quantized, c_.ratio), n_hi = p.quantized - n_lo;
            for (size_t bi = 0; bi < p.new_slots.size(); ++bi) {
                const int64_t hi0 = int64_t(bi) * q_.hi_tokens, lo0 = int64_t(bi) * q_.lo_tokens;
                plan_.insert(plan_.end(),
                             {p.new_slots[bi], int32_t(std::clamp<int64_t>(n_hi - hi0, 0, q_.hi_tokens)),
                              int32_t(std::clamp<int64_t>(n_lo - lo0, 0, q_.lo_tokens))});
            }
            plans_.push_back(std::move(p));
        }
        upload_prefill_tables(be, s);
    }

    // The step's layer-independent tables, uploaded once so that a layer enqueues its ops without
    // host work in between: the plan, and with saliency probe_scores' index tables and
    // select_salient's counts and prompt table.
    void upload_prefill_tables(backend & be, const kv_step & s) {
        std::vector<std::vector<int32_t>> t(n_prefill_tables);
        t[t_plan] = plan_;
        n_probes_ = 0, n_ranked_ = 0;
        if (c_.saliency && !plan_.empty()) {
            t[t_key_pos].resize(size_t(s.n_tokens));
            t[t_count].assign(size_t(s.n_tokens), 0);
            t[t_probe_indptr] = {0};
            for (const prompt_plan & p : plans_) {
                for (int32_t i = 0; i < p.len; ++i) t[t_key_pos][size_t(p.first_row + i)] = i;
                if (p.quantized > 0) {
                    for (int32_t x : p.probes)
                        t[t_probe_rows].push_back(p.first_row + x), t[t_probe_pos].push_back(x);
                    std::vector<int32_t> qpos(static_cast<size_t>(p.quantized));
                    for (int32_t i = 0; i < p.quantized; ++i) qpos[size_t(i)] = i;
                    // The host path's normalization (normalized_scores) divides by these same counts.
                    const auto count = hq::normalization_counts(qpos, p.probes, c_.nnz, p.len - 1);
                    for (int32_t i = 0; i < p.quantized; ++i)
                        t[t_count][size_t(p.first_row + i)] =
                            int32_t(std::min<int64_t>(count[size_t(i)], INT32_MAX));
                    const int32_t n_hi = p.quantized - int32_t(hq::regular_count(p.quantized, c_.ratio));
                    t[t_prompts].insert(t[t_prompts].end(), {p.first_row, p.quantized, n_hi, p.first_block});
                    ++n_ranked_;
                }
                t[t_probe_indptr].push_back(int32_t(t[t_probe_rows].size()));
            }
            t[t_seq_indptr] = s.host_seq_indptr;
            n_probes_ = int64_t(t[t_probe_rows].size());
        }
        prefill_views_ = upload_index_tables(be, prefill_tables_, t);
    }

    // Per layer: rank (saliency), quantize the prompt's blocks, copy the remainder to the window.
    // lse: the prompt rows' log-denominators from the prefill attention, or empty.
    void store_prefill(backend & be, int64_t layer, const kv_step & s, const tensor & q, const tensor & k,
                       const tensor & v, float scale, const tensor & lse) {
        const int64_t H = shape_.n_kv_heads;
        if (!plan_.empty()) {
            kv_quantize_params kp;
            kp.q = q_, kp.n_blocks = int64_t(plan_.size() / 3), kp.n_src_tokens = s.n_tokens;
            kp.row_tokens = 0, kp.n_slots = n_slots_;
            // Saliency: one probe_scores call for every prompt of the step, then the ranking on the
            // device (select_salient) or, where the backend lacks it, on the host after a download.
            const tensor sums = c_.saliency ? step_scores(be, s, q, k, scale, lse) : tensor{};
            const tensor rows = sums.valid() ? device_rows(be, s, sums) : tensor{};
            if (rows.valid()) {
                be.run(make_op(kp, {k, v, prefill_views_[t_plan], rows}, {block_pool(layer)}));
            } else {
                const auto t = upload_index_tables(be, layer_tables_, {host_rows(be, s, sums)});
                be.run(make_op(kp, {k, v, prefill_views_[t_plan], t[0]}, {block_pool(layer)}));
            }
        }
        // The unquantized tail (kivi's residual) goes to the request's window, slots 0..n-1.
        for (const prompt_plan & p : plans_) {
            const int32_t n = p.len - p.quantized;
            if (n == 0) continue;
            const request_state & r = reqs_.at(p.seq);
            std::vector<int32_t> pos(static_cast<size_t>(n)), zero(size_t(n), 0);
            for (int32_t i = 0; i < n; ++i) pos[size_t(i)] = i;
            const int32_t n_pages = int32_t(r.win_pages.size());
            const auto t = upload_index_tables(be, layer_tables_, {zero, pos, {0, n_pages}, r.win_pages});
            const size_t off = size_t(p.first_row + p.quantized) * size_t(H * shape_.head_dim) * 4;
            const tensor kr = make_tensor(k.buf, dtype::f32, {n, H, shape_.head_dim}, k.offset + off);
            const tensor vr = make_tensor(v.buf, dtype::f32, {n, H, shape_.head_dim}, v.offset + off);
            be.run(make_op(kv_append_params{window_layout(), n, 1, n_pages}, {kr, vr, t[0], t[1], t[2], t[3]},
                           {window_pool(wk_, layer), window_pool(wv_, layer)}));
        }
    }

    // kv_quantize's rows table [n_blocks, n_kv_heads, block_tokens] of the step, ranked on the
    // device by select_salient from the column sums `sums`; an empty view when the method is told
    // to rank on the host (select=host) or the backend cannot (e.g. OpenCL without fp64).
    tensor device_rows(backend & be, const kv_step & s, const tensor & sums) {
        if (!c_.select_on_device) return {};
        const int64_t H = shape_.n_kv_heads, G = q_.block_tokens(), n_blocks = int64_t(plan_.size() / 3);
        const size_t bytes = size_t(n_blocks * H * G) * 4;
        if (!rows_buf_ || rows_buf_->size() < bytes) rows_buf_ = be.alloc(bytes);
        select_salient_params sp;
        sp.n_kv_heads = H, sp.n_tokens = s.n_tokens, sp.n_prompts = n_ranked_, sp.n_blocks = n_blocks;
        sp.hi_tokens = q_.hi_tokens, sp.lo_tokens = q_.lo_tokens;
        const tensor rows = make_tensor(rows_buf_.get(), dtype::i32, {n_blocks, H, G});
        const op_desc op = make_op(sp, {sums, prefill_views_[t_count], prefill_views_[t_prompts]}, {rows});
        if (!be.supports(op).ok) return {};
        be.run(op);
        return rows;
    }

    // The same rows table built on the host (the fallback): downloads the sums (when ranked by
    // saliency; this waits for the device) and ranks each (prompt, KV head) with host/quant.
    std::vector<int32_t> host_rows(backend & be, const kv_step & s, const tensor & sums_view) {
        const int64_t H = shape_.n_kv_heads, G = q_.block_tokens();
        std::vector<float> sums;
        if (sums_view.valid()) {
            sums.resize(static_cast<size_t>(H * s.n_tokens));
            be.download(*sums_view.buf, sums_view.offset, sums.data(), sums.size() * 4);
        }
        // Per prompt and KV head: the prompt's token indices, salient first (ascending), then
        // regular. The (prompt, head) rankings are independent: they run on host threads.
        std::vector<std::vector<std::vector<int32_t>>> order(plans_.size());
        std::vector<std::pair<size_t, int64_t>> jobs;
        for (size_t pi = 0; pi < plans_.size(); ++pi) {
            if (plans_[pi].quantized == 0) continue;
            order[pi].resize(size_t(H));
            for (int64_t h = 0; h < H; ++h) jobs.emplace_back(pi, h);
        }
        // Host threads pay off from ~64K tokens to rank; below that (a 4K prompt: 32K tokens over
        // 8 heads, ~0.3 ms) waking the pool's workers measured slower than one thread.
        int64_t rank_tokens = 0;
        for (const auto & [pi, h] : jobs) rank_tokens += plans_[pi].quantized;
        const auto run_jobs = [&](const std::function<void(int64_t)> & job) {
            if (rank_tokens >= (int64_t(1) << 16))
                host::parallel_for(int64_t(jobs.size()), job);
            else
                for (int64_t j = 0; j < int64_t(jobs.size()); ++j) job(j);
        };
        run_jobs([&](int64_t j) {
            const auto [pi, h] = jobs[size_t(j)];
            const prompt_plan & p = plans_[pi];
            std::vector<int32_t> & o = order[pi][size_t(h)];
            if (sums.empty()) {
                o.resize(size_t(p.quantized));
                for (int32_t i = 0; i < p.quantized; ++i) o[size_t(i)] = i;
                return;
            }
            std::vector<int32_t> qpos(static_cast<size_t>(p.quantized));
            for (int32_t i = 0; i < p.quantized; ++i) qpos[size_t(i)] = i;
            o = hq::split_by_saliency(
                hq::normalized_scores(sums.data() + h * s.n_tokens + p.first_row, qpos, p.probes, c_.nnz, p.len - 1),
                c_.ratio);
        });
        std::vector<int32_t> rows(plan_.size() / 3 * size_t(H * G), 0);
        run_jobs([&](int64_t j) {
            const auto [pi, h] = jobs[size_t(j)];
            const prompt_plan & p = plans_[pi];
            const std::vector<int32_t> & o = order[pi][size_t(h)];
            const int64_t n_hi = p.quantized - hq::regular_count(p.quantized, c_.ratio);
            for (size_t bi = 0; bi < p.new_slots.size(); ++bi) {
                const int64_t blk = p.first_block + int64_t(bi);
                const int32_t hi = plan_[size_t(3 * blk + 1)], lo = plan_[size_t(3 * blk + 2)];
                const int64_t hi0 = int64_t(bi) * q_.hi_tokens, lo0 = int64_t(bi) * q_.lo_tokens;
                int32_t * dst = rows.data() + (blk * H + h) * G;
                for (int32_t x = 0; x < hi; ++x) dst[x] = p.first_row + o[size_t(hi0 + x)];
                for (int32_t x = 0; x < lo; ++x) dst[hi + x] = p.first_row + o[size_t(n_hi + lo0 + x)];
            }
        });
        return rows;
    }

    // Probe column sums of every prompt of the step, f32 [n_kv_heads, n_tokens] (column = the
    // step's token row), from one ragged probe_scores call (request b: its probes, its prompt's
    // keys) over the tables plan_prefill uploaded; a view of the device buffer (host_rows
    // downloads it, select_salient reads it in place). Prompts that quantize nothing get no probes
    // (their columns stay 0 and are not read). With `lse` (every prompt row's log-denominator, f32
    // [n_tokens, n_q_heads]) the probe rows' are gathered from it. Empty when the step has no probes.
    tensor step_scores(backend & be, const kv_step & s, const tensor & q, const tensor & k, float scale,
                       const tensor & lse) {
        const int64_t H = shape_.n_kv_heads, hd = shape_.head_dim, n = s.n_tokens, np = n_probes_;
        if (np == 0) return {};
        const auto & t = prefill_views_;
        const int64_t QH = shape_.n_q_heads;
        // Layout: probe q | scores | probe lse (each 16-byte aligned).
        const size_t qbytes = size_t(np * q_row()) * 4, sbytes = (size_t(H * n) * 4 + 15) / 16 * 16,
                     lbytes = lse.buf ? size_t(np * QH) * 4 : 0;
        if (!scores_buf_ || scores_buf_->size() < qbytes + sbytes + lbytes)
            scores_buf_ = be.alloc((qbytes + sbytes + lbytes) * 2);
        const tensor qp = make_tensor(scores_buf_.get(), dtype::f32, {np, q_row()});
        const tensor sc = make_tensor(scores_buf_.get(), dtype::f32, {H, n}, qbytes);
        be.run(make_op(
            get_rows_params{np, q_row(), q.numel() / q_row()},
            {make_tensor(q.buf, dtype::f32, {q.numel() / q_row(), q_row()}, q.offset), t[t_probe_rows]},
            {qp}));
        tensor lp;
        if (lse.buf) {
            lp = make_tensor(scores_buf_.get(), dtype::f32, {np, QH}, qbytes + sbytes);
            be.run(make_op(get_rows_params{np, QH, s.n_tokens}, {lse, t[t_probe_rows]}, {lp}));
        }
        probe_scores_params ps;
        ps.n_probes = np, ps.n_keys = n, ps.n_q_heads = shape_.n_q_heads, ps.n_kv_heads = H, ps.head_dim = hd;
        ps.scale = scale, ps.batch = s.batch, ps.use_lse = lse.buf != nullptr;
        const tensor kr = make_tensor(k.buf, dtype::f32, {n, H, hd}, k.offset);
        be.run(make_op(ps,
                       {make_tensor(qp.buf, dtype::f32, {np, shape_.n_q_heads, hd}, qp.offset),
                        t[t_probe_pos], kr, t[t_key_pos], lp, t[t_probe_indptr], t[t_seq_indptr]},
                       {sc}));
        return sc;
    }

    // --- decode ----------------------------------------------------------------------------
    void plan_decode(backend & be, const kv_step & s) {
        // The window page tables are per request of the step: row b of the attention's win_pages
        // and kv_append's pages [b * win_ppr, (b + 1) * win_ppr) (entries past a window's pages: 0).
        std::vector<int32_t> bindptr{0}, bindices, win, wpos, wpages, bidx(size_t(s.batch)),
            pindptr(size_t(s.batch) + 1);
        for (int64_t b = 0; b < s.batch; ++b) {
            request_state & r = reqs_.at(s.seq_ids[size_t(b)]);
            if (r.row < 0) r.row = take_row();
            const int32_t slot = r.win_len;  // the new token's window slot
            cover_window(r, slot + 1);
            if (r.win_len == 0) r.win_start = s.host_positions[size_t(b)];
            r.probe_now = c_.saliency && (slot >= c_.window - c_.decode_probe_recent ||
                                          std::uniform_real_distribution<double>(0, 1)(r.rng) < c_.decode_probe_p) &&
                          int32_t(r.probe_pos.size()) < probe_cap_;
            if (r.probe_now) r.probe_pos.push_back(s.host_positions[size_t(b)]);
            ++r.win_len;
            bindices.insert(bindices.end(), r.slots.begin(), r.slots.end());
            bindptr.push_back(int32_t(bindices.size()));
            win.insert(win.end(), {int32_t(b), 0, r.win_len});
            wpos.push_back(slot);
            wpages.insert(wpages.end(), r.win_pages.begin(), r.win_pages.end());
            wpages.resize(size_t((b + 1) * win_ppr_), 0);
            bidx[size_t(b)] = int32_t(b);
            pindptr[size_t(b)] = int32_t(b * win_ppr_);
        }
        pindptr[size_t(s.batch)] = int32_t(s.batch * win_ppr_);
        nnz_blocks_ = int64_t(bindices.size());
        int64_t most = 0;
        for (int64_t b = 0; b < s.batch; ++b)
            most = std::max<int64_t>(most, int64_t(bindptr[size_t(b) + 1] - bindptr[size_t(b)]) * q_.block_tokens() +
                                               win[size_t(b) * 3 + 2]);
        max_tokens_ = most;
        // Views: 0 block_indptr, 1 block_indices, 2 win, 3 window slot of each new token,
        // 4 batch_idx, 5 window page indptr, 6 window pages [batch, win_ppr].
        decode_tables_ =
            upload_index_tables(be, step_tables_, {bindptr, bindices, win, wpos, bidx, pindptr, wpages});
        if (!lse_ || lse_->size() < size_t(s.batch * shape_.n_q_heads) * 4)
            lse_ = be.alloc(size_t(std::max<int64_t>(s.batch, shape_.max_requests) * shape_.n_q_heads) * 4);
    }

    void decode(backend & be, int64_t layer, const kv_step & s, const tensor & q, const tensor & k, const tensor & v,
                const tensor & out, float scale) {
        const auto & t = decode_tables_;
        // The new token into its window slot: its request's pages, position = slot.
        be.run(make_op(kv_append_params{window_layout(), s.n_tokens, s.batch, s.batch * win_ppr_},
                       {k, v, t[4], t[3], t[5], t[6]}, {window_pool(wk_, layer), window_pool(wv_, layer)}));
        attn_decode_quant_params p;
        p.q = q_, p.batch = s.batch, p.n_q_heads = shape_.n_q_heads, p.n_slots = n_slots_;
        p.nnz_blocks = nnz_blocks_, p.n_win_rows = s.batch, p.win_tokens = c_.window;
        p.n_win_pages = win_.n_pages, p.win_page_tokens = win_.page_tokens;
        p.max_tokens = max_tokens_, p.scale = scale;
        const tensor lse = make_tensor(lse_.get(), dtype::f32, {s.batch, shape_.n_q_heads});
        be.run(make_op(p,
                       {q, block_pool(layer), t[0], t[1], window_pool(wk_, layer), window_pool(wv_, layer),
                        t[2], make_tensor(t[6].buf, dtype::i32, {s.batch, win_ppr_}, t[6].offset)},
                       {out, lse}));
        if (!c_.saliency) return;
        // Probe steps keep their query and its full-row log-denominator for the window's ranking.
        for (int64_t b = 0; b < s.batch; ++b) {
            request_state & r = reqs_.at(s.seq_ids[size_t(b)]);
            if (!r.probe_now) continue;
            const int64_t slot = int64_t(r.row) * probe_cap_ + int64_t(r.probe_pos.size()) - 1;
            const int64_t nq = shape_.n_q_heads;
            be.run(make_op(copy_params{q_row()}, {make_tensor(q.buf, dtype::f32, {q_row()}, q.offset + size_t(b * q_row()) * 4)},
                           {make_tensor(probe_q_[size_t(layer)].get(), dtype::f32, {q_row()}, size_t(slot * q_row()) * 4)}));
            be.run(make_op(copy_params{nq}, {make_tensor(lse_.get(), dtype::f32, {nq}, size_t(b * nq) * 4)},
                           {make_tensor(probe_lse_[size_t(layer)].get(), dtype::f32, {nq}, size_t(slot * nq) * 4)}));
        }
    }

    // The full windows of `full` (sorted by window row), gathered from their pages into the
    // flush workspace: f32 K [n_full, n_kv_heads, window, head_dim] (and V after it when
    // `with_v`); window f's tokens are numbered f * window + slot. The gather table is uploaded
    // once per flush (gather_ids_).
    std::pair<tensor, tensor> gather_full(backend & be, int64_t layer, size_t n_full, bool with_v) {
        const int64_t n_ids = int64_t(n_full) * win_.n_kv_heads * c_.window, hd = win_.head_dim;
        const size_t bytes = size_t(n_ids * hd) * 4;
        if (!flush_ws_ || flush_ws_->size() < 2 * bytes) flush_ws_ = be.alloc(2 * bytes);
        const tensor kw =
            make_tensor(flush_ws_.get(), dtype::f32, {int64_t(n_full), win_.n_kv_heads, c_.window, hd});
        const tensor vw = make_tensor(flush_ws_.get(), dtype::f32,
                                      {int64_t(n_full), win_.n_kv_heads, c_.window, hd}, bytes);
        const tensor kflat = make_tensor(flush_ws_.get(), dtype::f32, {n_ids, hd});
        gather_window(be, win_, *wk_[size_t(layer)], gather_ids_, n_ids, kflat);
        if (with_v)
            gather_window(be, win_, *wv_[size_t(layer)], gather_ids_, n_ids,
                          make_tensor(flush_ws_.get(), dtype::f32, {n_ids, hd}, bytes));
        return {kw, vw};
    }

    // Probe column sums of the full windows of `full` (sorted by window row), f32 [n_layers,
    // n_kv_heads, n_keys] with n_keys = full.size() * window (column f * window + slot), from one
    // ragged probe_scores call per layer over the gathered windows and one download for all
    // layers: a flush synchronizes once, whatever the number of requests and layers. The call's
    // requests come in pairs per window row r (the probe buffers are indexed by row): (r's probe
    // steps, r's window keys if r flushes), then (r's unused probe slots, no keys), so every probe
    // slot of the buffers belongs to a request and rows that do not flush have no keys. Empty when
    // no window has a probe.
    std::vector<float> window_scores(backend & be, const std::vector<request_state *> & full, int64_t & n_keys) {
        const int64_t H = shape_.n_kv_heads, hd = shape_.head_dim, W = c_.window, nq = shape_.n_q_heads;
        int32_t rows = 0;
        bool any = false;
        for (const request_state * r : full) rows = std::max(rows, r->row + 1), any = any || !r->probe_pos.empty();
        if (!c_.saliency || !any) return {};
        std::vector<int32_t> n_probes(size_t(rows), 0), flushes(size_t(rows), 0);
        std::vector<int32_t> probe_pos(size_t(rows * probe_cap_), 0), key_pos;
        for (const request_state * r : full) {
            n_probes[size_t(r->row)] = int32_t(r->probe_pos.size());
            flushes[size_t(r->row)] = 1;
            std::copy(r->probe_pos.begin(), r->probe_pos.end(), probe_pos.begin() + int64_t(r->row) * probe_cap_);
            for (int64_t i = 0; i < W; ++i) key_pos.push_back(r->win_start + int32_t(i));
        }
        std::vector<int32_t> probe_indptr{0}, key_indptr{0};
        int32_t keys = 0;
        for (int32_t row = 0; row < rows; ++row) {
            keys += flushes[size_t(row)] * int32_t(W);
            probe_indptr.push_back(row * probe_cap_ + n_probes[size_t(row)]);
            key_indptr.push_back(keys);
            probe_indptr.push_back((row + 1) * probe_cap_);
            key_indptr.push_back(keys);
        }
        n_keys = int64_t(full.size()) * W;
        const int64_t np = int64_t(rows) * probe_cap_, per_layer = H * n_keys;
        const auto t = upload_index_tables(be, layer_tables_, {probe_pos, key_pos, probe_indptr, key_indptr});
        const size_t sbytes = size_t(shape_.n_layers * per_layer) * 4;
        if (!scores_buf_ || scores_buf_->size() < sbytes) scores_buf_ = be.alloc(sbytes * 2);
        probe_scores_params ps;
        ps.n_probes = np, ps.n_keys = n_keys, ps.n_q_heads = nq, ps.n_kv_heads = H, ps.head_dim = hd;
        ps.row_tokens = W, ps.scale = float(1.0 / std::sqrt(double(hd))), ps.use_lse = true;
        ps.batch = 2 * int64_t(rows);
        for (int64_t layer = 0; layer < shape_.n_layers; ++layer) {
            const tensor kw = gather_full(be, layer, full.size(), false).first;
            be.run(make_op(ps,
                           {make_tensor(probe_q_[size_t(layer)].get(), dtype::f32, {np, nq, hd}), t[0], kw, t[1],
                            make_tensor(probe_lse_[size_t(layer)].get(), dtype::f32, {np, nq}), t[2], t[3]},
                           {make_tensor(scores_buf_.get(), dtype::f32, {H, n_keys}, size_t(layer * per_layer) * 4)}));
        }
        std::vector<float> sums(static_cast<size_t>(shape_.n_layers * per_layer));
        be.download(*scores_buf_, 0, sums.data(), sums.size() * 4);
        return sums;
    }

    // The gather table of `full`'s windows (window_pages.h), uploaded for the flush's layers.
    void upload_gather_ids(backend & be, const std::vector<request_state *> & full) {
        std::vector<int32_t> ids;
        for (const request_state * r : full) append_window_rows(ids, win_, r->win_pages, c_.window);
        gather_ids_ = upload_index_tables(be, gather_tables_, {ids})[0];
    }

    // Empties the windows of `full`: their pages go back to the pool.
    void empty_windows(const std::vector<request_state *> & full) {
        for (request_state * r : full) {
            win_pool_->release(r->win_pages);
            r->win_pages.clear();
            r->win_len = 0;
            r->probe_pos.clear();
        }
    }

    // Quantizes the full windows of `full` into window / block blocks each (one kv_quantize per
    // layer for all of them) and empties them.
    void flush_windows(backend & be, std::vector<request_state *> full) {
        const int64_t H = shape_.n_kv_heads, W = c_.window, G = q_.block_tokens();
        const int64_t n_blocks = W / G;
        std::sort(full.begin(), full.end(),
                  [](const request_state * a, const request_state * b) { return a->row < b->row; });
        std::vector<std::vector<int32_t>> new_slots;
        for (size_t f = 0; f < full.size(); ++f) new_slots.push_back(take_slots(n_blocks));
        upload_gather_ids(be, full);
        int64_t n_keys = 0;
        const std::vector<float> sums = window_scores(be, full, n_keys);
        const int64_t n_lo = hq::regular_count(W, c_.ratio), n_hi = W - n_lo;
        for (int64_t layer = 0; layer < shape_.n_layers; ++layer) {
            std::vector<int32_t> plan, rows;
            for (size_t f = 0; f < full.size(); ++f) {
                const request_state & r = *full[f];
                std::vector<std::vector<int32_t>> order(static_cast<size_t>(H));
                if (!sums.empty() && !r.probe_pos.empty()) {
                    std::vector<int32_t> key_pos(static_cast<size_t>(W));
                    for (int64_t i = 0; i < W; ++i) key_pos[size_t(i)] = r.win_start + int32_t(i);
                    for (int64_t h = 0; h < H; ++h)
                        order[size_t(h)] = hq::split_by_saliency(
                            hq::normalized_scores(sums.data() + (layer * H + h) * n_keys + int64_t(f) * W,
                                                  key_pos, r.probe_pos, hq::nnz_mode::probe, key_pos.back()),
                            c_.ratio);
                } else {
                    for (auto & o : order) {
                        o.resize(size_t(W));
                        for (int64_t i = 0; i < W; ++i) o[size_t(i)] = int32_t(i);
                    }
                }
                // Block i takes hi tokens [i*hi_cap, ...) of the salient list and lo tokens likewise;
                // tokens are numbered in the gathered windows (f * window + slot).
                const int32_t base = int32_t(f) * int32_t(W);
                for (int64_t bi = 0; bi < n_blocks; ++bi) {
                    const int32_t hi = int32_t(std::clamp<int64_t>(n_hi - bi * q_.hi_tokens, 0, q_.hi_tokens));
                    const int32_t lo = int32_t(std::clamp<int64_t>(n_lo - bi * q_.lo_tokens, 0, q_.lo_tokens));
                    plan.insert(plan.end(), {new_slots[f][size_t(bi)], hi, lo});
                    for (int64_t h = 0; h < H; ++h) {
                        std::vector<int32_t> blk(size_t(G), 0);
                        const auto & o = order[size_t(h)];
                        for (int32_t j = 0; j < hi; ++j) blk[size_t(j)] = base + o[size_t(bi * q_.hi_tokens + j)];
                        for (int32_t j = 0; j < lo; ++j)
                            blk[size_t(hi + j)] = base + o[size_t(n_hi + bi * q_.lo_tokens + j)];
                        rows.insert(rows.end(), blk.begin(), blk.end());
                    }
                }
            }
            const auto t = upload_index_tables(be, layer_tables_, {plan, rows});
            const auto [kw, vw] = gather_full(be, layer, full.size(), true);
            kv_quantize_params kp;
            kp.q = q_, kp.n_blocks = int64_t(plan.size() / 3), kp.n_src_tokens = int64_t(full.size()) * W;
            kp.row_tokens = W, kp.n_slots = n_slots_;
            be.run(make_op(kp, {kw, vw, t[0], t[1]}, {block_pool(layer)}));
        }
        for (size_t f = 0; f < full.size(); ++f)
            full[f]->slots.insert(full[f]->slots.end(), new_slots[f].begin(), new_slots[f].end());
        empty_windows(full);
    }

    // recompress=all: every token of the requests re-quantized (kv_method_requant.h), windows emptied.
    void requant_windows(backend & be, const std::vector<request_state *> & full) {
        requant_state st{q_,          shape_,
                         c_.window,   c_.ratio,
                         c_.saliency, probe_cap_,
                         n_slots_,    pool_,
                         win_,        wk_,
                         wv_,         probe_q_,
                         probe_lse_,  [this](int64_t n) { return take_slots(n); }};
        std::vector<requant_request> reqs;
        for (request_state * r : full)
            reqs.push_back({&r->slots, r->row, r->win_start, &r->probe_pos, &r->win_pages});
        requant_.flush(be, st, reqs);
        empty_windows(full);
    }

    quant_method_config c_;
    kv_shape shape_;
    qblock_layout q_;
    int64_t n_slots_ = 0, nnz_blocks_ = 0, max_tokens_ = 0;
    int32_t probe_cap_ = 0;
    std::vector<buffer_ptr> pool_, wk_, wv_, probe_q_, probe_lse_;
    window_pool_shape win_;  // the window pages of every layer's wk_ / wv_
    int64_t win_ppr_ = 0;    // pages per full window
    std::unique_ptr<host::page_pool> win_pool_;
    buffer_ptr flush_ws_, gather_tables_;  // a flush's gathered windows and their gather table
    tensor gather_ids_;
    buffer_ptr scratch_, step_tables_, layer_tables_, scores_buf_, lse_, prompt_lse_;
    buffer_ptr prefill_tables_, rows_buf_;  // a prefill step's tables; select_salient's rows
    std::vector<tensor> decode_tables_, prefill_views_;
    std::unique_ptr<host::page_pool> slots_, rows_;
    std::map<int64_t, request_state> reqs_;
    std::vector<prompt_plan> plans_;
    std::vector<int32_t> plan_;            // the prefill step's kv_quantize plan [n_blocks, 3]
    int64_t n_probes_ = 0, n_ranked_ = 0;  // the step's probes; its prompts with quantized tokens
    requantizer requant_;
    uint64_t bytes_ = 0;
};

}  // namespace

std::unique_ptr<kv_method> make_quant_method(const quant_method_config & cfg) {
    return std::make_unique<quant_method>(cfg);
}

}  // namespace kvcomp::engine
