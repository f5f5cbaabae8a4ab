// Load balancing for attention with per-head dims (ZACK §5.3 / FDC §5.3; digest §3, §9.12).
//
// With per-head ranks the work of a head is no longer uniform: a decode task (request, head) reads
// s_kv keys of d_qk dims, does the softmax, and reads s_kv values of d_v dims, so its cost is
// s_kv * (d_qk + d_v + 1) ("d_sum"). The decode scheduler assigns such tasks to N compute units
// (SMs / compute units of one device) with the LPT rule: sort by cost descending, give each task to
// the currently least-loaded unit. LPT's makespan is at most (4/3 - 1/(3N)) times the optimum.
//
// Determinism: equal costs keep their input order (stable sort), and among equally loaded units the
// lowest index wins, so the same tasks always give the same plan — the host plan and a device-side
// version of it can be compared exactly.
//
// Prefill (digest §3): a head's Q row block is scaled by d_sum^max / d_sum^h so every row-block task
// does about the same work; prefill_row_blocks rounds that to the tile quantum.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace kvcomp::host::lowrank {

// Cost of one decode task in multiply-adds per query row (up to a constant factor): s_kv * (d_qk +
// d_v + 1). Throws invalid_argument for a negative s_kv or non-positive dims, or on int64 overflow.
int64_t decode_task_cost(int64_t s_kv, int64_t d_qk, int64_t d_v);

struct decode_task {
    int64_t request = 0;
    int64_t head = 0;  // the KV head (one task reads its K'/V' once for the GQA group, §10.8)
    int64_t s_kv = 0;
    int64_t d_qk = 0;
    int64_t d_v = 0;
};

struct unit_plan {
    std::vector<size_t> tasks;  // indices into the input task list, in assignment order
    int64_t load = 0;           // sum of their costs
};

struct lpt_schedule {
    std::vector<unit_plan> units;  // one per compute unit
    int64_t makespan = 0;          // the largest unit load
};

// LPT over plain costs (each >= 0); num_units >= 1. Throws invalid_argument otherwise.
lpt_schedule schedule_lpt(const std::vector<int64_t> & costs, int64_t num_units);

// LPT over decode tasks, costed with decode_task_cost. Tasks with s_kv = 0 cost 0 and are still
// assigned (every task is run exactly once).
lpt_schedule schedule_decode(const std::vector<decode_task> & tasks, int64_t num_units);

// A lower bound on any schedule's makespan: max(largest cost, ceil(total / num_units)).
int64_t makespan_lower_bound(const std::vector<int64_t> & costs, int64_t num_units);

// Prefill row-block scale of a head: d_sum^max / d_sum^h (>= 1), with d_sum = d_qk + d_v + 1.
double prefill_row_scale(int64_t d_sum_head, int64_t d_sum_max);

struct head_dims {
    int64_t d_qk = 0;
    int64_t d_v = 0;
    int64_t d_sum() const { return d_qk + d_v + 1; }
};

// Per head: base_rows * d_sum^max / d_sum^h rounded to the nearest multiple of `quantum` (halves
// round up), at least `quantum`. The head with the largest d_sum gets base_rows rounded the same way.
// Nearest rather than up keeps every head's task work within quantum/2 rows of the ideal.
// Throws invalid_argument for an empty list, dims < 1, base_rows < 1 or quantum < 1.
std::vector<int64_t> prefill_row_blocks(const std::vector<head_dims> & heads, int64_t base_rows = 64,
                                        int64_t quantum = 16);

}  // namespace kvcomp::host::lowrank
