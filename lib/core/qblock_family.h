// The quantized block of the whole family (issue 6, item 7): the slot of core/qblock.h, which KIVI and
// ZipCache store today, with the arrays GEAR and HACK add, and the byte accounting of all of them. No
// kernel reads these extensions yet; this header fixes where they go, so that GEAR and HACK come as new
// arrays of the same slot (same pool, page table, allocator and accounting) and not as a new format.
//
// How each method maps onto the slot (digests gear.md §6.2, §9.1 and hack.md §3):
//  - KIVI / ZipCache (params::kivi, no extension): exactly qblock_layout. A segment's per-channel
//    parameters (one min/step per channel over the segment's tokens) quantize the keys, its per-token
//    parameters (one min/step per token and group of `group` channels) the values.
//  - GEAR: KIVI's layout plus, per segment, the quantization residual's low-rank factors (X - deq(X) ~
//    A B^T with A [cap, r] and B [head_dim, r], f16, for K and for V: gear.md §9.1 "low-rank") and
//    outliers_per_row sparse entries per token row of K and of V (the f16 delta x - deq(x) and its u16
//    channel: §9.1 "sparse", delta form, local indices). GEAR's fp16 streaming buffer is the method's fp16
//    window, outside the slot, as KIVI's residual is.
//  - HACK (params::hack): every partition runs along the inner dimension of the product it feeds
//    (hack.md §3.1): keys per token in groups of `partition` channels (q k^T sums over channels) and
//    values per channel over blocks of `partition` tokens (p v sums over tokens). The two parameter
//    arrays trade tensors and keep their shapes: the per-channel array holds the values' parameters,
//    [cap / partition, head_dim], and the per-token array the keys', [cap, head_dim / partition]. Then
//    the code sums of every partition (hack.md §3.2: at most partition (2^b - 1), so u8 up to 255, else
//    u16): keys [cap, head_dim / partition], values [cap / partition, head_dim]. HACK's fp16 open block
//    is the fp16 window.
//
// Segment layout (every array 16-byte aligned; the padding is allocated and counted):
//   chan_min, chan_step   f16 [chan_rows, head_dim]          kivi: keys, chan_rows = 1;
//                                                            hack: values, chan_rows = cap / partition
//   tok_min, tok_step     f16 [cap, head_dim / tok_group]    kivi: values (tok_group = group);
//                                                            hack: keys (tok_group = partition)
//   kcodes, vcodes        u8  [cap, head_dim * bits / 8]
//   (hack) ksums [cap, head_dim / partition], vsums [cap / partition, head_dim]   u8 or u16
//   (gear) k_a, v_a f16 [cap, r]; k_b, v_b f16 [head_dim, r]
//   (gear) k_out_val, v_out_val f16 [cap, n]; k_out_idx, v_out_idx u16 [cap, n]
// With params::kivi and no extension every offset and size equals qblock_layout's, so today's kernels
// read a family slot of that kind as they are.
#pragma once

#include <cstdint>

#include "core/qblock.h"

namespace kvcomp {

struct qblock_family_layout {
    enum class params { kivi, hack };

    qblock_layout base;             // heads, head_dim, segment capacities and bits, v_group, vscale
    params orientation = params::kivi;
    int32_t partition = 0;          // hack: the partition size Pi (divides head_dim and each segment's cap)
    bool code_sums = false;         // hack: the sums of every partition's codes
    int32_t residual_rank = 0;      // gear: r of the residual's factors (0: none)
    int32_t outliers_per_row = 0;   // gear: sparse entries per token row of K and of V (0: none)

    static constexpr int64_t align(int64_t n) { return qblock_layout::align(n); }

    bool hack() const { return orientation == params::hack; }
    int64_t chan_rows(int32_t cap) const { return hack() ? cap / partition : 1; }
    int64_t tok_groups() const { return hack() ? base.head_dim / partition : base.v_groups(); }
    // Bytes of one code sum: a partition's sum of b-bit codes is at most partition * (2^b - 1).
    int64_t sum_bytes(int32_t bits) const { return int64_t(partition) * ((1 << bits) - 1) <= 255 ? 1 : 2; }

    // Offsets of a segment's arrays from the segment start (the first three groups as qblock_layout's).
    int64_t seg_chan_min() const { return 0; }
    int64_t seg_chan_step(int32_t cap) const { return align(chan_rows(cap) * base.head_dim * 2); }
    int64_t seg_tok_min(int32_t cap) const { return 2 * seg_chan_step(cap); }
    int64_t seg_tok_step(int32_t cap) const { return seg_tok_min(cap) + align(cap * tok_groups() * 2); }
    int64_t seg_kcodes(int32_t cap) const { return seg_tok_step(cap) + align(cap * tok_groups() * 2); }
    int64_t seg_vcodes(int32_t cap, int32_t bits) const { return seg_kcodes(cap) + align(cap * base.row_bytes(bits)); }
    int64_t seg_sums(int32_t cap, int32_t bits) const { return seg_vcodes(cap, bits) + align(cap * base.row_bytes(bits)); }
    int64_t sums_bytes(int32_t cap, int32_t bits) const {
        if (!code_sums) return 0;
        return align(cap * (base.head_dim / partition) * sum_bytes(bits)) +
               align(chan_rows(cap) * base.head_dim * sum_bytes(bits));
    }
    int64_t seg_factors(int32_t cap, int32_t bits) const { return seg_sums(cap, bits) + sums_bytes(cap, bits); }
    int64_t factors_bytes(int32_t cap) const {
        if (residual_rank == 0) return 0;
        return 2 * (align(int64_t(cap) * residual_rank * 2) + align(base.head_dim * residual_rank * 2));
    }
    int64_t seg_outliers(int32_t cap, int32_t bits) const { return seg_factors(cap, bits) + factors_bytes(cap); }
    int64_t outliers_bytes(int32_t cap) const {
        return outliers_per_row == 0 ? 0 : 2 * (2 * align(int64_t(cap) * outliers_per_row * 2));
    }
    int64_t seg_bytes(int32_t cap, int32_t bits) const {
        return cap == 0 ? 0 : seg_outliers(cap, bits) + outliers_bytes(cap);
    }

    int64_t head_hi() const { return base.vscale_bytes(); }
    int64_t head_lo() const { return head_hi() + seg_bytes(base.hi_tokens, base.hi_bits); }
    int64_t head_bytes() const { return head_lo() + seg_bytes(base.lo_tokens, base.lo_bits); }
    int64_t slot_bytes() const { return qblock_layout::header_bytes + base.n_kv_heads * head_bytes(); }

    // An empty string when the layout is consistent, else what is wrong (for the methods' option checks).
    const char * invalid() const {
        if (hack()) {
            if (partition <= 0 || base.head_dim % partition != 0) return "partition must divide head_dim";
            if ((base.hi_tokens % partition) != 0 || (base.lo_tokens % partition) != 0)
                return "partition must divide each segment's capacity";
            if (base.channel_scale) return "HACK has no channel scales";
        } else if (code_sums) {
            return "code sums are HACK's (params::hack)";
        }
        if (residual_rank < 0 || residual_rank > base.head_dim || outliers_per_row < 0 ||
            outliers_per_row > base.head_dim)
            return "residual_rank and outliers_per_row must be in [0, head_dim]";
        return "";
    }
};

}  // namespace kvcomp
