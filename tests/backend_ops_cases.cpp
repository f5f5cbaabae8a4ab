// One test_case class per op (contracts in lib/core/op.h). The case lists are in
// backend_ops_list.cpp.
//
// Accepted error per op (NMSE = sum((a-b)^2) / sum(b^2) against the fp64-accumulating CPU oracle):
//
//   op            metric   threshold  why
//   copy          exact    -          f32/f16/bf16 conversions are round-to-nearest-even by contract
//   add           nmse     1e-12      one fp32 rounding per element
//   gemm -> f32   nmse     1e-8       fp32 accumulation over k <= 4096 gives ~1e-12; TF32 inputs
//                                     (~1e-7) must fail, the contract says fp32 math
//   gemm -> f16   nmse     1e-6       fp16 rounding of the output alone is ~1e-7
//   rms_norm      nmse     1e-9       fp32 sum of squares and rsqrt
//   rope          nmse     1e-6       an fp32 angle at position ~4k is off by ~2.4e-4 rad at the
//                                     highest frequency (the oracle's angle is fp64)
//   silu_mul      nmse     1e-9       fp32 exp and division
//   softmax       nmse     1e-9       fp32 exp and row sum
//   get_rows      exact    -          f16/bf16 -> f32 is exact; bad ids give zero rows
//   argmax        exact    -          integer output; ties and NaN are specified
//   kv_append     exact    -          whole page pools bit for bit, untouched pages stay poisoned
//   attn_decode   nmse     1e-6       fp32 online softmax, fast exp and split-KV merging allowed
//   attn_prefill  nmse     1e-6       as attn_decode; the CUDA tensor-core kernel also rounds the
//                                     scaled q and the softmax weights to fp16: ~3e-8..6e-8 in a
//                                     CPU model of it (not yet measured on a GPU)
#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

#include "backend_ops_cases_impl.h"

