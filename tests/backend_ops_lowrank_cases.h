// Test cases of the low-rank KV ops (head_project, kv_append_ragged, attn_decode_ragged,
// attn_prefill_ragged, attn_decode_palu; contracts in lib/core/op.h "Low-rank KV"). Internal to
// tests/ and bench/, like backend_ops_cases_impl.h. These validate the OpenCL and CUDA kernels
// against the CPU reference.
#pragma once

#include "backend_ops_cases.h"
#include "host/lowrank/decode_schedule.h"

namespace kvcomp::test {

// Shape of a ragged case: per-KV-head widths, GQA group, pages and requests.
struct ragged_spec {
    std::vector<int64_t> k_widths, v_widths;  // per KV head (Palu: k_widths are the latent widths)
    int64_t group = 4;                        // query heads per KV head
    int64_t page_size = 16;
    std::vector<int64_t> lens;  // decode: tokens per request (0 allowed); prefill: prompt lengths
    host::lowrank::decode_policy policy = host::lowrank::decode_policy::balanced;
    int64_t workers = 132;         // compute units the decode schedule is built for
    bool balanced_prefill = true;  // attn_prefill_ragged
    // Palu: full head dim, rotary dims and pairing.
    int64_t head_dim = 128, rot_dim = 128;
    rope_style style = rope_style::neox;
    int64_t extra_pages = 3;
    int bits = 16;  // kv_append_ragged / attn_decode_ragged pages: 16 (f16) or 4 (core/ragged_q4.h)
    // The decode schedule's shortest task (decode_schedule_options): small ones give many tasks per row.
    int64_t min_chunk_tokens = 256;
    int64_t waves = 4;  // the balanced search's largest wave count (decode_schedule_options::waves)
    int64_t token_cost = 1;  // the balanced schedule's per-token cost (decode_schedule_options)
    int64_t task_cost = 0;   // ... and its per-task cost
    int64_t tail_percent = 0;  // ... and its tail (decode_schedule_options::tail_percent)
    // Keys of token j of a request of n tokens scaled by 1 + key_ramp * j / n: scores that keep
    // growing along the sequence, so a decode's running max moves in later tiles and tasks too (with
    // unscaled normal keys it settles in the first tile; the CUDA tensor-core softmax moves it only
    // when a score passes it by 2^8, decode_mma.cuh).
    double key_ramp = 0.0;
    // The layout's width hints (ragged_layout::max_k_width / max_v_width): -1 the spec's widest K and
    // V heads, as the engine gives them; else this value for both, e.g. a wrong one (it may cost
    // speed, never correctness: CUDA then stages a pair that does not fit 16 rows in 8-row tiles).
    int64_t width_hint = -1;
    bool shuffle_pages = true;  // build_page_table's shuffle (decode cases)
};

// attn_decode_ragged (palu = false) or attn_decode_palu over the spec's requests (bench_ops sweeps).
case_ptr make_ragged_decode_case(const ragged_spec & s, bool palu);
// attn_prefill_ragged over the spec's prompts (bench_ops prefill rows).
case_ptr make_attn_prefill_ragged_case(const ragged_spec & s);

// The case lists' entries for these ops (called from backend_ops_list.cpp).
void add_lowrank_cases(std::vector<case_ptr> & out, case_set set);

}  // namespace kvcomp::test
