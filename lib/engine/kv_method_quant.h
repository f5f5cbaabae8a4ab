// The quantizing KV methods ("kivi", "zipcache"): tokens are stored as quantized blocks
// (core/qblock.h) in fixed-size slots of a per-layer byte pool, plus a per-request fp16 window of
// the most recent tokens; decode attention reads both (attn_decode_quant) without an fp16 copy of
// the cache. What differs between the methods is which tokens go to which precision and when.
//
// Storage per layer: pool u8 [n_slots, slot_bytes]; window K and V in pages of the engine's page
// size, f16 [max_requests * ceil(window / page), n_kv_heads, page, head_dim] (window_pages.h): a
// request takes a page when its window reaches it and returns them all when the window is flushed.
// A request's slots and window pages hold the same numbers in every layer (one host allocation each).
//
// Flow:
//  - prefill: the prompt attends to its exact K/V (as with "none"); then, per layer, the prompt's
//    tokens are quantized: all of them (zipcache) or all but the last (L mod window) tokens, which
//    go to the window (kivi, whose window is KIVI's fp16 residual). With saliency (zipcache) the
//    prompt's probe rows (probe_scores) rank the tokens per KV head; the top `ratio` go to the
//    high-bit segments of the blocks, the rest to the low-bit ones, each in position order. One
//    ragged probe_scores call per layer serves every prompt of the step (the layer's K/V are
//    transient, so its blocks are quantized before the next layer runs); the select_salient op
//    ranks on the device from its sums, so a layer does not wait for the device. Where the
//    backend lacks that op (OpenCL without fp64) or select_on_device is off, the sums are
//    downloaded once per layer and ranked on the host (host/quant/saliency.h), with the same
//    result. The step's index tables (plan, probes, counts) are uploaded once per step.
//  - decode: the token is appended to the window, attention runs over blocks + window; when the
//    window holds `window` tokens (after the step) it is quantized into window / block blocks
//    (zipcache: ranked by the probe queries of the window's own decode steps: its last
//    `decode_probe_recent` steps plus each step with probability `decode_probe_p`, normalized by
//    the full-row denominators the attention returned) and emptied. Old blocks are never
//    re-quantized (append-only; no drift), unless recompress_all (kv_method_requant.h: the
//    request's blocks and window are re-ranked and re-quantized together). All windows that fill
//    in a step flush together: one ragged probe_scores call per layer over the window pool, one
//    download for all layers, one kv_quantize per layer.
//
// Accounting: bytes_held(seq) = its slots x slot_bytes + its window pages, K and V, every layer;
// bytes_for_tokens(t) = what a request holds right after a prefill of t tokens (no decode window
// for zipcache; kivi's residual pages when t mod window > 0); bytes_allocated = pools + window
// pages (+ zipcache's buffers of decode probe queries and their log-denominators, kept until a flush).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/qblock.h"
#include "engine/kv_method.h"
#include "host/quant/saliency.h"

namespace kvcomp::engine {

struct quant_method_config {
    std::string name;                 // "kivi" or "zipcache"
    int32_t block = 32;               // tokens per block (G)
    int32_t window = 32;              // fp16 tokens before a flush; a multiple of block
    int32_t hi_bits = 2, lo_bits = 2;
    double ratio = 1.0;               // fraction of a block's tokens at hi_bits (1: one segment)
    int32_t v_group = 32;             // 0: head_dim (one value group per token)
    bool channel_scale = false;       // ZipCache's channel-separable value quantization
    bool quantize_whole_prompt = false;  // zipcache: the prompt leaves no fp16 window
    bool saliency = false;            // rank tokens by probe attention (zipcache)
    double probe_recent = 0.05, probe_random = 0.05;
    int32_t decode_probe_recent = 5;
    double decode_probe_p = 0.05;
    host::quant::nnz_mode nnz = host::quant::nnz_mode::probe;
    bool select_on_device = true;  // prefill ranking by the select_salient op where the backend has it
    uint64_t seed = 0;
    bool recompress_all = false;      // zipcache recompress=all: flushes re-quantize every token (kv_method_requant.h)
};

std::unique_ptr<kv_method> make_quant_method(const quant_method_config & cfg);

}  // namespace kvcomp::engine
