// Low-rank KV methods zack / fdc / palu: see kv_method_lowrank.h.
#include "engine/kv_method_lowrank.h"

#include <algorithm>

#include "core/ragged_q4.h"
#include "engine/calibrate.h"
#include "engine/lowrank_device.h"
#include "host/lowrank/decode_schedule.h"

namespace kvcomp::engine {

namespace {

namespace hl = host::lowrank;

class lowrank_method : public kv_method {
  public:
    explicit lowrank_method(const lowrank_method_config & c)
        : c_(c), palu_(c.choice.method == hl::lowrank_method::palu) {}

    std::string name() const override { return hl::lowrank_method_name(c_.choice.method); }

    void prepare(backend & be, const model_context & m) override {
        const host::model_config & cfg = m.config;
        KVCOMP_CHECK_ARG(c_.kv_bits == 16 || !palu_, "method palu: kv_bits=", c_.kv_bits,
                         " is not supported (palu stores f16 latents; kv_bits=4 is for zack and fdc)");
        lowrank_choice choice = c_.choice;
        choice.equalize = q4() && c_.equalize;
        choice.fold_qk = c_.fold_qk;
        plan_ =
            make_lowrank_plan(choice, cfg, engine_model_hash(m.model_dir, m.random_weights, m.weight_seed));
        if (c_.padded_prefill) add_padded_prefill(plan_, palu_);
        dev_ = upload_lowrank_plan(be, plan_);
        folded_ = fold_model(be, cfg, m.weights, plan_, dev_, palu_);
        weight_bytes_ = folded_.bytes + dev_.bytes();
        // Palu's prefill applies RoPE to the reconstructed keys with the engine's rope parameters.
        rope_theta_ = float(cfg.rope.theta);
        freq_factors_ = m.weights.freq_factors.get();
    }

    const layer_projection * projection(int64_t layer) const override {
        return folded_.projections.empty() ? nullptr : &folded_.projections[size_t(layer)];
    }

    uint64_t weight_bytes() const override { return weight_bytes_; }

    void allocate(backend & be, const kv_shape & shape) override {
        KVCOMP_CHECK_ARG(!plan_.layers.empty(), "method ", name(), ": allocate() before prepare()");
        KVCOMP_CHECK_ARG(shape.n_layers == int64_t(plan_.layers.size()) &&
                             shape.n_kv_heads == plan_.n_kv_heads && shape.head_dim == plan_.head_dim,
                         "method ", name(), ": cache shape disagrees with the calibration");
        shape_ = shape;
        for (const lowrank_layer & L : plan_.layers) {
            const ragged_layout r = layout(L);
            const int64_t k_row = q4() ? r.k_row_bytes : L.k_total * 2,
                          v_row = q4() ? r.v_row_bytes : L.v_total * 2;
            k_.push_back(be.alloc(size_t(shape.n_pages * shape.page_size * k_row)));
            v_.push_back(be.alloc(size_t(shape.n_pages * shape.page_size * v_row)));
            bytes_ += k_.back()->size() + v_.back()->size();
            bytes_per_token_ += k_row + v_row;
        }
    }

    uint64_t bytes_allocated() const override { return bytes_; }

    uint64_t bytes_for_tokens(int64_t tokens) const override {
        const int64_t pages = (tokens + shape_.page_size - 1) / shape_.page_size;
        return uint64_t(pages * shape_.page_size * bytes_per_token_);
    }

