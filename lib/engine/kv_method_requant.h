// ZipCache's "re-quantize everything" recompression (zipcache recompress=all; digest zipcache.md
// §5 "Official code" and §9 A9): when a request's fp16 window fills, every token the request holds
// is re-ranked and re-quantized, as the authors' code re-runs its compression over the whole cache
// ("repeats the compression process", paper §5.1), instead of appending the window as new blocks
// (recompress=append, kv_method_quant.cpp, the default).
//
// At a flush of request r (tokens: N_old quantized in its blocks, W in its window; the blocks hold
// the fill layout of N_old tokens, see block_counts()), per layer:
//   1. kv_dequantize of r's blocks into an f32 workspace, head-major rows of G = block tokens
//      ([rows, n_kv_heads, G, head_dim], row_tokens = G); the window (W == G tokens in its pages,
//      window_pages.h) is gathered (converted) into the next row;
//   2. saliency (ratio strictly between 0 and 1): probe_scores of the window's probe queries (with
//      their full-row log-denominators from attn_decode_quant, as the append flush) over ALL of
//      those tokens. Old tokens get key position 0, so every probe sees them and their nnz is the
//      probe count; window tokens keep their positions (causal within the window). Padding rows of
//      partly filled blocks get position INT32_MAX (masked, never ranked);
//   3. the top `ratio` of the N = N_old + W tokens per KV head go to the hi segments, the rest to the
//      lo segments (without saliency: the tokens in workspace order), all parameters recomputed
//      (keys per channel, CST vscale, value steps); kv_quantize writes blocks_for(N) blocks: r's old
//      slots first, then new ones. Tokens are regrouped freely (attention is permutation invariant
//      and qblock keeps no positions).
// One score download per layer (for every request that flushes in the step): a flush synchronizes
// n_layers times, where the append flush does once; flushes happen once per block of decode tokens.
//
// Re-rounding old tokens drifts: keys are re-quantized from values on their old grid, so a key
// group whose membership is unchanged reproduces its codes (T5), but regrouping and CST's changing
// vscale move values by up to a quantization step per recompression (measured:
// tools/report/measure_requant_drift.sh, docs/data/requant_drift.csv).
//
// Workspace (not KV state, so not in bytes_allocated): K and V f32 [rows, n_kv_heads, G, head_dim]
// with rows = sum over the flushing requests of (blocks + 1), grown on demand and kept for reuse
// (8 * n_kv_heads * head_dim bytes per token held by the flushing requests).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "core/backend.h"
#include "core/qblock.h"
#include "engine/kv_method.h"
#include "engine/window_pages.h"

namespace kvcomp::engine {

// The quantized method's device state the flush reads and writes (owned by kv_method_quant.cpp).
struct requant_state {
    const qblock_layout & q;
    const kv_shape & shape;
    int32_t window = 0;     // tokens per window (== q.block_tokens())
    double ratio = 0.0;     // salient fraction
    bool saliency = false;  // rank by probe attention (0 < ratio < 1)
    int32_t probe_cap = 0;  // probe rows per window row in probe_q / probe_lse
    int64_t n_slots = 0;
    const std::vector<buffer_ptr> & pool;                     // per layer: u8 [n_slots * slot_bytes]
    const window_pool_shape & win;                            // the window pages of win_k / win_v
    const std::vector<buffer_ptr> &win_k, &win_v;             // per layer: f16 window pages
    const std::vector<buffer_ptr> &probe_q, &probe_lse;       // per layer (saliency): f32 rows per window row
    std::function<std::vector<int32_t>(int64_t)> take_slots;  // n new slots (throws when the pool is full)
};

// One request whose window is full.
struct requant_request {
    std::vector<int32_t> * slots;  // its blocks, in order; grown with the new ones
    int32_t row = 0;               // its window row
    int32_t win_start = 0;         // position of its window's first token = tokens in its blocks
    const std::vector<int32_t> * probe_pos = nullptr;  // positions of its window's probe steps
    const std::vector<int32_t> * win_pages = nullptr;  // its window's pages, in slot order
};

// Tokens per block of the fill layout of n tokens at `ratio` (hi and lo segments fill in parallel,
// as the prefill lays out a prompt): (n_hi, n_lo) of each block, blocks_for(n) of them.
std::vector<std::pair<int32_t, int32_t>> block_counts(const qblock_layout & q, double ratio, int64_t n);

class requantizer {
  public:
    // Re-quantizes every listed request (blocks + full window) into its blocks, as above. The
    // caller empties the windows afterwards.
    void flush(backend & be, const requant_state & st, const std::vector<requant_request> & reqs);

  private:
    buffer_ptr ws_k_, ws_v_, tables_, plan_, scores_;
};

}  // namespace kvcomp::engine
