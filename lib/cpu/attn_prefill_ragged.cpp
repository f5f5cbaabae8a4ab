// attn_prefill_ragged: exact causal attention with per-head Q/K and V widths. `balanced` only
// changes how GPU kernels cut the work, so the oracle ignores it.
#include "cpu/attn_common.h"
#include "cpu/ragged_common.h"

namespace kvcomp::cpu {

void run_attn_prefill_ragged(const op_desc & op) {
    const auto & p = op.get<attn_prefill_ragged_params>();
    const std::string what = describe(op);
    const auto heads = read_ragged_heads(op.src[4], p.n_kv_heads, p.k_total, p.v_total, p.max_width, what);
    const float * q = ptr<const float>(op.src[0]);
    const uint16_t * k = ptr<const uint16_t>(op.src[1]);
    const uint16_t * v = ptr<const uint16_t>(op.src[2]);
    const int32_t * indptr = ptr<const int32_t>(op.src[3]);
    float * out = ptr<float>(op.dst[0]);
    const int64_t g = p.n_q_heads / p.n_kv_heads;
    KVCOMP_CHECK_ARG(indptr[0] == 0 && indptr[p.batch] == p.n_tokens, what,
                     ": seq_indptr must run from 0 to n_tokens (", indptr[0], "..", indptr[p.batch], ")");
    std::vector<double> scores;
    for (int64_t b = 0; b < p.batch; ++b) {
        const int64_t s0 = indptr[b], s1 = indptr[b + 1];
        KVCOMP_CHECK_ARG(s0 <= s1 && s1 - s0 <= p.max_seq_len, what, ": request ", b, " spans [", s0, ",", s1,
                         ")");
        for (int64_t t = s0; t < s1; ++t) {
            for (int64_t c = 0; c < p.n_kv_heads; ++c) {
                const ragged_head & h = heads[size_t(c)];
                auto key = [&](int64_t j) { return k + (s0 + j) * p.k_total + h.k_offset; };
                auto value = [&](int64_t j) { return v + (s0 + j) * p.v_total + h.v_offset; };
                for (int64_t i = 0; i < g; ++i) {
                    const float * qr = q + t * g * p.k_total + g * h.k_offset + i * h.k_width;
                    float * o = out + t * g * p.v_total + g * h.v_offset + i * h.v_width;
                    attend_row_kv(qr, t - s0 + 1, h.k_width, h.v_width, p.scale, key, value, o, scores);
                }
            }
        }
    }
}

}  // namespace kvcomp::cpu