    void attend(backend & be, int64_t layer, const kv_step & s, const tensor & q, const tensor & k,
                const tensor & v, const tensor & out, float scale) override {
        const lowrank_layer & L = plan_.layers[size_t(layer)];
        const lowrank_device_layer & D = dev_.layers[size_t(layer)];
        const int64_t n = s.n_tokens, nkv = shape_.n_kv_heads, d = shape_.head_dim;
        grow_scratch(be, n);
        const ragged_layout kv = layout(L);
        const tensor kp = pages(*k_[size_t(layer)], L, false), vp = pages(*v_[size_t(layer)], L, true);

        // The cached K: k' = k R_k (post-RoPE, zack/fdc) or the latent k R_k (pre-RoPE, palu); on a
        // fold_qk layer k is k' already (the folded W_K made it).
        tensor kc = k;
        if (!L.fold_qk) {
            kc = scratch_f32(0, {n, L.k_total});
            be.run(make_op(head_project_params{n, nkv, nkv * d, L.k_total, D.bases.numel()},
                           {k, D.bases, D.k_table}, {kc}));
        }
        be.run(make_op(kv_append_ragged_params{kv, n, s.batch, s.nnz_pages},
                       {kc, v, s.batch_idx, s.positions, s.indptr, s.indices, D.heads}, {kp, vp}));
        if (s.prefill)
            prefill(be, L, D, s, q, kc, v, out, scale);
        else
            decode(be, layer, L, D, s, q, kp, vp, out, scale);
    }

  private:
    bool q4() const { return c_.kv_bits == 4; }
    // Palu's path (cached pre-RoPE latent, keys rebuilt and rotated to attend) on layers with RoPE;
    // a fold_qk layer attends on q' and the cached k' like zack/fdc.
    bool rebuilds_keys(const lowrank_layer & L) const { return palu_ && !L.fold_qk; }
    // q' of `q`: the online projection, or q itself on a fold_qk layer (the folded W_Q made it).
    tensor project_q(backend & be, const lowrank_layer & L, const lowrank_device_layer & D, const tensor & q,
                     int64_t n) const {
        if (L.fold_qk) return q;
        const int64_t nq = shape_.n_q_heads, d = shape_.head_dim, g = nq / shape_.n_kv_heads;
        const tensor qa = scratch_f32(1, {n, g * L.k_total});
        be.run(make_op(head_project_params{n, nq, nq * d, g * L.k_total, D.bases.numel()},
                       {q, D.bases, D.q_table}, {qa}));
        return qa;
    }
    ragged_layout layout(const lowrank_layer & L) const {
        ragged_layout r{shape_.n_pages, shape_.n_kv_heads, shape_.page_size,
                        L.k_total,      L.v_total,         L.max_width};
        r.max_k_width = *std::max_element(L.k.begin(), L.k.end());
        r.max_v_width = *std::max_element(L.v.begin(), L.v.end());
        if (q4())
            r.bits = 4, r.k_row_bytes = ragged_q4_row_total(L.k), r.v_row_bytes = ragged_q4_row_total(L.v);
        return r;
    }
    // A layer's K or V pool: f16 elements, or the q4 rows' bytes.
    tensor pages(buffer & b, const lowrank_layer & L, bool v) const {
        const ragged_layout r = layout(L);
        if (q4())
            return make_tensor(&b, dtype::u8,
                               {shape_.n_pages, shape_.page_size * (v ? r.v_row_bytes : r.k_row_bytes)});
        return make_tensor(&b, dtype::f16, {shape_.n_pages, shape_.page_size * (v ? L.v_total : L.k_total)});
    }

