// kv_append_ragged: scatter new tokens into ragged pages (each KV head its own width): f16
// elements, or (kv.bits == 4) one q4 row per token and head (core/ragged_q4.h).
#include "core/ragged_q4.h"
#include "cpu/ragged_common.h"

namespace kvcomp::cpu {

void run_kv_append_ragged(const op_desc & op) {
    const auto & p = op.get<kv_append_ragged_params>();
    const ragged_layout & l = p.kv;
    const std::string what = describe(op);
    const auto heads = read_ragged_heads(op.src[6], l.n_kv_heads, l.k_total, l.v_total, l.max_width, what);
    const bool q4 = l.bits == 4;
    const std::vector<int64_t> k_q4 = q4 ? ragged_q4_offsets(heads, l, false, what) : std::vector<int64_t>{};
    const std::vector<int64_t> v_q4 = q4 ? ragged_q4_offsets(heads, l, true, what) : std::vector<int64_t>{};
    const float * k_new = ptr<const float>(op.src[0]);
    const float * v_new = ptr<const float>(op.src[1]);
    const int32_t * batch_idx = ptr<const int32_t>(op.src[2]);
    const int32_t * positions = ptr<const int32_t>(op.src[3]);
    const int32_t * indptr = ptr<const int32_t>(op.src[4]);
    const int32_t * indices = ptr<const int32_t>(op.src[5]);
    for (int64_t t = 0; t < p.n_tokens; ++t) {
        const int64_t b = batch_idx[t], pos = positions[t];
        // The GPU kernels skip such tokens; the oracle refuses them so a bad table is found early.
        KVCOMP_CHECK_ARG(b >= 0 && b < p.batch && pos >= 0, what, ": token ", t, " has request ", b,
                         " position ", pos);
        const int64_t entry = indptr[b] + pos / l.page_size;
        KVCOMP_CHECK_ARG(entry < indptr[b + 1] && entry < p.nnz_pages, what, ": token ", t, " (request ", b,
                         ", position ", pos, ") is beyond the request's pages");
        const int64_t page = indices[entry];
        KVCOMP_CHECK_ARG(page >= 0 && page < l.n_pages, what, ": page index ", page, " out of range");
        const int64_t slot = pos % l.page_size;
        for (size_t c = 0; c < heads.size(); ++c) {
            const ragged_head & h = heads[c];
            const float * kx = k_new + t * l.k_total + h.k_offset;
            const float * vx = v_new + t * l.v_total + h.v_offset;
            if (q4) {
                // Byte addressing: the q4 pages are ragged pages of bytes with row_bytes per row.
                const int64_t kr = ragged_q4_row_bytes(h.k_width), vr = ragged_q4_row_bytes(h.v_width);
                ragged_q4_quantize_row(kx, h.k_width,
                                       ptr<uint8_t>(op.dst[0]) +
                                           ragged_slot(page, slot, l.page_size, l.k_row_bytes, kr, k_q4[c]));
                ragged_q4_quantize_row(vx, h.v_width,
                                       ptr<uint8_t>(op.dst[1]) +
                                           ragged_slot(page, slot, l.page_size, l.v_row_bytes, vr, v_q4[c]));
                continue;
            }
            uint16_t * kd = ptr<uint16_t>(op.dst[0]) +
                            ragged_slot(page, slot, l.page_size, l.k_total, h.k_width, h.k_offset);
            uint16_t * vd = ptr<uint16_t>(op.dst[1]) +
                            ragged_slot(page, slot, l.page_size, l.v_total, h.v_width, h.v_offset);
            for (int64_t d = 0; d < h.k_width; ++d) kd[d] = float_to_half(kx[d]);
            for (int64_t d = 0; d < h.v_width; ++d) vd[d] = float_to_half(vx[d]);
        }
    }
}

}  // namespace kvcomp::cpu
