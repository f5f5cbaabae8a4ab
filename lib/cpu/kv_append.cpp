// kv_append: scatter new K/V tokens into fp16 HND pages through the page table.
#include "cpu/cpu_common.h"

namespace kvcomp::cpu {

void run_kv_append(const op_desc & op) {
    const auto & p = op.get<kv_append_params>();
    const kv_layout & l = p.kv;
    const int32_t * batch_idx = ptr<const int32_t>(op.src[2]);
    const int32_t * positions = ptr<const int32_t>(op.src[3]);
    const int32_t * indptr = ptr<const int32_t>(op.src[4]);
    const int32_t * indices = ptr<const int32_t>(op.src[5]);
    uint16_t * kp = ptr<uint16_t>(op.dst[0]);
    uint16_t * vp = ptr<uint16_t>(op.dst[1]);
    for (int64_t t = 0; t < p.n_tokens; ++t) {
        const int64_t b = batch_idx[t], pos = positions[t];
        // The GPU kernels skip such tokens; the oracle refuses them so a bad table is found early.
        KVCOMP_CHECK_ARG(b >= 0 && b < p.batch && pos >= 0, describe(op), ": token ", t, " has request ", b,
                         " position ", pos);
        const int64_t slot_in_table = indptr[b] + pos / l.page_size;
        KVCOMP_CHECK_ARG(slot_in_table < indptr[b + 1] && slot_in_table < p.nnz_pages, describe(op), ": token ", t,
                         " (request ", b, ", position ", pos, ") is beyond the request's pages");
        const int64_t page = indices[slot_in_table];
        KVCOMP_CHECK_ARG(page >= 0 && page < l.n_pages, describe(op), ": page index ", page, " out of range");
        const int64_t slot = pos % l.page_size;
        for (int64_t h = 0; h < l.n_kv_heads; ++h) {
            const int64_t dst = ((page * l.n_kv_heads + h) * l.page_size + slot) * l.head_dim;
            const int64_t src = (t * l.n_kv_heads + h) * l.head_dim;
            for (int64_t d = 0; d < l.head_dim; ++d) {
                kp[dst + d] = float_to_half(load_float(op.src[0], src + d));
                vp[dst + d] = float_to_half(load_float(op.src[1], src + d));
            }
        }
    }
}

}  // namespace kvcomp::cpu
