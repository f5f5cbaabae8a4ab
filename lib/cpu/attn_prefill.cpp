// attn_prefill: exact causal attention within each request of a ragged batch (fp16 K/V), and
// optionally each row's log-denominator.
#include "cpu/attn_common.h"
#include "cpu/cpu_common.h"

namespace kvcomp::cpu {

void run_attn_prefill(const op_desc & op) {
    const auto & p = op.get<attn_prefill_params>();
    const float * q = ptr<const float>(op.src[0]);
    const uint16_t * k = ptr<const uint16_t>(op.src[1]);
    const uint16_t * v = ptr<const uint16_t>(op.src[2]);
    const int32_t * indptr = ptr<const int32_t>(op.src[3]);
    float * out = ptr<float>(op.dst[0]);
    float * lse = op.dst.size() > 1 && op.dst[1].buf ? ptr<float>(op.dst[1]) : nullptr;
    const int64_t group = p.n_q_heads / p.n_kv_heads;
    KVCOMP_CHECK_ARG(indptr[0] == 0 && indptr[p.batch] == p.n_tokens, describe(op),
                     ": seq_indptr must run from 0 to n_tokens (", indptr[0], "..", indptr[p.batch], ")");
    std::vector<double> scores;
    for (int64_t b = 0; b < p.batch; ++b) {
        const int64_t s0 = indptr[b], s1 = indptr[b + 1];
        KVCOMP_CHECK_ARG(s0 <= s1 && s1 - s0 <= p.max_seq_len, describe(op), ": request ", b, " spans [", s0, ",",
                         s1, ")");
        for (int64_t i = s0; i < s1; ++i) {
            for (int64_t h = 0; h < p.n_q_heads; ++h) {
                const int64_t kvh = h / group;
                const int64_t row = (i * p.n_q_heads + h) * p.head_dim;
                auto kv_at = [&](const uint16_t * base, int64_t j) {
                    return base + ((s0 + j) * p.n_kv_heads + kvh) * p.head_dim;
                };
                const double l = attend_row(
                    q + row, i - s0 + 1, p.head_dim, p.scale, [&](int64_t j) { return kv_at(k, j); },
                    [&](int64_t j) { return kv_at(v, j); }, out + row, scores);
                if (lse) lse[i * p.n_q_heads + h] = float(l);
            }
        }
    }
}

}  // namespace kvcomp::cpu
