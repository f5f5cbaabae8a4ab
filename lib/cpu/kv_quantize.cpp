// kv_quantize: the reference encoder (core/qblock_codec) applied to each planned block.
#include <set>

#include "core/qblock_codec.h"
#include "cpu/cpu_common.h"
#include "cpu/kv_source.h"

namespace kvcomp::cpu {

void run_kv_quantize(const op_desc & op) {
    const auto & p = op.get<kv_quantize_params>();
    const qblock_layout & q = p.q;
    const int32_t * plan = ptr<const int32_t>(op.src[2]);
    const int32_t * rows = ptr<const int32_t>(op.src[3]);
    uint8_t * pool = ptr<uint8_t>(op.dst[0]);
    std::set<int32_t> slots;
    for (int64_t i = 0; i < p.n_blocks; ++i) {
        const int32_t slot = plan[i * 3], n_hi = plan[i * 3 + 1], n_lo = plan[i * 3 + 2];
        KVCOMP_CHECK_ARG(slot >= 0 && slot < p.n_slots, describe(op), ": block ", i, " targets slot ", slot,
                         " outside the pool");
        KVCOMP_CHECK_ARG(slots.insert(slot).second, describe(op), ": two blocks target slot ", slot);
        KVCOMP_CHECK_ARG(n_hi >= 0 && n_hi <= q.hi_tokens && n_lo >= 0 && n_lo <= q.lo_tokens, describe(op),
                         ": block ", i, " stores ", n_hi, "+", n_lo, " tokens, capacity ", q.hi_tokens, "+",
                         q.lo_tokens);
        const int32_t * block_rows = rows + i * q.n_kv_heads * q.block_tokens();
        auto row = [&](int64_t h, int64_t j) {
            const int64_t t = block_rows[h * q.block_tokens() + j];
            KVCOMP_CHECK_ARG(t >= 0 && t < p.n_src_tokens, describe(op), ": block ", i, " head ", h,
                             " names token ", t, " outside the source");
            return t;
        };
        auto element = [&](const tensor & src) {
            return [&](int64_t t, int64_t h, int64_t c) {
                return load_float(src, source_index(t, h, c, p.row_tokens, q.n_kv_heads, q.head_dim));
            };
        };
        qblock::encode_slot(q, pool + slot * q.slot_bytes(), n_hi, n_lo, row, element(op.src[0]),
                            element(op.src[1]));
    }
}

}  // namespace kvcomp::cpu
