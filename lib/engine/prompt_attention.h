// Prefill attention shared by the KV methods: the prompt attends to its own K/V (causal, per
// request), converted to fp16 like the uncompressed cache stores them. Methods that compress the
// cache still compute prefill on the exact prompt K/V (the papers' convention).
#pragma once

#include "engine/kv_method.h"

namespace kvcomp::engine {

// q f32 [n_tokens, n_q_heads, head_dim]; k, v f32 [n_tokens, n_kv_heads, head_dim]; out like q.
// `scratch` is grown as needed to hold the fp16 copies of k and v. When `lse` (f32 [n_tokens,
// n_q_heads]) is given and the backend can write it, it receives every row's log-denominator
// (attn_prefill's dst1) and true is returned; otherwise false (lse untouched).
bool attend_prompt(backend & be, buffer_ptr & scratch, const kv_shape & shape, const kv_step & s, const tensor & q,
                   const tensor & k, const tensor & v, const tensor & out, float scale, const tensor & lse = tensor{});

}  // namespace kvcomp::engine
