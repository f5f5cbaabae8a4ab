// kv_dequantize: the reference decoder (core/qblock_codec) applied to each listed block, written
// to K/V rows under the row_tokens addressing of core/op.h.
#include <cstring>

#include "core/qblock_codec.h"
#include "cpu/cpu_common.h"
#include "cpu/kv_source.h"

namespace kvcomp::cpu {

void run_kv_dequantize(const op_desc & op) {
    const auto & p = op.get<kv_dequantize_params>();
    const qblock_layout & q = p.q;
    const int32_t * slots = ptr<const int32_t>(op.src[1]);
    const uint8_t * pool = ptr<const uint8_t>(op.src[0]);
    const int64_t G = q.block_tokens(), hd = q.head_dim;
    // f16 rows round like qblock.h's f16() (saturating), so a value past the f16 range stays finite.
    auto store = [&](const tensor & t, int64_t i, float x) {
        if (t.type == dtype::f16)
            ptr<uint16_t>(t)[i] = qblock::f16_sat(x);
        else
            ptr<float>(t)[i] = x;
    };
    for (int64_t i = 0; i < p.n_blocks; ++i) {
        const int32_t slot = slots[i];
        KVCOMP_CHECK_ARG(slot >= 0 && slot < p.n_slots, describe(op), ": block ", i, " names slot ", slot,
                         " outside the pool");
        const uint8_t * sp = pool + slot * q.slot_bytes();
        const int32_t n_hi = qblock::read_i32(sp), n_lo = qblock::read_i32(sp + 4);
        KVCOMP_CHECK_ARG(n_hi >= 0 && n_hi <= q.hi_tokens && n_lo >= 0 && n_lo <= q.lo_tokens, describe(op),
                         ": slot ", slot, " header holds ", n_hi, "+", n_lo, " tokens, capacity ",
                         q.hi_tokens, "+", q.lo_tokens);
        for (int64_t h = 0; h < q.n_kv_heads; ++h) {
            const qblock::decoded_head d = qblock::decode_head(q, sp, h);
            const int64_t n = d.n_hi + d.n_lo;
            for (int64_t j = 0; j < G; ++j)
                for (int64_t c = 0; c < hd; ++c) {
                    const int64_t at = source_index(i * G + j, h, c, p.row_tokens, q.n_kv_heads, hd);
                    store(op.dst[0], at, j < n ? d.k[size_t(j * hd + c)] : 0.0f);
                    store(op.dst[1], at, j < n ? d.v[size_t(j * hd + c)] : 0.0f);
                }
        }
    }
}

}  // namespace kvcomp::cpu