    // Scratch regions per token (f32 unless said), each starting on a 256-byte boundary (vector
    // loads of the attention kernels):
    //   0: cached K [k_max]
    //   1: q' [g * k_max] (decode, ragged prefill); padded prefill of zack/fdc: padded q' [nq * d];
    //      palu prefill: the reconstructed keys [nkv * d]
    //   2: f16 K for prefill: [k_max] (ragged zack/fdc) or [nkv * d] (padded, palu)
    //   3: f16 V for prefill: [v_max] (ragged) or [nkv * d] (padded)
    //   4: padded prefill only: padded K, then padded V [nkv * d] (each converted to f16 before the
    //      next; the queue is in order), then the padded attention output [nq * d]
    // (k_max / v_max: the largest k_total / v_total of a layer.)
    int64_t k_max() const {
        int64_t m = 0;
        for (const auto & L : plan_.layers) m = std::max(m, L.k_total);
        return m;
    }
    int64_t v_max() const {
        int64_t m = 0;
        for (const auto & L : plan_.layers) m = std::max(m, L.v_total);
        return m;
    }
    void grow_scratch(backend & be, int64_t n) {
        if (n <= scratch_tokens_) return;
        const int64_t g = shape_.n_q_heads / shape_.n_kv_heads, d = shape_.head_dim;
        const int64_t full_kv = shape_.n_kv_heads * d, full_q = shape_.n_q_heads * d;
        const bool pad = c_.padded_prefill;
        bool any_fold = false;
        for (const auto & L : plan_.layers) any_fold = any_fold || L.fold_qk;
        // Region 1 holds palu's rebuilt keys, or the padded q' of zack/fdc and of fold_qk layers.
        const int64_t q_width = std::max(palu_ ? full_kv : 0, pad && (!palu_ || any_fold) ? full_q : 0);
        const int64_t bytes[5] = {k_max() * 4, std::max(g * k_max(), q_width) * 4,
                                  (pad || palu_ ? full_kv : k_max()) * 2, (pad ? full_kv : v_max()) * 2,
                                  pad ? full_q * 4 : 0};
        int64_t at = 0;
        for (int r = 0; r < 5; ++r) {
            region_[r] = at;
            at += (n * bytes[r] + 255) / 256 * 256;
        }
        scratch_ = be.alloc(size_t(at));
        scratch_tokens_ = n;
    }
    tensor scratch_f32(int r, std::initializer_list<int64_t> shape) const {
        return make_tensor(scratch_.get(), dtype::f32, shape, size_t(region_[r]));
    }
    tensor scratch_f16(int r, std::initializer_list<int64_t> shape) const {
        return make_tensor(scratch_.get(), dtype::f16, shape, size_t(region_[r]));
    }

    void prefill(backend & be, const lowrank_layer & L, const lowrank_device_layer & D, const kv_step & s,
                 const tensor & q, const tensor & kc, const tensor & v, const tensor & out, float scale) {
        if (c_.padded_prefill)
            prefill_padded(be, L, D, s, q, kc, v, out, scale);
        else
            prefill_ragged(be, L, D, s, q, kc, v, out, scale);
    }

    // Palu's keys as decode sees them: latent R_k^T, then RoPE, into region 1 [n, nkv, d] (f32).
    tensor reconstruct_keys(backend & be, const lowrank_layer & L, const lowrank_device_layer & D,
                            const kv_step & s, const tensor & kc) {
        const int64_t n = s.n_tokens, nkv = shape_.n_kv_heads, d = shape_.head_dim;
        const tensor rec = scratch_f32(1, {n, nkv, d});
        be.run(make_op(head_project_params{n, nkv, L.k_total, nkv * d, D.aux.numel()},
                       {kc, D.aux, D.rec_table}, {rec}));
        rope_params rp;
        rp.n_tokens = n, rp.n_heads = nkv, rp.head_dim = d, rp.rot_dim = d, rp.theta = rope_theta_;
        rp.style = rope_style::neox;
        const tensor ff = freq_factors_ ? make_tensor(freq_factors_, dtype::f32, {d / 2}) : tensor{};
        be.run(make_op(rp, {rec, s.positions, ff}, {rec}));
        return rec;
    }

    void prefill_ragged(backend & be, const lowrank_layer & L, const lowrank_device_layer & D,
                        const kv_step & s, const tensor & q, const tensor & kc, const tensor & v,
                        const tensor & out, float scale) {
        const int64_t n = s.n_tokens, nq = shape_.n_q_heads, nkv = shape_.n_kv_heads, d = shape_.head_dim;
        attn_prefill_ragged_params p;
        p.batch = s.batch, p.n_tokens = n, p.n_q_heads = nq, p.n_kv_heads = nkv, p.v_total = L.v_total;
        p.max_seq_len = s.max_seq_len, p.scale = scale, p.balanced = c_.prefill_balance;
        tensor qa, k16, heads;
        if (rebuilds_keys(L)) {
            // Queries stay at the full head_dim.
            const tensor rec = reconstruct_keys(be, L, D, s, kc);
            k16 = scratch_f16(2, {n, nkv * d});
            be.run(make_op(copy_params{n * nkv * d}, {rec}, {k16}));
            qa = q, heads = D.heads_full;
            p.k_total = nkv * d, p.max_width = std::max(L.max_width, d);
        } else {
            qa = project_q(be, L, D, q, n);
            k16 = scratch_f16(2, {n, L.k_total});
            be.run(make_op(copy_params{n * L.k_total}, {kc}, {k16}));
            heads = D.heads;
            p.k_total = L.k_total, p.max_width = L.max_width;
        }
        const tensor v16 = scratch_f16(3, {n, L.v_total});
        be.run(make_op(copy_params{n * L.v_total}, {v}, {v16}));
        be.run(make_op(p, {qa, k16, v16, s.seq_indptr, heads}, {out}));
    }

