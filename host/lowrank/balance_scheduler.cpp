// LPT decode scheduling and prefill row-block scaling. See balance_scheduler.h.
#include "host/lowrank/balance_scheduler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <queue>

#include "core/error.h"

namespace kvcomp::host::lowrank {

int64_t decode_task_cost(int64_t s_kv, int64_t d_qk, int64_t d_v) {
    KVCOMP_CHECK_ARG(s_kv >= 0 && d_qk >= 1 && d_v >= 1, "decode_task_cost(s_kv=", s_kv, ", d_qk=", d_qk,
                     ", d_v=", d_v, "): needs s_kv >= 0 and dims >= 1");
    KVCOMP_CHECK_ARG(
        d_qk <= std::numeric_limits<int32_t>::max() && d_v <= std::numeric_limits<int32_t>::max(),
        "decode_task_cost(s_kv=", s_kv, ", d_qk=", d_qk, ", d_v=", d_v, "): dims too large");
    const int64_t d_sum = d_qk + d_v + 1;
    KVCOMP_CHECK_ARG(s_kv <= std::numeric_limits<int64_t>::max() / d_sum, "decode_task_cost(s_kv=", s_kv,
                     ", d_qk=", d_qk, ", d_v=", d_v, "): cost overflows int64");
    return s_kv * d_sum;
}

lpt_schedule schedule_lpt(const std::vector<int64_t> & costs, int64_t num_units) {
    KVCOMP_CHECK_ARG(num_units >= 1, "schedule_lpt: num_units = ", num_units, " must be >= 1");
    for (size_t i = 0; i < costs.size(); ++i)
        KVCOMP_CHECK_ARG(costs[i] >= 0, "schedule_lpt: cost of task ", i, " is ", costs[i],
                         " (must be >= 0)");

    std::vector<size_t> order(costs.size());
    std::iota(order.begin(), order.end(), size_t(0));
    // Stable: equal costs keep input order, so plans are reproducible.
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return costs[a] > costs[b]; });

    lpt_schedule out;
    out.units.resize(size_t(num_units));
    // Min-heap on (load, unit index): the lowest index breaks load ties.
    using slot = std::pair<int64_t, int64_t>;
    std::priority_queue<slot, std::vector<slot>, std::greater<slot>> heap;
    for (int64_t u = 0; u < num_units; ++u) heap.push({0, u});
    for (size_t t : order) {
        const slot s = heap.top();
        heap.pop();
        KVCOMP_CHECK_ARG(s.first <= std::numeric_limits<int64_t>::max() - costs[t],
                         "schedule_lpt: the load of unit ", s.second, " overflows int64");
        unit_plan & u = out.units[size_t(s.second)];
        u.tasks.push_back(t);
        u.load = s.first + costs[t];
        heap.push({u.load, s.second});
        out.makespan = std::max(out.makespan, u.load);
    }
    return out;
}

lpt_schedule schedule_decode(const std::vector<decode_task> & tasks, int64_t num_units) {
    std::vector<int64_t> costs;
    costs.reserve(tasks.size());
    for (const decode_task & t : tasks) costs.push_back(decode_task_cost(t.s_kv, t.d_qk, t.d_v));
    return schedule_lpt(costs, num_units);
}

int64_t makespan_lower_bound(const std::vector<int64_t> & costs, int64_t num_units) {
    KVCOMP_CHECK_ARG(num_units >= 1, "makespan_lower_bound: num_units = ", num_units, " must be >= 1");
    int64_t total = 0, largest = 0;
    for (int64_t c : costs) {
        KVCOMP_CHECK_ARG(c >= 0 && total <= std::numeric_limits<int64_t>::max() - c,
                         "makespan_lower_bound: bad cost ", c, " or total overflow");
        total += c;
        largest = std::max(largest, c);
    }
    return std::max(largest, (total + num_units - 1) / num_units);
}

double prefill_row_scale(int64_t d_sum_head, int64_t d_sum_max) {
    KVCOMP_CHECK_ARG(d_sum_head >= 1 && d_sum_max >= d_sum_head, "prefill_row_scale(d_sum_head=", d_sum_head,
                     ", d_sum_max=", d_sum_max, "): needs 1 <= d_sum_head <= d_sum_max");
    return double(d_sum_max) / double(d_sum_head);
}

std::vector<int64_t> prefill_row_blocks(const std::vector<head_dims> & heads, int64_t base_rows,
                                        int64_t quantum) {
    KVCOMP_CHECK_ARG(!heads.empty(), "prefill_row_blocks: no heads");
    KVCOMP_CHECK_ARG(base_rows >= 1 && quantum >= 1, "prefill_row_blocks: base_rows = ", base_rows,
                     " and quantum = ", quantum, " must be >= 1");
    int64_t d_max = 0;
    for (size_t h = 0; h < heads.size(); ++h) {
        KVCOMP_CHECK_ARG(heads[h].d_qk >= 1 && heads[h].d_v >= 1, "prefill_row_blocks: head ", h,
                         " has d_qk = ", heads[h].d_qk, ", d_v = ", heads[h].d_v, " (must be >= 1)");
        d_max = std::max(d_max, heads[h].d_sum());
    }
    std::vector<int64_t> rows;
    rows.reserve(heads.size());
    for (const head_dims & h : heads) {
        const double ideal = double(base_rows) * prefill_row_scale(h.d_sum(), d_max);
        const int64_t q = int64_t(std::floor(ideal / double(quantum) + 0.5));
        rows.push_back(std::max<int64_t>(q, 1) * quantum);
    }
    return rows;
}

}  // namespace kvcomp::host::lowrank
