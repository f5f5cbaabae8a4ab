// Reference codec of quantized KV blocks: see core/qblock.h for the format and the quantizer.
#include "core/qblock_codec.h"

#include <algorithm>
#include <cstring>

namespace kvcomp::qblock {

namespace {

void write_f16(uint8_t * p, int64_t i, float x) {
    const uint16_t h = f16_sat(x);
    std::memcpy(p + 2 * i, &h, 2);
}

// One precision segment of one head: keys per channel, values per token and channel group.
void encode_segment(const qblock_layout & q, uint8_t * seg, int32_t cap, int32_t bits, int32_t n,
                    const std::function<int64_t(int64_t)> & token, int64_t h, const element_fn & kel,
                    const element_fn & vel, const uint8_t * vscale) {
    const int64_t hd = q.head_dim;
    const float levels = float(max_code(bits));
    uint8_t * kmin = seg + q.seg_kmin();
    uint8_t * kstep = seg + q.seg_kstep();
    uint8_t * vmin = seg + q.seg_vmin();
    uint8_t * vstep = seg + q.seg_vstep(cap);
    uint8_t * kcodes = seg + q.seg_kcodes(cap);
    uint8_t * vcodes = seg + q.seg_vcodes(cap, bits);
    if (n == 0) return;  // params stay zero
    for (int64_t c = 0; c < hd; ++c) {
        float mn = INFINITY, mx = -INFINITY;
        for (int32_t j = 0; j < n; ++j) {
            const float x = kel(token(j), h, c);
            mn = std::min(mn, x), mx = std::max(mx, x);
        }
        write_f16(kmin, c, mn);
        write_f16(kstep, c, (mx - mn) / levels);
        const float m16 = read_f16(kmin, c), s16 = read_f16(kstep, c);
        for (int32_t j = 0; j < n; ++j)
            put_code(kcodes + j * q.row_bytes(bits), c, bits, quantize(kel(token(j), h, c), m16, s16, bits));
    }
    const int64_t groups = q.v_groups();
    std::vector<float> w(static_cast<size_t>(hd));
    for (int32_t j = 0; j < n; ++j) {
        for (int64_t c = 0; c < hd; ++c) {
            const float x = vel(token(j), h, c);
            w[size_t(c)] = vscale ? x / read_f16(vscale, c) : x;
        }
        for (int64_t g = 0; g < groups; ++g) {
            float mn = INFINITY, mx = -INFINITY;
            for (int64_t c = g * q.v_group; c < (g + 1) * q.v_group; ++c)
                mn = std::min(mn, w[size_t(c)]), mx = std::max(mx, w[size_t(c)]);
            write_f16(vmin, j * groups + g, mn);
            write_f16(vstep, j * groups + g, (mx - mn) / levels);
            const float m16 = read_f16(vmin, j * groups + g), s16 = read_f16(vstep, j * groups + g);
            for (int64_t c = g * q.v_group; c < (g + 1) * q.v_group; ++c)
                put_code(vcodes + j * q.row_bytes(bits), c, bits, quantize(w[size_t(c)], m16, s16, bits));
        }
    }
}

void decode_segment(const qblock_layout & q, const uint8_t * seg, int32_t cap, int32_t bits, int32_t n,
                    const uint8_t * vscale, float * k, float * v) {
    const int64_t hd = q.head_dim, groups = q.v_groups();
    for (int32_t j = 0; j < n; ++j) {
        const uint8_t * krow = seg + q.seg_kcodes(cap) + j * q.row_bytes(bits);
        const uint8_t * vrow = seg + q.seg_vcodes(cap, bits) + j * q.row_bytes(bits);
        for (int64_t c = 0; c < hd; ++c) {
            k[j * hd + c] = float(get_code(krow, c, bits)) * read_f16(seg + q.seg_kstep(), c) +
                            read_f16(seg + q.seg_kmin(), c);
            const int64_t g = j * groups + c / q.v_group;
            const float w = float(get_code(vrow, c, bits)) * read_f16(seg + q.seg_vstep(cap), g) +
                            read_f16(seg + q.seg_vmin(), g);
            v[j * hd + c] = vscale ? w * read_f16(vscale, c) : w;
        }
    }
}

}  // namespace

void encode_slot(const qblock_layout & q, uint8_t * slot, int32_t n_hi, int32_t n_lo,
                 const std::function<int64_t(int64_t h, int64_t j)> & rows, const element_fn & k,
                 const element_fn & v) {
    std::memset(slot, 0, size_t(q.slot_bytes()));
    std::memcpy(slot, &n_hi, 4);
    std::memcpy(slot + 4, &n_lo, 4);
    for (int64_t h = 0; h < q.n_kv_heads; ++h) {
        uint8_t * head = slot + q.head_offset(h);
        uint8_t * vscale = q.channel_scale ? head : nullptr;
        if (vscale) {
            for (int64_t c = 0; c < q.head_dim; ++c) {
                float a = 0.0f;
                for (int32_t j = 0; j < n_hi + n_lo; ++j) a = std::max(a, std::fabs(v(rows(h, j), h, c)));
                const uint16_t s = f16_sat(std::sqrt(a));
                const uint16_t one = float_to_half(1.0f);
                std::memcpy(vscale + 2 * c, half_to_float(s) == 0.0f ? &one : &s, 2);
            }
        }
        encode_segment(q, head + q.head_hi(), q.hi_tokens, q.hi_bits, n_hi, [&](int64_t j) { return rows(h, j); }, h,
                       k, v, vscale);
        encode_segment(q, head + q.head_lo(), q.lo_tokens, q.lo_bits, n_lo,
                       [&](int64_t j) { return rows(h, n_hi + j); }, h, k, v, vscale);
    }
}

decoded_head decode_head(const qblock_layout & q, const uint8_t * slot, int64_t h) {
    decoded_head d;
    d.n_hi = read_i32(slot), d.n_lo = read_i32(slot + 4);
    const int64_t hd = q.head_dim;
    d.k.resize(size_t((d.n_hi + d.n_lo) * hd));
    d.v.resize(d.k.size());
    const uint8_t * head = slot + q.head_offset(h);
    const uint8_t * vscale = q.channel_scale ? head : nullptr;
    decode_segment(q, head + q.head_hi(), q.hi_tokens, q.hi_bits, d.n_hi, vscale, d.k.data(), d.v.data());
    decode_segment(q, head + q.head_lo(), q.lo_tokens, q.lo_bits, d.n_lo, vscale, d.k.data() + d.n_hi * hd,
                   d.v.data() + d.n_hi * hd);
    return d;
}

}  // namespace kvcomp::qblock
