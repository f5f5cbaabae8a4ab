// Reference encoder/decoder of quantized KV blocks (format and quantizer: core/qblock.h). The CPU
// backend's kv_quantize and attn_decode_quant use it, and tests use it to check the other
// backends' slots and the quantizer's error bounds. Plain fp32 arithmetic in the order the format
// specifies, so every backend can reproduce the codes bit for bit.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <vector>

#include "core/dtype.h"
#include "core/qblock.h"

namespace kvcomp::qblock {

// f16 rounding (nearest even) that saturates at +-65504 instead of overflowing to infinity.
inline uint16_t f16_sat(float x) {
    if (x > 65504.0f) x = 65504.0f;
    if (x < -65504.0f) x = -65504.0f;
    return float_to_half(x);
}

inline int32_t max_code(int32_t bits) { return (1 << bits) - 1; }

// code = step == 0 ? 0 : clamp(rint((x - mn) / step), 0, 2^bits - 1)
inline int32_t quantize(float x, float mn, float step, int32_t bits) {
    if (step == 0.0f) return 0;
    const float r = std::rint((x - mn) / step);
    return r <= 0.0f ? 0 : r >= float(max_code(bits)) ? max_code(bits) : int32_t(r);
}

inline void put_code(uint8_t * row, int64_t c, int32_t bits, int32_t code) {
    const int64_t bit = c * bits;
    row[bit / 8] = uint8_t(row[bit / 8] | (code << (bit % 8)));
}
inline int32_t get_code(const uint8_t * row, int64_t c, int32_t bits) {
    const int64_t bit = c * bits;
    return (row[bit / 8] >> (bit % 8)) & max_code(bits);
}

inline int32_t read_i32(const uint8_t * p) {
    int32_t v;
    std::memcpy(&v, p, 4);
    return v;
}
inline float read_f16(const uint8_t * p, int64_t i) {
    uint16_t h;
    std::memcpy(&h, p + 2 * i, 2);
    return half_to_float(h);
}

// Element c of token `token` of KV head h, as float (the encoder's view of its sources).
using element_fn = std::function<float(int64_t token, int64_t h, int64_t c)>;

// Writes one whole slot: for head h, hi tokens rows(h, 0 .. n_hi) and lo tokens rows(h, n_hi ..
// n_hi + n_lo) are token numbers passed to k and v.
void encode_slot(const qblock_layout & q, uint8_t * slot, int32_t n_hi, int32_t n_lo,
                 const std::function<int64_t(int64_t h, int64_t j)> & rows, const element_fn & k,
                 const element_fn & v);

// Dequantized tokens of head h of a slot, hi segment first: k and v [n_hi + n_lo, head_dim].
struct decoded_head {
    int32_t n_hi = 0, n_lo = 0;
    std::vector<float> k, v;
};
decoded_head decode_head(const qblock_layout & q, const uint8_t * slot, int64_t h);

}  // namespace kvcomp::qblock
