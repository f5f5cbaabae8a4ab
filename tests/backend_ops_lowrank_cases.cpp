// Test cases of the low-rank KV ops. Accepted error (see backend_ops_cases.cpp for the others):
//
//   op                   metric  threshold  why
//   head_project         nmse    1e-10      fp32 accumulation over <= 256 terms (~1e-13)
//   kv_append_ragged     exact   -          fp32 -> fp16 round to nearest even, by contract; q4
//                                           pages: the codes and f16 min/step of core/ragged_q4.h
//                                           (IEEE division, rint), byte for byte
//   attn_decode_ragged   nmse    1e-6       q4 pages too: the dequantized rows are exact fp32
//                                           (code * step + min of f16 values), so only the
//                                           summation order differs from the f16 case
//   attn_decode_ragged   nmse    1e-6       as attn_decode: fp32 online softmax, split merging
//   attn_prefill_ragged  nmse    1e-6       as attn_prefill
//   attn_decode_palu     nmse    1e-6       as attn_decode plus an fp32 reconstruction (<= 256
//                                           terms) and fp32 RoPE angles at positions < 4K (the
//                                           rope op's 1e-6 budget covers the same phase error)
#include "backend_ops_lowrank_cases.h"

#include "core/ragged_q4.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <sstream>

namespace kvcomp::test {

namespace lr = host::lowrank;

namespace {

std::string join(const std::vector<int64_t> & v) {
    std::ostringstream os;
    os << '[';
    for (size_t i = 0; i < v.size(); ++i) os << (i ? "," : "") << v[i];
    os << ']';
    return os.str();
}

void fill_i32(host_tensor & t, const std::vector<int32_t> & v) {
    KVCOMP_ASSERT(int64_t(v.size()) <= t.numel());
    std::copy(v.begin(), v.end(), t.as<int32_t>());
}

int64_t sum(const std::vector<int64_t> & v) {
    return std::accumulate(v.begin(), v.end(), int64_t(0));
}
int64_t widest(const ragged_spec & s) {
    return std::max(*std::max_element(s.k_widths.begin(), s.k_widths.end()),
                    *std::max_element(s.v_widths.begin(), s.v_widths.end()));
}

// The op's layout for a spec (q4 row totals when bits == 4).
ragged_layout spec_layout(const ragged_spec & s, int64_t n_pages) {
    ragged_layout l{n_pages,  int64_t(s.k_widths.size()), s.page_size, sum(s.k_widths), sum(s.v_widths),
                    widest(s)};
    l.max_k_width = s.width_hint >= 0 ? s.width_hint : *std::max_element(s.k_widths.begin(), s.k_widths.end());
    l.max_v_width = s.width_hint >= 0 ? s.width_hint : *std::max_element(s.v_widths.begin(), s.v_widths.end());
    if (s.bits == 4)
        l.bits = 4, l.k_row_bytes = ragged_q4_row_total(s.k_widths),
        l.v_row_bytes = ragged_q4_row_total(s.v_widths);
    return l;
}
// Per-token width of a pool: f16 elements or q4 bytes.
int64_t pool_row(const ragged_spec & s, bool v) {
    const std::vector<int64_t> & w = v ? s.v_widths : s.k_widths;
    return s.bits == 4 ? ragged_q4_row_total(w) : sum(w);
}

// Per pool slot (page * page_size + slot): 0 when no request's token is there, else the factor of
// its key (ragged_spec::key_ramp).
std::vector<float> slot_key_scales(const ragged_spec & s, const page_table_arrays & pt, int64_t n_pages) {
    std::vector<float> scale(static_cast<size_t>(n_pages * s.page_size), 0.0f);
    for (size_t b = 0; b < s.lens.size(); ++b)
        for (int64_t j = 0; j < s.lens[b]; ++j)
            scale[size_t(pt.indices[size_t(pt.indptr[b] + j / s.page_size)] * s.page_size + j % s.page_size)] =
                float(1.0 + s.key_ramp * double(j) / double(s.lens[b]));
    return scale;
}

// q4 pools (core/ragged_q4.h) filled as fill_ragged_pools: the requests' rows are quantized normal
// values, every other row quantizes K = 0 and V = 3e4 (min 3e4, step 0).
void fill_ragged_q4_pools(host_tensor & k, host_tensor & v, const ragged_spec & s,
                          const page_table_arrays & pt, int64_t n_pages, test_rng & rng) {
    const std::vector<float> key_scale = slot_key_scales(s, pt, n_pages);
    const int64_t kt = pool_row(s, false), vt = pool_row(s, true);
    // One generator per page (pages are disjoint bytes of both pools): multi-GiB pools for bench_ops
    // fill on every core, with the same bytes whatever the number of threads.
    for_each_seeded(n_pages, rng, [&](int64_t page, test_rng & local) {
        std::vector<float> x(size_t(widest(s)));
        int64_t ko = 0, vo = 0;
        for (size_t c = 0; c < s.k_widths.size(); ++c) {
            const int64_t kw = s.k_widths[c], vw = s.v_widths[c];
            const int64_t kr = ragged_q4_row_bytes(kw), vr = ragged_q4_row_bytes(vw);
            for (int64_t slot = 0; slot < s.page_size; ++slot) {
                const float ks = key_scale[size_t(page * s.page_size + slot)];
                const bool u = ks > 0.0f;
                for (int64_t d = 0; d < kw; ++d) x[size_t(d)] = u ? ks * local.normal() : 0.0f;
                ragged_q4_quantize_row(
                    x.data(), kw, k.as<uint8_t>() + page * s.page_size * kt + s.page_size * ko + slot * kr);
                for (int64_t d = 0; d < vw; ++d) x[size_t(d)] = u ? local.normal() : 3e4f;
                ragged_q4_quantize_row(
                    x.data(), vw, v.as<uint8_t>() + page * s.page_size * vt + s.page_size * vo + slot * vr);
            }
            ko += kr;
            vo += vr;
        }
    });
}

std::string ragged_vars(const ragged_spec & s) {
    std::ostringstream os;
    os << "k=" << join(s.k_widths) << ",v=" << join(s.v_widths) << ",g=" << s.group << ",page=" << s.page_size
       << ",lens=" << join(s.lens);
    if (s.bits != 16) os << ",bits=" << s.bits;
    if (s.key_ramp != 0.0) os << ",key_ramp=" << s.key_ramp;
    if (s.width_hint >= 0) os << ",width_hint=" << s.width_hint;
    return os.str();
}

// Fills ragged K and V pools: the requests' tokens get normal values; every other slot gets K = 0
// (an ordinary score) and V = 3e4, so any weight a kernel gives a slot it should not read shows.
void fill_ragged_pools(host_tensor & k, host_tensor & v, const ragged_spec & s, const page_table_arrays & pt,
                       int64_t n_pages, test_rng & rng) {
    const int64_t kt = sum(s.k_widths), vt = sum(s.v_widths);
    const std::vector<float> key_scale = slot_key_scales(s, pt, n_pages);
    // Head c's part of page p starts at p * page_size * total + page_size * offset (the heads tile
    // the page, so every element is set). One generator per page, as fill_ragged_q4_pools.
    for_each_seeded(n_pages, rng, [&](int64_t page, test_rng & local) {
        int64_t ko = 0, vo = 0;
        for (size_t c = 0; c < s.k_widths.size(); ++c) {
            const int64_t kw = s.k_widths[c], vw = s.v_widths[c];
            for (int64_t slot = 0; slot < s.page_size; ++slot) {
                const float ks = key_scale[size_t(page * s.page_size + slot)];
                const bool u = ks > 0.0f;
                const int64_t kb = page * s.page_size * kt + s.page_size * ko + slot * kw;
                const int64_t vb = page * s.page_size * vt + s.page_size * vo + slot * vw;
                for (int64_t d = 0; d < kw; ++d) set_float(k, kb + d, u ? ks * local.normal() : 0.0f);
                for (int64_t d = 0; d < vw; ++d) set_float(v, vb + d, u ? local.normal() : 3e4f);
            }
            ko += kw;
            vo += vw;
        }
    });
}

// ---------------------------------------------------------------------------------------------

class head_project_case : public test_case {
  public:
    // Heads h < n_heads with widths in_w[h] -> out_w[h]; heads of one `share` group use one basis
    // (the GQA query heads of a KV head; their widths must agree). Two unnamed columns stay
    // untouched at the end of dst.
    head_project_case(int64_t n_tokens, std::vector<int64_t> in_w, std::vector<int64_t> out_w, int64_t share)
        : n_(n_tokens), in_(std::move(in_w)), out_(std::move(out_w)), share_(share) {
        for (size_t h = 0; h < in_.size(); ++h)
            KVCOMP_CHECK_ARG(in_[h] == in_[h - h % size_t(share_)] && out_[h] == out_[h - h % size_t(share_)],
                             "head_project_case: heads sharing a basis need equal widths");
        for (size_t h = 0; h < in_.size(); ++h)
            if (h % size_t(share_) == 0) n_basis_ += in_[h] * out_[h];
        add_tensor("x", dtype::f32, {std::max<int64_t>(n_, 1), sum(in_)}, tensor_role::input);
        add_tensor("bases", dtype::f32, {n_basis_}, tensor_role::input);
        add_tensor("table", dtype::i32, {int64_t(in_.size()), 5}, tensor_role::input);
        add_tensor("dst", dtype::f32, {std::max<int64_t>(n_, 1), sum(out_) + 2}, tensor_role::output)
            .expect_written = n_ * sum(out_);
    }
    op_type op() const override { return op_type::head_project; }
    std::string vars() const override {
        std::ostringstream os;
        os << "tokens=" << n_ << ",in=" << join(in_) << ",out=" << join(out_) << ",share=" << share_;
        return os.str();
    }
    double max_nmse() const override { return 1e-10; }
    uint64_t flops() const override {
        return 2 * uint64_t(n_) *
               uint64_t(std::inner_product(in_.begin(), in_.end(), out_.begin(), int64_t(0)));
    }
    op_desc build(const std::vector<tensor> & v) const override {
        head_project_params p;
        p.n_tokens = n_, p.n_heads = int64_t(in_.size()), p.in_total = sum(in_), p.out_total = sum(out_) + 2;
        p.n_basis = n_basis_;
        return make_op(p, {v[0], v[1], v[2]}, {v[3]});
    }

