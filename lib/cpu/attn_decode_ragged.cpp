// attn_decode_ragged: exact decode attention in the reduced per-head dims (ZACK/FDC). The oracle
// checks the schedule and merge table but computes each (request, query head) in one pass, so its
// result is the contract's (exact softmax over all of the request's tokens) whatever the schedule.
#include "cpu/attn_common.h"
#include "cpu/ragged_common.h"

namespace kvcomp::cpu {

void run_attn_decode_ragged(const op_desc & op) {
    const auto & p = op.get<attn_decode_ragged_params>();
    const ragged_layout & l = p.kv;
    const std::string what = describe(op);
    const auto heads = read_ragged_heads(op.src[6], l.n_kv_heads, l.k_total, l.v_total, l.max_width, what);
    const float * q = ptr<const float>(op.src[0]);
    const uint16_t * kp = ptr<const uint16_t>(op.src[1]);
    const uint16_t * vp = ptr<const uint16_t>(op.src[2]);
    const int32_t * indptr = ptr<const int32_t>(op.src[3]);
    const int32_t * indices = ptr<const int32_t>(op.src[4]);
    const int32_t * last = ptr<const int32_t>(op.src[5]);
    float * out = ptr<float>(op.dst[0]);
    const auto lens = ragged_seq_lens(indptr, last, p.batch, l.page_size, p.nnz_pages, p.max_seq_len, what);
    check_decode_schedule(ptr<const int32_t>(op.src[7]), ptr<const int32_t>(op.src[8]), p.n_tasks, p.batch,
                          l.n_kv_heads, lens, what);
    const int64_t g = p.n_q_heads / l.n_kv_heads;
    std::vector<double> scores;
    for (int64_t b = 0; b < p.batch; ++b) {
        for (int64_t c = 0; c < l.n_kv_heads; ++c) {
            const ragged_head & h = heads[size_t(c)];
            auto key = [&](int64_t j) {
                const int64_t page = ragged_page_of(indptr, indices, b, j, l.page_size, l.n_pages, what);
                return kp + ragged_slot(page, j % l.page_size, l.page_size, l.k_total, h.k_width, h.k_offset);
            };
            auto value = [&](int64_t j) {
                const int64_t page = ragged_page_of(indptr, indices, b, j, l.page_size, l.n_pages, what);
                return vp + ragged_slot(page, j % l.page_size, l.page_size, l.v_total, h.v_width, h.v_offset);
            };
            for (int64_t i = 0; i < g; ++i) {
                const float * qr = q + b * g * l.k_total + g * h.k_offset + i * h.k_width;
                float * o = out + b * g * l.v_total + g * h.v_offset + i * h.v_width;
                attend_row_kv(qr, lens[size_t(b)], h.k_width, h.v_width, p.scale, key, value, o, scores);
            }
        }
    }
}

}  // namespace kvcomp::cpu
