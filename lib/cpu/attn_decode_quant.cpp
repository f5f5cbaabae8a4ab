// attn_decode_quant: exact attention of one query per request over its quantized blocks
// (dequantized by the reference codec) and its fp16 window, in double; also the log-denominator.
#include <cmath>

#include "core/qblock_codec.h"
#include "cpu/cpu_common.h"

namespace kvcomp::cpu {

void run_attn_decode_quant(const op_desc & op) {
    const auto & p = op.get<attn_decode_quant_params>();
    const qblock_layout & q = p.q;
    const int64_t hd = q.head_dim, group = p.n_q_heads / q.n_kv_heads;
    const float * qv = ptr<const float>(op.src[0]);
    const uint8_t * pool = ptr<const uint8_t>(op.src[1]);
    const int32_t * indptr = ptr<const int32_t>(op.src[2]);
    const int32_t * indices = ptr<const int32_t>(op.src[3]);
    const uint16_t * wk = ptr<const uint16_t>(op.src[4]);
    const uint16_t * wv = ptr<const uint16_t>(op.src[5]);
    const int32_t * win = ptr<const int32_t>(op.src[6]);
    const int32_t * win_pages = ptr<const int32_t>(op.src[7]);
    const int64_t P = p.win_page_tokens, ppr = p.win_pages_per_row();
    float * out = ptr<float>(op.dst[0]);
    float * lse = ptr<float>(op.dst[1]);
    for (int64_t b = 0; b < p.batch; ++b) {
        KVCOMP_CHECK_ARG(indptr[b] >= 0 && indptr[b] <= indptr[b + 1] && indptr[b + 1] <= p.nnz_blocks, describe(op),
                         ": block_indptr of request ", b, " is not a valid range");
        const int32_t row = win[b * 3], start = win[b * 3 + 1], len = win[b * 3 + 2];
        KVCOMP_CHECK_ARG(len >= 0 && len <= p.win_tokens && (len == 0 || (row >= 0 && row < p.n_win_rows)) &&
                             start >= 0 && start < p.win_tokens,
                         describe(op), ": window (", row, ",", start, ",", len, ") of request ", b, " is invalid");
        // Gather the request's dequantized tokens per KV head (blocks, then the window).
        for (int64_t kvh = 0; kvh < q.n_kv_heads; ++kvh) {
            std::vector<float> keys, vals;
            for (int32_t i = indptr[b]; i < indptr[b + 1]; ++i) {
                const int32_t slot = indices[i];
                KVCOMP_CHECK_ARG(slot >= 0 && slot < p.n_slots, describe(op), ": slot ", slot, " out of range");
                const auto d = qblock::decode_head(q, pool + slot * q.slot_bytes(), kvh);
                keys.insert(keys.end(), d.k.begin(), d.k.end());
                vals.insert(vals.end(), d.v.begin(), d.v.end());
            }
            for (int32_t j = 0; j < len; ++j) {
                const int64_t s = (start + j) % p.win_tokens, page = win_pages[row * ppr + s / P];
                KVCOMP_CHECK_ARG(page >= 0 && page < p.n_win_pages, describe(op), ": window page ", page,
                                 " (request ", b, ", slot ", s, ") out of range");
                const int64_t at = ((page * q.n_kv_heads + kvh) * P + s % P) * hd;
                for (int64_t c = 0; c < hd; ++c) {
                    keys.push_back(half_to_float(wk[at + c]));
                    vals.push_back(half_to_float(wv[at + c]));
                }
            }
            const int64_t n = int64_t(keys.size()) / hd;
            KVCOMP_CHECK_ARG(n <= p.max_tokens, describe(op), ": request ", b, " has ", n,
                             " tokens, more than max_tokens");
            for (int64_t g = 0; g < group; ++g) {
                const int64_t h = kvh * group + g;
                const float * qr = qv + (b * p.n_q_heads + h) * hd;
                float * o = out + (b * p.n_q_heads + h) * hd;
                if (n == 0) {
                    for (int64_t c = 0; c < hd; ++c) o[c] = 0.0f;
                    lse[b * p.n_q_heads + h] = -INFINITY;
                    continue;
                }
                std::vector<double> s(static_cast<size_t>(n));
                double mx = -INFINITY;
                for (int64_t j = 0; j < n; ++j) {
                    double dot = 0.0;
                    for (int64_t c = 0; c < hd; ++c) dot += double(qr[c]) * double(keys[size_t(j * hd + c)]);
                    s[size_t(j)] = dot * double(p.scale);
                    mx = std::fmax(mx, s[size_t(j)]);
                }
                double sum = 0.0;
                std::vector<double> acc(size_t(hd), 0.0);
                for (int64_t j = 0; j < n; ++j) {
                    const double e = std::exp(s[size_t(j)] - mx);
                    sum += e;
                    for (int64_t c = 0; c < hd; ++c) acc[size_t(c)] += e * double(vals[size_t(j * hd + c)]);
                }
                for (int64_t c = 0; c < hd; ++c) o[c] = float(acc[size_t(c)] / sum);
                lse[b * p.n_q_heads + h] = float(mx + std::log(sum));
            }
        }
    }
}

}  // namespace kvcomp::cpu