  protected:
    void init(test_rng & rng) override {
        fill_normal(tensors_[0], rng);
        fill_normal(tensors_[1], rng, 0.1f);
        std::vector<int32_t> table;
        int64_t in_off = 0, out_off = 0, b_off = 0;
        for (size_t h = 0; h < in_.size(); ++h) {
            if (h % size_t(share_) == 0 && h > 0) b_off += in_[h - size_t(share_)] * out_[h - size_t(share_)];
            table.insert(table.end(), {int32_t(in_off), int32_t(in_[h]), int32_t(b_off), int32_t(out_off),
                                       int32_t(out_[h])});
            in_off += in_[h];
            out_off += out_[h];
        }
        fill_i32(tensors_[2], table);
    }

  private:
    int64_t n_;
    std::vector<int64_t> in_, out_;
    int64_t share_, n_basis_ = 0;
};

// ---------------------------------------------------------------------------------------------

class kv_append_ragged_case : public test_case {
  public:
    // prev[b] tokens already cached, add[b] new ones (shuffled across requests when `shuffle`).
    kv_append_ragged_case(const ragged_spec & s, std::vector<int64_t> prev, std::vector<int64_t> add,
                          bool shuffle)
        : s_(s), prev_(std::move(prev)), add_(std::move(add)), shuffle_(shuffle) {
        for (size_t b = 0; b < prev_.size(); ++b) total_.push_back(prev_[b] + add_[b]);
        n_tokens_ = sum(add_);
        nnz_ = std::max<int64_t>(1, pages_needed(total_, s.page_size));
        n_pages_ = nnz_ + s.extra_pages;
        const int64_t kt = sum(s.k_widths), vt = sum(s.v_widths);
        add_tensor("k_new", dtype::f32, {std::max<int64_t>(n_tokens_, 1), kt}, tensor_role::input);
        add_tensor("v_new", dtype::f32, {std::max<int64_t>(n_tokens_, 1), vt}, tensor_role::input);
        add_tensor("batch_idx", dtype::i32, {std::max<int64_t>(n_tokens_, 1)}, tensor_role::input);
        add_tensor("positions", dtype::i32, {std::max<int64_t>(n_tokens_, 1)}, tensor_role::input);
        add_tensor("indptr", dtype::i32, {int64_t(prev_.size()) + 1}, tensor_role::input);
        add_tensor("indices", dtype::i32, {nnz_}, tensor_role::input);
        add_tensor("heads", dtype::i32, {int64_t(s.k_widths.size()), 4}, tensor_role::input);
        if (s.bits == 4) {
            // q4 bytes may take any value, so no poison check: the pools start as random bytes and
            // must come back identical to the reference's, byte for byte (rows not appended to
            // included).
            add_tensor("k_pages", dtype::u8, {n_pages_, s.page_size * pool_row(s, false)}, tensor_role::inout,
                       compare_kind::exact);
            add_tensor("v_pages", dtype::u8, {n_pages_, s.page_size * pool_row(s, true)}, tensor_role::inout,
                       compare_kind::exact);
            return;
        }
        add_tensor("k_pages", dtype::f16, {n_pages_, s.page_size * kt}, tensor_role::output,
                   compare_kind::exact)
            .expect_written = sum(total_) * kt;
        add_tensor("v_pages", dtype::f16, {n_pages_, s.page_size * vt}, tensor_role::output,
                   compare_kind::exact)
            .expect_written = sum(total_) * vt;
    }
    op_type op() const override { return op_type::kv_append_ragged; }
    std::string vars() const override {
        std::ostringstream os;
        os << "k=" << join(s_.k_widths) << ",v=" << join(s_.v_widths) << ",page=" << s_.page_size
           << ",prev=" << join(prev_) << ",new=" << join(add_) << ",shuffled=" << shuffle_;
        if (s_.bits != 16) os << ",bits=" << s_.bits;
        return os.str();
    }
    double max_nmse() const override { return 0.0; }
    op_desc build(const std::vector<tensor> & v) const override {
        kv_append_ragged_params p;
        p.kv = spec_layout(s_, n_pages_);
        p.n_tokens = n_tokens_, p.batch = int64_t(prev_.size()), p.nnz_pages = nnz_;
        return make_op(p, {v[0], v[1], v[2], v[3], v[4], v[5], v[6]}, {v[7], v[8]});
    }