    // Every head zero-padded to head_dim and the standard attn_prefill (kv_method_lowrank.h). The
    // fp16 K and V are the same values the ragged path attends to (padding with [I_w | 0] is exact).
    void prefill_padded(backend & be, const lowrank_layer & L, const lowrank_device_layer & D,
                        const kv_step & s, const tensor & q, const tensor & kc, const tensor & v,
                        const tensor & out, float scale) {
        const int64_t n = s.n_tokens, nq = shape_.n_q_heads, nkv = shape_.n_kv_heads, d = shape_.head_dim;
        const int64_t g = nq / nkv, n_pad = D.pad_bases.numel();
        const tensor k16 = scratch_f16(2, {n, nkv, d}), v16 = scratch_f16(3, {n, nkv, d});
        const tensor staged = scratch_f32(4, {n, nkv, d});  // padded K, then padded V (f32)
        tensor qa = q;
        if (rebuilds_keys(L)) {
            const tensor rec = reconstruct_keys(be, L, D, s, kc);
            be.run(make_op(copy_params{n * nkv * d}, {rec}, {k16}));
        } else {
            // q_pad_table: q -> padded q' (R_k folded in), or on a fold_qk layer q' -> padded q'.
            const int64_t q_in = L.fold_qk ? g * L.k_total : nq * d;
            qa = scratch_f32(1, {n, nq, d});
            be.run(make_op(head_project_params{n, nq, q_in, nq * d, n_pad}, {q, D.pad_bases, D.q_pad_table},
                           {qa}));
            be.run(make_op(head_project_params{n, nkv, L.k_total, nkv * d, n_pad},
                           {kc, D.pad_bases, D.k_pad_table}, {staged}));
            be.run(make_op(copy_params{n * nkv * d}, {staged}, {k16}));
        }
        be.run(make_op(head_project_params{n, nkv, L.v_total, nkv * d, n_pad},
                       {v, D.pad_bases, D.v_pad_table}, {staged}));
        be.run(make_op(copy_params{n * nkv * d}, {staged}, {v16}));
        attn_prefill_params p;
        p.batch = s.batch, p.n_tokens = n, p.n_q_heads = nq, p.n_kv_heads = nkv, p.head_dim = d;
        p.max_seq_len = s.max_seq_len, p.scale = scale;
        const tensor padded_out = scratch_f32(4, {n, nq, d});
        be.run(make_op(p, {qa, k16, v16, s.seq_indptr}, {padded_out}));
        be.run(make_op(head_project_params{n, nq, nq * d, g * L.v_total, n_pad},
                       {padded_out, D.pad_bases, D.unpad_table}, {out}));
    }

