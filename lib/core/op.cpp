// Op names, descriptions for messages, and the shared validation every backend runs first.
#include "core/op.h"

#include <algorithm>
#include <sstream>

#include "core/backend.h"
#include "core/error.h"
#include "core/ragged_q4.h"

namespace kvcomp {

const char * op_name(op_type t) {
    switch (t) {
        case op_type::copy: return "copy";
        case op_type::add: return "add";
        case op_type::gemm: return "gemm";
        case op_type::rms_norm: return "rms_norm";
        case op_type::rope: return "rope";
        case op_type::silu_mul: return "silu_mul";
        case op_type::softmax: return "softmax";
        case op_type::get_rows: return "get_rows";
        case op_type::argmax: return "argmax";
        case op_type::kv_append: return "kv_append";
        case op_type::attn_decode: return "attn_decode";
        case op_type::attn_prefill: return "attn_prefill";
        case op_type::kv_quantize: return "kv_quantize";
        case op_type::attn_decode_quant: return "attn_decode_quant";
        case op_type::probe_scores: return "probe_scores";
        case op_type::head_project: return "head_project";
        case op_type::kv_append_ragged: return "kv_append_ragged";
        case op_type::attn_decode_ragged: return "attn_decode_ragged";
        case op_type::attn_prefill_ragged: return "attn_prefill_ragged";
        case op_type::attn_decode_palu: return "attn_decode_palu";
        case op_type::kv_dequantize: return "kv_dequantize";
        case op_type::select_salient: return "select_salient";
        case op_type::count: break;
    }
    return "?";
}

namespace {

// Maps each parameter struct to its op_type (the variant index follows the enum order).
template <typename P>
constexpr op_type type_of() {
    constexpr size_t i = [] {
        op_params v{P{}};
        return v.index();
    }();
    return static_cast<op_type>(i);
}

struct param_printer {
    std::ostringstream & os;
    void operator()(const copy_params & p) { os << "n=" << p.n; }
    void operator()(const add_params & p) { os << "n=" << p.n; }
    void operator()(const gemm_params & p) {
        os << "m=" << p.m << ",n=" << p.n << ",k=" << p.k << ",trans_b=" << p.trans_b << ",batch=" << p.batch;
        if (p.alpha != 1.0f) os << ",alpha=" << p.alpha;
        if (p.beta != 0.0f) os << ",beta=" << p.beta;
    }
    void operator()(const rms_norm_params & p) { os << "rows=" << p.rows << ",n=" << p.n << ",eps=" << p.eps; }
    void operator()(const rope_params & p) {
        os << "tokens=" << p.n_tokens << ",heads=" << p.n_heads << ",hd=" << p.head_dim << ",rot=" << p.rot_dim
           << ",theta=" << p.theta << ",style=" << (p.style == rope_style::neox ? "neox" : "interleaved");
    }
    void operator()(const silu_mul_params & p) { os << "rows=" << p.rows << ",n=" << p.n; }
    void operator()(const softmax_params & p) { os << "rows=" << p.rows << ",n=" << p.n << ",scale=" << p.scale; }
    void operator()(const get_rows_params & p) {
        os << "ids=" << p.n_ids << ",row_len=" << p.row_len << ",table_rows=" << p.n_table_rows;
    }
    void operator()(const argmax_params & p) { os << "rows=" << p.rows << ",n=" << p.n; }
    void kv(const kv_layout & l) {
        os << "pages=" << l.n_pages << ",kv_heads=" << l.n_kv_heads << ",page=" << l.page_size
           << ",hd=" << l.head_dim;
    }
    void operator()(const kv_append_params & p) {
        kv(p.kv);
        os << ",tokens=" << p.n_tokens << ",batch=" << p.batch;
    }
    void operator()(const attn_decode_params & p) {
        os << "batch=" << p.batch << ",q_heads=" << p.n_q_heads << ",";
        kv(p.kv);
        os << ",max_len=" << p.max_seq_len;
        if (p.n_splits) os << ",splits=" << p.n_splits;
    }
    void operator()(const attn_prefill_params & p) {
        os << "batch=" << p.batch << ",tokens=" << p.n_tokens << ",q_heads=" << p.n_q_heads
           << ",kv_heads=" << p.n_kv_heads << ",hd=" << p.head_dim << ",max_len=" << p.max_seq_len;
    }
    void qb(const qblock_layout & q) {
        os << "kv_heads=" << q.n_kv_heads << ",hd=" << q.head_dim << ",hi=" << q.hi_tokens << "x" << q.hi_bits
           << "b,lo=" << q.lo_tokens << "x" << q.lo_bits << "b,v_group=" << q.v_group
           << ",cscale=" << (q.channel_scale ? 1 : 0);
    }
    void operator()(const kv_quantize_params & p) {
        qb(p.q);
        os << ",blocks=" << p.n_blocks << ",src_tokens=" << p.n_src_tokens << ",row_tokens=" << p.row_tokens
           << ",slots=" << p.n_slots;
    }
    void operator()(const kv_dequantize_params & p) {
        qb(p.q);
        os << ",blocks=" << p.n_blocks << ",row_tokens=" << p.row_tokens << ",slots=" << p.n_slots;
    }
    void operator()(const select_salient_params & p) {
        os << "kv_heads=" << p.n_kv_heads << ",tokens=" << p.n_tokens << ",prompts=" << p.n_prompts
           << ",blocks=" << p.n_blocks << ",hi=" << p.hi_tokens << ",lo=" << p.lo_tokens;
    }
    void operator()(const attn_decode_quant_params & p) {
        qb(p.q);
        os << ",batch=" << p.batch << ",q_heads=" << p.n_q_heads << ",slots=" << p.n_slots
           << ",blocks=" << p.nnz_blocks << ",win_rows=" << p.n_win_rows << ",win=" << p.win_tokens
           << ",win_pages=" << p.n_win_pages << "x" << p.win_page_tokens << ",max_tokens=" << p.max_tokens;
        if (p.n_splits) os << ",splits=" << p.n_splits;
    }
    void operator()(const probe_scores_params & p) {
        os << "probes=" << p.n_probes << ",keys=" << p.n_keys << ",q_heads=" << p.n_q_heads
           << ",kv_heads=" << p.n_kv_heads << ",hd=" << p.head_dim << ",row_tokens=" << p.row_tokens
           << ",lse=" << (p.use_lse ? 1 : 0);
        if (p.batch) os << ",batch=" << p.batch;
    }
    void operator()(const head_project_params & p) {
        os << "tokens=" << p.n_tokens << ",heads=" << p.n_heads << ",in=" << p.in_total << ",out=" << p.out_total
           << ",basis=" << p.n_basis;
    }
    void ragged(const ragged_layout & l) {
        os << "pages=" << l.n_pages << ",kv_heads=" << l.n_kv_heads << ",page=" << l.page_size
           << ",k_total=" << l.k_total << ",v_total=" << l.v_total << ",max_width=" << l.max_width;
        if (l.bits != 16)
            os << ",bits=" << l.bits << ",k_row_bytes=" << l.k_row_bytes << ",v_row_bytes=" << l.v_row_bytes;
    }
    void operator()(const kv_append_ragged_params & p) {
        ragged(p.kv);
        os << ",tokens=" << p.n_tokens << ",batch=" << p.batch;
    }
    void operator()(const attn_decode_ragged_params & p) {
        os << "batch=" << p.batch << ",q_heads=" << p.n_q_heads << ",";
        ragged(p.kv);
        os << ",max_len=" << p.max_seq_len << ",tasks=" << p.n_tasks;
    }
    void operator()(const attn_prefill_ragged_params & p) {
        os << "batch=" << p.batch << ",tokens=" << p.n_tokens << ",q_heads=" << p.n_q_heads
           << ",kv_heads=" << p.n_kv_heads << ",k_total=" << p.k_total << ",v_total=" << p.v_total
           << ",max_width=" << p.max_width << ",max_len=" << p.max_seq_len << ",balanced=" << (p.balanced ? 1 : 0);
    }
    void operator()(const attn_decode_palu_params & p) {
        os << "batch=" << p.batch << ",q_heads=" << p.n_q_heads << ",hd=" << p.head_dim << ",rot=" << p.rot_dim
           << ",";
        ragged(p.kv);
        os << ",max_len=" << p.max_seq_len << ",tasks=" << p.n_tasks;
    }
};

// Validation helpers: each failure names the op (with parameters), the operand and the value.
struct checker {
    const op_desc & op;
    std::string what() const { return describe(op); }