  protected:
    void init(test_rng & rng) override {
        fill_normal(tensors_[0], rng);
        fill_normal(tensors_[1], rng);
        const page_table_arrays pt = build_page_table(total_, s_.page_size, n_pages_, rng);
        std::vector<int32_t> bidx, pos;
        for (size_t b = 0; b < prev_.size(); ++b)
            for (int64_t i = 0; i < add_[b]; ++i)
                bidx.push_back(int32_t(b)), pos.push_back(int32_t(prev_[b] + i));
        if (shuffle_)
            for (size_t i = bidx.size(); i > 1; --i) {
                const size_t j = size_t(rng.below(int64_t(i)));
                std::swap(bidx[i - 1], bidx[j]);
                std::swap(pos[i - 1], pos[j]);
            }
        fill_i32(tensors_[2], bidx);
        fill_i32(tensors_[3], pos);
        fill_i32(tensors_[4], pt.indptr);
        fill_i32(tensors_[5], pt.indices);
        fill_i32(tensors_[6], lr::ragged_heads_table(s_.k_widths, s_.v_widths));
        if (s_.bits == 4) {
            for (int i = 7; i < 9; ++i)
                for (uint8_t & byte : tensors_[size_t(i)].data) byte = uint8_t(rng.below(256));
            return;
        }
        // Tokens already cached hold data; every other slot keeps the poison pattern.
        int64_t off[2] = {0, 0};
        for (size_t c = 0; c < s_.k_widths.size(); ++c) {
            const int64_t w[2] = {s_.k_widths[c], s_.v_widths[c]},
                          tot[2] = {sum(s_.k_widths), sum(s_.v_widths)};
            for (int i = 0; i < 2; ++i) {
                for (size_t b = 0; b < prev_.size(); ++b)
                    for (int64_t j = 0; j < prev_[b]; ++j) {
                        const int64_t page = pt.indices[size_t(pt.indptr[b] + j / s_.page_size)];
                        const int64_t base =
                            page * s_.page_size * tot[i] + s_.page_size * off[i] + (j % s_.page_size) * w[i];
                        for (int64_t d = 0; d < w[i]; ++d)
                            set_float(tensors_[size_t(7 + i)], base + d, rng.normal());
                    }
                off[i] += w[i];
            }
        }
    }

