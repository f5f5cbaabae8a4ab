// The quantized KV block: one storage format for the quantizing KV methods (KIVI, ZipCache; GEAR's
// residual factors and outliers and HACK's code sums are further arrays of each segment of the same
// block, and HACK trades which tensor each parameter array quantizes: core/qblock_family.h, with their
// byte accounting).
//
// A block holds up to hi_tokens + lo_tokens tokens of one request in one layer, for every KV head,
// split into two precision segments: "hi" (hi_bits per element, ZipCache's salient tokens) and
// "lo" (lo_bits, the regular tokens). KIVI uses a single segment (lo_tokens = 0). Blocks live in
// fixed-size slots of a byte pool, so a page table of slot numbers addresses them like fp16 pages.
// Attention does not need token order (keys are stored after RoPE; softmax is permutation
// invariant), so a segment stores its tokens in any order and no position index is kept.
//
// Slot layout (every array starts on a 16-byte boundary; the padding is allocated and counted):
//   header: i32 n_hi, i32 n_lo, i32 0, i32 0             tokens actually stored in each segment
//   per KV head h, at header_bytes + h * head_bytes():
//     vscale f16 [head_dim]                              only when channel_scale (ZipCache CST)
//     segment hi, then segment lo, each:
//       kmin, kstep  f16 [head_dim]                      keys: per channel over the segment's tokens
//       vmin, vstep  f16 [cap, head_dim / v_group]       values: per token and channel group
//       kcodes, vcodes u8 [cap, head_dim * bits / 8]     token rows; channel c at bit c*bits of the row
//                                                        (little-endian within each byte)
//
// Quantizer (identical on every backend; fp32 arithmetic, IEEE division and sqrt, rint = round half
// to even; f16() rounds to nearest even and saturates at +-65504):
//   keys, per segment and channel c:   mn, mx = min, max of k[t,c] over the segment's tokens
//       kmin = f16(mn), kstep = f16((mx - mn) / (2^bits - 1))
//       code = kstep == 0 ? 0 : clamp(rint((k - kmin) / kstep), 0, 2^bits - 1),  k^ = code * kstep + kmin
//   values: when channel_scale, per channel over all tokens of the block (both segments):
//       vscale = f16(sqrt(max |v[t,c]|)), 1 when that is 0;  w = v / vscale  (else w = v, no vscale stored)
//     per token and group of v_group channels:  mn, mx = min, max of w over the group
//       vmin = f16(mn), vstep = f16((mx - mn) / (2^bits - 1)), code as for keys,
//       v^ = (code * vstep + vmin) * vscale
//   (kmin, kstep, vmin, vstep, vscale are used as their f16-rounded values in every formula.)
// Unused capacity (rows beyond n_hi / n_lo) is written as zeros, so slots are byte-identical
// across backends.
#pragma once

#include <cstdint>

namespace kvcomp {

struct qblock_layout {
    int64_t n_kv_heads = 0, head_dim = 0;
    int32_t hi_tokens = 0, lo_tokens = 0;  // segment capacities (tokens)
    int32_t hi_bits = 4, lo_bits = 2;      // 2, 4 or 8
    int32_t v_group = 0;                   // channels per value group (head_dim: one group per token)
    bool channel_scale = false;            // ZipCache's channel-separable values (vscale present)

    static constexpr int64_t header_bytes = 16;
    static constexpr int64_t align(int64_t n) { return (n + 15) / 16 * 16; }

    int64_t v_groups() const { return v_group > 0 ? head_dim / v_group : 0; }
    int64_t row_bytes(int32_t bits) const { return head_dim * bits / 8; }
    int64_t vscale_bytes() const { return channel_scale ? align(head_dim * 2) : 0; }

    // Offsets of a segment's arrays from the segment start.
    int64_t seg_kmin() const { return 0; }
    int64_t seg_kstep() const { return align(head_dim * 2); }
    int64_t seg_vmin() const { return 2 * align(head_dim * 2); }
    int64_t seg_vstep(int32_t cap) const { return seg_vmin() + align(cap * v_groups() * 2); }
    int64_t seg_kcodes(int32_t cap) const { return seg_vstep(cap) + align(cap * v_groups() * 2); }
    int64_t seg_vcodes(int32_t cap, int32_t bits) const { return seg_kcodes(cap) + align(cap * row_bytes(bits)); }
    int64_t seg_bytes(int32_t cap, int32_t bits) const {
        return cap == 0 ? 0 : seg_vcodes(cap, bits) + align(cap * row_bytes(bits));
    }

    // Offsets of a head's segments from the head start, and of a head from the slot start.
    int64_t head_hi() const { return vscale_bytes(); }
    int64_t head_lo() const { return head_hi() + seg_bytes(hi_tokens, hi_bits); }
    int64_t head_bytes() const { return head_lo() + seg_bytes(lo_tokens, lo_bits); }
    int64_t head_offset(int64_t h) const { return header_bytes + h * head_bytes(); }
    int64_t slot_bytes() const { return header_bytes + n_kv_heads * head_bytes(); }
    int32_t block_tokens() const { return hi_tokens + lo_tokens; }
};

}  // namespace kvcomp
