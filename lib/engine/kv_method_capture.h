// Calibration capture (kvcomp calibrate; digest research/zack_fdc.md §8.1 steps 2-3): the KV method
// "none" (same cache, same ops, same logits) that also downloads, at every attend(), the q/k/v the
// engine hands it and accumulates per (layer, KV head) Gram matrices on the host, in double:
//   qk[l * n_kv_heads + c] = sum over tokens of X^T X, X = [Q_p^{h} for the g query heads h of
//                            group c (h = c*g .. c*g+g-1); K_p^c]  (post-RoPE, §10.8: one basis per
//                            KV head shared by its GQA group; on a layer without RoPE the forward
//                            hands q and k over as projected, the q and k the folded W_Q / W_K see)
//   v [l * n_kv_heads + c] = sum over tokens of V^{cT} V^c      (only when with_v; ZACK adds W_O)
// Every step is captured (prefill and decode); kvcomp calibrate only prefills.
//
// Not in the registry: users never select it by name. The caller builds it with
// make_kv_method_capture and hands it to the engine through engine_config::method_factory, keeping
// a shared_ptr to the grams to read them after the run. Calibration only: the downloads make every
// layer wait for the device.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "engine/kv_method.h"
#include "host/lowrank/svd_basis.h"

namespace kvcomp::engine {

struct capture_grams {
    bool with_v = false;  // set by the caller before the engine allocates the method
    // Filled by allocate() from the model's shape:
    int64_t n_layers = 0, n_q_heads = 0, n_kv_heads = 0, head_dim = 0;
    std::vector<host::lowrank::gram_accumulator> qk;  // [layer * n_kv_heads + kv_head], head_dim^2
    std::vector<host::lowrank::gram_accumulator> v;   // same index; empty unless with_v
    int64_t tokens = 0;                                // tokens captured (counted at layer 0)
};

std::unique_ptr<kv_method> make_kv_method_capture(std::shared_ptr<capture_grams> grams);

}  // namespace kvcomp::engine