    void decode(backend & be, int64_t layer, const lowrank_layer & L, const lowrank_device_layer & D,
                const kv_step & s, const tensor & q, const tensor & kp, const tensor & vp, const tensor & out,
                float scale) {
        if (layer == 0) build_schedules(be, s);
        const step_schedule & sc = sched_[size_t(layer)];
        const tensor schedule = make_tensor(sched_buf_.get(), dtype::i32,
                                            {std::max<int64_t>(sc.n_tasks, 1) * 4}, sc.schedule_at * 4);
        const tensor merge = make_tensor(sched_buf_.get(), dtype::i32,
                                         {s.batch * shape_.n_kv_heads + 1 + sc.n_tasks}, sc.merge_at * 4);
        if (rebuilds_keys(L)) {
            attn_decode_palu_params p;
            p.kv = layout(L), p.batch = s.batch, p.n_q_heads = shape_.n_q_heads, p.head_dim = shape_.head_dim;
            p.rot_dim = shape_.head_dim, p.nnz_pages = s.nnz_pages, p.max_seq_len = s.max_seq_len;
            p.n_tasks = sc.n_tasks, p.style = rope_style::neox, p.scale = scale;
            be.run(make_op(p,
                           {q, kp, vp, s.indptr, s.indices, s.last_page_len, D.heads, schedule, merge, D.aux},
                           {out}));
            return;
        }
        const int64_t nq = shape_.n_q_heads;
        const tensor qa = project_q(be, L, D, q, s.n_tokens);
        attn_decode_ragged_params p;
        p.kv = layout(L), p.batch = s.batch, p.n_q_heads = nq, p.nnz_pages = s.nnz_pages;
        p.max_seq_len = s.max_seq_len, p.n_tasks = sc.n_tasks, p.scale = scale;
        be.run(
            make_op(p, {qa, kp, vp, s.indptr, s.indices, s.last_page_len, D.heads, schedule, merge}, {out}));
    }

    // Every layer's decode schedule for this step, in one upload (one transfer per layer would make
    // the stream wait 32 times per step on an 8B model). Layers with the same widths share one. A
    // balanced schedule is searched when the requests change or a length moved by more than a
    // sixteenth since its search; in between, the new lengths are re-cut into the same chunk counts
    // (decode_schedule.h: the search costs ~0.3 ms of host time per layer at batch 16, on the
    // critical path of every step).
    void build_schedules(backend & be, const kv_step & s) {
        std::vector<int64_t> lens(static_cast<size_t>(s.batch), 0);
        for (size_t t = 0; t < s.host_positions.size(); ++t) {
            const size_t b = size_t(s.host_batch_idx[t]);
            lens[b] = std::max<int64_t>(lens[b], int64_t(s.host_positions[t]) + 1);
        }
        hl::decode_schedule_options opt = decode_schedule_options_for(c_);
        std::vector<int32_t> host;
        sched_.resize(plan_.layers.size());
        for (size_t l = 0; l < plan_.layers.size(); ++l) {
            const lowrank_layer & L = plan_.layers[l];
            size_t same = l;
            for (size_t e = 0; e < l && same == l; ++e)
                if (plan_.layers[e].k == L.k && plan_.layers[e].v == L.v) same = e;
            step_schedule & sc = sched_[l];
            if (same != l) {
                sc.n_tasks = sched_[same].n_tasks;
                sc.schedule_at = sched_[same].schedule_at, sc.merge_at = sched_[same].merge_at;
                continue;
            }
            // The backend's answer may depend on the batch (OpenCL); a new batch is searched anew
            // (schedule_cut_reusable needs the same requests), so it is asked again then.
            if (sc.workers == 0 || sc.inputs_batch != s.batch) {
                const decode_schedule_inputs in = decode_schedule_inputs_for(c_, be, decode_params(L, s.batch));
                sc.workers = in.workers, sc.task_cost = in.task_cost, sc.tail_percent = in.tail_percent;
                sc.inputs_batch = s.batch;
            }
            opt.n_workers = sc.workers, opt.task_cost = sc.task_cost, opt.tail_percent = sc.tail_percent;
            const bool reuse = opt.policy == hl::decode_policy::balanced && !sc.parts.empty() &&
                               hl::schedule_cut_reusable(sc.searched_lens, lens);
            hl::decode_schedule ds = reuse ? hl::schedule_with_parts(lens, L.k, L.v, sc.parts, opt)
                                           : hl::build_decode_schedule(lens, L.k, L.v, opt);
            if (!reuse) sc.parts = std::move(ds.parts), sc.searched_lens = lens;
            sc.n_tasks = ds.n_tasks;
            sc.schedule_at = host.size();
            host.insert(host.end(), ds.schedule.begin(), ds.schedule.end());
            if (ds.schedule.empty()) host.insert(host.end(), 4, 0);  // a valid view for a step without tasks
            sc.merge_at = host.size();
            host.insert(host.end(), ds.merge.begin(), ds.merge.end());
        }
        if (!sched_buf_ || sched_buf_->size() < host.size() * 4) sched_buf_ = be.alloc(host.size() * 4 * 2);
        be.upload(*sched_buf_, 0, host.data(), host.size() * 4);
    }

