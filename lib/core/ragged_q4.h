// The 4-bit ragged page format of the low-rank KV methods (zack / fdc with kv_bits=4): the reduced
// K'' and V'' rows of core/op.h's ragged pages stored as 4-bit codes plus f16 parameters per token
// and KV head, instead of f16 elements. Shared by every backend's kv_append_ragged and
// attn_decode_ragged (ragged_layout::bits == 4), like core/qblock.h is for the quantized blocks.
//
// Row of one token of KV head c (width w = k_width(c) or v_width(c)), row_bytes(w) bytes:
//   bytes 0..1  min  f16        the row's minimum
//   bytes 2..3  step f16        (max - min) / 15
//   bytes 4..   codes u8 [4 * ceil(w / 8)]: channel i in byte 4 + i / 2, low nibble first (even i
//               low, odd i high); padded with zero codes to whole 32-bit words (a kernel reads
//               eight channels per u32 load, and every row stays 4-byte aligned).
// Pages mirror the f16 ragged pages with bytes for elements: a token of the layer takes
// row_total = sum over heads of row_bytes(width) bytes; head c's part of page p starts at byte
//   p * page_size * row_total + page_size * row_offset(c),   row_offset(c) = sum_{c' < c} row_bytes,
// slot s at + s * row_bytes(width(c)) (each head's tokens contiguous, as in the f16 pages).
// ragged_layout::k_row_bytes / v_row_bytes carry row_total (the host computes them from the widths).
//
// Quantizer (identical on every backend; fp32, IEEE division, rint = round half to even; f16()
// rounds to nearest even, saturating at +-65504; the qblock.h per-token formulas with one group per row):
//   mn, mx = min, max of the row;  min = f16(mn), step = f16((mx - mn) / 15)
//   code_i = step == 0 ? 0 : clamp(rint((x_i - min) / step), 0, 15),   x^_i = code_i * step + min
// (min and step used as their f16-rounded values). |x - x^| <= step / 2 up to the f16 rounding of
// min and step (digest research/zack_fdc.md invariant 15).
//
// Why the rows hold K'' = K' D^-1 rather than K': the rotated basis packs the energy into the
// first channels, so a per-token range would be set by them and the tail channels would all get
// code 0. The method folds a per-channel scale D (from the calibration's singular values:
// D_j = max(sigma_j / sigma_0, 1/64)) into the bases: k'' = k R D^-1, q'' = q R D (q''.k'' = q'.k'
// exactly), v'' = v R_v D_v^-1 with D_v folded into the rows of W_O'. See kv_method_lowrank.h.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "core/dtype.h"

namespace kvcomp {

constexpr int64_t ragged_q4_param_bytes = 4;  // min, step (f16)

inline int64_t ragged_q4_row_bytes(int64_t width) {
    return ragged_q4_param_bytes + 4 * ((width + 7) / 8);
}

// Bytes of one token over all heads of the given widths (ragged_layout::k_row_bytes / v_row_bytes).
inline int64_t ragged_q4_row_total(const std::vector<int64_t> & widths) {
    int64_t s = 0;
    for (int64_t w : widths) s += ragged_q4_row_bytes(w);
    return s;
}

// f16 bits of x, saturated at +-65504 as qblock's parameters (a huge row keeps finite parameters).
inline uint16_t ragged_q4_half(float x) {
    if (x > 65504.0f) x = 65504.0f;
    if (x < -65504.0f) x = -65504.0f;
    return float_to_half(x);  // NaN passes
}

// Quantizes one row of w floats into `row` (row_bytes(w) bytes, padding codes written as 0).
inline void ragged_q4_quantize_row(const float * x, int64_t w, uint8_t * row) {
    float mn = x[0], mx = x[0];
    for (int64_t i = 1; i < w; ++i) mn = std::fmin(mn, x[i]), mx = std::fmax(mx, x[i]);
    const uint16_t hmin = ragged_q4_half(mn), hstep = ragged_q4_half((mx - mn) / 15.0f);
    const float fmin = half_to_float(hmin), fstep = half_to_float(hstep);
    row[0] = uint8_t(hmin & 0xff), row[1] = uint8_t(hmin >> 8);
    row[2] = uint8_t(hstep & 0xff), row[3] = uint8_t(hstep >> 8);
    uint8_t * codes = row + ragged_q4_param_bytes;
    for (int64_t i = 0; i < 4 * ((w + 7) / 8); ++i) codes[i] = 0;
    if (fstep == 0.0f) return;
    for (int64_t i = 0; i < w; ++i) {
        const float r = std::rint((x[i] - fmin) / fstep);
        const int code = int(std::fmin(std::fmax(r, 0.0f), 15.0f));
        codes[i / 2] = uint8_t(codes[i / 2] | (code << (4 * (i % 2))));
    }
}

inline float ragged_q4_min(const uint8_t * row) {
    return half_to_float(uint16_t(row[0] | (row[1] << 8)));
}
inline float ragged_q4_step(const uint8_t * row) {
    return half_to_float(uint16_t(row[2] | (row[3] << 8)));
}
inline int ragged_q4_code(const uint8_t * row, int64_t i) {
    return (row[ragged_q4_param_bytes + i / 2] >> (4 * (i % 2))) & 15;
}

// x^ of the w channels of a row (fp32: code * step + min).
inline void ragged_q4_dequantize_row(const uint8_t * row, int64_t w, float * out) {
    const float mn = ragged_q4_min(row), st = ragged_q4_step(row);
    for (int64_t i = 0; i < w; ++i) out[i] = float(ragged_q4_code(row, i)) * st + mn;
}

}  // namespace kvcomp
