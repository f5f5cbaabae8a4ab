// attn_decode_ragged: exact decode attention in the reduced per-head dims (ZACK/FDC). The oracle
// checks the schedule and merge table but computes each (request, query head) in one pass, so its
// result is the contract's (exact softmax over all of the request's tokens) whatever the schedule.
// q4 pages (kv.bits == 4) are dequantized row by row into a scratch row (core/ragged_q4.h).
#include "core/ragged_q4.h"
#include "cpu/attn_common.h"
#include "cpu/ragged_common.h"

namespace kvcomp::cpu {

void run_attn_decode_ragged(const op_desc & op) {
    const auto & p = op.get<attn_decode_ragged_params>();
    const ragged_layout & l = p.kv;
    const std::string what = describe(op);
    const auto heads = read_ragged_heads(op.src[6], l.n_kv_heads, l.k_total, l.v_total, l.max_width, what);
    const float * q = ptr<const float>(op.src[0]);
    const bool q4 = l.bits == 4;
    const std::vector<int64_t> k_q4 = q4 ? ragged_q4_offsets(heads, l, false, what) : std::vector<int64_t>{};
    const std::vector<int64_t> v_q4 = q4 ? ragged_q4_offsets(heads, l, true, what) : std::vector<int64_t>{};
    std::vector<float> k_row(size_t(l.max_width)), v_row(size_t(l.max_width));
    const int32_t * indptr = ptr<const int32_t>(op.src[3]);
    const int32_t * indices = ptr<const int32_t>(op.src[4]);
    const int32_t * last = ptr<const int32_t>(op.src[5]);
    float * out = ptr<float>(op.dst[0]);
    const auto lens = ragged_seq_lens(indptr, last, p.batch, l.page_size, p.nnz_pages, p.max_seq_len, what);
    check_decode_schedule(ptr<const int32_t>(op.src[7]), ptr<const int32_t>(op.src[8]), p.n_tasks, p.batch,
                          l.n_kv_heads, lens, what);
    const int64_t g = p.n_q_heads / l.n_kv_heads;
    std::vector<double> scores;
    // Row j of request b of one head: a pointer into f16 pages, or the q4 row dequantized into `row`.
    auto f16_rows = [&](const tensor & pages, int64_t offset, int64_t total, int64_t w, int64_t b) {
        return [&, offset, total, w, b](int64_t j) {
            const int64_t page = ragged_page_of(indptr, indices, b, j, l.page_size, l.n_pages, what);
            return ptr<const uint16_t>(pages) +
                   ragged_slot(page, j % l.page_size, l.page_size, total, w, offset);
        };
    };
    auto q4_rows = [&](const tensor & pages, int64_t offset, int64_t total, int64_t w, int64_t b,
                       std::vector<float> & row) {
        return [&, offset, total, w, b](int64_t j) {
            const int64_t page = ragged_page_of(indptr, indices, b, j, l.page_size, l.n_pages, what);
            const uint8_t * r =
                ptr<const uint8_t>(pages) +
                ragged_slot(page, j % l.page_size, l.page_size, total, ragged_q4_row_bytes(w), offset);
            ragged_q4_dequantize_row(r, w, row.data());
            return static_cast<const float *>(row.data());
        };
    };
    for (int64_t b = 0; b < p.batch; ++b) {
        for (int64_t c = 0; c < l.n_kv_heads; ++c) {
            const ragged_head & h = heads[size_t(c)];
            for (int64_t i = 0; i < g; ++i) {
                const float * qr = q + b * g * l.k_total + g * h.k_offset + i * h.k_width;
                float * o = out + b * g * l.v_total + g * h.v_offset + i * h.v_width;
                if (q4)
                    attend_row_kv(qr, lens[size_t(b)], h.k_width, h.v_width, p.scale,
                                  q4_rows(op.src[1], k_q4[size_t(c)], l.k_row_bytes, h.k_width, b, k_row),
                                  q4_rows(op.src[2], v_q4[size_t(c)], l.v_row_bytes, h.v_width, b, v_row), o,
                                  scores);
                else
                    attend_row_kv(qr, lens[size_t(b)], h.k_width, h.v_width, p.scale,
                                  f16_rows(op.src[1], h.k_offset, l.k_total, h.k_width, b),
                                  f16_rows(op.src[2], h.v_offset, l.v_total, h.v_width, b), o, scores);
            }
        }
    }
}

}  // namespace kvcomp::cpu