namespace kvcomp::test {

namespace {

// "[1,15,17]"; long uniform lists (bench batches) as "16x4096".
std::string join(const std::vector<int64_t> & v) {
    std::ostringstream os;
    if (v.size() > 4 && std::all_of(v.begin(), v.end(), [&](int64_t x) { return x == v[0]; })) {
        os << v.size() << 'x' << v[0];
        return os.str();
    }
    os << '[';
    for (size_t i = 0; i < v.size(); ++i) os << (i ? "," : "") << v[i];
    os << ']';
    return os.str();
}

void fill_i32(host_tensor & t, const std::vector<int32_t> & v) {
    KVCOMP_ASSERT(int64_t(v.size()) == t.numel());
    std::copy(v.begin(), v.end(), t.as<int32_t>());
}

}  // namespace

// ---------------------------------------------------------------------------------------------

copy_case::copy_case(dtype src, dtype dst, int64_t n, size_t pad) : src_(src), dst_(dst), n_(n) {
    pad_bytes_ = pad;
    add_tensor("src", src, {n}, tensor_role::input);
    add_tensor("dst", dst, {n}, tensor_role::output, compare_kind::exact);
}
std::string copy_case::vars() const {
    std::string v =
        std::string("src=") + dtype_name(src_) + ",dst=" + dtype_name(dst_) + ",n=" + std::to_string(n_);
    return pad_bytes_ != 256 ? v + ",offset=" + std::to_string(pad_bytes_) : v;
}
void copy_case::init(test_rng & rng) {
    fill_normal(tensors_[0], rng);
}
op_desc copy_case::build(const std::vector<tensor> & v) const {
    return make_op(copy_params{n_}, {v[0]}, {v[1]});
}

add_case::add_case(int64_t n, bool inplace) : n_(n), inplace_(inplace) {
    add_tensor("a", dtype::f32, {n}, inplace ? tensor_role::inout : tensor_role::input);
    add_tensor("b", dtype::f32, {n}, tensor_role::input);
    if (!inplace) add_tensor("dst", dtype::f32, {n}, tensor_role::output);
}
std::string add_case::vars() const {
    return "n=" + std::to_string(n_) + ",inplace=" + std::to_string(inplace_);
}
void add_case::init(test_rng & rng) {
    fill_normal(tensors_[0], rng);
    fill_normal(tensors_[1], rng);
}
op_desc add_case::build(const std::vector<tensor> & v) const {
    return make_op(add_params{n_}, {v[0], v[1]}, {inplace_ ? v[0] : v[2]});
}

// ---------------------------------------------------------------------------------------------

gemm_case::gemm_case(dtype ta, dtype tb, dtype tc, const gemm_params & p) : ta_(ta), tb_(tb), tc_(tc), p_(p) {
    auto span = [&](int64_t stride, int64_t item) { return stride * (p.batch - 1) + item; };
    const bool reads_c = p.beta != 0.0f;
    add_tensor("A", ta, {span(p.stride_a, p.m * p.k)}, tensor_role::input);
    add_tensor("B", tb, {span(p.stride_b, p.k * p.n)}, tensor_role::input);
    host_tensor & c = add_tensor("C", tc, {span(p.stride_c, p.m * p.n)},
                                 reads_c ? tensor_role::inout : tensor_role::output);
    c.expect_written = p.batch * p.m * p.n;  // stride gaps stay untouched
}
std::string gemm_case::vars() const {
    std::ostringstream os;
    os << "type=" << dtype_name(ta_) << "," << dtype_name(tb_) << "->" << dtype_name(tc_) << ",m=" << p_.m
       << ",n=" << p_.n << ",k=" << p_.k << ",trans_b=" << p_.trans_b << ",batch=" << p_.batch;
    if (p_.batch > 1) os << ",sa=" << p_.stride_a << ",sb=" << p_.stride_b << ",sc=" << p_.stride_c;
    if (p_.alpha != 1.0f || p_.beta != 0.0f) os << ",alpha=" << p_.alpha << ",beta=" << p_.beta;
    return os.str();
}
double gemm_case::max_nmse() const {
    return tc_ == dtype::f16 ? 1e-6 : 1e-8;
}
uint64_t gemm_case::flops() const {
    return uint64_t(2 * p_.m * p_.n * p_.k * p_.batch);
}
void gemm_case::init(test_rng & rng) {
    fill_normal(tensors_[0], rng);
    fill_normal(tensors_[1], rng);
    if (tensors_[2].role == tensor_role::inout) fill_normal(tensors_[2], rng);
}
op_desc gemm_case::build(const std::vector<tensor> & v) const {
    return make_op(p_, {v[0], v[1]}, {v[2]});
}

// ---------------------------------------------------------------------------------------------

rms_norm_case::rms_norm_case(int64_t rows, int64_t n, dtype wtype, bool inplace)
    : rows_(rows), n_(n), wtype_(wtype), inplace_(inplace) {
    add_tensor("x", dtype::f32, {rows, n}, inplace ? tensor_role::inout : tensor_role::input);
    add_tensor("weight", wtype, {n}, tensor_role::input);
    if (!inplace) add_tensor("dst", dtype::f32, {rows, n}, tensor_role::output);
}
std::string rms_norm_case::vars() const {
    return "rows=" + std::to_string(rows_) + ",n=" + std::to_string(n_) + ",w=" + dtype_name(wtype_) +
           ",inplace=" + std::to_string(inplace_);
}
void rms_norm_case::init(test_rng & rng) {
    fill_normal(tensors_[0], rng, 3.0f);
    fill_normal(tensors_[1], rng);
}
op_desc rms_norm_case::build(const std::vector<tensor> & v) const {
    return make_op(rms_norm_params{rows_, n_, 1e-5f}, {v[0], v[1]}, {inplace_ ? v[0] : v[2]});
}

// ---------------------------------------------------------------------------------------------

rope_case::rope_case(const rope_params & p, bool freq_factors, bool inplace, int32_t max_pos)
    : p_(p), ff_(freq_factors), inplace_(inplace), max_pos_(max_pos) {
    const std::vector<int64_t> shape{p.n_tokens, p.n_heads, p.head_dim};
    add_tensor("x", dtype::f32, shape, inplace ? tensor_role::inout : tensor_role::input);
    add_tensor("positions", dtype::i32, {p.n_tokens}, tensor_role::input);
    add_tensor("freq_factors", dtype::f32, ff_ ? std::vector<int64_t>{p.rot_dim / 2} : std::vector<int64_t>{},
               tensor_role::input);
    if (!inplace) add_tensor("dst", dtype::f32, shape, tensor_role::output);
}
std::string rope_case::vars() const {
    std::ostringstream os;
    os << "tokens=" << p_.n_tokens << ",heads=" << p_.n_heads << ",hd=" << p_.head_dim
       << ",rot=" << p_.rot_dim << ",style=" << (p_.style == rope_style::neox ? "neox" : "interleaved")
       << ",ff=" << ff_ << ",theta=" << p_.theta << ",max_pos=" << max_pos_ << ",inplace=" << inplace_;
    return os.str();
}
void rope_case::init(test_rng & rng) {
    fill_normal(tensors_[0], rng);
    std::vector<int32_t> pos(static_cast<size_t>(p_.n_tokens));
    for (auto & q : pos) q = int32_t(rng.below(max_pos_));
    pos.front() = 0;
    pos.back() = max_pos_ - 1;  // the largest angle, where fp32 phase error is worst
    fill_i32(tensors_[1], pos);
    if (ff_) {
        // Llama 3 style: 1 for high frequencies, up to 8 for low ones, smooth in between.
        host_tensor & f = tensors_[2];
        const int64_t half = p_.rot_dim / 2;
        for (int64_t i = 0; i < half; ++i)
            set_float(f, i, 1.0f + 7.0f * float(i) / float(std::max<int64_t>(1, half - 1)));
    }
}
op_desc rope_case::build(const std::vector<tensor> & v) const {
    return make_op(p_, {v[0], v[1], v[2]}, {inplace_ ? v[0] : v[3]});
}

// ---------------------------------------------------------------------------------------------

silu_mul_case::silu_mul_case(int64_t rows, int64_t n) : rows_(rows), n_(n) {
    add_tensor("gate", dtype::f32, {rows, n}, tensor_role::input);
    add_tensor("up", dtype::f32, {rows, n}, tensor_role::input);
    add_tensor("dst", dtype::f32, {rows, n}, tensor_role::output);
}
std::string silu_mul_case::vars() const {
    return "rows=" + std::to_string(rows_) + ",n=" + std::to_string(n_);
}
void silu_mul_case::init(test_rng & rng) {
    fill_normal(tensors_[0], rng, 4.0f);  // reaches the saturated tails of the sigmoid
    fill_normal(tensors_[1], rng);
}
op_desc silu_mul_case::build(const std::vector<tensor> & v) const {
    return make_op(silu_mul_params{rows_, n_}, {v[0], v[1]}, {v[2]});
}

softmax_case::softmax_case(int64_t rows, int64_t n, float scale, bool mask)
    : rows_(rows), n_(n), scale_(scale), mask_(mask) {
    add_tensor("x", dtype::f32, {rows, n}, tensor_role::input);
    add_tensor("dst", dtype::f32, {rows, n}, tensor_role::output);
}
std::string softmax_case::vars() const {
    std::ostringstream os;
    os << "rows=" << rows_ << ",n=" << n_ << ",scale=" << scale_ << ",mask=" << mask_;
    return os.str();
}
void softmax_case::init(test_rng & rng) {
    fill_normal(tensors_[0], rng, 5.0f);
    if (mask_) {  // causal-mask style -inf entries, never a whole row
        float * x = tensors_[0].as<float>();
        for (int64_t r = 0; r < rows_; ++r)
            for (int64_t i = r % n_ + 1; i < n_; i += 2)
                x[r * n_ + i] = -std::numeric_limits<float>::infinity();
    }
}
op_desc softmax_case::build(const std::vector<tensor> & v) const {
    return make_op(softmax_params{rows_, n_, scale_}, {v[0]}, {v[1]});
}

// ---------------------------------------------------------------------------------------------

get_rows_case::get_rows_case(dtype table, int64_t table_rows, int64_t row_len, int64_t n_ids)
    : table_(table), rows_(table_rows), len_(row_len), ids_(n_ids) {
    add_tensor("table", table, {table_rows, row_len}, tensor_role::input);
    add_tensor("ids", dtype::i32, {n_ids}, tensor_role::input);
    add_tensor("dst", dtype::f32, {n_ids, row_len}, tensor_role::output, compare_kind::exact);
}
std::string get_rows_case::vars() const {
    return std::string("table=") + dtype_name(table_) + ",table_rows=" + std::to_string(rows_) +
           ",row_len=" + std::to_string(len_) + ",ids=" + std::to_string(ids_);
}
void get_rows_case::init(test_rng & rng) {
    fill_normal(tensors_[0], rng);
    std::vector<int32_t> ids(static_cast<size_t>(ids_));
    for (auto & i : ids) i = int32_t(rng.below(rows_));
    // Out-of-range ids give zero rows (op.h); a repeated id; the last row.
    const int32_t special[] = {-1, int32_t(rows_), std::numeric_limits<int32_t>::max(),
                               std::numeric_limits<int32_t>::min(), int32_t(rows_ - 1)};
    for (size_t i = 0; i < 5 && 2 * i + 1 < ids.size(); ++i) ids[2 * i + 1] = special[i];
    if (ids.size() > 2) ids[2] = ids[0];
    fill_i32(tensors_[1], ids);
}
op_desc get_rows_case::build(const std::vector<tensor> & v) const {
    return make_op(get_rows_params{ids_, len_, rows_}, {v[0], v[1]}, {v[2]});
}

argmax_case::argmax_case(int64_t rows, int64_t n) : rows_(rows), n_(n) {
    add_tensor("x", dtype::f32, {rows, n}, tensor_role::input);
    add_tensor("dst", dtype::i32, {rows}, tensor_role::output, compare_kind::exact);
}
std::string argmax_case::vars() const {
    return "rows=" + std::to_string(rows_) + ",n=" + std::to_string(n_);
}
void argmax_case::init(test_rng & rng) {
    fill_normal(tensors_[0], rng);
    float * x = tensors_[0].as<float>();
    const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
    if (n_ >= 3) {
        // row 0: a tie of the maximum (lowest index wins); row 1: NaN first and last (never wins);
        // row 2: -inf entries and the maximum in the last column.
        x[n_ / 3] = x[2 * n_ / 3] = 100.0f;
        if (rows_ > 1) x[n_] = x[2 * n_ - 1] = nan;
        if (rows_ > 2) {
            for (int64_t i = 0; i < n_; i += 3) x[2 * n_ + i] = -inf;
            x[3 * n_ - 1] = 50.0f;
        }
    }
}
op_desc argmax_case::build(const std::vector<tensor> & v) const {
    return make_op(argmax_params{rows_, n_}, {v[0]}, {v[1]});
}

// ---------------------------------------------------------------------------------------------

kv_append_case::kv_append_case(const append_spec & s) : s_(s) {
    std::vector<int64_t> total;
    for (size_t b = 0; b < s.prev.size(); ++b) total.push_back(s.prev[b] + s.add[b]);
    n_tokens_ = 0;
    for (int64_t a : s.add) n_tokens_ += a;
    nnz_ = pages_needed(total, s.page_size);
    n_pages_ = nnz_ + s.extra_pages;
    const int64_t batch = int64_t(s.prev.size());
    const std::vector<int64_t> tok{n_tokens_, s.n_kv_heads, s.head_dim};
    const std::vector<int64_t> pool{n_pages_, s.n_kv_heads, s.page_size, s.head_dim};
    add_tensor("k_new", s.new_type, tok, tensor_role::input);
    add_tensor("v_new", s.new_type, tok, tensor_role::input);
    add_tensor("batch_idx", dtype::i32, {n_tokens_}, tensor_role::input);
    add_tensor("positions", dtype::i32, {n_tokens_}, tensor_role::input);
    add_tensor("indptr", dtype::i32, {batch + 1}, tensor_role::input);
    add_tensor("indices", dtype::i32, {nnz_}, tensor_role::input);
    int64_t cached = 0;
    for (int64_t t : total) cached += t;
    for (const char * name : {"k_pages", "v_pages"})
        add_tensor(name, dtype::f16, pool, tensor_role::output, compare_kind::exact).expect_written =
            cached * s.n_kv_heads * s.head_dim;
}
std::string kv_append_case::vars() const {
    std::ostringstream os;
    os << "batch=" << s_.prev.size() << ",kv_heads=" << s_.n_kv_heads << ",hd=" << s_.head_dim
       << ",page=" << s_.page_size << ",prev=" << join(s_.prev) << ",new=" << join(s_.add)
       << ",k=" << dtype_name(s_.new_type) << ",shuffled=" << s_.shuffle;
    return os.str();
}
uint64_t kv_append_case::bytes() const {
    // Read the new tokens, write them as fp16; the pools' other pages are not touched.
    const uint64_t elems = uint64_t(n_tokens_ * s_.n_kv_heads * s_.head_dim);
    return 2 * elems * (dtype_size(s_.new_type) + 2) + uint64_t(n_tokens_) * 8;
}
void kv_append_case::init(test_rng & rng) {
    fill_normal(tensors_[0], rng);
    fill_normal(tensors_[1], rng);
    std::vector<int64_t> total;
    for (size_t b = 0; b < s_.prev.size(); ++b) total.push_back(s_.prev[b] + s_.add[b]);
    const page_table_arrays pt = build_page_table(total, s_.page_size, n_pages_, rng);
    std::vector<int32_t> bidx, pos;
    for (size_t b = 0; b < s_.prev.size(); ++b)
        for (int64_t i = 0; i < s_.add[b]; ++i) {
            bidx.push_back(int32_t(b));
            pos.push_back(int32_t(s_.prev[b] + i));
        }
    if (s_.shuffle)  // tokens of different requests in any order
        for (size_t i = bidx.size(); i > 1; --i) {
            const size_t j = size_t(rng.below(int64_t(i)));
            std::swap(bidx[i - 1], bidx[j]);
            std::swap(pos[i - 1], pos[j]);
        }
    fill_i32(tensors_[2], bidx);
    fill_i32(tensors_[3], pos);
    fill_i32(tensors_[4], pt.indptr);
    fill_i32(tensors_[5], pt.indices);
    // Tokens already cached hold data; every other slot keeps the poison pattern.
    for (int pool = 6; pool < 8; ++pool) {
        host_tensor & t = tensors_[size_t(pool)];
        for (size_t b = 0; b < s_.prev.size(); ++b)
            for (int64_t p = 0; p < s_.prev[b]; ++p) {
                const int64_t page = pt.indices[size_t(pt.indptr[b] + p / s_.page_size)];
                for (int64_t h = 0; h < s_.n_kv_heads; ++h) {
                    const int64_t base =
                        ((page * s_.n_kv_heads + h) * s_.page_size + p % s_.page_size) * s_.head_dim;
                    for (int64_t d = 0; d < s_.head_dim; ++d) set_float(t, base + d, rng.normal());
                }
            }
    }
}
op_desc kv_append_case::build(const std::vector<tensor> & v) const {
    kv_append_params p;
    p.kv = {n_pages_, s_.n_kv_heads, s_.page_size, s_.head_dim};
    p.n_tokens = n_tokens_;
    p.batch = int64_t(s_.prev.size());
    p.nnz_pages = nnz_;
    return make_op(p, {v[0], v[1], v[2], v[3], v[4], v[5]}, {v[6], v[7]});
}

// ---------------------------------------------------------------------------------------------

uint64_t decode_kv_bytes(const decode_spec & s) {
    uint64_t tokens = 0;
    for (int64_t l : s.lens) tokens += uint64_t(l);
    return 2 * tokens * uint64_t(s.n_kv_heads * s.head_dim) * 2;
}

attn_decode_case::attn_decode_case(const decode_spec & s) : s_(s) {
    batch_ = int64_t(s.lens.size());
    nnz_ = std::max<int64_t>(1, pages_needed(s.lens, s.page_size));
    n_pages_ = nnz_ + s.extra_pages;
    const std::vector<int64_t> q{batch_, s.n_q_heads, s.head_dim};
    const std::vector<int64_t> pool{n_pages_, s.n_kv_heads, s.page_size, s.head_dim};
    add_tensor("q", dtype::f32, q, tensor_role::input);
    add_tensor("k_pages", dtype::f16, pool, tensor_role::input);
    add_tensor("v_pages", dtype::f16, pool, tensor_role::input);
    add_tensor("indptr", dtype::i32, {batch_ + 1}, tensor_role::input);
    add_tensor("indices", dtype::i32, {nnz_}, tensor_role::input);
    add_tensor("last_page_len", dtype::i32, {batch_}, tensor_role::input);
    add_tensor("out", dtype::f32, q, tensor_role::output);
}
std::string attn_decode_case::vars() const {
    std::ostringstream os;
    os << "batch=" << batch_ << ",q_heads=" << s_.n_q_heads << ",kv_heads=" << s_.n_kv_heads
       << ",hd=" << s_.head_dim << ",page=" << s_.page_size << ",lens=" << join(s_.lens)
       << ",splits=" << (s_.n_splits ? std::to_string(s_.n_splits) : std::string("auto"));
    if (s_.key_ramp > 0.0f) os << ",key_ramp=" << s_.key_ramp;
    return os.str();
}
uint64_t attn_decode_case::bytes() const {
    return decode_kv_bytes(s_) + 2 * uint64_t(batch_ * s_.n_q_heads * s_.head_dim) * 4;
}
uint64_t attn_decode_case::flops() const {
    uint64_t tokens = 0;
    for (int64_t l : s_.lens) tokens += uint64_t(l);
    return 4 * tokens * uint64_t(s_.n_q_heads * s_.head_dim);
}
void attn_decode_case::init(test_rng & rng) {
    fill_normal(tensors_[0], rng);
    fill_normal(tensors_[1], rng);
    fill_normal(tensors_[2], rng);
    const page_table_arrays pt = build_page_table(s_.lens, s_.page_size, n_pages_, rng, s_.shuffle_pages);
    std::vector<int32_t> indices = pt.indices;
    indices.resize(size_t(nnz_), 0);  // all-empty batch: one dummy entry, never read
    fill_i32(tensors_[3], pt.indptr);
    fill_i32(tensors_[4], indices);
    fill_i32(tensors_[5], pt.last_page_len);
    if (s_.key_ramp > 0.0f)  // decode_spec::key_ramp
        for (size_t b = 0; b < s_.lens.size(); ++b) {
            for (int64_t h = 0; h < s_.n_q_heads; ++h)
                set_float(tensors_[0], (int64_t(b) * s_.n_q_heads + h) * s_.head_dim, 2.0f);
            for (int64_t p = 0; p < s_.lens[b]; ++p) {
                const int64_t page = pt.indices[size_t(pt.indptr[b] + p / s_.page_size)];
                for (int64_t h = 0; h < s_.n_kv_heads; ++h) {
                    const int64_t e = ((page * s_.n_kv_heads + h) * s_.page_size + p % s_.page_size) * s_.head_dim;
                    set_float(tensors_[1], e, get_float(tensors_[1], e) + s_.key_ramp * float(p));
                }
            }
        }
    // Slots past a request's last token and pages no request owns: K = 0 gives them an ordinary
    // score and V = 3e4 makes any weight they get visible in the output.
    std::vector<uint8_t> used(size_t(n_pages_ * s_.page_size), 0);
    for (size_t b = 0; b < s_.lens.size(); ++b)
        for (int64_t p = 0; p < s_.lens[b]; ++p)
            used[size_t(pt.indices[size_t(pt.indptr[b] + p / s_.page_size)] * s_.page_size +
                        p % s_.page_size)] = 1;
    for (int64_t page = 0; page < n_pages_; ++page)
        for (int64_t slot = 0; slot < s_.page_size; ++slot) {
            if (used[size_t(page * s_.page_size + slot)]) continue;
            for (int64_t h = 0; h < s_.n_kv_heads; ++h) {
                const int64_t base = ((page * s_.n_kv_heads + h) * s_.page_size + slot) * s_.head_dim;
                for (int64_t d = 0; d < s_.head_dim; ++d) {
                    set_float(tensors_[1], base + d, 0.0f);
                    set_float(tensors_[2], base + d, 3e4f);
                }
            }
        }
}
op_desc attn_decode_case::build(const std::vector<tensor> & v) const {
    attn_decode_params p;
    p.kv = {n_pages_, s_.n_kv_heads, s_.page_size, s_.head_dim};
    p.batch = batch_;
    p.n_q_heads = s_.n_q_heads;
    p.nnz_pages = nnz_;
    p.max_seq_len = s_.lens.empty() ? 0 : *std::max_element(s_.lens.begin(), s_.lens.end());
    p.scale = 1.0f / std::sqrt(float(s_.head_dim));
    p.n_splits = s_.n_splits;
    return make_op(p, {v[0], v[1], v[2], v[3], v[4], v[5]}, {v[6]});
}

// ---------------------------------------------------------------------------------------------

attn_prefill_case::attn_prefill_case(std::vector<int64_t> seqs, int64_t q_heads, int64_t kv_heads, int64_t hd,
                                     size_t pad, bool with_lse, float key_ramp)
    : seqs_(std::move(seqs)), qh_(q_heads), kvh_(kv_heads), hd_(hd), with_lse_(with_lse), key_ramp_(key_ramp) {
    pad_bytes_ = pad;
    n_tokens_ = 0;
    for (int64_t s : seqs_) n_tokens_ += s;
    add_tensor("q", dtype::f32, {n_tokens_, qh_, hd_}, tensor_role::input);
    add_tensor("k", dtype::f16, {n_tokens_, kvh_, hd_}, tensor_role::input);
    add_tensor("v", dtype::f16, {n_tokens_, kvh_, hd_}, tensor_role::input);
    add_tensor("seq_indptr", dtype::i32, {int64_t(seqs_.size()) + 1}, tensor_role::input);
    add_tensor("out", dtype::f32, {n_tokens_, qh_, hd_}, tensor_role::output);
    if (with_lse_) add_tensor("lse", dtype::f32, {n_tokens_, qh_}, tensor_role::output);
}
std::string attn_prefill_case::vars() const {
    std::ostringstream os;
    os << "batch=" << seqs_.size() << ",q_heads=" << qh_ << ",kv_heads=" << kvh_ << ",hd=" << hd_
       << ",seqs=" << join(seqs_);
    if (pad_bytes_ != 256) os << ",offset=" << pad_bytes_;
    if (with_lse_) os << ",lse=1";
    if (key_ramp_ > 0.0f) os << ",key_ramp=" << key_ramp_;
    return os.str();
}
uint64_t attn_prefill_case::flops() const {
    uint64_t pairs = 0;
    for (int64_t s : seqs_) pairs += uint64_t(s * (s + 1) / 2);
    return 4 * pairs * uint64_t(qh_ * hd_);
}
void attn_prefill_case::init(test_rng & rng) {
    for (int i = 0; i < 3; ++i) fill_normal(tensors_[size_t(i)], rng);
    std::vector<int32_t> indptr{0};
    for (int64_t s : seqs_) indptr.push_back(indptr.back() + int32_t(s));
    if (key_ramp_ > 0.0f)  // see the constructor: scores that climb along each request's keys
        for (size_t b = 0; b < seqs_.size(); ++b)
            for (int64_t p = 0; p < seqs_[b]; ++p) {
                const int64_t t = indptr[b] + p;
                for (int64_t h = 0; h < qh_; ++h) set_float(tensors_[0], (t * qh_ + h) * hd_, 2.0f);
                for (int64_t h = 0; h < kvh_; ++h) {
                    const int64_t e = (t * kvh_ + h) * hd_;
                    set_float(tensors_[1], e, get_float(tensors_[1], e) + key_ramp_ * float(p));
                }
            }
    fill_i32(tensors_[3], indptr);
}
op_desc attn_prefill_case::build(const std::vector<tensor> & v) const {
    attn_prefill_params p;
    p.batch = int64_t(seqs_.size());
    p.n_tokens = n_tokens_;
    p.n_q_heads = qh_;
    p.n_kv_heads = kvh_;
    p.head_dim = hd_;
    p.max_seq_len = *std::max_element(seqs_.begin(), seqs_.end());
    p.scale = 1.0f / std::sqrt(float(hd_));
    return with_lse_ ? make_op(p, {v[0], v[1], v[2], v[3]}, {v[4], v[5]}) : make_op(p, {v[0], v[1], v[2], v[3]}, {v[4]});
}

}  // namespace kvcomp::test
