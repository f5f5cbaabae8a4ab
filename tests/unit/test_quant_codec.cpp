// The quantized KV block codec (lib/core/qblock_codec.*, format in core/qblock.h) against the
// quantizer spec, digest zipcache.md §10 T1-T5:
//   T1 code packing is a bijection for 2, 4 and 8 bits, little-endian within a byte;
//   T2 error bounds derived from the stored f16 parameters (interior codes: step/2 plus fp32
//      rounding; codes clamped at 0 or 2^bits - 1: the f16 rounding of min/step on top);
//   T3 min and max of a group are reproduced (up to the f16 rounding of the parameters);
//   zero-range guards (constant key channel, all-zero / constant value token, all-zero CST channel);
//   T4 channel-separable values (CST) beat plain token-wise on an outlier channel;
//   T5 re-encoding decoded data reproduces the key codes and parameters (and, without CST, the
//      whole slot) exactly.
// The test recomputes every parameter and code from the spec independently of the encoder.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "core/qblock.h"
#include "core/qblock_codec.h"

using namespace kvcomp;

namespace {

float f16r(float x) { return half_to_float(qblock::f16_sat(x)); }

// Synthetic K/V of one block: [tokens, heads, head_dim] each.
struct block_data {
    int64_t T = 0, H = 0, D = 0;
    std::vector<float> k, v;
    float & K(int64_t t, int64_t h, int64_t c) { return k[size_t((t * H + h) * D + c)]; }
    float & V(int64_t t, int64_t h, int64_t c) { return v[size_t((t * H + h) * D + c)]; }
    float K(int64_t t, int64_t h, int64_t c) const { return k[size_t((t * H + h) * D + c)]; }
    float V(int64_t t, int64_t h, int64_t c) const { return v[size_t((t * H + h) * D + c)]; }
};

block_data random_block(int64_t T, int64_t H, int64_t D, uint64_t seed) {
    block_data b{T, H, D, {}, {}};
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    b.k.resize(size_t(T * H * D));
    b.v.resize(b.k.size());
    for (auto & x : b.k) x = nd(rng);
    for (auto & x : b.v) x = nd(rng);
    return b;
}

// Head h's hi tokens are rows(h, 0..n_hi), lo tokens rows(h, n_hi..): a per-head permutation, so
// the encoder's row indirection is exercised too.
int64_t row_of(int64_t h, int64_t j, int64_t n) { return (j * 7 + h * 3) % n; }

std::vector<uint8_t> encode(const qblock_layout & q, const block_data & b, int32_t n_hi, int32_t n_lo) {
    std::vector<uint8_t> slot(size_t(q.slot_bytes()), 0xAB);  // garbage: the encoder writes everything
    const int64_t n = n_hi + n_lo;
    qblock::encode_slot(
        q, slot.data(), n_hi, n_lo, [&](int64_t h, int64_t j) { return row_of(h, j, n); },
        [&](int64_t t, int64_t h, int64_t c) { return b.K(t, h, c); },
        [&](int64_t t, int64_t h, int64_t c) { return b.V(t, h, c); });
    return slot;
}

// What a segment of head h stores, recomputed from the spec and compared with the slot, with the
// decoded values checked against the derived error bounds. Returns the largest error / step seen
// on interior codes (so a caller can check the bound is not vacuous).
struct seg_view {
    const qblock_layout & q;
    const uint8_t * seg;
    int32_t cap, bits;
    float kmin(int64_t c) const { return qblock::read_f16(seg + q.seg_kmin(), c); }
    float kstep(int64_t c) const { return qblock::read_f16(seg + q.seg_kstep(), c); }
    float vmin(int64_t j, int64_t g) const { return qblock::read_f16(seg + q.seg_vmin(), j * q.v_groups() + g); }
    float vstep(int64_t j, int64_t g) const { return qblock::read_f16(seg + q.seg_vstep(cap), j * q.v_groups() + g); }
    int32_t kcode(int64_t j, int64_t c) const {
        return qblock::get_code(seg + q.seg_kcodes(cap) + j * q.row_bytes(bits), c, bits);
    }
    int32_t vcode(int64_t j, int64_t c) const {
        return qblock::get_code(seg + q.seg_vcodes(cap, bits) + j * q.row_bytes(bits), c, bits);
    }
};

// The spec's code for x, written out here (not qblock::quantize).
int32_t spec_code(float x, float mn16, float step16, int32_t bits) {
    if (step16 == 0.0f) return 0;
    const float r = std::rint((x - mn16) / step16);
    const float top = float((1 << bits) - 1);
    return int32_t(std::min(std::max(r, 0.0f), top));
}

// Bound on |x - x^| for one element quantized with (mn16, step16) in a group whose true extremes
// are mn, mx (x in [mn, mx]). Step 0: the f16 rounding of the (constant) value. Interior codes: step16 / 2; code 0: x lies in [mn, mn16 + step16/2),
// so also mn16 - mn; top code: x lies in (x^ - step16/2, mx], so also mx - x^. Plus fp32 rounding
// of (x - mn16) / step16 and of code * step16 + mn16.
double elem_bound(float x, float xhat, int32_t code, int32_t bits, float mn, float mx, float mn16, float step16) {
    double b = 0.5 * double(step16);
    // Step 0 (a range below half the smallest f16 step): every x in [mn, mx] decodes to mn16.
    if (step16 == 0.0f) b = std::max(std::fabs(double(mn16) - double(mn)), std::fabs(double(mx) - double(mn16)));
    if (code == 0) b = std::max(b, double(mn16) - double(mn));
    if (code == (1 << bits) - 1) b = std::max(b, double(mx) - double(xhat));
    const double fp32 = 4.0 * 0x1p-24 * (std::fabs(double(x)) + std::fabs(double(mn16)) + std::fabs(double(xhat)) +
                                         double(code) * double(step16));
    return b + fp32;
}

struct check_stats {
    double worst_interior_ratio = 0.0;  // max |x - x^| / step over interior codes
    int64_t elements = 0;
};

// Checks every parameter, code and decoded element of head h against the spec and the bounds.
void check_head(const qblock_layout & q, const std::vector<uint8_t> & slot, const block_data & b, int32_t n_hi,
                int32_t n_lo, int64_t h, check_stats & st) {
    const int64_t D = q.head_dim, n = n_hi + n_lo;
    ASSERT_EQ(qblock::read_i32(slot.data()), n_hi);
    ASSERT_EQ(qblock::read_i32(slot.data() + 4), n_lo);
    const uint8_t * head = slot.data() + q.head_offset(h);
    const qblock::decoded_head dec = qblock::decode_head(q, slot.data(), h);
    ASSERT_EQ(dec.n_hi, n_hi);
    ASSERT_EQ(dec.n_lo, n_lo);
    ASSERT_EQ(dec.k.size(), size_t(n * D));

    // vscale (CST): f16(sqrt(max |v|)) over both segments' tokens, 1 when that is 0.
    std::vector<float> vscale(size_t(D), 1.0f);
    if (q.channel_scale) {
        for (int64_t c = 0; c < D; ++c) {
            float a = 0.0f;
            for (int64_t j = 0; j < n; ++j) a = std::max(a, std::fabs(b.V(row_of(h, j, n), h, c)));
            const float want = f16r(std::sqrt(a)) == 0.0f ? 1.0f : f16r(std::sqrt(a));
            vscale[size_t(c)] = qblock::read_f16(head, c);
            EXPECT_EQ(vscale[size_t(c)], want) << "vscale head " << h << " channel " << c;
        }
    }

    for (int seg_i = 0; seg_i < 2; ++seg_i) {
        const bool hi = seg_i == 0;
        const int32_t cap = hi ? q.hi_tokens : q.lo_tokens, bits = hi ? q.hi_bits : q.lo_bits;
        const int32_t cnt = hi ? n_hi : n_lo, first = hi ? 0 : n_hi;
        if (cap == 0) continue;
        const seg_view s{q, head + (hi ? q.head_hi() : q.head_lo()), cap, bits};
        const int32_t top = (1 << bits) - 1;
        // Keys, per channel over the segment's tokens.
        for (int64_t c = 0; c < D; ++c) {
            if (cnt == 0) {
                EXPECT_EQ(s.kmin(c), 0.0f);
                EXPECT_EQ(s.kstep(c), 0.0f);
                continue;
            }
            float mn = INFINITY, mx = -INFINITY;
            for (int32_t j = 0; j < cnt; ++j) {
                const float x = b.K(row_of(h, first + j, n), h, c);
                mn = std::min(mn, x), mx = std::max(mx, x);
            }
            const float mn16 = s.kmin(c), st16 = s.kstep(c);
            ASSERT_EQ(mn16, f16r(mn)) << "kmin h" << h << " c" << c;
            ASSERT_EQ(st16, f16r((mx - mn) / float(top))) << "kstep h" << h << " c" << c;
            for (int32_t j = 0; j < cnt; ++j) {
                const float x = b.K(row_of(h, first + j, n), h, c);
                const int32_t code = s.kcode(j, c);
                ASSERT_EQ(code, spec_code(x, mn16, st16, bits)) << "key code h" << h << " tok " << first + j << " c" << c;
                const float xhat = dec.k[size_t((first + j) * D + c)];
                ASSERT_EQ(xhat, float(code) * st16 + mn16);
                const double err = std::fabs(double(x) - double(xhat));
                EXPECT_LE(err, elem_bound(x, xhat, code, bits, mn, mx, mn16, st16))
                    << "key h" << h << " tok " << first + j << " c" << c << " code " << code << " step " << st16;
                if (code > 0 && code < top && st16 > 0)
                    st.worst_interior_ratio = std::max(st.worst_interior_ratio, err / double(st16));
                ++st.elements;
            }
        }
        // Values, per token and group of v_group channels, of w = v / vscale.
        for (int32_t j = 0; j < cnt; ++j) {
            const int64_t t = row_of(h, first + j, n);
            for (int64_t g = 0; g < q.v_groups(); ++g) {
                float mn = INFINITY, mx = -INFINITY;
                for (int64_t c = g * q.v_group; c < (g + 1) * q.v_group; ++c) {
                    const float w = q.channel_scale ? b.V(t, h, c) / vscale[size_t(c)] : b.V(t, h, c);
                    mn = std::min(mn, w), mx = std::max(mx, w);
                }
                const float mn16 = s.vmin(j, g), st16 = s.vstep(j, g);
                ASSERT_EQ(mn16, f16r(mn));
                ASSERT_EQ(st16, f16r((mx - mn) / float(top)));
                for (int64_t c = g * q.v_group; c < (g + 1) * q.v_group; ++c) {
                    const float vs = vscale[size_t(c)];
                    const float w = q.channel_scale ? b.V(t, h, c) / vs : b.V(t, h, c);
                    const int32_t code = s.vcode(j, c);
                    ASSERT_EQ(code, spec_code(w, mn16, st16, bits)) << "value code h" << h << " tok " << t << " c" << c;
                    const float vhat = dec.v[size_t((first + j) * D + c)];
                    const float what = float(code) * st16 + mn16;
                    ASSERT_EQ(vhat, q.channel_scale ? what * vs : what);
                    // |v - v^| <= vscale * |w - w^| + the fp32 rounding of v / vscale and w^ * vscale.
                    const double bound = double(vs) * elem_bound(w, what, code, bits, mn, mx, mn16, st16) +
                                         2.0 * 0x1p-24 * (std::fabs(double(b.V(t, h, c))) + std::fabs(double(vhat)));
                    EXPECT_LE(std::fabs(double(b.V(t, h, c)) - double(vhat)), bound)
                        << "value h" << h << " tok " << t << " c" << c << " code " << code;
                }
            }
        }
        // Unused capacity rows are zero.
        for (int64_t j = cnt; j < cap; ++j)
            for (int64_t i = 0; i < q.row_bytes(bits); ++i) {
                ASSERT_EQ(s.seg[q.seg_kcodes(cap) + j * q.row_bytes(bits) + i], 0);
                ASSERT_EQ(s.seg[q.seg_vcodes(cap, bits) + j * q.row_bytes(bits) + i], 0);
            }
    }
}

qblock_layout layout(int32_t hi_tok, int32_t lo_tok, int32_t hi_bits, int32_t lo_bits, int32_t v_group, bool cst,
                     int64_t D = 64, int64_t H = 2) {
    qblock_layout q;
    q.n_kv_heads = H, q.head_dim = D;
    q.hi_tokens = hi_tok, q.lo_tokens = lo_tok, q.hi_bits = hi_bits, q.lo_bits = lo_bits;
    q.v_group = v_group, q.channel_scale = cst;
    return q;
}

// --- T1 ------------------------------------------------------------------------------------------

TEST(quant_codec, code_packing_is_a_bijection) {
    std::mt19937_64 rng(1);
    for (int32_t bits : {2, 4, 8}) {
        const int64_t D = 64, row = D * bits / 8;
        const int32_t top = qblock::max_code(bits);
        ASSERT_EQ(top, (1 << bits) - 1);
        for (int trial = 0; trial < 200; ++trial) {
            std::vector<int32_t> codes(static_cast<size_t>(D));
            for (auto & c : codes) c = int32_t(rng() % uint64_t(top + 1));
            if (trial == 0) std::fill(codes.begin(), codes.end(), top);  // every bit set
            std::vector<uint8_t> r(static_cast<size_t>(row), 0);
            for (int64_t c = 0; c < D; ++c) qblock::put_code(r.data(), c, bits, codes[size_t(c)]);
            for (int64_t c = 0; c < D; ++c) ASSERT_EQ(qblock::get_code(r.data(), c, bits), codes[size_t(c)]) << bits;
            // The layout: channel c at bit c * bits, little-endian within each byte.
            for (int64_t i = 0; i < row; ++i) {
                uint32_t want = 0;
                for (int64_t c = i * 8 / bits; c < (i + 1) * 8 / bits; ++c)
                    want |= uint32_t(codes[size_t(c)]) << ((c * bits) % 8);
                ASSERT_EQ(uint32_t(r[size_t(i)]), want) << "bits " << bits << " byte " << i;
            }
        }
        // Every code value at every position of a byte, neighbours untouched (injective per field).
        for (int64_t c = 0; c < 8 / bits + 1; ++c)
            for (int32_t v = 0; v <= top; ++v) {
                std::vector<uint8_t> r(static_cast<size_t>(row), 0);
                qblock::put_code(r.data(), c, bits, v);
                for (int64_t o = 0; o < D; ++o) ASSERT_EQ(qblock::get_code(r.data(), o, bits), o == c ? v : 0);
            }
    }
    // A concrete byte: 2-bit codes 1, 2, 3, 0 -> 0b00111001.
    uint8_t b[1] = {0};
    const int32_t c2[4] = {1, 2, 3, 0};
    for (int i = 0; i < 4; ++i) qblock::put_code(b, i, 2, c2[i]);
    EXPECT_EQ(b[0], 0x39);
    uint8_t n[1] = {0};
    qblock::put_code(n, 0, 4, 0xA), qblock::put_code(n, 1, 4, 0x5);
    EXPECT_EQ(n[0], 0x5A);
}

TEST(quant_codec, quantize_rounds_half_to_even_and_clamps) {
    EXPECT_EQ(qblock::quantize(0.5f, 0.0f, 1.0f, 2), 0);   // rint(0.5) = 0
    EXPECT_EQ(qblock::quantize(1.5f, 0.0f, 1.0f, 2), 2);   // rint(1.5) = 2
    EXPECT_EQ(qblock::quantize(2.5f, 0.0f, 1.0f, 2), 2);   // rint(2.5) = 2
    EXPECT_EQ(qblock::quantize(9.0f, 0.0f, 1.0f, 2), 3);   // clamped at the top
    EXPECT_EQ(qblock::quantize(-4.0f, 0.0f, 1.0f, 2), 0);  // clamped at 0
    EXPECT_EQ(qblock::quantize(300.0f, 0.0f, 1.0f, 8), 255);
    EXPECT_EQ(qblock::quantize(7.0f, 3.0f, 0.0f, 4), 0);   // step 0: code 0
}

// --- T2, T3 --------------------------------------------------------------------------------------

struct codec_case {
    const char * name;
    qblock_layout q;
    int32_t n_hi, n_lo;
};

std::vector<codec_case> codec_cases() {
    return {
        {"kivi2_full", layout(0, 32, 2, 2, 32, false), 0, 32},
        {"kivi4_partial", layout(0, 32, 4, 4, 32, false), 0, 19},
        {"kivi8_group16", layout(0, 32, 8, 8, 16, false), 0, 32},
        {"zip_4_2_cst", layout(13, 19, 4, 2, 64, true), 13, 19},
        {"zip_8_2_cst_partial", layout(13, 19, 8, 2, 64, true), 5, 11},
        {"zip_8_4_cst_hi_only", layout(13, 19, 8, 4, 64, true), 13, 0},
        {"zip_2_8_nocst", layout(8, 24, 2, 8, 64, false), 8, 24},
    };
}

TEST(quant_codec, parameters_codes_and_error_bounds_follow_the_spec) {
    for (const auto & cc : codec_cases()) {
        SCOPED_TRACE(cc.name);
        // Data with structure the bounds must survive: an outlier channel, a channel with a large
        // offset (|min| >> range, so the f16 rounding of kmin exceeds step/2 and codes clamp), and a
        // wide-range token.
        block_data b = random_block(cc.n_hi + cc.n_lo, cc.q.n_kv_heads, cc.q.head_dim, 7);
        for (int64_t t = 0; t < b.T; ++t)
            for (int64_t h = 0; h < b.H; ++h) {
                b.K(t, h, 3) *= 20.0f;
                b.K(t, h, 5) = 100.0f + 0.01f * b.K(t, h, 5);
                b.V(t, h, 9) *= 20.0f;
                b.V(t, h, 11) = -50.0f + 0.02f * b.V(t, h, 11);
            }
        for (int64_t c = 0; c < b.D; ++c) b.V(1, 0, c) *= 30.0f;
        const auto slot = encode(cc.q, b, cc.n_hi, cc.n_lo);
        check_stats st;
        for (int64_t h = 0; h < cc.q.n_kv_heads; ++h) check_head(cc.q, slot, b, cc.n_hi, cc.n_lo, h, st);
        EXPECT_EQ(st.elements, (cc.n_hi + cc.n_lo) * cc.q.head_dim * cc.q.n_kv_heads);
        // Not vacuous: rounding to the nearest level makes some interior errors near step / 2.
        EXPECT_GT(st.worst_interior_ratio, 0.3);
        EXPECT_LE(st.worst_interior_ratio, 0.5 + 1e-4);
    }
}

// The large-offset channel: the f16 rounding of kmin (ulp 1/16 at 100) dwarfs the step, so codes
// clamp and the error is that rounding, not step/2 — the bound accounts for it, and it is still
// at most half an f16 ulp of the offset plus the range.
TEST(quant_codec, large_offset_channel_error_is_the_f16_rounding_of_kmin) {
    const qblock_layout q = layout(0, 32, 8, 8, 32, false, 64, 1);
    block_data b = random_block(32, 1, 64, 11);
    for (int64_t t = 0; t < 32; ++t) b.K(t, 0, 0) = 100.0f + 0.001f * b.K(t, 0, 0);
    const auto slot = encode(q, b, 0, 32);
    const auto dec = qblock::decode_head(q, slot.data(), 0);
    float mn = INFINITY, mx = -INFINITY;
    double worst = 0.0;
    for (int64_t t = 0; t < 32; ++t) mn = std::min(mn, b.K(t, 0, 0)), mx = std::max(mx, b.K(t, 0, 0));
    for (int64_t j = 0; j < 32; ++j)
        worst = std::max(worst, std::fabs(double(b.K(row_of(0, j, 32), 0, 0)) - double(dec.k[size_t(j * 64)])));
    const float step = (mx - mn) / 255.0f;
    EXPECT_GT(worst, 0.5 * double(step));             // worse than the ideal step/2 ...
    EXPECT_LE(worst, 0.5 * 0.0625 + double(mx - mn));  // ... but within half an f16 ulp at 100 + range
    check_stats st;
    check_head(q, slot, b, 0, 32, 0, st);
}

TEST(quant_codec, group_min_and_max_are_reproduced) {
    for (int32_t bits : {2, 4, 8}) {
        const qblock_layout q = layout(0, 32, bits, bits, 16, false, 64, 1);
        const block_data b = random_block(32, 1, 64, 100 + uint64_t(bits));
        const auto slot = encode(q, b, 0, 32);
        const auto dec = qblock::decode_head(q, slot.data(), 0);
        const seg_view s{q, slot.data() + q.head_offset(0) + q.head_lo(), 32, bits};
        const int32_t top = (1 << bits) - 1;
        for (int64_t c = 0; c < 64; ++c) {
            int64_t jmin = 0, jmax = 0;
            for (int64_t j = 0; j < 32; ++j) {
                if (b.K(row_of(0, j, 32), 0, c) < b.K(row_of(0, jmin, 32), 0, c)) jmin = j;
                if (b.K(row_of(0, j, 32), 0, c) > b.K(row_of(0, jmax, 32), 0, c)) jmax = j;
            }
            const float mn = b.K(row_of(0, jmin, 32), 0, c), mx = b.K(row_of(0, jmax, 32), 0, c);
            EXPECT_EQ(s.kcode(jmin, c), 0) << bits << " c" << c;
            EXPECT_EQ(s.kcode(jmax, c), top) << bits << " c" << c;
            EXPECT_EQ(dec.k[size_t(jmin * 64 + c)], f16r(mn));  // exactly the f16 min
            // The max: top * f16(step) + f16(min), off by the f16 rounding of both parameters.
            const double tol = double(top) * std::fabs(double(f16r((mx - mn) / float(top))) - double(mx - mn) / top) +
                               std::fabs(double(f16r(mn)) - double(mn)) + 1e-6;
            EXPECT_NEAR(dec.k[size_t(jmax * 64 + c)], mx, tol) << bits << " c" << c;
            EXPECT_LE(tol, 2e-3 * (std::fabs(mx) + std::fabs(mn)) + 1e-6);  // and that rounding is small
        }
        // Values: per token and group of 16 channels.
        for (int64_t j = 0; j < 32; ++j)
            for (int64_t g = 0; g < 4; ++g) {
                int64_t cmin = g * 16, cmax = g * 16;
                const int64_t t = row_of(0, j, 32);
                for (int64_t c = g * 16; c < (g + 1) * 16; ++c) {
                    if (b.V(t, 0, c) < b.V(t, 0, cmin)) cmin = c;
                    if (b.V(t, 0, c) > b.V(t, 0, cmax)) cmax = c;
                }
                EXPECT_EQ(s.vcode(j, cmin), 0);
                EXPECT_EQ(s.vcode(j, cmax), top);
                EXPECT_EQ(dec.v[size_t(j * 64 + cmin)], f16r(b.V(t, 0, cmin)));
                EXPECT_NEAR(dec.v[size_t(j * 64 + cmax)], b.V(t, 0, cmax), 2e-3 * 8.0);
            }
    }
}

// --- zero-range guards ---------------------------------------------------------------------------

TEST(quant_codec, zero_ranges_give_step_zero_code_zero_and_exact_f16_values) {
    for (bool cst : {false, true}) {
        SCOPED_TRACE(cst ? "cst" : "plain");
        const qblock_layout q = layout(6, 10, 4, 2, cst ? 64 : 32, cst, 64, 1);
        block_data b = random_block(16, 1, 64, 5);
        const float konst = 0.3333333f;  // not an f16 value: the reconstruction is its f16 rounding
        ASSERT_NE(f16r(konst), konst);
        for (int64_t t = 0; t < 16; ++t) {
            b.K(t, 0, 7) = konst;   // constant key channel
            b.V(t, 0, 20) = 0.0f;   // all-zero value channel (CST: vscale 1)
        }
        for (int64_t c = 0; c < 64; ++c) b.V(row_of(0, 2, 16), 0, c) = 0.0f;  // all-zero value token (hi seg)
        for (int64_t c = 32; c < 64; ++c) b.V(row_of(0, 9, 16), 0, c) = -2.7182817f;  // constant group (lo seg)
        const auto slot = encode(q, b, 6, 10);
        const auto dec = qblock::decode_head(q, slot.data(), 0);
        const uint8_t * head = slot.data() + q.head_offset(0);
        const seg_view hi{q, head + q.head_hi(), 6, 4}, lo{q, head + q.head_lo(), 10, 2};
        for (const seg_view * s : {&hi, &lo}) {
            EXPECT_EQ(s->kstep(7), 0.0f);
            EXPECT_EQ(s->kmin(7), f16r(konst));
        }
        for (int64_t j = 0; j < 16; ++j) {
            const seg_view & s = j < 6 ? hi : lo;
            EXPECT_EQ(s.kcode(j < 6 ? j : j - 6, 7), 0);
            EXPECT_EQ(dec.k[size_t(j * 64 + 7)], f16r(konst)) << "token " << j;
        }
        if (cst) {
            EXPECT_EQ(qblock::read_f16(head, 20), 1.0f);  // vscale of an all-zero channel
        }
        // The all-zero value token: vmin = vstep = 0 in every group, codes 0, exact zeros.
        for (int64_t g = 0; g < q.v_groups(); ++g) {
            EXPECT_EQ(hi.vmin(2, g), 0.0f);
            EXPECT_EQ(hi.vstep(2, g), 0.0f);
        }
        for (int64_t c = 0; c < 64; ++c) {
            EXPECT_EQ(hi.vcode(2, c), 0);
            EXPECT_EQ(dec.v[size_t(2 * 64 + c)], 0.0f) << "c" << c;
        }
        // The constant value group (channels 32..63 of one token) without CST: step 0, the f16
        // rounding of the constant.
        if (!cst) {
            EXPECT_EQ(lo.vstep(9 - 6, 1), 0.0f);
            EXPECT_NE(lo.vstep(9 - 6, 0), 0.0f);
            for (int64_t c = 32; c < 64; ++c) EXPECT_EQ(dec.v[size_t(9 * 64 + c)], f16r(-2.7182817f));
        }
        check_stats st;
        check_head(q, slot, b, 6, 10, 0, st);
    }
    // A segment without tokens keeps zero parameters and decodes to nothing.
    const qblock_layout q = layout(6, 10, 4, 2, 64, true, 64, 1);
    const block_data b = random_block(10, 1, 64, 6);
    const auto slot = encode(q, b, 0, 10);
    check_stats st;
    check_head(q, slot, b, 0, 10, 0, st);
    EXPECT_EQ(qblock::decode_head(q, slot.data(), 0).k.size(), size_t(10 * 64));
}

// --- T4 ------------------------------------------------------------------------------------------

double rel_frobenius(const std::vector<float> & a, const std::vector<float> & b) {
    double num = 0, den = 0;
    for (size_t i = 0; i < a.size(); ++i) num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]), den += double(b[i]) * b[i];
    return std::sqrt(num / den);
}

