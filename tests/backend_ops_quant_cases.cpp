// Test cases of the quantized-KV ops. Accepted error (see backend_ops_cases.cpp for the others):
//
//   op                 metric  threshold  why
//   kv_quantize        exact   -          codes and f16 parameters are specified operation by
//                                         operation (core/qblock.h): every backend must match
//   kv_dequantize      exact   -          k^ = code * kstep + kmin etc. in fp32 without FMA
//                                         (core/qblock.h): the same bits on every backend
//   attn_decode_quant  nmse    1e-6       as attn_decode; dequantization may fuse multiply-add
//   probe_scores       nmse    1e-6       fp32 exp and sums in any order
//   select_salient     exact   -          an exact selection over correctly rounded fp64 quotients
#include "backend_ops_quant_cases.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <sstream>

#include "core/qblock_codec.h"

namespace kvcomp::test {

namespace {

void put_i32(host_tensor & t, const std::vector<int32_t> & v) {
    KVCOMP_ASSERT(int64_t(v.size()) == t.numel());
    std::copy(v.begin(), v.end(), t.as<int32_t>());
}

template <typename T>
void shuffle(std::vector<T> & v, test_rng & rng) {
    for (size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[size_t(rng.below(int64_t(i)))]);
}

std::string layout_vars(const qblock_layout & q) {
    std::ostringstream os;
    os << "kv_heads=" << q.n_kv_heads << ",hd=" << q.head_dim << ",hi=" << q.hi_tokens << "x" << q.hi_bits
       << ",lo=" << q.lo_tokens << "x" << q.lo_bits << ",v_group=" << q.v_group
       << ",cscale=" << (q.channel_scale ? 1 : 0);
    return os.str();
}

std::string join(const std::vector<int64_t> & v) {
    std::ostringstream os;
    os << '[';
    for (size_t i = 0; i < v.size(); ++i) os << (i ? "," : "") << v[i];
    os << ']';
    return os.str();
}

// Shape of a K/V source of `tokens` tokens under the row_tokens addressing of core/op.h.
std::vector<int64_t> source_shape(int64_t tokens, int64_t row_tokens, int64_t kv_heads, int64_t hd) {
    if (row_tokens == 0) return {tokens, kv_heads, hd};
    return {(tokens + row_tokens - 1) / row_tokens, kv_heads, row_tokens, hd};
}

// Splits n tokens of a block into hi/lo counts that fit the layout (varied, some segments empty).
std::pair<int32_t, int32_t> split_counts(const qblock_layout & q, int64_t n) {
    const int32_t lo = int32_t(std::min<int64_t>(q.lo_tokens, n - std::min<int64_t>(q.hi_tokens, n / 3)));
    return {int32_t(n - lo), lo};
}

// Realistic K/V rows: normal values, one outlier channel (x20), one constant key channel (zero
// range) and occasional all-zero value tokens (zero range of a token group).
float kv_value(test_rng & rng, int64_t c, bool is_key, int64_t token) {
    if (is_key && c == 5) return 0.75f;
    if (!is_key && token % 7 == 3) return 0.0f;
    const float x = rng.normal();
    return c == 3 ? 20.0f * x : x;
}

}  // namespace

// ---------------------------------------------------------------------------------------------

kv_quantize_case::kv_quantize_case(const quant_spec & s) : s_(s) {
    n_blocks_ = int64_t(s.blocks.size());
    n_src_ = std::accumulate(s.blocks.begin(), s.blocks.end(), int64_t(0)) + 5;
    n_slots_ = n_blocks_ + 2;
    const auto src = source_shape(n_src_, s.row_tokens, s.q.n_kv_heads, s.q.head_dim);
    add_tensor("k", s.src_type, src, tensor_role::input);
    add_tensor("v", s.src_type, src, tensor_role::input);
    add_tensor("plan", dtype::i32, {n_blocks_, 3}, tensor_role::input);
    add_tensor("rows", dtype::i32, {n_blocks_, s.q.n_kv_heads, s.q.block_tokens()}, tensor_role::input);
    add_tensor("pool", dtype::u8, {n_slots_ * s.q.slot_bytes()}, tensor_role::inout, compare_kind::exact);
}
std::string kv_quantize_case::vars() const {
    std::ostringstream os;
    os << layout_vars(s_.q) << ",src=" << dtype_name(s_.src_type) << ",row_tokens=" << s_.row_tokens
       << ",blocks=" << join(s_.blocks);
    return os.str();
}
void kv_quantize_case::init(test_rng & rng) {
    const qblock_layout & q = s_.q;
    for (int i = 0; i < 2; ++i) {
        host_tensor & t = tensors_[size_t(i)];
        const int64_t T = s_.row_tokens;
        for (int64_t e = 0; e < t.numel(); ++e) {
            const int64_t c = e % q.head_dim;
            const int64_t token = T ? (e / (q.head_dim * T * q.n_kv_heads)) * T + (e / q.head_dim) % T
                                    : e / (q.head_dim * q.n_kv_heads);
            set_float(t, e, kv_value(rng, c, i == 0, token));
        }
    }
    std::vector<int32_t> slots(static_cast<size_t>(n_slots_));
    std::iota(slots.begin(), slots.end(), 0);
    shuffle(slots, rng);
    std::vector<int32_t> plan, rows(size_t(n_blocks_ * q.n_kv_heads * q.block_tokens()), 0);
    for (int64_t i = 0; i < n_blocks_; ++i) {
        const auto [hi, lo] = split_counts(q, s_.blocks[size_t(i)]);
        plan.insert(plan.end(), {slots[size_t(i)], hi, lo});
        for (int64_t h = 0; h < q.n_kv_heads; ++h) {
            // Each head picks its own tokens, in its own order.
            std::vector<int32_t> tokens(static_cast<size_t>(n_src_));
            std::iota(tokens.begin(), tokens.end(), 0);
            shuffle(tokens, rng);
            std::copy(tokens.begin(), tokens.begin() + (hi + lo),
                      rows.begin() + (i * q.n_kv_heads + h) * q.block_tokens());
        }
    }
    put_i32(tensors_[2], plan);
    put_i32(tensors_[3], rows);
    for (auto & b : tensors_[4].data) b = uint8_t(rng.next());  // slots not written must stay as they are
}
op_desc kv_quantize_case::build(const std::vector<tensor> & v) const {
    kv_quantize_params p;
    p.q = s_.q;
    p.n_blocks = n_blocks_;
    p.n_src_tokens = n_src_;
    p.row_tokens = s_.row_tokens;
    p.n_slots = n_slots_;
    return make_op(p, {v[0], v[1], v[2], v[3]}, {v[4]});
}

// ---------------------------------------------------------------------------------------------

kv_dequantize_case::kv_dequantize_case(const quant_spec & s) : s_(s) {
    n_blocks_ = int64_t(s.blocks.size());
    n_slots_ = n_blocks_ + 3;
    const auto rows = source_shape(n_blocks_ * s.q.block_tokens(), s.row_tokens, s.q.n_kv_heads, s.q.head_dim);
    add_tensor("pool", dtype::u8, {n_slots_ * s.q.slot_bytes()}, tensor_role::input);
    add_tensor("slots", dtype::i32, {n_blocks_}, tensor_role::input);
    add_tensor("k", s.src_type, rows, tensor_role::inout, compare_kind::exact);
    add_tensor("v", s.src_type, rows, tensor_role::inout, compare_kind::exact);
}
std::string kv_dequantize_case::vars() const {
    std::ostringstream os;
    os << layout_vars(s_.q) << ",dst=" << dtype_name(s_.src_type) << ",row_tokens=" << s_.row_tokens
       << ",blocks=" << join(s_.blocks);
    return os.str();
}
void kv_dequantize_case::init(test_rng & rng) {
    const qblock_layout & q = s_.q;
    const int64_t hd = q.head_dim;
    host_tensor & pool = tensors_[0];
    for (auto & byte : pool.data) byte = uint8_t(rng.next());  // unlisted slots: garbage nobody may read
    std::vector<int32_t> slots(static_cast<size_t>(n_slots_));
    std::iota(slots.begin(), slots.end(), 0);
    shuffle(slots, rng);
    slots.resize(size_t(n_blocks_));
    for (int64_t i = 0; i < n_blocks_; ++i) {
        const int64_t n = s_.blocks[size_t(i)];
        const auto [hi, lo] = split_counts(q, n);
        std::vector<float> kd(size_t(std::max<int64_t>(n, 1) * q.n_kv_heads * hd)), vd(kd.size());
        for (size_t e = 0; e < kd.size(); ++e) {
            kd[e] = kv_value(rng, int64_t(e) % hd, true, int64_t(e) / (hd * q.n_kv_heads));
            vd[e] = kv_value(rng, int64_t(e) % hd, false, int64_t(e) / (hd * q.n_kv_heads));
        }
        auto at = [&](const std::vector<float> & d) {
            return [&d, &q, hd](int64_t t, int64_t h, int64_t c) { return d[size_t((t * q.n_kv_heads + h) * hd + c)]; };
        };
        // Heads read the tokens in different orders, as the engine's rankings do.
        qblock::encode_slot(q, pool.data.data() + slots[size_t(i)] * q.slot_bytes(), hi, lo,
                            [n](int64_t h, int64_t j) { return (j + h * 7) % n; }, at(kd), at(vd));
    }
    put_i32(tensors_[1], slots);
    // The outputs start as garbage: every element must be written (zeros past a block's tokens).
    for (int i = 2; i < 4; ++i)
        for (int64_t e = 0; e < tensors_[size_t(i)].numel(); ++e) set_float(tensors_[size_t(i)], e, 1e4f);
}
op_desc kv_dequantize_case::build(const std::vector<tensor> & v) const {
    kv_dequantize_params p;
    p.q = s_.q;
    p.n_blocks = n_blocks_;
    p.row_tokens = s_.row_tokens;
    p.n_slots = n_slots_;
    return make_op(p, {v[0], v[1]}, {v[2], v[3]});
}

// ---------------------------------------------------------------------------------------------

attn_decode_quant_case::attn_decode_quant_case(const quant_spec & s) : s_(s) {
    batch_ = int64_t(s.blocks.size());
    nnz_ = std::accumulate(s.blocks.begin(), s.blocks.end(), int64_t(0));
    n_slots_ = nnz_ + 2;
    n_win_rows_ = batch_ + 1;
    n_win_pages_ = n_win_rows_ * pages_per_row() + 2;  // two pages no row names
    const qblock_layout & q = s.q;
    add_tensor("q", dtype::f32, {batch_, s.n_q_heads, q.head_dim}, tensor_role::input);
    add_tensor("pool", dtype::u8, {n_slots_ * q.slot_bytes()}, tensor_role::input);
    add_tensor("block_indptr", dtype::i32, {batch_ + 1}, tensor_role::input);
    add_tensor("block_indices", dtype::i32, {std::max<int64_t>(nnz_, 1)}, tensor_role::input);
    add_tensor("win_k", dtype::f16, {n_win_pages_, q.n_kv_heads, s.win_page_tokens, q.head_dim},
               tensor_role::input);
    add_tensor("win_v", dtype::f16, {n_win_pages_, q.n_kv_heads, s.win_page_tokens, q.head_dim},
               tensor_role::input);
    add_tensor("win", dtype::i32, {batch_, 3}, tensor_role::input);
    add_tensor("win_pages", dtype::i32, {n_win_rows_, pages_per_row()}, tensor_role::input);
    add_tensor("out", dtype::f32, {batch_, s.n_q_heads, q.head_dim}, tensor_role::output);
    add_tensor("lse", dtype::f32, {batch_, s.n_q_heads}, tensor_role::output);
    // Full blocks except each request's last (partial: its true count is in the slot header).
    for (int64_t b = 0; b < batch_; ++b)
        max_tokens_ = std::max(max_tokens_, s.blocks[size_t(b)] * q.block_tokens() + s.window[size_t(b)]);
}
std::string attn_decode_quant_case::vars() const {
    std::ostringstream os;
    os << layout_vars(s_.q) << ",q_heads=" << s_.n_q_heads << ",blocks=" << join(s_.blocks)
       << ",window=" << join(s_.window) << ",win=" << s_.win_tokens << ",win_page=" << s_.win_page_tokens;
    if (s_.key_ramp > 0.0f) os << ",key_ramp=" << s_.key_ramp;
    return os.str();
}
uint64_t attn_decode_quant_case::bytes() const {
    uint64_t win = 0;
    for (int64_t w : s_.window) win += uint64_t(w);
    return uint64_t(nnz_ * s_.q.slot_bytes()) + win * uint64_t(s_.q.n_kv_heads * s_.q.head_dim) * 4 +
           2 * uint64_t(batch_ * s_.n_q_heads * s_.q.head_dim) * 4;
}
uint64_t attn_decode_quant_case::flops() const {
    return 4 * uint64_t(max_tokens_ * batch_ * s_.n_q_heads * s_.q.head_dim);
}
void attn_decode_quant_case::init(test_rng & rng) {
    const qblock_layout & q = s_.q;
    const int64_t hd = q.head_dim;
    fill_normal(tensors_[0], rng);
    if (s_.key_ramp > 0.0f)  // every query's channel 5 (see quant_spec::key_ramp)
        for (int64_t e = 5; e < tensors_[0].numel(); e += hd) set_float(tensors_[0], e, 2.0f);
    // Unused slots hold random bytes: a kernel that reads them produces garbage.
    host_tensor & pool = tensors_[1];
    for (auto & byte : pool.data) byte = uint8_t(rng.next());
    std::vector<int32_t> slots(static_cast<size_t>(n_slots_));
    std::iota(slots.begin(), slots.end(), 0);
    shuffle(slots, rng);
    std::vector<int32_t> indptr{0}, indices;
    for (int64_t b = 0; b < batch_; ++b) {
        for (int64_t i = 0; i < s_.blocks[size_t(b)]; ++i) {
            const int32_t slot = slots[indices.size()];
            indices.push_back(slot);
            const bool last = i + 1 == s_.blocks[size_t(b)];
            // Perf shapes (no partial blocks) reuse the first block's bytes: encoding hundreds of
            // thousands of blocks on the host would dominate the benchmark, and timing does not
            // depend on the values.
            if (!s_.partial_last && indices.size() > 1) {
                std::memcpy(pool.data.data() + slot * q.slot_bytes(), pool.data.data() + indices[0] * q.slot_bytes(),
                            size_t(q.slot_bytes()));
                continue;
            }
            const int64_t n = last && s_.partial_last ? 1 + rng.below(q.block_tokens()) : q.block_tokens();
            const auto [hi, lo] = split_counts(q, n);
            std::vector<float> kd(size_t(n * q.n_kv_heads * hd)), vd(kd.size());
            for (size_t e = 0; e < kd.size(); ++e) {
                kd[e] = kv_value(rng, int64_t(e) % hd, true, int64_t(e) / (hd * q.n_kv_heads));
                vd[e] = kv_value(rng, int64_t(e) % hd, false, int64_t(e) / (hd * q.n_kv_heads));
                if (int64_t(e) % hd == 5) kd[e] += s_.key_ramp * float(i);  // 0 unless key_ramp
            }
            auto at = [&](const std::vector<float> & d) {
                return [&d, &q, hd](int64_t t, int64_t h, int64_t c) { return d[size_t((t * q.n_kv_heads + h) * hd + c)]; };
            };
            qblock::encode_slot(q, pool.data.data() + slot * q.slot_bytes(), hi, lo,
                                [](int64_t, int64_t j) { return j; }, at(kd), at(vd));
        }
        indptr.push_back(int32_t(indices.size()));
    }
    indices.resize(size_t(std::max<int64_t>(nnz_, 1)), 0);
    put_i32(tensors_[2], indptr);
    put_i32(tensors_[3], indices);
    // Windows: request b uses row (b + 1) % rows from a random start; the rows' pages are a
    // shuffle of the pool's. Slots outside a window (and the pages no row names) hold K = 0,
    // V = 3e4, so any weight they get shows in the output.
    std::vector<int32_t> win, pages(static_cast<size_t>(n_win_pages_));
    std::iota(pages.begin(), pages.end(), 0);
    shuffle(pages, rng);
    pages.resize(size_t(n_win_rows_ * pages_per_row()));
    host_tensor & wk = tensors_[4];
    host_tensor & wv = tensors_[5];
    for (int64_t e = 0; e < wk.numel(); ++e) set_float(wk, e, 0.0f), set_float(wv, e, 3e4f);
    const int64_t P = s_.win_page_tokens;
    for (int64_t b = 0; b < batch_; ++b) {
        const int32_t row = int32_t((b + 1) % n_win_rows_), start = int32_t(rng.below(s_.win_tokens));
        const int32_t len = int32_t(s_.window[size_t(b)]);
        win.insert(win.end(), {row, start, len});
        for (int32_t j = 0; j < len; ++j)
            for (int64_t h = 0; h < q.n_kv_heads; ++h) {
                const int64_t slot = (start + j) % s_.win_tokens,
                              page = pages[size_t(row * pages_per_row() + slot / P)];
                const int64_t base = ((page * q.n_kv_heads + h) * P + slot % P) * hd;
                for (int64_t c = 0; c < hd; ++c) {
                    set_float(wk, base + c, rng.normal());
                    set_float(wv, base + c, rng.normal());
                }
            }
    }
    put_i32(tensors_[6], win);
    put_i32(tensors_[7], pages);
}
op_desc attn_decode_quant_case::build(const std::vector<tensor> & v) const {
    attn_decode_quant_params p;
    p.q = s_.q;
    p.batch = batch_;
    p.n_q_heads = s_.n_q_heads;
    p.n_slots = n_slots_;
    p.nnz_blocks = nnz_;
    p.n_win_rows = n_win_rows_;
    p.win_tokens = s_.win_tokens;
    p.n_win_pages = n_win_pages_;
    p.win_page_tokens = s_.win_page_tokens;
    p.max_tokens = max_tokens_;
    p.scale = 1.0f / std::sqrt(float(s_.q.head_dim));
    return make_op(p, {v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]}, {v[8], v[9]});
}

