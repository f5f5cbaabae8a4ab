// The family's block layout (lib/core/qblock_family.h): without extensions it is qblock_layout to the byte
// (today's kernels read it); HACK's and GEAR's arrays are counted as their digests count them (hack.md §3.3,
// gear.md §6.2), on shapes where no array needs padding, so the comparison is exact; every array is 16-byte
// aligned and none overlaps the next; inconsistent layouts are named.
#include <gtest/gtest.h>

#include <string>

#include "core/qblock_family.h"

using namespace kvcomp;

namespace {

qblock_layout base_layout(int64_t head_dim, int32_t hi, int32_t lo, int32_t hi_bits, int32_t lo_bits, int32_t v_group,
                          bool cscale) {
    qblock_layout q;
    q.n_kv_heads = 8, q.head_dim = head_dim;
    q.hi_tokens = hi, q.lo_tokens = lo, q.hi_bits = hi_bits, q.lo_bits = lo_bits;
    q.v_group = v_group, q.channel_scale = cscale;
    return q;
}

}  // namespace

TEST(qblock_family, without_extensions_is_the_kivi_zipcache_block) {
    const qblock_layout cases[] = {
        base_layout(128, 32, 0, 2, 2, 32, false),   // KIVI-2
        base_layout(128, 32, 0, 4, 4, 128, false),  // KIVI-4, one value group
        base_layout(128, 40, 60, 4, 2, 0, true),    // ZipCache (v_group 0: head_dim)
        base_layout(64, 20, 30, 4, 2, 0, true),     // ZipCache, blocks of 50, head_dim 64
        base_layout(48, 16, 0, 8, 8, 16, false),    // a reduced cache (lowrank=, rank=48)
    };
    for (const qblock_layout & q : cases) {
        qblock_family_layout f;
        f.base = q;
        ASSERT_STREQ(f.invalid(), "");
        EXPECT_EQ(f.slot_bytes(), q.slot_bytes());
        EXPECT_EQ(f.head_bytes(), q.head_bytes());
        EXPECT_EQ(f.head_lo(), q.head_lo());
        for (auto [cap, bits] : {std::pair{q.hi_tokens, q.hi_bits}, std::pair{q.lo_tokens, q.lo_bits}}) {
            EXPECT_EQ(f.seg_chan_step(cap), q.seg_kstep());
            EXPECT_EQ(f.seg_tok_min(cap), q.seg_vmin());
            EXPECT_EQ(f.seg_tok_step(cap), q.seg_vstep(cap));
            EXPECT_EQ(f.seg_kcodes(cap), q.seg_kcodes(cap));
            EXPECT_EQ(f.seg_vcodes(cap, bits), q.seg_vcodes(cap, bits));
            EXPECT_EQ(f.seg_bytes(cap, bits), q.seg_bytes(cap, bits));
        }
    }
}

// hack.md §3.3, d_h = 128, 2-bit K and V, bytes per token and KV head: K codes 32, K parameters
// (head_dim / Pi) x 4, V codes 32, V parameters head_dim x 4 / Pi, then the sums, K (head_dim / Pi) and
// V head_dim / Pi, each of 1 byte up to Pi (2^b - 1) = 255 and 2 beyond: 104 / 84 / 76 bytes for
// Pi = 32 / 64 / 128 (20.3 % / 16.4 % / 14.8 % of fp16's 512).
TEST(qblock_family, hack_bytes_per_token_are_the_digests) {
    const struct { int32_t pi; int64_t per_token, sum_bytes; } cases[] = {{32, 104, 1}, {64, 84, 1}, {128, 76, 2}};
    for (const auto & c : cases) {
        qblock_family_layout f;
        f.base = base_layout(128, 128, 0, 2, 2, 128, false);
        f.orientation = qblock_family_layout::params::hack;
        f.partition = c.pi;
        f.code_sums = true;
        ASSERT_STREQ(f.invalid(), "");
        EXPECT_EQ(f.sum_bytes(2), c.sum_bytes);
        const int64_t formula = 32 + (128 / c.pi) * 4 + 32 + 128 * 4 / c.pi + (128 / c.pi) * c.sum_bytes +
                                128 * c.sum_bytes / c.pi;
        EXPECT_EQ(formula, c.per_token) << "the digest's table";
        EXPECT_EQ(f.head_bytes(), c.per_token * 128) << "Pi = " << c.pi;
        f.code_sums = false;
        EXPECT_EQ(f.head_bytes(), (c.per_token - (128 / c.pi) * c.sum_bytes - 128 * c.sum_bytes / c.pi) * 128);
    }
}