  private:
    ragged_spec s_;
    std::vector<int64_t> prev_, add_, total_;
    bool shuffle_;
    int64_t n_tokens_ = 0, nnz_ = 0, n_pages_ = 0;
};

// ---------------------------------------------------------------------------------------------

// attn_decode_ragged and attn_decode_palu (palu = true): same pages, schedule and output.
class ragged_decode_case : public test_case {
  public:
    ragged_decode_case(const ragged_spec & s, bool palu) : s_(s), palu_(palu) {
        batch_ = int64_t(s.lens.size());
        n_kv_ = int64_t(s.k_widths.size());
        nnz_ = std::max<int64_t>(1, pages_needed(s.lens, s.page_size));
        n_pages_ = nnz_ + s.extra_pages;
        lr::decode_schedule_options o;
        o.policy = s.policy;
        o.n_workers = s.workers;
        o.min_chunk_tokens = s.min_chunk_tokens;
        o.waves = s.waves;
        o.token_cost = s.token_cost;
        o.task_cost = s.task_cost;
        o.tail_percent = s.tail_percent;
        sched_ = lr::build_decode_schedule(s.lens, s.k_widths, s.v_widths, o);
        const int64_t kt = sum(s.k_widths), vt = sum(s.v_widths), g = s.group;
        add_tensor("q", dtype::f32, {batch_, palu ? n_kv_ * g * s.head_dim : g * kt}, tensor_role::input);
        const dtype pt = s.bits == 4 ? dtype::u8 : dtype::f16;
        add_tensor("k_pages", pt, {n_pages_, s.page_size * pool_row(s, false)}, tensor_role::input);
        add_tensor("v_pages", pt, {n_pages_, s.page_size * pool_row(s, true)}, tensor_role::input);
        add_tensor("indptr", dtype::i32, {batch_ + 1}, tensor_role::input);
        add_tensor("indices", dtype::i32, {nnz_}, tensor_role::input);
        add_tensor("last_page_len", dtype::i32, {batch_}, tensor_role::input);
        add_tensor("heads", dtype::i32, {n_kv_, 4}, tensor_role::input);
        add_tensor("schedule", dtype::i32, {std::max<int64_t>(sched_.n_tasks, 1), 4}, tensor_role::input);
        add_tensor("merge", dtype::i32, {int64_t(sched_.merge.size())}, tensor_role::input);
        if (palu) add_tensor("aux", dtype::f32, {s.head_dim * kt + s.rot_dim / 2}, tensor_role::input);
        add_tensor("out", dtype::f32, {batch_, g * vt}, tensor_role::output);
    }
    op_type op() const override { return palu_ ? op_type::attn_decode_palu : op_type::attn_decode_ragged; }
    std::string vars() const override {
        std::ostringstream os;
        os << ragged_vars(s_) << ",sched=" << lr::policy_name(s_.policy) << "/" << s_.workers;
        if (s_.token_cost != 1) os << ",token_cost=" << s_.token_cost;
        if (s_.task_cost != 0) os << ",task_cost=" << s_.task_cost;
        if (s_.tail_percent != 0) os << ",tail=" << s_.tail_percent;
        os << ",tasks=" << sched_.n_tasks;
        if (palu_)
            os << ",hd=" << s_.head_dim << ",rot=" << s_.rot_dim
               << ",style=" << (s_.style == rope_style::neox ? "neox" : "interleaved");
        return os.str();
    }
    double max_nmse() const override { return 1e-6; }
    uint64_t bytes() const override {
        // The requests' K'/V' once (f16 elements or q4 rows), q and out.
        uint64_t b = 0;
        const int64_t row = s_.bits == 4 ? pool_row(s_, false) + pool_row(s_, true)
                                         : (sum(s_.k_widths) + sum(s_.v_widths)) * 2;
        for (int64_t l : s_.lens) b += uint64_t(l * row);
        return b + uint64_t(tensors_.front().numel() + tensors_.back().numel()) * 4;
    }
    op_desc build(const std::vector<tensor> & v) const override {
        const ragged_layout kv = spec_layout(s_, n_pages_);
        const int64_t max_len = *std::max_element(s_.lens.begin(), s_.lens.end());
        if (palu_) {
            attn_decode_palu_params p;
            p.kv = kv;
            p.batch = batch_, p.n_q_heads = n_kv_ * s_.group, p.head_dim = s_.head_dim,
            p.rot_dim = s_.rot_dim;
            p.nnz_pages = nnz_, p.max_seq_len = max_len, p.n_tasks = sched_.n_tasks, p.style = s_.style;
            p.scale = 1.0f / std::sqrt(float(s_.head_dim));
            return make_op(p, {v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8], v[9]}, {v[10]});
        }
        attn_decode_ragged_params p;
        p.kv = kv;
        p.batch = batch_, p.n_q_heads = n_kv_ * s_.group, p.nnz_pages = nnz_, p.max_seq_len = max_len;
        p.n_tasks = sched_.n_tasks;
        p.scale = 1.0f / std::sqrt(128.0f);  // the original head_dim's, not any width's
        return make_op(p, {v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8]}, {v[9]});
    }

