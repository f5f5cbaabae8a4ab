// Decode task lists for the ragged decode ops (attn_decode_ragged, attn_decode_palu; contract in
// lib/core/op.h, "Decode task list") and the ragged heads table.
//
// A task is (request b, KV head c, tokens [first, end)); a work-group runs one task for all g query
// heads of c, writes a partial (or the output when it is the only task of (b, c)), and the merge
// table says which tasks make up each (b, c). Two policies:
//   plain     what the fp16 decode kernels do: every (b, c) cut into chunks of one common length
//             chosen from the longest request so that about waves * n_workers tasks exist, chunks
//             no shorter than min_chunk_tokens; tasks in natural order (b, c, chunk).
//   balanced  ZACK/FDC §5.3: a task costs s_kv * (k_width + v_width + 1) (balance_scheduler.h; the 1
//             is decode_schedule_options::token_cost);
//             candidate cuts give every (b, c) chunks of about the same COST, total / (w *
//             n_workers) for w in 1..waves (chunk counts rounded to nearest and up, chunks no
//             shorter than min_chunk_tokens), plus the plain cut (it wins when equal token chunks
//             already fill the waves evenly); the candidate with the smallest LPT makespan (every
//             task also costing decode_schedule_options::task_cost) is kept (ties: fewer tasks)
//             and its rows are put in descending cost. A GPU hands the
//             next work-group to the first free compute unit, so descending order is LPT list
//             scheduling. With tail_percent, each row's last tokens become small pieces after every
//             full chunk (decode_schedule_options::tail_percent).
// Both cover each request's tokens exactly once per KV head; empty requests get no tasks (zeros).
// A decoding engine calls this every step for lengths that grew by one token: the balanced search
// (9 LPT schedules of every candidate cut) costs ~0.3 ms of host time per layer of distinct widths at
// batch 16 (about 10 ms per step for 32 such layers on a 2-core EPYC machine), so the engine keeps
// each (request, KV head)'s chunk count (decode_schedule::parts) and re-cuts the new lengths into
// the same counts (schedule_with_parts) until a length moved by more than a sixteenth.
#pragma once

#include <cstdint>
#include <vector>

namespace kvcomp::host::lowrank {

// heads i32 [n_kv_heads, 4] = (k_width, k_offset, v_width, v_offset), offsets the prefix sums.
// Throws invalid_argument for an empty list, lists of different lengths, or a width outside
// [1, max_width] (max_width <= kvcomp::max_ragged_width, core/op.h).
std::vector<int32_t> ragged_heads_table(const std::vector<int64_t> & k_widths,
                                        const std::vector<int64_t> & v_widths, int64_t max_width = 256);

enum class decode_policy { plain, balanced };
const char * policy_name(decode_policy p);

struct decode_schedule_options {
    decode_policy policy = decode_policy::balanced;
    int64_t n_workers = 1;           // compute units (SMs / CUs) of the device
    int64_t waves = 4;               // at most this many waves of n_workers tasks
    int64_t min_chunk_tokens = 256;  // below this a partial write + merge costs more than it saves
    // A token's cost beside its channels: tasks cost s_kv * (k_width + v_width + token_cost). ZACK /
    // FDC §5.3 count 1 (the softmax); a kernel whose per-token work outweighs a channel's balances
    // better with a larger value (default_token_cost). In [0, 2^20].
    int64_t token_cost = 1;
    // A task's own cost, in the same units, whatever its length: its start (the task, q and the first
    // page-table entries loaded before its first pages arrive) and its partial's write and merge. The
    // search's LPT makespans count it once per task, so it weighs more waves of smaller tasks against
    // their better-balanced tail; 0 leaves the choice to the tail alone. In [0, 2^30].
    int64_t task_cost = 0;
    // Balanced: the share of each (request, KV head)'s tokens, in percent, cut off the end of its chunks
    // into pieces of about a quarter chunk that follow every full chunk in the list (none for a row
    // whose pieces would cost less than 32768: their starts outweigh what they even out). A GPU hands
    // them to the compute units that finish first: its SMs do not stream at one rate (CUDA on an H200:
    // the fastest SM's mean block time 0.70-0.83 x the slowest's, the same SMs fastest call after call;
    // docs/RESULTS.md "block by block"), which no static cut sees. 0 (default): none. In [0, 50].
    int64_t tail_percent = 0;
    bool stats = true;  // fill the makespan fields (three more list schedules; tests and benches)
};

struct decode_schedule {
    std::vector<int32_t> schedule;  // i32 [n_tasks, 4] (request, KV head, first, end)
    std::vector<int32_t> merge;     // i32 [batch * n_kv_heads + 1 + n_tasks]
    int64_t n_tasks = 0;
    std::vector<int64_t> costs;  // per schedule row, s_kv * (k_width + v_width + token_cost)
    std::vector<int64_t> parts;  // full chunks per (request, KV head), [batch * n_kv_heads] (b-major; tail pieces not counted)
    // Predicted makespans in cost units on n_workers (each row's cost plus task_cost): the list
    // schedule of the rows in their order (what GPU dispatch does), LPT of the same tasks
    // (schedule_lpt) and the lower bound.
    int64_t dispatch_makespan = 0, lpt_makespan = 0, lower_bound = 0;
};

// The engine's token_cost for pages of `page_bits` (16: f16, 4: core/ragged_q4.h rows): 1 for f16 pages
// (ZACK / FDC's cost); 64 for 4-bit pages, whose rows cost little per channel next to a row's
// parameters, softmax and addressing: on the CUDA tensor-core decode (H200, docs/RESULTS.md "per-token
// cost") 64 was 5-13 % faster than 1 at batch 16 from 32K, and f16 pages showed no clear gain either way.
int64_t default_token_cost(int64_t page_bits);

// Builds the task list for requests of seq_lens tokens and KV heads of the given widths.
// Throws invalid_argument for negative lengths, bad widths, n_workers/waves/min_chunk_tokens < 1,
// or sizes that do not fit the contract's i32 arrays.
decode_schedule build_decode_schedule(const std::vector<int64_t> & seq_lens,
                                      const std::vector<int64_t> & k_widths,
                                      const std::vector<int64_t> & v_widths,
                                      const decode_schedule_options & opt);

// The schedule that cuts request b's tokens into parts[b * n_kv_heads + c] equal chunks for KV head
// c (a previous schedule's parts, for slightly longer requests; counts above the length shrink to
// it), ordered as opt.policy orders its rows, with the same tables and validation. No search.
decode_schedule schedule_with_parts(const std::vector<int64_t> & seq_lens, const std::vector<int64_t> & k_widths,
                                    const std::vector<int64_t> & v_widths, const std::vector<int64_t> & parts,
                                    const decode_schedule_options & opt);

// Whether a schedule built for lengths `built` may be re-cut for `now` (schedule_with_parts): the
// same requests, none shorter, none more than max(16, built / 16) tokens longer.
bool schedule_cut_reusable(const std::vector<int64_t> & built, const std::vector<int64_t> & now);

}  // namespace kvcomp::host::lowrank
