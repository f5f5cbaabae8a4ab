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
#pragma once

#include <vector>

#include "engine/lowrank_layout.h"
#include "engine/model_weights.h"

namespace kvcomp::engine {

// One layer's arrays on the device (views into the two buffers of lowrank_device).
struct lowrank_device_layer {
    tensor heads, heads_full, q_table, k_table, bv_table, o_table, rec_table;  // i32
    tensor bases, aux;                                                         // f32 (aux: Palu only)
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
    uint64_t bytes = 0;
};

// Folds layer l (see the top of the file). `scratch` is grown as needed and may be reused.
folded_layer fold_layer(backend & be, const host::model_config & cfg, const model_weights & w, int64_t l,
                        const lowrank_layer & plan, const lowrank_device_layer & dev, buffer_ptr & scratch);

// After every fold: waits for the device, then frees the model's v_proj, its bias and o_proj in
// every layer (their bytes leave w.bytes); the folded ones replace them.
void release_replaced_weights(backend & be, model_weights & w);

}  // namespace kvcomp::engine