TEST(quant_codec, channel_separable_values_beat_tokenwise_on_an_outlier_channel) {
    // Digest §10 T4: l = 64 tokens, Gaussian values with one channel scaled x20; per-token groups of
    // the whole head. Digest's numbers (hd 32): 0.198 vs 0.485 at 2 bits, 0.037 vs 0.113 at 4 bits.
    for (int32_t bits : {2, 4}) {
        double err_cst = 0, err_tok = 0;
        for (int64_t D : {32, 64}) {
            block_data b = random_block(64, 1, D, 2024 + uint64_t(D));
            for (int64_t t = 0; t < 64; ++t) b.V(t, 0, 5) *= 20.0f;
            std::vector<float> want;
            for (int64_t j = 0; j < 64; ++j)
                for (int64_t c = 0; c < D; ++c) want.push_back(b.V(row_of(0, j, 64), 0, c));
            const qblock_layout cst = layout(0, 64, bits, bits, int32_t(D), true, D, 1);
            const qblock_layout tok = layout(0, 64, bits, bits, int32_t(D), false, D, 1);
            err_cst = rel_frobenius(qblock::decode_head(cst, encode(cst, b, 0, 64).data(), 0).v, want);
            err_tok = rel_frobenius(qblock::decode_head(tok, encode(tok, b, 0, 64).data(), 0).v, want);
            std::printf("[ T4 ] bits %d hd %lld: CST %.3f, token-wise %.3f\n", bits, static_cast<long long>(D),
                        err_cst, err_tok);
            EXPECT_LT(err_cst, 0.6 * err_tok) << "bits " << bits << " hd " << D;
            EXPECT_LT(err_cst, bits == 2 ? 0.3 : 0.06);
        }
    }
}

