// Device side of a low-rank plan (lowrank_layout.h): its tables and bases uploaded once, and the
// load-time folding of the V basis into W_V / b_V and W_O, run with the backend's ops (the 8B model
// folds 32 layers: no host loop touches a weight).
//
// Folding (digest research/zack_fdc.md §1.4, §1.6; weights are [out, in]):
//   W_V'^c = R_v^cT W_V^c        [v_c, hidden]   gemm, A = R_v^cT (f32), B = W_V^c not transposed
//   b_V'^c = R_v^cT b_V^c        [v_c]           head_project of b_V
//   W_O'^h = W_O^h R_v^c(h)      [hidden, v_c]   head_project over the rows of W_O (as f32): in = query
//                                                head h's head_dim columns, out = its packed v_c columns
// stored in the weights' matrix type (biases f32). Then v' = x W_V'^T comes out compressed and
// out' W_O'^T = (P V R_v)(R_v^T W_O^T): the rank-v_c approximation of the layer's output.
//
// On a fold_qk layer (no RoPE; lowrank_layout.h) the K basis goes into W_Q and W_K too (Lemma 1):
//   W_K'^c = R_k^cT W_K^c        [k_c, hidden]       gemm, A = qk_fold's key block
//   W_Q'^h = R_k^c(h)T W_Q^h     [k_c, hidden]       gemm per query head, A = qk_fold's query block,
//                                                    rows packed as q_table's output (g * k_total)
// (with the equalization D of kv_bits=4 on the same sides as the online k_table / q_table), so the
// projection GEMMs give k' and q' directly; the forward skips RoPE there, so nothing is lost. q/k
// biases are refused there (no supported architecture has them on a layer without RoPE).
#pragma once

#include <vector>

#include "engine/kv_method.h"
#include "engine/lowrank_layout.h"
#include "engine/model_weights.h"

namespace kvcomp::engine {

// One layer's arrays on the device (views into the two buffers of lowrank_device).
struct lowrank_device_layer {
    tensor heads, heads_full, q_table, k_table, bv_table, o_table, rec_table;  // i32
    tensor bases, aux;                                                         // f32 (aux: Palu only)
    tensor qk_fold;  // f32, lowrank_layer::qk_fold (invalid unless the layer is fold_qk)
    // Padded prefill (lowrank_layer::pad_bases and its tables; invalid when not built).
    tensor pad_bases, q_pad_table, k_pad_table, v_pad_table, unpad_table;
};

struct lowrank_device {
    buffer_ptr ints, floats;
    std::vector<lowrank_device_layer> layers;
    uint64_t bytes() const { return (ints ? ints->size() : 0) + (floats ? floats->size() : 0); }
};

// Uploads every layer's tables and bases in two transfers.
lowrank_device upload_lowrank_plan(backend & be, const lowrank_plan & plan);

// The folded projections of one layer, owned by the method.
struct folded_layer {
    buffer_ptr w_v, b_v, w_o;  // b_v null when the model has no V bias
    buffer_ptr w_q, w_k;       // fold_qk layers only
    uint64_t bytes = 0;
};

// Folds layer l (see the top of the file). `scratch` is grown as needed and may be reused.
folded_layer fold_layer(backend & be, const host::model_config & cfg, const model_weights & w, int64_t l,
                        const lowrank_layer & plan, const lowrank_device_layer & dev, buffer_ptr & scratch);

// After every fold: waits for the device, then frees the model's v_proj, its bias and o_proj in
// every layer, and q_proj / k_proj in the plan's fold_qk layers (their bytes leave
// w.bytes); the folded ones replace them.
void release_replaced_weights(backend & be, model_weights & w, const lowrank_plan & plan);

// Every layer folded (fold_layer), the replaced weights released, and each layer's projections as
// kv_method::projection describes them: v' [v_total] and the output [g * v_total] always; q' and k'
// from the folded W_Q / W_K on fold_qk layers; k pre-RoPE on the layers where `palu` rebuilds keys.
struct folded_model {
    std::vector<folded_layer> layers;
    std::vector<layer_projection> projections;
    uint64_t bytes = 0;  // the folded weights (not the plan's device arrays)
};
folded_model fold_model(backend & be, const host::model_config & cfg, model_weights & w, const lowrank_plan & plan,
                        const lowrank_device & dev, bool palu);

}  // namespace kvcomp::engine