    void operand(const tensor & t, const char * role, std::initializer_list<dtype> types, int64_t numel) const {
        KVCOMP_CHECK_ARG(t.valid(), what(), ": ", role, " is missing");
        bool type_ok = false;
        for (dtype d : types) type_ok = type_ok || d == t.type;
        if (!type_ok) {
            std::string allowed;
            for (dtype d : types) allowed += std::string(allowed.empty() ? "" : "|") + dtype_name(d);
            KVCOMP_THROW(status::invalid_argument, what(), ": ", role, " has dtype ", dtype_name(t.type),
                         ", expected ", allowed);
        }
        KVCOMP_CHECK_ARG(t.numel() == numel, what(), ": ", role, " has ", t.numel(), " elements (",
                         describe(t), "), expected ", numel);
    }
    void positive(int64_t v, const char * name) const {
        KVCOMP_CHECK_ARG(v > 0, what(), ": ", name, " must be positive, got ", v);
    }
    void non_negative(int64_t v, const char * name) const {
        KVCOMP_CHECK_ARG(v >= 0, what(), ": ", name, " must be >= 0, got ", v);
    }
};

constexpr std::initializer_list<dtype> floats = {dtype::f32, dtype::f16, dtype::bf16};

void check_qblock(const checker & c, const qblock_layout & q) {
    c.positive(q.n_kv_heads, "n_kv_heads");
    c.positive(q.head_dim, "head_dim");
    c.non_negative(q.hi_tokens, "hi_tokens");
    c.non_negative(q.lo_tokens, "lo_tokens");
    KVCOMP_CHECK_ARG(q.block_tokens() > 0, c.what(), ": a block must hold at least one token");
    for (int32_t bits : {q.hi_bits, q.lo_bits})
        KVCOMP_CHECK_ARG(bits == 2 || bits == 4 || bits == 8, c.what(), ": bits must be 2, 4 or 8, got ", bits);
    KVCOMP_CHECK_ARG(q.head_dim % 16 == 0, c.what(), ": head_dim must be a multiple of 16 for packed codes, got ",
                     q.head_dim);
    KVCOMP_CHECK_ARG(q.v_group > 0 && q.head_dim % q.v_group == 0, c.what(), ": v_group (", q.v_group,
                     ") must divide head_dim (", q.head_dim, ")");
}

// Tokens a K/V source holds under the row_tokens addressing of core/op.h.
int64_t source_elems(int64_t tokens, int64_t row_tokens, int64_t n_kv_heads, int64_t head_dim) {
    const int64_t rows = row_tokens > 0 ? (tokens + row_tokens - 1) / row_tokens : 0;
    return (row_tokens > 0 ? rows * row_tokens : tokens) * n_kv_heads * head_dim;
}

void check_kv(const checker & c, const kv_layout & l) {
    c.positive(l.n_pages, "n_pages");
    c.positive(l.n_kv_heads, "n_kv_heads");
    c.positive(l.page_size, "page_size");
    c.positive(l.head_dim, "head_dim");
}

void check_ragged(const checker & c, const ragged_layout & l) {
    c.positive(l.n_pages, "n_pages");
    c.positive(l.n_kv_heads, "n_kv_heads");
    c.positive(l.page_size, "page_size");
    c.positive(l.k_total, "k_total");
    c.positive(l.v_total, "v_total");
    KVCOMP_CHECK_ARG(l.max_width > 0 && l.max_width <= max_ragged_width, c.what(), ": max_width must be in [1, ",
                     max_ragged_width, "], got ", l.max_width);
    KVCOMP_CHECK_ARG(l.k_total >= l.n_kv_heads && l.v_total >= l.n_kv_heads, c.what(),
                     ": every KV head needs at least one K and one V dim");
    KVCOMP_CHECK_ARG(l.bits == 16 || l.bits == 4, c.what(), ": bits must be 16 or 4, got ", l.bits);
    if (l.bits == 4) {
        // The exact totals depend on the heads table (checked by the CPU reference); these bounds
        // are what the widths allow: every row has its 4 parameter bytes and w/2 code bytes.
        KVCOMP_CHECK_ARG(l.k_row_bytes >= ragged_q4_param_bytes * l.n_kv_heads + l.k_total / 2 &&
                             l.v_row_bytes >= ragged_q4_param_bytes * l.n_kv_heads + l.v_total / 2 &&
                             l.k_row_bytes % 4 == 0 && l.v_row_bytes % 4 == 0,
                         c.what(), ": k_row_bytes ", l.k_row_bytes, " / v_row_bytes ", l.v_row_bytes,
                         " are not q4 row totals (core/ragged_q4.h) for k_total ", l.k_total, ", v_total ",
                         l.v_total);
    }
}

// Element type and count of a ragged page pool (f16 elements or q4 row bytes).
dtype ragged_page_type(const ragged_layout & l) {
    return l.bits == 4 ? dtype::u8 : dtype::f16;
}
int64_t ragged_page_elems(const ragged_layout & l, bool v) {
    const int64_t per_token = l.bits == 4 ? (v ? l.v_row_bytes : l.k_row_bytes) : (v ? l.v_total : l.k_total);
    return l.n_pages * l.page_size * per_token;
}

}  // namespace

template <typename P>
op_desc make_op(const P & params, std::initializer_list<tensor> src, std::initializer_list<tensor> dst) {
    KVCOMP_CHECK_ARG(src.size() <= max_op_src && dst.size() <= max_op_dst, op_name(type_of<P>()),
                     ": too many operands");
    op_desc op;
    op.type = type_of<P>();
    op.params = params;
    size_t i = 0;
    for (const tensor & t : src) op.src[i++] = t;
    i = 0;
    for (const tensor & t : dst) op.dst[i++] = t;
    return op;
}

#define KVCOMP_INSTANTIATE_MAKE_OP(P) \
    template op_desc make_op<P>(const P &, std::initializer_list<tensor>, std::initializer_list<tensor>);
KVCOMP_INSTANTIATE_MAKE_OP(copy_params)
KVCOMP_INSTANTIATE_MAKE_OP(add_params)
KVCOMP_INSTANTIATE_MAKE_OP(gemm_params)
KVCOMP_INSTANTIATE_MAKE_OP(rms_norm_params)
KVCOMP_INSTANTIATE_MAKE_OP(rope_params)
KVCOMP_INSTANTIATE_MAKE_OP(silu_mul_params)
KVCOMP_INSTANTIATE_MAKE_OP(softmax_params)
KVCOMP_INSTANTIATE_MAKE_OP(get_rows_params)
KVCOMP_INSTANTIATE_MAKE_OP(argmax_params)
KVCOMP_INSTANTIATE_MAKE_OP(kv_append_params)
KVCOMP_INSTANTIATE_MAKE_OP(attn_decode_params)
KVCOMP_INSTANTIATE_MAKE_OP(attn_prefill_params)
KVCOMP_INSTANTIATE_MAKE_OP(kv_quantize_params)
KVCOMP_INSTANTIATE_MAKE_OP(attn_decode_quant_params)
KVCOMP_INSTANTIATE_MAKE_OP(probe_scores_params)
KVCOMP_INSTANTIATE_MAKE_OP(head_project_params)
KVCOMP_INSTANTIATE_MAKE_OP(kv_append_ragged_params)
KVCOMP_INSTANTIATE_MAKE_OP(attn_decode_ragged_params)
KVCOMP_INSTANTIATE_MAKE_OP(attn_prefill_ragged_params)
KVCOMP_INSTANTIATE_MAKE_OP(attn_decode_palu_params)
KVCOMP_INSTANTIATE_MAKE_OP(kv_dequantize_params)
KVCOMP_INSTANTIATE_MAKE_OP(select_salient_params)
#undef KVCOMP_INSTANTIATE_MAKE_OP

std::string describe(const op_desc & op) {
    std::ostringstream os;
    os << op_name(op.type) << '(';
    param_printer pp{os};
    std::visit(pp, op.params);
    for (int i = 0; i < max_op_src; ++i)
        if (op.src[size_t(i)].valid()) os << ",src" << i << '=' << describe(op.src[size_t(i)]);
    for (int i = 0; i < max_op_dst; ++i)
        if (op.dst[size_t(i)].valid()) os << ",dst" << i << '=' << describe(op.dst[size_t(i)]);
    os << ')';
    return os.str();
}

void check_op(const op_desc & op) {
    KVCOMP_CHECK_ARG(op.type < op_type::count && size_t(op.type) == op.params.index(), "op type ",
                     int(op.type), " does not match its parameter struct (", op.params.index(), ")");
    const checker c{op};
    const auto & s = op.src;
    const auto & d = op.dst;
    const dtype f32 = dtype::f32, f16 = dtype::f16, i32 = dtype::i32;
    switch (op.type) {
        case op_type::copy: {
            const auto & p = op.get<copy_params>();
            c.non_negative(p.n, "n");
            c.operand(s[0], "src", floats, p.n);
            c.operand(d[0], "dst", floats, p.n);
            break;
        }
        case op_type::add: {
            const auto & p = op.get<add_params>();
            c.non_negative(p.n, "n");
            c.operand(s[0], "a", {f32}, p.n);
            c.operand(s[1], "b", {f32}, p.n);
            c.operand(d[0], "dst", {f32}, p.n);
            break;
        }
        case op_type::gemm: {
            const auto & p = op.get<gemm_params>();
            c.positive(p.m, "m");
            c.positive(p.n, "n");
            c.positive(p.k, "k");
            c.positive(p.batch, "batch");
            c.non_negative(p.stride_a, "stride_a");
            c.non_negative(p.stride_b, "stride_b");
            c.non_negative(p.stride_c, "stride_c");
            // Each operand must hold its last batch item.
            auto need = [&](int64_t stride, int64_t item) { return stride * (p.batch - 1) + item; };
            KVCOMP_CHECK_ARG(s[0].valid() && s[1].valid() && d[0].valid(), c.what(), ": needs A, B and C");
            KVCOMP_CHECK_ARG(s[0].numel() >= need(p.stride_a, p.m * p.k), c.what(), ": A has ", s[0].numel(),
                             " elements, needs ", need(p.stride_a, p.m * p.k));
            KVCOMP_CHECK_ARG(s[1].numel() >= need(p.stride_b, p.k * p.n), c.what(), ": B has ", s[1].numel(),
                             " elements, needs ", need(p.stride_b, p.k * p.n));
            KVCOMP_CHECK_ARG(d[0].numel() >= need(p.stride_c, p.m * p.n), c.what(), ": C has ", d[0].numel(),
                             " elements, needs ", need(p.stride_c, p.m * p.n));
            KVCOMP_CHECK_ARG(p.batch == 1 || p.stride_c >= p.m * p.n, c.what(),
                             ": stride_c must separate the outputs (>= m*n)");
            const dtype ta = s[0].type, tb = s[1].type, tc = d[0].type;
            const bool ok = (ta == f32 && tb == f32 && tc == f32) || (ta == f16 && tb == f16 && tc != dtype::bf16 &&
                                                                      tc != i32 && tc != dtype::u8) ||
                            (ta == f32 && tb == f16 && tc == f32);
            KVCOMP_CHECK_ARG(ok, c.what(), ": dtype combination A=", dtype_name(ta), " B=", dtype_name(tb),
                             " C=", dtype_name(tc), " is not one of f32,f32->f32 | f16,f16->f32|f16 | f32,f16->f32");
            break;
        }
        case op_type::rms_norm: {
            const auto & p = op.get<rms_norm_params>();
            c.non_negative(p.rows, "rows");
            c.positive(p.n, "n");
            KVCOMP_CHECK_ARG(p.eps >= 0.0f, c.what(), ": eps must be >= 0");
            c.operand(s[0], "x", {f32}, p.rows * p.n);
            c.operand(s[1], "weight", {f32, f16}, p.n);
            c.operand(d[0], "dst", {f32}, p.rows * p.n);
            break;
        }
        case op_type::rope: {
            const auto & p = op.get<rope_params>();
            c.non_negative(p.n_tokens, "n_tokens");
            c.positive(p.n_heads, "n_heads");
            c.positive(p.head_dim, "head_dim");
            KVCOMP_CHECK_ARG(p.rot_dim > 0 && p.rot_dim % 2 == 0 && p.rot_dim <= p.head_dim, c.what(),
                             ": rot_dim must be even and in (0, head_dim], got ", p.rot_dim);
            KVCOMP_CHECK_ARG(p.theta > 0.0f, c.what(), ": theta must be positive, got ", p.theta);
            const int64_t n = p.n_tokens * p.n_heads * p.head_dim;
            c.operand(s[0], "x", {f32}, n);
            c.operand(s[1], "positions", {i32}, p.n_tokens);
            if (s[2].valid()) c.operand(s[2], "freq_factors", {f32}, p.rot_dim / 2);
            c.operand(d[0], "dst", {f32}, n);
            break;
        }
        case op_type::silu_mul: {
            const auto & p = op.get<silu_mul_params>();
            c.non_negative(p.rows, "rows");
            c.positive(p.n, "n");
            c.operand(s[0], "gate", {f32}, p.rows * p.n);
            c.operand(s[1], "up", {f32}, p.rows * p.n);
            c.operand(d[0], "dst", {f32}, p.rows * p.n);
            break;
        }
        case op_type::softmax: {
            const auto & p = op.get<softmax_params>();
            c.non_negative(p.rows, "rows");
            c.positive(p.n, "n");
            c.operand(s[0], "x", {f32}, p.rows * p.n);
            c.operand(d[0], "dst", {f32}, p.rows * p.n);
            break;
        }
        case op_type::get_rows: {
            const auto & p = op.get<get_rows_params>();
            c.non_negative(p.n_ids, "n_ids");
            c.positive(p.row_len, "row_len");
            c.positive(p.n_table_rows, "n_table_rows");
            c.operand(s[0], "table", floats, p.n_table_rows * p.row_len);
            c.operand(s[1], "ids", {i32}, p.n_ids);
            c.operand(d[0], "dst", {f32}, p.n_ids * p.row_len);
            break;
        }
        case op_type::argmax: {
            const auto & p = op.get<argmax_params>();
            c.non_negative(p.rows, "rows");
            c.positive(p.n, "n");
            c.operand(s[0], "x", {f32}, p.rows * p.n);
            c.operand(d[0], "dst", {i32}, p.rows);
            break;
        }
        case op_type::kv_append: {
            const auto & p = op.get<kv_append_params>();
            check_kv(c, p.kv);
            c.non_negative(p.n_tokens, "n_tokens");
            c.positive(p.batch, "batch");
            c.positive(p.nnz_pages, "nnz_pages");
            const int64_t tok = p.n_tokens * p.kv.n_kv_heads * p.kv.head_dim;
            const int64_t pool = p.kv.n_pages * p.kv.n_kv_heads * p.kv.page_size * p.kv.head_dim;
            c.operand(s[0], "k_new", {f32, f16}, tok);
            c.operand(s[1], "v_new", {f32, f16}, tok);
            c.operand(s[2], "batch_idx", {i32}, p.n_tokens);
            c.operand(s[3], "positions", {i32}, p.n_tokens);
            c.operand(s[4], "indptr", {i32}, p.batch + 1);
            c.operand(s[5], "indices", {i32}, p.nnz_pages);
            c.operand(d[0], "k_pages", {f16}, pool);
            c.operand(d[1], "v_pages", {f16}, pool);
            break;
        }
        case op_type::attn_decode: {
            const auto & p = op.get<attn_decode_params>();
            check_kv(c, p.kv);
            c.positive(p.batch, "batch");
            c.positive(p.n_q_heads, "n_q_heads");
            c.positive(p.nnz_pages, "nnz_pages");
            c.non_negative(p.max_seq_len, "max_seq_len");
            c.non_negative(p.n_splits, "n_splits");
            KVCOMP_CHECK_ARG(p.n_q_heads % p.kv.n_kv_heads == 0, c.what(), ": n_q_heads (", p.n_q_heads,
                             ") must be a multiple of n_kv_heads (", p.kv.n_kv_heads, ")");
            const int64_t q = p.batch * p.n_q_heads * p.kv.head_dim;
            const int64_t pool = p.kv.n_pages * p.kv.n_kv_heads * p.kv.page_size * p.kv.head_dim;
            c.operand(s[0], "q", {f32}, q);
            c.operand(s[1], "k_pages", {f16}, pool);
            c.operand(s[2], "v_pages", {f16}, pool);
            c.operand(s[3], "indptr", {i32}, p.batch + 1);
            c.operand(s[4], "indices", {i32}, p.nnz_pages);
            c.operand(s[5], "last_page_len", {i32}, p.batch);
            c.operand(d[0], "out", {f32}, q);
            break;
        }
        case op_type::attn_prefill: {
            const auto & p = op.get<attn_prefill_params>();
            c.positive(p.batch, "batch");
            c.non_negative(p.n_tokens, "n_tokens");
            c.positive(p.n_q_heads, "n_q_heads");
            c.positive(p.n_kv_heads, "n_kv_heads");
            c.positive(p.head_dim, "head_dim");
            c.non_negative(p.max_seq_len, "max_seq_len");
            KVCOMP_CHECK_ARG(p.n_q_heads % p.n_kv_heads == 0, c.what(), ": n_q_heads (", p.n_q_heads,
                             ") must be a multiple of n_kv_heads (", p.n_kv_heads, ")");
            c.operand(s[0], "q", {f32}, p.n_tokens * p.n_q_heads * p.head_dim);
            c.operand(s[1], "k", {f16}, p.n_tokens * p.n_kv_heads * p.head_dim);
            c.operand(s[2], "v", {f16}, p.n_tokens * p.n_kv_heads * p.head_dim);
            c.operand(s[3], "seq_indptr", {i32}, p.batch + 1);
            c.operand(d[0], "out", {f32}, p.n_tokens * p.n_q_heads * p.head_dim);
            if (d.size() > 1 && d[1].buf) c.operand(d[1], "lse", {f32}, p.n_tokens * p.n_q_heads);
            break;
        }
        case op_type::kv_quantize: {
            const auto & p = op.get<kv_quantize_params>();
            check_qblock(c, p.q);
            c.non_negative(p.n_blocks, "n_blocks");
            c.non_negative(p.n_src_tokens, "n_src_tokens");
            c.non_negative(p.row_tokens, "row_tokens");
            c.positive(p.n_slots, "n_slots");
            const int64_t src = source_elems(p.n_src_tokens, p.row_tokens, p.q.n_kv_heads, p.q.head_dim);
            c.operand(s[0], "k", {f32, f16}, src);
            c.operand(s[1], "v", {f32, f16}, src);
            c.operand(s[2], "plan", {i32}, p.n_blocks * 3);
            c.operand(s[3], "rows", {i32}, p.n_blocks * p.q.n_kv_heads * p.q.block_tokens());
            c.operand(d[0], "pool", {dtype::u8}, p.n_slots * p.q.slot_bytes());
            break;
        }
        case op_type::kv_dequantize: {
            const auto & p = op.get<kv_dequantize_params>();
            check_qblock(c, p.q);
            c.non_negative(p.n_blocks, "n_blocks");
            c.non_negative(p.row_tokens, "row_tokens");
            c.positive(p.n_slots, "n_slots");
            const int64_t tokens = p.n_blocks * p.q.block_tokens();
            KVCOMP_CHECK_ARG(p.row_tokens == 0 || tokens % p.row_tokens == 0, c.what(), ": row_tokens (",
                             p.row_tokens, ") must divide the ", tokens, " output tokens (every row is written)");
            c.operand(s[0], "pool", {dtype::u8}, p.n_slots * p.q.slot_bytes());
            // An empty slot list is passed as a 1-element placeholder (as block_indices below).
            c.operand(s[1], "slots", {i32}, std::max<int64_t>(p.n_blocks, 1));
            const int64_t out = tokens * p.q.n_kv_heads * p.q.head_dim;
            c.operand(d[0], "k", {f32, f16}, std::max<int64_t>(out, 1));
            c.operand(d[1], "v", {d[0].type}, std::max<int64_t>(out, 1));
            break;
        }
        case op_type::select_salient: {
            const auto & p = op.get<select_salient_params>();
            c.positive(p.n_kv_heads, "n_kv_heads");
            c.non_negative(p.n_tokens, "n_tokens");
            c.non_negative(p.n_prompts, "n_prompts");
            c.non_negative(p.n_blocks, "n_blocks");
            c.non_negative(p.hi_tokens, "hi_tokens");
            c.non_negative(p.lo_tokens, "lo_tokens");
            KVCOMP_CHECK_ARG(p.hi_tokens + p.lo_tokens > 0, c.what(),
                             ": a block must hold at least one token");
            // Empty arrays are passed as 1-element placeholders (as kv_dequantize's slots).
            c.operand(s[0], "sums", {f32}, std::max<int64_t>(p.n_kv_heads * p.n_tokens, 1));
            c.operand(s[1], "count", {i32}, std::max<int64_t>(p.n_tokens, 1));
            c.operand(s[2], "prompts", {i32}, std::max<int64_t>(p.n_prompts * 4, 1));
            c.operand(d[0], "rows", {i32},
                      std::max<int64_t>(p.n_blocks * p.n_kv_heads * (p.hi_tokens + p.lo_tokens), 1));
            break;
        }
        case op_type::attn_decode_quant: {
            const auto & p = op.get<attn_decode_quant_params>();
            check_qblock(c, p.q);
            c.positive(p.batch, "batch");
            c.positive(p.n_q_heads, "n_q_heads");
            c.positive(p.n_slots, "n_slots");
            c.non_negative(p.nnz_blocks, "nnz_blocks");
            c.positive(p.n_win_rows, "n_win_rows");
            c.positive(p.win_tokens, "win_tokens");
            c.positive(p.n_win_pages, "n_win_pages");
            c.positive(p.win_page_tokens, "win_page_tokens");
            c.non_negative(p.max_tokens, "max_tokens");
            c.non_negative(p.n_splits, "n_splits");
            KVCOMP_CHECK_ARG(p.n_q_heads % p.q.n_kv_heads == 0, c.what(), ": n_q_heads (", p.n_q_heads,
                             ") must be a multiple of n_kv_heads (", p.q.n_kv_heads, ")");
            const int64_t q = p.batch * p.n_q_heads * p.q.head_dim;
            const int64_t win = p.n_win_pages * p.q.n_kv_heads * p.win_page_tokens * p.q.head_dim;
            c.operand(s[0], "q", {f32}, q);
            c.operand(s[1], "pool", {dtype::u8}, p.n_slots * p.q.slot_bytes());
            c.operand(s[2], "block_indptr", {i32}, p.batch + 1);
            // An empty index list is passed as a 1-element placeholder.
            c.operand(s[3], "block_indices", {i32}, std::max<int64_t>(p.nnz_blocks, 1));
            c.operand(s[4], "win_k", {f16}, win);
            c.operand(s[5], "win_v", {f16}, win);
            c.operand(s[6], "win", {i32}, p.batch * 3);
            c.operand(s[7], "win_pages", {i32}, p.n_win_rows * p.win_pages_per_row());
            c.operand(d[0], "out", {f32}, q);
            c.operand(d[1], "lse", {f32}, p.batch * p.n_q_heads);
            break;
        }
        case op_type::probe_scores: {
            const auto & p = op.get<probe_scores_params>();
            c.non_negative(p.n_probes, "n_probes");
            c.positive(p.n_keys, "n_keys");
            c.positive(p.n_q_heads, "n_q_heads");
            c.positive(p.n_kv_heads, "n_kv_heads");
            c.positive(p.head_dim, "head_dim");
            c.non_negative(p.row_tokens, "row_tokens");
            KVCOMP_CHECK_ARG(p.n_q_heads % p.n_kv_heads == 0, c.what(), ": n_q_heads (", p.n_q_heads,
                             ") must be a multiple of n_kv_heads (", p.n_kv_heads, ")");
            c.operand(s[0], "q", {f32}, std::max<int64_t>(p.n_probes, 1) * p.n_q_heads * p.head_dim);
            c.operand(s[1], "probe_pos", {i32}, std::max<int64_t>(p.n_probes, 1));
            c.operand(s[2], "k", {f32, f16}, source_elems(p.n_keys, p.row_tokens, p.n_kv_heads, p.head_dim));
            c.operand(s[3], "key_pos", {i32}, p.n_keys);
            if (p.use_lse) c.operand(s[4], "lse", {f32}, std::max<int64_t>(p.n_probes, 1) * p.n_q_heads);
            c.non_negative(p.batch, "batch");
            if (p.batch > 0) {
                c.operand(s[5], "probe_indptr", {i32}, p.batch + 1);
                c.operand(s[6], "key_indptr", {i32}, p.batch + 1);
            }
            c.operand(d[0], "scores", {f32}, p.n_kv_heads * p.n_keys);
            break;
        }
        case op_type::head_project: {
            const auto & p = op.get<head_project_params>();
            c.non_negative(p.n_tokens, "n_tokens");
            c.positive(p.n_heads, "n_heads");
            c.positive(p.in_total, "in_total");
            c.positive(p.out_total, "out_total");
            c.positive(p.n_basis, "n_basis");
            c.operand(s[0], "x", {f32}, std::max<int64_t>(p.n_tokens, 1) * p.in_total);
            c.operand(s[1], "bases", {f32}, p.n_basis);
            c.operand(s[2], "table", {i32}, p.n_heads * 5);
            c.operand(d[0], "dst", {f32}, std::max<int64_t>(p.n_tokens, 1) * p.out_total);
            break;
        }
        case op_type::kv_append_ragged: {
            const auto & p = op.get<kv_append_ragged_params>();
            check_ragged(c, p.kv);
            c.non_negative(p.n_tokens, "n_tokens");
            c.positive(p.batch, "batch");
            c.positive(p.nnz_pages, "nnz_pages");
            const int64_t n = std::max<int64_t>(p.n_tokens, 1);
            c.operand(s[0], "k_new", {f32}, n * p.kv.k_total);
            c.operand(s[1], "v_new", {f32}, n * p.kv.v_total);
            c.operand(s[2], "batch_idx", {i32}, n);
            c.operand(s[3], "positions", {i32}, n);
            c.operand(s[4], "indptr", {i32}, p.batch + 1);
            c.operand(s[5], "indices", {i32}, p.nnz_pages);
            c.operand(s[6], "heads", {i32}, p.kv.n_kv_heads * 4);
            c.operand(d[0], "k_pages", {ragged_page_type(p.kv)}, ragged_page_elems(p.kv, false));
            c.operand(d[1], "v_pages", {ragged_page_type(p.kv)}, ragged_page_elems(p.kv, true));
            break;
        }
        case op_type::attn_decode_ragged:
        case op_type::attn_decode_palu: {
            const bool palu = op.type == op_type::attn_decode_palu;
            const ragged_layout & kv = palu ? op.get<attn_decode_palu_params>().kv
                                            : op.get<attn_decode_ragged_params>().kv;
            int64_t batch, n_q_heads, nnz_pages, max_seq_len, n_tasks;
            if (palu) {
                const auto & p = op.get<attn_decode_palu_params>();
                batch = p.batch, n_q_heads = p.n_q_heads, nnz_pages = p.nnz_pages, max_seq_len = p.max_seq_len,
                n_tasks = p.n_tasks;
                c.positive(p.head_dim, "head_dim");
                KVCOMP_CHECK_ARG(p.head_dim <= max_ragged_width, c.what(), ": head_dim must be <= ",
                                 max_ragged_width, ", got ", p.head_dim);
                KVCOMP_CHECK_ARG(p.rot_dim > 0 && p.rot_dim % 2 == 0 && p.rot_dim <= p.head_dim, c.what(),
                                 ": rot_dim must be even and in (0, head_dim], got ", p.rot_dim);
            } else {
                const auto & p = op.get<attn_decode_ragged_params>();
                batch = p.batch, n_q_heads = p.n_q_heads, nnz_pages = p.nnz_pages, max_seq_len = p.max_seq_len,
                n_tasks = p.n_tasks;
            }
            check_ragged(c, kv);
            c.positive(batch, "batch");
            c.positive(n_q_heads, "n_q_heads");
            c.positive(nnz_pages, "nnz_pages");
            c.non_negative(max_seq_len, "max_seq_len");
            c.non_negative(n_tasks, "n_tasks");
            KVCOMP_CHECK_ARG(n_q_heads % kv.n_kv_heads == 0, c.what(), ": n_q_heads (", n_q_heads,
                             ") must be a multiple of n_kv_heads (", kv.n_kv_heads, ")");
            const int64_t g = n_q_heads / kv.n_kv_heads;
            const int64_t hd = palu ? op.get<attn_decode_palu_params>().head_dim : 0;
            c.operand(s[0], "q", {f32}, palu ? batch * n_q_heads * hd : batch * g * kv.k_total);
            KVCOMP_CHECK_ARG(!palu || kv.bits == 16, c.what(),
                             ": Palu's latent pages are f16 only (bits 16), got bits ", kv.bits);
            c.operand(s[1], "k_pages", {ragged_page_type(kv)}, ragged_page_elems(kv, false));
            c.operand(s[2], "v_pages", {ragged_page_type(kv)}, ragged_page_elems(kv, true));
            c.operand(s[3], "indptr", {i32}, batch + 1);
            c.operand(s[4], "indices", {i32}, nnz_pages);
            c.operand(s[5], "last_page_len", {i32}, batch);
            c.operand(s[6], "heads", {i32}, kv.n_kv_heads * 4);
            c.operand(s[7], "schedule", {i32}, std::max<int64_t>(n_tasks, 1) * 4);
            c.operand(s[8], "merge", {i32}, batch * kv.n_kv_heads + 1 + n_tasks);
            if (palu)
                c.operand(s[9], "aux", {f32}, hd * kv.k_total + op.get<attn_decode_palu_params>().rot_dim / 2);
            c.operand(d[0], "out", {f32}, batch * g * kv.v_total);
            break;
        }
        case op_type::attn_prefill_ragged: {
            const auto & p = op.get<attn_prefill_ragged_params>();
            c.positive(p.batch, "batch");
            c.non_negative(p.n_tokens, "n_tokens");
            c.positive(p.n_q_heads, "n_q_heads");
            c.positive(p.n_kv_heads, "n_kv_heads");
            c.positive(p.k_total, "k_total");
            c.positive(p.v_total, "v_total");
            c.non_negative(p.max_seq_len, "max_seq_len");
            KVCOMP_CHECK_ARG(p.max_width > 0 && p.max_width <= max_ragged_width, c.what(),
                             ": max_width must be in [1, ", max_ragged_width, "], got ", p.max_width);
            KVCOMP_CHECK_ARG(p.n_q_heads % p.n_kv_heads == 0, c.what(), ": n_q_heads (", p.n_q_heads,
                             ") must be a multiple of n_kv_heads (", p.n_kv_heads, ")");
            const int64_t g = p.n_q_heads / p.n_kv_heads, n = std::max<int64_t>(p.n_tokens, 1);
            c.operand(s[0], "q", {f32}, n * g * p.k_total);
            c.operand(s[1], "k", {f16}, n * p.k_total);
            c.operand(s[2], "v", {f16}, n * p.v_total);
            c.operand(s[3], "seq_indptr", {i32}, p.batch + 1);
            c.operand(s[4], "heads", {i32}, p.n_kv_heads * 4);
            c.operand(d[0], "out", {f32}, n * g * p.v_total);
            break;
        }
        case op_type::count: break;
    }
    // Every view must lie inside its buffer.
    auto in_bounds = [&](const tensor & t, const char * role, int i) {
        if (!t.valid()) return;
        KVCOMP_CHECK_ARG(t.offset + t.nbytes() <= t.buf->size(), describe(op), ": ", role, i, " (",
                         describe(t), " at byte ", t.offset, ") overruns its buffer of ", t.buf->size(), " bytes");
        KVCOMP_CHECK_ARG(t.offset % dtype_size(t.type) == 0, describe(op), ": ", role, i,
                         " offset ", t.offset, " is not a multiple of its element size");
    };
    for (int i = 0; i < max_op_src; ++i) in_bounds(s[size_t(i)], "src", i);
    for (int i = 0; i < max_op_dst; ++i) in_bounds(d[size_t(i)], "dst", i);
}

}  // namespace kvcomp