// ---------------------------------------------------------------------------------------------

probe_scores_case::probe_scores_case(const quant_spec & s, int64_t n_keys, int64_t n_probes, bool use_lse)
    : s_(s), keys_{n_keys}, probes_{n_probes}, ragged_(false), use_lse_(use_lse) {
    add_tensors();
}
probe_scores_case::probe_scores_case(const quant_spec & s, std::vector<int64_t> keys, std::vector<int64_t> probes,
                                     bool use_lse)
    : s_(s), keys_(std::move(keys)), probes_(std::move(probes)), ragged_(true), use_lse_(use_lse) {
    KVCOMP_ASSERT(keys_.size() == probes_.size() && !keys_.empty());
    add_tensors();
}
void probe_scores_case::add_tensors() {
    n_keys_ = std::accumulate(keys_.begin(), keys_.end(), int64_t(0));
    n_probes_ = std::accumulate(probes_.begin(), probes_.end(), int64_t(0));
    const int64_t hd = s_.q.head_dim, batch = int64_t(keys_.size());
    add_tensor("q", dtype::f32, {std::max<int64_t>(n_probes_, 1), s_.n_q_heads, hd}, tensor_role::input);
    add_tensor("probe_pos", dtype::i32, {std::max<int64_t>(n_probes_, 1)}, tensor_role::input);
    add_tensor("k", s_.src_type, source_shape(n_keys_, s_.row_tokens, s_.q.n_kv_heads, hd), tensor_role::input);
    add_tensor("key_pos", dtype::i32, {n_keys_}, tensor_role::input);
    add_tensor("lse", dtype::f32, {std::max<int64_t>(n_probes_, 1), s_.n_q_heads}, tensor_role::input);
    add_tensor("probe_indptr", dtype::i32, {batch + 1}, tensor_role::input);
    add_tensor("key_indptr", dtype::i32, {batch + 1}, tensor_role::input);
    add_tensor("scores", dtype::f32, {s_.q.n_kv_heads, n_keys_}, tensor_role::output);
}
std::string probe_scores_case::vars() const {
    std::ostringstream os;
    os << "q_heads=" << s_.n_q_heads << ",kv_heads=" << s_.q.n_kv_heads << ",hd=" << s_.q.head_dim
       << ",k=" << dtype_name(s_.src_type) << ",row_tokens=" << s_.row_tokens;
    if (ragged_) {
        os << ",requests=" << keys_.size() << ",keys=";
        for (size_t b = 0; b < keys_.size(); ++b) os << (b ? "/" : "") << keys_[b];
        os << ",probes=";
        for (size_t b = 0; b < probes_.size(); ++b) os << (b ? "/" : "") << probes_[b];
    } else {
        os << ",keys=" << n_keys_ << ",probes=" << n_probes_;
    }
    os << ",lse=" << (use_lse_ ? 1 : 0);
    return os.str();
}
void probe_scores_case::init(test_rng & rng) {
    const int64_t hd = s_.q.head_dim, kvh = s_.q.n_kv_heads, group = s_.n_q_heads / kvh;
    fill_normal(tensors_[0], rng);
    fill_normal(tensors_[2], rng);
    // Per request: keys at positions base .. base + n - 1 in shuffled order (a ring window is not in
    // position order); probes at positions in the same range, the first after every key. Requests
    // use different bases, so a probe leaking into another request's keys changes the result.
    std::vector<int32_t> key_pos, probe_pos, key_indptr{0}, probe_indptr{0};
    for (size_t b = 0; b < keys_.size(); ++b) {
        const int32_t base = 100 + 37 * int32_t(b), n = int32_t(keys_[b]);
        std::vector<int32_t> kp(static_cast<size_t>(n));
        std::iota(kp.begin(), kp.end(), base);
        if (s_.row_tokens) shuffle(kp, rng);
        key_pos.insert(key_pos.end(), kp.begin(), kp.end());
        for (int64_t p = 0; p < probes_[b]; ++p)
            probe_pos.push_back(p == 0 || n == 0 ? base + n : base + int32_t(rng.below(n)));
        key_indptr.push_back(int32_t(key_pos.size()));
        probe_indptr.push_back(int32_t(probe_pos.size()));
    }
    probe_pos.resize(size_t(std::max<int64_t>(n_probes_, 1)), 100);
    put_i32(tensors_[1], probe_pos);
    put_i32(tensors_[3], key_pos);
    put_i32(tensors_[5], probe_indptr);
    put_i32(tensors_[6], key_indptr);
    // lse: the exact log-denominator over the keys the probe sees plus 0.3, as if the row also saw
    // keys outside this set (the decode case: the window is part of a longer cache).
    // Only computed when the op reads it: at perf sizes (16 prompts of 4K) it is ~10^11 flops here.
    host_tensor & lse = tensors_[4];
    const float scale = 1.0f / std::sqrt(float(hd));
    set_float(lse, 0, 0.0f);
    if (!use_lse_) return;
    for (size_t b = 0; b < keys_.size(); ++b)
        for (int64_t p = probe_indptr[b]; p < probe_indptr[b + 1]; ++p)
            for (int64_t h = 0; h < s_.n_q_heads; ++h) {
                double mx = -INFINITY, sum = 0.0;
                std::vector<double> logits;
                for (int64_t i = key_indptr[b]; i < key_indptr[b + 1]; ++i) {
                    if (key_pos[size_t(i)] > probe_pos[size_t(p)]) continue;
                    double dot = 0.0;
                    for (int64_t c = 0; c < hd; ++c) {
                        const int64_t T = s_.row_tokens;
                        const int64_t e = T ? (((i / T) * kvh + h / group) * T + i % T) * hd + c
                                            : (i * kvh + h / group) * hd + c;
                        dot += double(get_float(tensors_[0], (p * s_.n_q_heads + h) * hd + c)) *
                               double(get_float(tensors_[2], e));
                    }
                    logits.push_back(dot * scale);
                    mx = std::max(mx, logits.back());
                }
                for (double l : logits) sum += std::exp(l - mx);
                set_float(lse, p * s_.n_q_heads + h, logits.empty() ? 0.0f : float(mx + std::log(sum) + 0.3));
            }
}
op_desc probe_scores_case::build(const std::vector<tensor> & v) const {
    probe_scores_params p;
    p.n_probes = n_probes_;
    p.n_keys = n_keys_;
    p.n_q_heads = s_.n_q_heads;
    p.n_kv_heads = s_.q.n_kv_heads;
    p.head_dim = s_.q.head_dim;
    p.row_tokens = s_.row_tokens;
    p.scale = 1.0f / std::sqrt(float(s_.q.head_dim));
    p.use_lse = use_lse_;
    p.batch = ragged_ ? int64_t(keys_.size()) : 0;
    return make_op(p, {v[0], v[1], v[2], v[3], use_lse_ ? v[4] : tensor{}, ragged_ ? v[5] : tensor{}, ragged_ ? v[6] : tensor{}},
                   {v[7]});
}