  protected:
    void init(test_rng & rng) override {
        fill_normal(tensors_[0], rng);
        const page_table_arrays pt = build_page_table(s_.lens, s_.page_size, n_pages_, rng, s_.shuffle_pages);
        std::vector<int32_t> indices = pt.indices;
        indices.resize(size_t(nnz_), 0);  // all-empty batch: one dummy entry, never read
        if (s_.bits == 4)
            fill_ragged_q4_pools(tensors_[1], tensors_[2], s_, pt, n_pages_, rng);
        else
            fill_ragged_pools(tensors_[1], tensors_[2], s_, pt, n_pages_, rng);
        fill_i32(tensors_[3], pt.indptr);
        fill_i32(tensors_[4], indices);
        fill_i32(tensors_[5], pt.last_page_len);
        fill_i32(tensors_[6], lr::ragged_heads_table(s_.k_widths, s_.v_widths));
        std::vector<int32_t> sched = sched_.schedule;
        sched.resize(size_t(std::max<int64_t>(sched_.n_tasks, 1) * 4), 0);
        fill_i32(tensors_[7], sched);
        fill_i32(tensors_[8], sched_.merge);
        if (palu_) {
            // B_c scaled so reconstructed keys have unit variance; Llama's inv_freq (theta 1e4).
            host_tensor & aux = tensors_[9];
            const int64_t kt = sum(s_.k_widths);
            int64_t off = 0;
            for (int64_t kw : s_.k_widths) {
                for (int64_t e = 0; e < kw * s_.head_dim; ++e)
                    set_float(aux, s_.head_dim * off + e, rng.normal() / std::sqrt(float(kw)));
                off += kw;
            }
            for (int64_t i = 0; i < s_.rot_dim / 2; ++i)
                set_float(aux, s_.head_dim * kt + i,
                          float(std::pow(10000.0, -2.0 * double(i) / double(s_.rot_dim))));
        }
    }

  private:
    ragged_spec s_;
    bool palu_;
    int64_t batch_ = 0, n_kv_ = 0, nnz_ = 0, n_pages_ = 0;
    lr::decode_schedule sched_;
};

// ---------------------------------------------------------------------------------------------

class attn_prefill_ragged_case : public test_case {
  public:
    explicit attn_prefill_ragged_case(const ragged_spec & s) : s_(s) {
        n_tokens_ = sum(s.lens);
        const int64_t n = std::max<int64_t>(n_tokens_, 1), g = s.group;
        add_tensor("q", dtype::f32, {n, g * sum(s.k_widths)}, tensor_role::input);
        add_tensor("k", dtype::f16, {n, sum(s.k_widths)}, tensor_role::input);
        add_tensor("v", dtype::f16, {n, sum(s.v_widths)}, tensor_role::input);
        add_tensor("seq_indptr", dtype::i32, {int64_t(s.lens.size()) + 1}, tensor_role::input);
        add_tensor("heads", dtype::i32, {int64_t(s.k_widths.size()), 4}, tensor_role::input);
        add_tensor("out", dtype::f32, {n, g * sum(s.v_widths)}, tensor_role::output).expect_written =
            n_tokens_ * g * sum(s.v_widths);
    }
    op_type op() const override { return op_type::attn_prefill_ragged; }
    std::string vars() const override {
        return ragged_vars(s_) + ",balanced=" + (s_.balanced_prefill ? "1" : "0");
    }
    double max_nmse() const override { return 1e-6; }
    // Causal half: per request L (L + 1) / 2 visible pairs, 2 (k_width + v_width) flops per pair and
    // query head (q.k and p.v).
    uint64_t flops() const override {
        uint64_t pairs = 0;
        for (int64_t l : s_.lens) pairs += uint64_t(l) * uint64_t(l + 1) / 2;
        return pairs * uint64_t(2 * s_.group * (sum(s_.k_widths) + sum(s_.v_widths)));
    }
    op_desc build(const std::vector<tensor> & v) const override {
        attn_prefill_ragged_params p;
        p.batch = int64_t(s_.lens.size()), p.n_tokens = n_tokens_, p.n_kv_heads = int64_t(s_.k_widths.size());
        p.n_q_heads = p.n_kv_heads * s_.group, p.k_total = sum(s_.k_widths), p.v_total = sum(s_.v_widths);
        p.max_width = widest(s_), p.max_seq_len = *std::max_element(s_.lens.begin(), s_.lens.end());
        p.scale = 1.0f / std::sqrt(128.0f);
        p.balanced = s_.balanced_prefill;
        return make_op(p, {v[0], v[1], v[2], v[3], v[4]}, {v[5]});
    }

  protected:
    void init(test_rng & rng) override {
        fill_normal(tensors_[0], rng);
        fill_normal(tensors_[1], rng);
        fill_normal(tensors_[2], rng);
        std::vector<int32_t> indptr{0};
        for (int64_t l : s_.lens) indptr.push_back(indptr.back() + int32_t(l));
        fill_i32(tensors_[3], indptr);
        fill_i32(tensors_[4], lr::ragged_heads_table(s_.k_widths, s_.v_widths));
    }

  private:
    ragged_spec s_;
    int64_t n_tokens_ = 0;
};

ragged_spec rs(std::vector<int64_t> k, std::vector<int64_t> v, int64_t g, std::vector<int64_t> lens,
               lr::decode_policy policy = lr::decode_policy::balanced, int64_t workers = 132) {
    ragged_spec s;
    s.k_widths = std::move(k), s.v_widths = std::move(v), s.group = g, s.lens = std::move(lens);
    s.policy = policy, s.workers = workers;
    return s;
}

}  // namespace

case_ptr make_attn_prefill_ragged_case(const ragged_spec & s) {
    return std::make_unique<attn_prefill_ragged_case>(s);
}