    // The decode op a layer runs, as the backend's schedule queries take it: Palu's layers
    // attn_decode_palu (the backend knows which of its kernels runs), the others attn_decode_ragged.
    op_params decode_params(const lowrank_layer & L, int64_t batch) const {
        if (rebuilds_keys(L)) {
            attn_decode_palu_params p;
            p.kv = layout(L), p.batch = batch, p.n_q_heads = shape_.n_q_heads, p.head_dim = shape_.head_dim;
            p.rot_dim = shape_.head_dim, p.style = rope_style::neox;  // as decode() runs it
            return p;
        }
        attn_decode_ragged_params p;
        p.kv = layout(L), p.batch = batch, p.n_q_heads = shape_.n_q_heads;
        return p;
    }

    struct step_schedule {
        // decode_schedule_inputs_for, asked again when the batch changes
        int64_t workers = 0, inputs_batch = 0, task_cost = 0, tail_percent = 0;
        int64_t n_tasks = 0;
        size_t schedule_at = 0, merge_at = 0;  // i32 elements into sched_buf_
        // Balanced, layers owning a schedule: the chunk counts of the last search and its lengths.
        std::vector<int64_t> parts, searched_lens;
    };

    lowrank_method_config c_;
    bool palu_;
    lowrank_plan plan_;
    lowrank_device dev_;
    folded_model folded_;
    uint64_t weight_bytes_ = 0;
    float rope_theta_ = 10000.0f;
    buffer * freq_factors_ = nullptr;

    kv_shape shape_;
    std::vector<buffer_ptr> k_, v_;
    uint64_t bytes_ = 0;
    int64_t bytes_per_token_ = 0;  // sum over layers of a token's K and V page bytes

    buffer_ptr scratch_;
    int64_t scratch_tokens_ = 0;
    int64_t region_[5] = {0, 0, 0, 0, 0};
    std::vector<step_schedule> sched_;
    buffer_ptr sched_buf_;
};

}  // namespace

host::lowrank::decode_schedule_options decode_schedule_options_for(const lowrank_method_config & c) {
    host::lowrank::decode_schedule_options opt;
    opt.policy = c.balanced_schedule ? host::lowrank::decode_policy::balanced : host::lowrank::decode_policy::plain;
    opt.stats = false;
    opt.token_cost = c.token_cost >= 0 ? c.token_cost : host::lowrank::default_token_cost(c.kv_bits);
    opt.task_cost = std::max<int64_t>(c.task_cost, 0);  // auto (-1): the backend's, per layer (decode_schedule_inputs_for)
    opt.tail_percent = std::max<int64_t>(c.tail_percent, 0);  // auto (-1): the backend's, per layer
    return opt;
}

// workers=auto: the decode tasks the backend runs at once for this layer's kernel (on CUDA SMs x
// resident blocks, e.g. 3 x 132 for the tensor-core kernels on an H200, the Palu tensor-core kernel's
// resident blocks, one per SM for its CUDA-core kernel; on OpenCL GPUs 8 x the compute units, 4 x for
// ragged decodes where batch x KV heads is at most half of them; on CPU devices one per compute unit).
decode_schedule_inputs decode_schedule_inputs_for(const lowrank_method_config & c, backend & be,
                                                  const op_params & decode) {
    decode_schedule_inputs in;
    in.workers = c.worker_scale > 0 ? int64_t(std::max(1, be.info().compute_units)) * c.worker_scale
                                    : be.concurrent_workgroups(decode);
    in.task_cost = c.task_cost >= 0 ? c.task_cost : be.decode_task_cost(decode);
    in.tail_percent = c.tail_percent >= 0 ? c.tail_percent : be.decode_tail_percent(decode);
    return in;
}

std::unique_ptr<kv_method> make_lowrank_method(const lowrank_method_config & cfg) {
    return std::make_unique<lowrank_method>(cfg);
}

}  // namespace kvcomp::engine