// ---------------------------------------------------------------------------------------------

select_salient_case::select_salient_case(const select_spec & s) : s_(s) {
    auto cdiv = [](int64_t a, int64_t b) { return b > 0 ? (a + b - 1) / b : 0; };
    int64_t owned = 0;
    for (size_t b = 0; b < s.prompts.size(); ++b) {
        const auto [n, n_hi] = s.prompts[b];
        const int64_t nb = std::max(cdiv(n_hi, s.hi_tokens), cdiv(n - n_hi, s.lo_tokens));
        n_tokens_ += s.gap;
        table_.insert(table_.end(), {int32_t(n_tokens_), int32_t(n), int32_t(n_hi), int32_t(n_blocks_)});
        n_tokens_ += n;
        n_blocks_ += nb + (b == 0 ? 1 : 0);
        owned += nb;
    }
    const int64_t G = s.hi_tokens + s.lo_tokens;
    add_tensor("sums", dtype::f32, {s.kv_heads, n_tokens_}, tensor_role::input);
    add_tensor("count", dtype::i32, {n_tokens_}, tensor_role::input);
    add_tensor("prompts", dtype::i32, {int64_t(s.prompts.size()), 4}, tensor_role::input);
    host_tensor & rows =
        add_tensor("rows", dtype::i32, {n_blocks_, s.kv_heads, G}, tensor_role::output, compare_kind::exact);
    rows.expect_written = owned * s.kv_heads * G;
}
std::string select_salient_case::vars() const {
    std::ostringstream os;
    os << "kv_heads=" << s_.kv_heads << ",hi=" << s_.hi_tokens << ",lo=" << s_.lo_tokens << ",prompts=";
    // Long uniform lists (perf) as "16x4096/1639".
    const auto & p = s_.prompts;
    if (p.size() > 4 && std::all_of(p.begin(), p.end(), [&](const auto & e) { return e == p[0]; }))
        os << p.size() << "x" << p[0].first << "/" << p[0].second;
    else
        for (size_t b = 0; b < p.size(); ++b) os << (b ? "," : "") << p[b].first << "/" << p[b].second;
    os << ",values=" << s_.values;
    return os.str();
}
void select_salient_case::init(test_rng & rng) {
    host_tensor & sums = tensors_[0];
    int32_t * count = tensors_[1].as<int32_t>();
    // Counts: mostly small (so that level * count ties are exact), some zero (score 0 whatever
    // the sum), some large.
    for (int64_t c = 0; c < n_tokens_; ++c) {
        const int64_t r = rng.below(10);
        count[c] = r == 0 ? 0 : r < 8 ? int32_t(1 + rng.below(6)) : int32_t(1 + rng.below(5000));
    }
    const float levels[] = {0.0f, 0.125f, 0.25f, 0.5f, 1.0f, 3.0f};
    for (int64_t h = 0; h < s_.kv_heads; ++h)
        for (int64_t c = 0; c < n_tokens_; ++c) {
            float x;
            if (s_.values == "spread")
                x = std::fabs(rng.normal()) * std::pow(10.0f, -3.0f * float(rng.uniform()));
            else
                x = levels[rng.below(6)] * float(count[c]);
            if (s_.values == "special") {
                const float specials[] = {NAN, -0.0f, -1.5f, INFINITY, 1e-40f, 3e-45f, -INFINITY, 0.0f};
                if (rng.below(8) == 0) x = specials[rng.below(8)];
            }
            set_float(sums, h * n_tokens_ + c, x);
        }
    put_i32(tensors_[2], table_);
}
op_desc select_salient_case::build(const std::vector<tensor> & v) const {
    select_salient_params p;
    p.n_kv_heads = s_.kv_heads;
    p.n_tokens = n_tokens_;
    p.n_prompts = int64_t(s_.prompts.size());
    p.n_blocks = n_blocks_;
    p.hi_tokens = s_.hi_tokens;
    p.lo_tokens = s_.lo_tokens;
    return make_op(p, {v[0], v[1], v[2]}, {v[3]});
}