case_ptr make_ragged_decode_case(const ragged_spec & s, bool palu) {
    return std::make_unique<ragged_decode_case>(s, palu);
}

void add_lowrank_cases(std::vector<case_ptr> & out, case_set set) {
    using P = lr::decode_policy;
    auto add = [&](case_ptr c) { out.push_back(std::move(c)); };
    // Uneven widths, some not multiples of 16 (ZACK/FDC ranks are rounded to 16, Palu's need not be).
    const std::vector<int64_t> kw = {16, 48, 128, 80}, vw = {32, 16, 128, 40};
    const std::vector<int64_t> kw_odd = {24, 7, 100, 64}, vw_odd = {9, 40, 64, 128};
    if (set == case_set::full || set == case_set::smoke) {
        add(std::make_unique<head_project_case>(17, std::vector<int64_t>{128, 128, 128, 128},
                                                std::vector<int64_t>{16, 48, 128, 80}, 1));
        add(std::make_unique<head_project_case>(5, std::vector<int64_t>(8, 128),
                                                std::vector<int64_t>{24, 24, 24, 24, 7, 7, 7, 7}, 4));
        add(std::make_unique<kv_append_ragged_case>(rs(kw, vw, 4, {}), std::vector<int64_t>{0, 16, 5},
                                                    std::vector<int64_t>{15, 1, 40}, false));
        add(std::make_unique<ragged_decode_case>(rs(kw, vw, 4, {1500, 1, 0, 700}), false));
        add(std::make_unique<attn_prefill_ragged_case>(rs(kw, vw, 4, {15, 1, 33})));
        // kv_bits=4 pages (core/ragged_q4.h): odd widths, so rows end mid-word and mid-byte.
        {
            ragged_spec s = rs(kw_odd, vw_odd, 4, {});
            s.bits = 4;
            add(std::make_unique<kv_append_ragged_case>(s, std::vector<int64_t>{0, 16, 5},
                                                        std::vector<int64_t>{15, 1, 40}, true));
            ragged_spec d = rs(kw_odd, vw_odd, 4, {1500, 1, 0, 700});
            d.bits = 4;
            add(std::make_unique<ragged_decode_case>(d, false));
        }
        {
            ragged_spec s = rs({24, 7}, {16, 40}, 4, {1000, 1, 0});
            s.head_dim = 64, s.rot_dim = 32;
            add(std::make_unique<ragged_decode_case>(s, true));
        }
    }
    if (set == case_set::full) {
        // head_project: Q (query heads share their KV head's basis), K/V (one basis per head), a
        // width-1 head, a wide up-projection (Palu-style latent -> head_dim) and no tokens.
        add(std::make_unique<head_project_case>(33, std::vector<int64_t>{64, 64, 64, 64},
                                                std::vector<int64_t>{1, 9, 64, 33}, 1));
        add(std::make_unique<head_project_case>(3, std::vector<int64_t>{24, 7},
                                                std::vector<int64_t>{128, 128}, 1));
        add(std::make_unique<head_project_case>(0, std::vector<int64_t>{16}, std::vector<int64_t>{16}, 1));
        // Prefill-sized (the tiled CUDA kernel; the cases above take its few-token kernel).
        add(std::make_unique<head_project_case>(300, std::vector<int64_t>{128, 128, 128, 128},
                                                std::vector<int64_t>{16, 48, 128, 200}, 1));
        // ... with input widths that are no multiple of the 16-wide k-steps, past one token tile.
        add(std::make_unique<head_project_case>(130, std::vector<int64_t>{24, 7},
                                                std::vector<int64_t>{33, 128}, 1));
        // kv_append_ragged: decode steps at page boundaries (shuffled), page size 1, odd widths.
        add(std::make_unique<kv_append_ragged_case>(rs(kw_odd, vw_odd, 4, {}),
                                                    std::vector<int64_t>{0, 15, 16, 31, 1, 100},
                                                    std::vector<int64_t>{1, 1, 1, 1, 1, 1}, true));
        {
            ragged_spec s = rs(kw, vw, 4, {});
            s.page_size = 1;
            add(std::make_unique<kv_append_ragged_case>(s, std::vector<int64_t>{3, 0, 5},
                                                        std::vector<int64_t>{2, 1, 4}, true));
        }
        // attn_decode_ragged: both policies on few and many workers, GQA 1 and 4, odd widths,
        // long requests that split (1000-3000 tokens), empty and 1-token requests, page size 1.
        for (P policy : {P::plain, P::balanced})
            for (int64_t workers : {int64_t(4), int64_t(132)}) {
                add(std::make_unique<ragged_decode_case>(rs(kw, vw, 4, {3000, 1, 0, 1000}, policy, workers),
                                                         false));
                add(std::make_unique<ragged_decode_case>(
                    rs(kw_odd, vw_odd, 1, {2049, 17, 1}, policy, workers), false));
            }
        add(std::make_unique<ragged_decode_case>(rs({256, 1}, {1, 256}, 4, {300, 257}), false));
        // A width hint that claims narrow heads: CUDA takes its small-stage kernel, in which the
        // 128 + 128 head's rows fit only 8-row tiles (half of each mma step masked); with rising
        // scores, so the running max moves across those tiles too.
        {
            ragged_spec s = rs(kw, vw, 4, {3000, 1, 0, 1000}, P::balanced, 8);
            s.width_hint = 16, s.key_ramp = 20.0;
            add(std::make_unique<ragged_decode_case>(s, false));
        }
        // The merge on rows of many tasks: short chunks for many workers give the 2600-token request
        // 200 tasks per KV head (two chunks of the merge's 128-task weights), the 40-token one 4,
        // next to a 1-task and an empty row; a 200-wide head takes two channels per work-item.
        {
            ragged_spec s = rs({24, 40}, {9, 200}, 4, {2600, 1, 0, 40}, P::plain, 400);
            s.min_chunk_tokens = 8;
            add(std::make_unique<ragged_decode_case>(s, false));
            s.bits = 4;
            add(std::make_unique<ragged_decode_case>(s, false));
        }
        // Rows of more than 64 tasks on average (325 each; the CUDA merge's 16-warp variant), heads no
        // wider than 128 (the tensor-core decodes), f16 and q4 pages.
        {
            ragged_spec s = rs({24, 40}, {9, 120}, 4, {2600, 2600}, P::plain, 400);
            s.min_chunk_tokens = 8;
            add(std::make_unique<ragged_decode_case>(s, false));
            s.bits = 4;
            add(std::make_unique<ragged_decode_case>(s, false));
        }
        // Rising scores (keys up to 21x): the running max moves through the whole sequence, in every
        // task of a row and in the tiles after a task's first, on f16 and q4 pages.
        {
            ragged_spec s = rs({48, 64}, {32, 128}, 4, {2600, 300, 17}, P::balanced, 8);
            s.key_ramp = 20.0;
            add(std::make_unique<ragged_decode_case>(s, false));
            s.bits = 4;
            add(std::make_unique<ragged_decode_case>(s, false));
            // Keys up to 201x: scores climb by hundreds of log2 units within a task, so a running max
            // that stopped moving after the task's first tile would overflow.
            s.key_ramp = 200.0;
            add(std::make_unique<ragged_decode_case>(s, false));
            s.bits = 16;
            add(std::make_unique<ragged_decode_case>(s, false));
        }
        add(std::make_unique<ragged_decode_case>(rs({16}, {16}, 8, {0, 0}), false));
        // Pages of 64 and 128 tokens (the engine's --page-size; bench_ops --page-sizes): more rows than a
        // stage of the widest heads holds, so their tiles are runs inside one page; f16 and q4 pages.
        for (int64_t page : {64, 128}) {
            ragged_spec s = rs(kw, vw, 4, {3000, 1, 0, 1000}, P::balanced, 132);
            s.page_size = page;
            add(std::make_unique<ragged_decode_case>(s, false));
            s.bits = 4;
            add(std::make_unique<ragged_decode_case>(s, false));
        }
        // Widths that are multiples of 8 but not 16 (the CUDA tensor-core kernel copies them in
        // 16-byte chunks and must keep the stale half of its last 16-channel step out of the scores).
        add(std::make_unique<ragged_decode_case>(rs({24, 40, 8, 56}, {8, 120, 40, 24}, 4, {1000, 17, 3}), false));
        // GQA 8 (one work-group for all heads, 4-wide chunks) and 16 (two head sub-groups of 8).
        add(std::make_unique<ragged_decode_case>(rs({32, 24}, {16, 40}, 8, {700, 33}), false));
        add(std::make_unique<ragged_decode_case>(rs({32, 9}, {16, 40}, 16, {300, 1}), false));
        {
            ragged_spec s = rs(kw_odd, vw_odd, 4, {15, 1, 17});
            s.page_size = 1;
            add(std::make_unique<ragged_decode_case>(s, false));
        }
        // q4 pages: ZACK-style widths (multiples of 16), page size 1, GQA 1 and 8, a 256-wide head,
        // both policies on few workers (split rows, merged), empty and 1-token requests.
        for (P policy : {P::plain, P::balanced}) {
            ragged_spec a = rs(kw, vw, 4, {3000, 1, 0, 1000}, policy, 4);
            a.bits = 4;
            add(std::make_unique<ragged_decode_case>(a, false));
            ragged_spec b = rs(kw_odd, vw_odd, 1, {2049, 17, 1}, policy, 132);
            b.bits = 4;
            add(std::make_unique<ragged_decode_case>(b, false));
        }
        {
            ragged_spec a = rs({256, 1}, {1, 256}, 8, {300, 257});
            a.bits = 4;
            add(std::make_unique<ragged_decode_case>(a, false));
            ragged_spec b = rs(kw_odd, vw_odd, 4, {15, 1, 17});
            b.bits = 4, b.page_size = 1;
            add(std::make_unique<ragged_decode_case>(b, false));
            ragged_spec c = rs(kw, vw, 4, {});
            c.bits = 4, c.page_size = 1;
            add(std::make_unique<kv_append_ragged_case>(c, std::vector<int64_t>{3, 0, 5},
                                                        std::vector<int64_t>{2, 1, 4}, false));
            // The tensor-core kernel on q4 pages (widest head <= 128): widths that are multiples of 8
            // but not of 32 (code words read past a row's end), GQA 8 and 16 (head chunks of 4).
            ragged_spec f = rs({24, 40, 8, 56}, {8, 120, 40, 24}, 4, {1000, 17, 3});
            f.bits = 4;
            add(std::make_unique<ragged_decode_case>(f, false));
            ragged_spec g8 = rs({32, 24}, {16, 40}, 8, {700, 33});
            g8.bits = 4;
            add(std::make_unique<ragged_decode_case>(g8, false));
            ragged_spec g16 = rs({32, 9}, {16, 40}, 16, {300, 1});
            g16.bits = 4;
            add(std::make_unique<ragged_decode_case>(g16, false));
            ragged_spec e = rs({256, 1, 9}, {1, 256, 17}, 4, {});
            e.bits = 4;
            add(std::make_unique<kv_append_ragged_case>(e, std::vector<int64_t>{0, 15, 31},
                                                        std::vector<int64_t>{1, 1, 1}, true));
        }
        // attn_prefill_ragged: balanced on/off, GQA 1 and 4, odd widths, tiles around 64/128 rows.
        for (bool balanced : {false, true}) {
            ragged_spec a = rs(kw, vw, 4, {1, 17, 63, 64, 65, 200});
            a.balanced_prefill = balanced;
            add(std::make_unique<attn_prefill_ragged_case>(a));
            ragged_spec b = rs(kw_odd, vw_odd, 1, {127, 128, 129, 1});
            b.balanced_prefill = balanced;
            add(std::make_unique<attn_prefill_ragged_case>(b));
        }
        // attn_decode_palu: neox and interleaved, full and partial rotary, GQA 1 and 4, odd latent
        // widths, both policies, requests long enough to split.
        for (rope_style style : {rope_style::neox, rope_style::interleaved})
            for (int64_t rot : {int64_t(128), int64_t(64)}) {
                ragged_spec s = rs({32, 48, 17, 64}, {32, 16, 40, 128}, 4, {3000, 1, 0, 513},
                                   rot == 128 ? P::balanced : P::plain, 132);
                s.head_dim = 128, s.rot_dim = rot, s.style = style;
                add(std::make_unique<ragged_decode_case>(s, true));
            }
        {
            ragged_spec s = rs({64, 9}, {64, 9}, 1, {1200, 2}, P::balanced, 4);
            s.head_dim = 64, s.rot_dim = 64, s.style = rope_style::interleaved;
            add(std::make_unique<ragged_decode_case>(s, true));
        }
        // Latent widths 80..128: the CUDA tensor-core kernel's rebuild paths of 5..8 latent steps (the
        // cases above take 1..4), neox at full and interleaved at partial rotary.
        for (rope_style style : {rope_style::neox, rope_style::interleaved}) {
            ragged_spec s = rs({80, 96, 112, 128}, {64, 80, 48, 128}, 4, {700, 33}, P::balanced, 132);
            s.head_dim = 128, s.rot_dim = style == rope_style::neox ? 128 : 96, s.style = style;
            add(std::make_unique<ragged_decode_case>(s, true));
        }
        // A request of 100K tokens: positions past the range the other cases reach (angles of up to 1e5
        // rad, page tables of 6250 entries). Only these fail (NMSE ~3e-5, checked on PoCL) when the OpenCL
        // kernel takes its tile's position modulo 2^16. They do not catch a rotation whose angle is formed
        // in fp32 (up to 4e-3 rad off here): over this case's unpeaked attention that error averages out
        // (NMSE ~7e-12 on PoCL with the OpenCL kernel so altered). With keys growing along the request
        // (key_ramp) it showed (1.3e-6 to 5e-6), but so did the f16 rounding of the CUDA tensor-core
        // kernel's keys, roughly emulated in the OpenCL kernel (4.6e-7 to 2.5e-6): no budget tells the
        // two apart (docs/kernel_notes.md).
        for (rope_style style : {rope_style::neox, rope_style::interleaved}) {
            ragged_spec s = rs({32, 64}, {16, 32}, 4, {100000, 3}, P::balanced, 132);
            s.head_dim = style == rope_style::neox ? 128 : 64, s.rot_dim = s.head_dim, s.style = style;
            add(std::make_unique<ragged_decode_case>(s, true));
        }
        {
            // Many tasks per row for the merge (see the attn_decode_ragged case above): 167 tasks.
            ragged_spec s = rs({24, 7}, {16, 40}, 4, {1500, 1, 0}, P::plain, 400);
            s.head_dim = 64, s.rot_dim = 32, s.min_chunk_tokens = 8;
            add(std::make_unique<ragged_decode_case>(s, true));
        }
    }
    if (set == case_set::perf || set == case_set::perf_cpu) {
        // Llama-3-8B decode (8 KV heads of 128, GQA 4) at ~50% compression with uneven ranks.
        const bool cpu = set == case_set::perf_cpu;
        const std::vector<int64_t> k8 = {32, 48, 64, 64, 80, 96, 112, 128},
                                   v8 = {64, 64, 48, 80, 64, 32, 96, 64};
        const int64_t ctx = cpu ? 4096 : 32768, b = cpu ? 2 : 16;
        for (P policy : {P::plain, P::balanced}) {
            add(std::make_unique<ragged_decode_case>(rs(k8, v8, 4, {ctx}, policy, 132), false));
            add(std::make_unique<ragged_decode_case>(
                rs(k8, v8, 4, std::vector<int64_t>(size_t(b), ctx / 8), policy, 132), false));
        }
        // The same shapes on q4 pages (kv_bits=4), balanced schedule.
        for (const std::vector<int64_t> & lens :
             {std::vector<int64_t>{ctx}, std::vector<int64_t>(size_t(b), ctx / 8)}) {
            ragged_spec q = rs(k8, v8, 4, lens, P::balanced, 132);
            q.bits = 4;
            add(std::make_unique<ragged_decode_case>(q, false));
        }
        // Palu at the same shapes (latent K widths k8, head_dim 128, full rotary): its cost is the
        // per-step key reconstruction (k_width * 128 FMAs per token and KV head), not the bytes.
        ragged_spec s = rs(k8, v8, 4, {ctx / 4}, P::balanced, 132);
        s.head_dim = 128, s.rot_dim = 128;
        add(std::make_unique<ragged_decode_case>(s, true));
    }
}

}  // namespace kvcomp::test
