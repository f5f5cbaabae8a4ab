// Element types of kvcomp tensors and host-side fp16/bf16 conversion.
//
// fp16 is IEEE binary16 stored as uint16_t; conversion rounds to nearest even and keeps
// infinities, NaN and subnormals, so the CPU reference produces the same bits as the
// hardware conversions of OpenCL (vstore_half_rte) and CUDA (__float2half_rn).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace kvcomp {

enum class dtype : int32_t { f32 = 0, f16 = 1, bf16 = 2, i32 = 3, u8 = 4 };

constexpr size_t dtype_size(dtype t) {
    return t == dtype::f32 || t == dtype::i32 ? 4 : t == dtype::u8 ? 1 : 2;
}
const char * dtype_name(dtype t);

inline uint32_t float_bits(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return u;
}
inline float bits_float(uint32_t u) {
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

inline float half_to_float(uint16_t h) {
    const uint32_t sign = uint32_t(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t mant = h & 0x3ffu;
    if (exp == 0x1f) return bits_float(sign | 0x7f800000u | (mant << 13));  // inf / nan
    if (exp == 0) {
        if (mant == 0) return bits_float(sign);
        // Subnormal: value = mant * 2^-24.
        float v = float(mant) * (1.0f / 16777216.0f);
        return sign ? -v : v;
    }
    return bits_float(sign | ((exp + 112u) << 23) | (mant << 13));
}

inline uint16_t float_to_half(float f) {
    const uint32_t x = float_bits(f);
    const uint16_t sign = uint16_t((x >> 16) & 0x8000u);
    const uint32_t ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) return uint16_t(sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u : 0u));
    if (ax >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // rounds to >= 65520: overflow to inf
    if (ax < 0x38800000u) {
        // Result is subnormal (or zero): round |f| * 2^24 to nearest even integer.
        if (ax < 0x33000000u) return sign;  // below half of the smallest subnormal
        const uint32_t e = ax >> 23;
        const uint32_t m = (ax & 0x7fffffu) | 0x800000u;
        const uint32_t shift = 126u - e;  // so that result = m >> (shift) with rounding
        uint32_t r = m >> shift;
        const uint32_t rem = m & ((1u << shift) - 1u);
        const uint32_t half = 1u << (shift - 1u);
        if (rem > half || (rem == half && (r & 1u))) ++r;
        return uint16_t(sign | r);
    }
    uint32_t r = ((ax >> 13) - (112u << 10));  // rebias exponent, keep 10 mantissa bits
    const uint32_t rem = ax & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (r & 1u))) ++r;  // may carry into the exponent: fine
    return uint16_t(sign | r);
}

inline float bf16_to_float(uint16_t h) { return bits_float(uint32_t(h) << 16); }
inline uint16_t float_to_bf16(float f) {
    uint32_t x = float_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return uint16_t((x >> 16) | 0x40u);  // quiet nan
    x += 0x7fffu + ((x >> 16) & 1u);
    return uint16_t(x >> 16);
}

}  // namespace kvcomp
