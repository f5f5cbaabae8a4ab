// kv_append_ragged: scatter new tokens into ragged fp16 pages (each KV head its own width).
#include "cpu/ragged_common.h"

namespace kvcomp::cpu {

void run_kv_append_ragged(const op_desc & op) {
    const auto & p = op.get<kv_append_ragged_params>();
    const ragged_layout & l = p.kv;
    const std::string what = describe(op);
    const auto heads = read_ragged_heads(op.src[6], l.n_kv_heads, l.k_total, l.v_total, l.max_width, what);
    const float * k_new = ptr<const float>(op.src[0]);
    const float * v_new = ptr<const float>(op.src[1]);
    const int32_t * batch_idx = ptr<const int32_t>(op.src[2]);
    const int32_t * positions = ptr<const int32_t>(op.src[3]);
    const int32_t * indptr = ptr<const int32_t>(op.src[4]);
    const int32_t * indices = ptr<const int32_t>(op.src[5]);
    uint16_t * kp = ptr<uint16_t>(op.dst[0]);
    uint16_t * vp = ptr<uint16_t>(op.dst[1]);
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
        for (const ragged_head & h : heads) {
            const int64_t kd = ragged_slot(page, slot, l.page_size, l.k_total, h.k_width, h.k_offset);
            const int64_t vd = ragged_slot(page, slot, l.page_size, l.v_total, h.v_width, h.v_offset);
            for (int64_t d = 0; d < h.k_width; ++d)
                kp[kd + d] = float_to_half(k_new[t * l.k_total + h.k_offset + d]);
            for (int64_t d = 0; d < h.v_width; ++d)
                vp[vd + d] = float_to_half(v_new[t * l.v_total + h.v_offset + d]);
        }
    }
}

}  // namespace kvcomp::cpu