// ---------------------------------------------------------------------------------------------

namespace {

// ZipCache's default block (G = 100: 40 salient tokens at 4 bits, 60 at 2 bits, CST values).
qblock_layout zipcache_layout(int64_t kv_heads, int64_t hd, int32_t hi = 40, int32_t lo = 60) {
    qblock_layout q;
    q.n_kv_heads = kv_heads, q.head_dim = hd, q.hi_tokens = hi, q.lo_tokens = lo;
    q.hi_bits = 4, q.lo_bits = 2, q.v_group = int32_t(hd), q.channel_scale = true;
    return q;
}
// KIVI: one segment of `group` tokens at `bits`, values per token in groups of 32 channels.
qblock_layout kivi_layout(int64_t kv_heads, int64_t hd, int32_t bits, int32_t group = 32) {
    qblock_layout q;
    q.n_kv_heads = kv_heads, q.head_dim = hd, q.hi_tokens = group, q.lo_tokens = 0;
    q.hi_bits = bits, q.lo_bits = bits, q.v_group = 32, q.channel_scale = false;
    return q;
}
// The layout with values quantized in groups of g channels.
qblock_layout with_v_group(qblock_layout q, int32_t g) {
    q.v_group = g;
    return q;
}
// The spec with window pages of p tokens.
quant_spec with_win_pages(quant_spec s, int64_t p) {
    s.win_page_tokens = p;
    return s;
}
quant_spec spec(const qblock_layout & q, int64_t q_heads, std::vector<int64_t> blocks, std::vector<int64_t> window = {},
                int64_t win_tokens = 16, dtype src = dtype::f32, int64_t row_tokens = 0) {
    quant_spec s;
    s.q = q, s.n_q_heads = q_heads, s.blocks = std::move(blocks), s.window = std::move(window);
    s.win_tokens = win_tokens, s.src_type = src, s.row_tokens = row_tokens;
    return s;
}

}  // namespace

