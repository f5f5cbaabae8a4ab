// attn_decode: exact attention of one query token per request over its paged fp16 KV.
// n_splits does not change the math, so the oracle ignores it.
#include "cpu/attn_common.h"
#include "cpu/cpu_common.h"

namespace kvcomp::cpu {

void run_attn_decode(const op_desc & op) {
    const auto & p = op.get<attn_decode_params>();
    const kv_layout & l = p.kv;
    const float * q = ptr<const float>(op.src[0]);
    const uint16_t * kp = ptr<const uint16_t>(op.src[1]);
    const uint16_t * vp = ptr<const uint16_t>(op.src[2]);
    const int32_t * indptr = ptr<const int32_t>(op.src[3]);
    const int32_t * indices = ptr<const int32_t>(op.src[4]);
    const int32_t * last = ptr<const int32_t>(op.src[5]);
    float * out = ptr<float>(op.dst[0]);
    const int64_t group = p.n_q_heads / l.n_kv_heads;
    std::vector<double> scores;
    for (int64_t b = 0; b < p.batch; ++b) {
        const int64_t n = paged_seq_len(indptr, last, b, l.page_size);
        KVCOMP_CHECK_ARG(n <= p.max_seq_len, describe(op), ": request ", b, " has ", n,
                         " tokens, more than max_seq_len");
        for (int64_t h = 0; h < p.n_q_heads; ++h) {
            const int64_t kvh = h / group;
            auto addr = [&](const uint16_t * pool, int64_t j) {
                const int64_t page = indices[indptr[b] + j / l.page_size];
                KVCOMP_CHECK_ARG(page >= 0 && page < l.n_pages, describe(op), ": page index ", page, " out of range");
                return pool + ((page * l.n_kv_heads + kvh) * l.page_size + j % l.page_size) * l.head_dim;
            };
            const int64_t row = (b * p.n_q_heads + h) * l.head_dim;
            attend_row(
                q + row, n, l.head_dim, p.scale, [&](int64_t j) { return addr(kp, j); },
                [&](int64_t j) { return addr(vp, j); }, out + row, scores);
        }
    }
}

}  // namespace kvcomp::cpu