// gear.md §6.2 with local u16 indices: bits per element = b + (parameters) + n (16 + 16) / head_dim
// (sparse) + 16 r (cap + head_dim) / (cap head_dim) (low rank), the parameters being 32 / cap for the
// keys (per channel over the segment) and 32 / v_group for the values. head_dim 128, one 64-token
// segment at 2 bits, v_group 64, r = 2, n = 2: 2 + 0.5 + 0.5 + 0.75 = 3.75 bits for K and for V.
TEST(qblock_family, gear_bytes_are_the_digests_formula) {
    qblock_family_layout f;
    f.base = base_layout(128, 64, 0, 2, 2, 64, false);
    f.residual_rank = 2;
    f.outliers_per_row = 2;
    ASSERT_STREQ(f.invalid(), "");
    const double b = 2, cap = 64, d = 128, g = 64, r = 2, n = 2;
    const double k_bits = b + 32 / cap + n * 32 / d + 16 * r * (cap + d) / (cap * d);
    const double v_bits = b + 32 / g + n * 32 / d + 16 * r * (cap + d) / (cap * d);
    EXPECT_DOUBLE_EQ(k_bits, 3.75);
    EXPECT_EQ(double(f.head_bytes()), (k_bits + v_bits) * cap * d / 8);
    // Each extension alone adds exactly its own arrays.
    f.outliers_per_row = 0;
    EXPECT_EQ(f.head_bytes(), f.base.head_bytes() + 2 * (64 * 2 * 2 + 128 * 2 * 2));
    f.residual_rank = 0;
    f.outliers_per_row = 2;
    EXPECT_EQ(f.head_bytes(), f.base.head_bytes() + 2 * 64 * 2 * (2 + 2));
}

TEST(qblock_family, arrays_are_aligned_and_in_order) {
    qblock_family_layout f;
    f.base = base_layout(128, 40, 60, 4, 2, 0, true);  // ZipCache's segments, with GEAR's arrays on top
    f.residual_rank = 4;
    f.outliers_per_row = 3;
    ASSERT_STREQ(f.invalid(), "");
    for (auto [cap, bits] : {std::pair{40, 4}, std::pair{60, 2}}) {
        const int64_t offs[] = {f.seg_chan_min(),     f.seg_chan_step(cap),   f.seg_tok_min(cap),
                                f.seg_tok_step(cap),  f.seg_kcodes(cap),      f.seg_vcodes(cap, bits),
                                f.seg_sums(cap, bits), f.seg_factors(cap, bits), f.seg_outliers(cap, bits),
                                f.seg_bytes(cap, bits)};
        for (size_t i = 0; i < std::size(offs); ++i) {
            EXPECT_EQ(offs[i] % 16, 0) << "array " << i << " of the " << cap << "-token segment";
            if (i > 0) {
                EXPECT_GE(offs[i], offs[i - 1]) << "array " << i;
            }
        }
        EXPECT_EQ(f.seg_outliers(cap, bits) - f.seg_factors(cap, bits), f.factors_bytes(cap));
        EXPECT_GE(f.factors_bytes(cap), 2 * (cap + 128) * 4 * 2);
        EXPECT_GE(f.outliers_bytes(cap), 2 * cap * 3 * 4);
    }
    EXPECT_EQ(f.head_bytes() % 16, 0);
}

TEST(qblock_family, inconsistent_layouts_are_named) {
    auto hack = [](int32_t pi, int32_t cap, bool cscale) {
        qblock_family_layout f;
        f.base = base_layout(128, cap, 0, 2, 2, 128, cscale);
        f.orientation = qblock_family_layout::params::hack;
        f.partition = pi;
        f.code_sums = true;
        return std::string(f.invalid());
    };
    EXPECT_EQ(hack(64, 128, false), "");
    EXPECT_EQ(hack(48, 96, false), "partition must divide head_dim");
    EXPECT_EQ(hack(0, 128, false), "partition must divide head_dim");
    EXPECT_EQ(hack(64, 96, false), "partition must divide each segment's capacity");
    EXPECT_EQ(hack(64, 128, true), "HACK has no channel scales");
    qblock_family_layout f;
    f.base = base_layout(128, 32, 0, 2, 2, 32, false);
    f.code_sums = true;
    EXPECT_EQ(std::string(f.invalid()), "code sums are HACK's (params::hack)");
    f.code_sums = false;
    f.residual_rank = 129;
    EXPECT_EQ(std::string(f.invalid()), "residual_rank and outliers_per_row must be in [0, head_dim]");
}