case_ptr make_attn_decode_quant_case(const std::string & layout, int64_t batch, int64_t context, int64_t head_dim) {
    KVCOMP_CHECK_ARG(layout == "zipcache" || layout == "kivi2" || layout == "kivi4",
                     "unknown quantized layout '", layout, "' (zipcache, kivi2, kivi4)");
    KVCOMP_CHECK_ARG(head_dim >= 16 && head_dim % 16 == 0, "head_dim must be a positive multiple of 16, got ", head_dim);
    const int32_t kivi_group = head_dim % 32 == 0 ? 32 : 16;  // tokens and value channels, as kivi's group=
    const qblock_layout q =
        layout == "zipcache"
            ? zipcache_layout(8, head_dim)
            : with_v_group(kivi_layout(8, head_dim, layout == "kivi2" ? 2 : 4, kivi_group), kivi_group);
    const int64_t g = q.block_tokens();
    quant_spec sp = spec(q, 32, std::vector<int64_t>(size_t(batch), context / g),
                         std::vector<int64_t>(size_t(batch), context % g), g);
    sp.partial_last = false;
    sp.win_page_tokens = 16;  // the engine's window pages (kv_method_quant.cpp: its page size)
    return std::make_unique<attn_decode_quant_case>(sp);
}

void add_quant_cases(std::vector<case_ptr> & out, case_set set) {
    const dtype f16 = dtype::f16, f32 = dtype::f32;
    auto add = [&](case_ptr c) { out.push_back(std::move(c)); };
    if (set == case_set::full || set == case_set::smoke) {
        // kv_quantize: ZipCache and KIVI layouts, 2/4/8 bits, f32 token-major and f16 window sources,
        // full, partial and single-token blocks.
        add(std::make_unique<kv_quantize_case>(spec(zipcache_layout(2, 64), 8, {100, 37, 1}, {}, 16, f32)));
        add(std::make_unique<kv_quantize_case>(spec(kivi_layout(8, 128, 2), 32, {32, 32, 5}, {}, 16, f32)));
        add(std::make_unique<kv_quantize_case>(spec(kivi_layout(2, 64, 4), 8, {32, 17}, {}, 16, f16, 48)));
        if (set == case_set::full) {
            qblock_layout q8 = zipcache_layout(4, 128, 20, 12);
            q8.hi_bits = 8;
            add(std::make_unique<kv_quantize_case>(spec(q8, 16, {32, 3, 30}, {}, 16, f16, 64)));
            add(std::make_unique<kv_quantize_case>(spec(kivi_layout(1, 64, 2, 64), 4, {64}, {}, 16, f32)));
        }
        // kv_dequantize: ZipCache (CST, 4/2 bits) and KIVI (v_group 32 < head_dim, 2/4 bits) layouts,
        // an 8-bit hi segment, CST off with v_group < head_dim; full, partial, single-token and empty
        // blocks; f32 and f16 rows, token-major and head-major (row_tokens = block) addressing.
        add(std::make_unique<kv_dequantize_case>(spec(zipcache_layout(2, 64), 8, {100, 37, 1, 0}, {}, 16, f32)));
        add(std::make_unique<kv_dequantize_case>(spec(zipcache_layout(2, 64), 8, {100, 60, 41}, {}, 16, f32, 100)));
        add(std::make_unique<kv_dequantize_case>(spec(kivi_layout(2, 64, 4), 8, {32, 17}, {}, 16, f16, 32)));
        add(std::make_unique<kv_dequantize_case>(spec(kivi_layout(8, 128, 2), 32, {32, 32, 5}, {}, 16, f32)));
        {
            qblock_layout q8 = zipcache_layout(4, 128, 20, 12);
            q8.hi_bits = 8;
            add(std::make_unique<kv_dequantize_case>(spec(q8, 16, {32, 3, 30, 21}, {}, 16, f16, 64)));
            qblock_layout nocs = zipcache_layout(2, 64, 10, 22);
            nocs.channel_scale = false, nocs.v_group = 16, nocs.lo_bits = 8;
            add(std::make_unique<kv_dequantize_case>(spec(nocs, 8, {32, 9, 31}, {}, 16, f32, 32)));
        }
        // attn_decode_quant: GQA 4:1 and 8:1, windows empty to full, requests without blocks; window
        // pages of 5 tokens (the default: a row's last page partial), 16 and a whole row.
        add(std::make_unique<attn_decode_quant_case>(spec(zipcache_layout(2, 64), 8, {3, 1, 0}, {5, 0, 16}, 16)));
        add(std::make_unique<attn_decode_quant_case>(
            with_win_pages(spec(kivi_layout(8, 128, 2), 32, {2, 5}, {31, 1}, 48), 16)));
        if (set == case_set::full) {
            add(std::make_unique<attn_decode_quant_case>(spec(kivi_layout(4, 128, 4), 16, {40}, {63}, 64)));
            add(std::make_unique<attn_decode_quant_case>(with_win_pages(
                spec(zipcache_layout(1, 128, 8, 24), 8, {1, 2, 3, 4, 0, 7}, {0, 1, 2, 3, 4, 32}, 32), 32)));
            // Value groups of 16 and 32 channels (the CUDA tensor-core kernel is compiled per m-tiles per
            // group: 1 and 2 here, with and without channel scales, head_dim 64 and 128).
            add(std::make_unique<attn_decode_quant_case>(
                spec(with_v_group(kivi_layout(4, 128, 2), 16), 16, {5, 9}, {3, 20}, 32)));
            add(std::make_unique<attn_decode_quant_case>(
                spec(with_v_group(zipcache_layout(2, 64, 20, 12), 32), 8, {4, 2}, {10, 0}, 16)));
            add(std::make_unique<attn_decode_quant_case>(spec(with_v_group(kivi_layout(2, 64, 4), 16), 8, {6, 1}, {0, 7}, 16)));
            // Widths other than 64 and 128 (kivi / zipcache on a reduced cache, lowrank=, rank=R). On CUDA
            // the tensor-core kernel takes them all: an odd count of k16 steps (48, 80, 112), code rows
            // read 4 or 8 bytes at a time (2-bit rows of 12, 20, 24, 28 bytes, 4-bit of 24, 40), value
            // groups per row that are no power of two (3, 5, 7). With KVCOMP_QUANT_DECODE=simt the SIMT
            // kernel, whose rows then have lanes without channels (48: 3 of 4 lanes hold 16 channels;
            // 80, 112: 5 and 7 of 8; 96 at GQA 8: 12 of 16 lanes of 8), and 32 (4 lanes of 8). GQA 1, 2, 4, 8.
            {
                add(std::make_unique<attn_decode_quant_case>(spec(zipcache_layout(2, 48), 8, {3, 1, 0}, {5, 0, 16}, 16)));
                add(std::make_unique<attn_decode_quant_case>(spec(kivi_layout(2, 96, 2), 16, {4, 2}, {0, 17}, 32)));
                add(std::make_unique<attn_decode_quant_case>(
                    spec(with_v_group(kivi_layout(4, 80, 4), 16), 4, {3, 5}, {9, 1}, 32)));
                qblock_layout z112 = zipcache_layout(2, 112, 20, 12);
                z112.hi_bits = 8;
                add(std::make_unique<attn_decode_quant_case>(spec(z112, 4, {2, 3}, {16, 0}, 16)));
                add(std::make_unique<attn_decode_quant_case>(
                    spec(with_v_group(kivi_layout(2, 32, 2), 16), 8, {5, 1}, {7, 31}, 32)));
                // 192 rows, several splits each: the merge at a block per row of 48 channels.
                add(std::make_unique<attn_decode_quant_case>(spec(with_v_group(kivi_layout(8, 48, 4), 16), 32,
                                                                  {24, 24, 24, 24, 24, 24}, {0, 7, 31, 1, 16, 30}, 32)));
            }
            // 192 query-head rows with several splits each: CUDA's split merge then runs a block per row
            // (rows >= SMs); the cases above, with fewer rows, run it at 32 channels per block.
            add(std::make_unique<attn_decode_quant_case>(
                spec(kivi_layout(8, 128, 2), 32, {24, 24, 24, 24, 24, 24}, {0, 7, 31, 1, 16, 30}, 32)));
            // Scores that climb from block to block (quant_spec::key_ramp): about 10 log2 units between the
            // items a CUDA warp takes in turn (every 4th block), so the lazy running max (moved only past
            // 8) rescales the accumulators, and ZipCache's per-item ones, with a finite old maximum.
            {
                quant_spec k = spec(kivi_layout(2, 128, 2), 8, {40, 33}, {5, 0}, 16);
                k.key_ramp = 10.0f;  // 2 * 10 * 4 blocks * log2(e) / sqrt(128) = 10.2
                add(std::make_unique<attn_decode_quant_case>(k));
                quant_spec z = spec(zipcache_layout(2, 96), 8, {12, 9}, {0, 16}, 16);
                z.key_ramp = 9.0f;  // 2 * 9 * 4 * log2(e) / sqrt(96) = 10.6
                add(std::make_unique<attn_decode_quant_case>(z));
                // Steeper (~25 log2 units per block for KIVI over its 40 blocks, ~175 for ZipCache over
                // its 12, whose splits are a block or two): a running max that stopped moving after a
                // work-group's first tile would overflow.
                k.key_ramp = 100.0f;
                add(std::make_unique<attn_decode_quant_case>(k));
                z.key_ramp = 600.0f;
                add(std::make_unique<attn_decode_quant_case>(z));
            }
        }
        // probe_scores: token-major f32 prompt keys and f16 ring windows, with and without lse.
        add(std::make_unique<probe_scores_case>(spec(zipcache_layout(2, 64), 8, {}, {}, 16, f32), 200, 21, false));
        add(std::make_unique<probe_scores_case>(spec(zipcache_layout(2, 64), 8, {}, {}, 16, f16, 128), 100, 7, true));
        if (set == case_set::full) {
            add(std::make_unique<probe_scores_case>(spec(zipcache_layout(8, 128), 32, {}, {}, 16, f32), 333, 34, false));
            add(std::make_unique<probe_scores_case>(spec(zipcache_layout(1, 64), 4, {}, {}, 16, f32), 1, 1, false));
        }
        // Ragged batches (one call for every request of a step): uneven prompts with an empty
        // request and a request without probes; one request; f16 rows with lse (decode flush).
        add(std::make_unique<probe_scores_case>(spec(zipcache_layout(2, 64), 8, {}, {}, 16, f32),
                                                std::vector<int64_t>{70, 0, 33, 5, 41}, std::vector<int64_t>{8, 2, 4, 0, 1},
                                                false));
        add(std::make_unique<probe_scores_case>(spec(zipcache_layout(2, 64), 8, {}, {}, 16, f32),
                                                std::vector<int64_t>{97}, std::vector<int64_t>{11}, false));
        add(std::make_unique<probe_scores_case>(spec(zipcache_layout(2, 64), 8, {}, {}, 16, f16, 32),
                                                std::vector<int64_t>{32, 32, 0, 32}, std::vector<int64_t>{3, 0, 2, 7},
                                                true));
        if (set == case_set::full) {
            add(std::make_unique<probe_scores_case>(spec(zipcache_layout(8, 128), 32, {}, {}, 16, f32),
                                                    std::vector<int64_t>{300, 1, 129, 64}, std::vector<int64_t>{30, 1, 13, 7},
                                                    false));
            // The engine's prefill call: f32 prompt keys of head_dim 128 with the prefill's lse, more
            // probe rows than one stage of the tensor-core kernel (64) and keys past one work-group (128).
            add(std::make_unique<probe_scores_case>(spec(zipcache_layout(8, 128), 32, {}, {}, 16, f32),
                                                    std::vector<int64_t>{300, 0, 129, 64}, std::vector<int64_t>{30, 2, 13, 7},
                                                    true));
            add(std::make_unique<probe_scores_case>(spec(zipcache_layout(8, 128), 32, {}, {}, 16, f32), 333, 34, true));
            add(std::make_unique<probe_scores_case>(spec(zipcache_layout(1, 64), 4, {}, {}, 16, f32),
                                                    std::vector<int64_t>{0, 17}, std::vector<int64_t>{0, 3}, false));
        }
        // select_salient: ZipCache's block (40/60) with ragged prompts (an empty one, one token,
        // block-boundary counts 200/80 and 201/81), n_hi = 0 and n_hi = n with odd segments (7/9),
        // single-segment layouts (ratio 0: hi 0; ratio 1: lo 0), GQA KV head counts 1/2/8, ties,
        // spread and special (NaN, -0, negative, inf, subnormal) sums.
        auto sel = [&](int64_t kvh, int32_t hi, int32_t lo, std::vector<std::pair<int64_t, int64_t>> prompts,
                       const char * values) {
            select_spec sp;
            sp.kv_heads = kvh, sp.hi_tokens = hi, sp.lo_tokens = lo;
            sp.prompts = std::move(prompts), sp.values = values;
            add(std::make_unique<select_salient_case>(sp));
        };
        sel(2, 40, 60, {{1000, 400}, {37, 15}, {1, 1}, {0, 0}, {200, 80}, {201, 81}}, "ties");
        sel(1, 7, 9, {{100, 0}, {100, 100}, {33, 14}, {16, 7}}, "ties");
        sel(2, 40, 60, {{300, 120}, {77, 31}}, "special");
        if (set == case_set::full) {
            sel(8, 40, 60, {{4099, 1640}}, "spread");
            sel(8, 40, 60, {{513, 206}, {2, 1}, {999, 400}}, "ties");
            sel(2, 0, 100, {{250, 0}, {100, 0}}, "ties");
            sel(2, 32, 0, {{70, 70}, {64, 64}}, "spread");
            // A 128K-token prompt (the longest context the engine ranks).
            sel(2, 40, 60, {{131077, 52431}}, "ties");
        }
    } else {
        // Perf: Llama-3-8B decode shapes (32/8 heads of 128) at 4K x 16 and 32K x 1 tokens.
        const bool cpu = set == case_set::perf_cpu;
        const int64_t s = cpu ? 8 : 1;
        for (const qblock_layout & q : {zipcache_layout(8, 128), kivi_layout(8, 128, 2, 64)}) {
            const int64_t g = q.block_tokens();
            const int64_t batch = cpu ? 4 : 16;
            for (auto [b, ctx] : {std::pair<int64_t, int64_t>{batch, 4096 / s}, {1, 32768 / s}}) {
                quant_spec sp = spec(q, 32, std::vector<int64_t>(size_t(b), ctx / g),
                                     std::vector<int64_t>(size_t(b), ctx % g), g);
                sp.partial_last = false;
                add(std::make_unique<attn_decode_quant_case>(sp));
            }
        }
        add(std::make_unique<kv_quantize_case>(spec(zipcache_layout(8, 128), 32, std::vector<int64_t>(40 / s, 100))));
        add(std::make_unique<probe_scores_case>(spec(zipcache_layout(8, 128), 32, {}, {}, 16, f32), 4096 / s, 410 / s, false));
        // A 32K (cpu: 4K) prompt with 10% probes: the prefill's saliency cost at long context.
        add(std::make_unique<probe_scores_case>(spec(zipcache_layout(8, 128), 32, {}, {}, 16, f32), 32768 / s, 3277 / s, false));
        // One call for a prefill of 16 (cpu: 4) prompts of 4K (cpu: 512) tokens, 10% probes each.
        const int64_t n_req = cpu ? 4 : 16;
        add(std::make_unique<probe_scores_case>(spec(zipcache_layout(8, 128), 32, {}, {}, 16, f32),
                                                std::vector<int64_t>(size_t(n_req), 4096 / s),
                                                std::vector<int64_t>(size_t(n_req), 410 / s), false));
        // The ranking of that prefill (8 KV heads, ZipCache's 40/60 block, ratio 0.4).
        select_spec ss;
        ss.kv_heads = 8, ss.gap = 0;
        ss.prompts.assign(size_t(n_req), {4096 / s, 4096 / s - (4096 / s) * 6 / 10});
        add(std::make_unique<select_salient_case>(ss));
    }
}

}  // namespace kvcomp::test