// --- T5 ------------------------------------------------------------------------------------------

TEST(quant_codec, reencoding_decoded_keys_reproduces_codes_and_parameters) {
    for (const auto & cc : codec_cases()) {
        SCOPED_TRACE(cc.name);
        const int32_t n = cc.n_hi + cc.n_lo;
        const block_data b = random_block(n, cc.q.n_kv_heads, cc.q.head_dim, 31);
        const auto slot = encode(cc.q, b, cc.n_hi, cc.n_lo);
        // The decoded block, placed back at the tokens' positions (same segment membership).
        block_data d = b;
        for (int64_t h = 0; h < cc.q.n_kv_heads; ++h) {
            const auto dec = qblock::decode_head(cc.q, slot.data(), h);
            for (int64_t j = 0; j < n; ++j)
                for (int64_t c = 0; c < cc.q.head_dim; ++c) {
                    d.K(row_of(h, j, n), h, c) = dec.k[size_t(j * cc.q.head_dim + c)];
                    d.V(row_of(h, j, n), h, c) = dec.v[size_t(j * cc.q.head_dim + c)];
                }
        }
        const auto again = encode(cc.q, d, cc.n_hi, cc.n_lo);
        int64_t value_code_diffs = 0;
        for (int64_t h = 0; h < cc.q.n_kv_heads; ++h) {
            const uint8_t * h1 = slot.data() + cc.q.head_offset(h);
            const uint8_t * h2 = again.data() + cc.q.head_offset(h);
            for (int seg_i = 0; seg_i < 2; ++seg_i) {
                const bool hi = seg_i == 0;
                const int32_t cap = hi ? cc.q.hi_tokens : cc.q.lo_tokens, bits = hi ? cc.q.hi_bits : cc.q.lo_bits;
                if (cap == 0) continue;
                const int64_t off = hi ? cc.q.head_hi() : cc.q.head_lo();
                // Keys: kmin, kstep and the codes, byte for byte.
                EXPECT_EQ(std::memcmp(h1 + off + cc.q.seg_kmin(), h2 + off + cc.q.seg_kmin(),
                                      size_t(cc.q.seg_vmin() - cc.q.seg_kmin())), 0)
                    << "key params h" << h << " seg " << seg_i;
                EXPECT_EQ(std::memcmp(h1 + off + cc.q.seg_kcodes(cap), h2 + off + cc.q.seg_kcodes(cap),
                                      size_t(cap * cc.q.row_bytes(bits))), 0)
                    << "key codes h" << h << " seg " << seg_i;
                const seg_view s1{cc.q, h1 + off, cap, bits}, s2{cc.q, h2 + off, cap, bits};
                for (int64_t j = 0; j < cap; ++j)
                    for (int64_t c = 0; c < cc.q.head_dim; ++c) value_code_diffs += s1.vcode(j, c) != s2.vcode(j, c);
            }
        }
        if (!cc.q.channel_scale) {
            // Token-wise values too: the whole slot is reproduced.
            EXPECT_EQ(value_code_diffs, 0);
            EXPECT_TRUE(slot == again) << "slot differs after re-encoding";
        } else {
            // CST: vscale' = f16(sqrt(max |v^|)) may differ from vscale, so value codes may move;
            // the re-encoded block still meets the bounds for its own parameters.
            check_stats st;
            for (int64_t h = 0; h < cc.q.n_kv_heads; ++h) check_head(cc.q, again, d, cc.n_hi, cc.n_lo, h, st);
            std::printf("[ T5 ] %s: %lld value codes moved on re-encoding (CST)\n", cc.name,
                        static_cast<long long>(value_code_diffs));
        }
    }
}

}  // namespace
