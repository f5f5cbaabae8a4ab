// Decode task lists (plain / balanced) and the ragged heads table. See decode_schedule.h.
#include "host/lowrank/decode_schedule.h"

#include <algorithm>
#include <limits>
#include <numeric>
#include <queue>

#include "core/error.h"
#include "host/lowrank/balance_scheduler.h"

namespace kvcomp::host::lowrank {

namespace {

constexpr int64_t i32_max = std::numeric_limits<int32_t>::max();
// The least cost of a tail piece (decode_schedule_options::tail_percent). CUDA on an H200 (f16 pages,
// docs/data/bench_ops_tail_h200.csv): with a 10 % tail, pieces of ~16K cost (1 x 32K, half ranks)
// took 1.05 x the time of no tail, pieces of 38K-341K 0.95-1.00 x.
constexpr int64_t kMinTailPieceCost = 32768;

struct task {
    int64_t b, c, first, end, cost;
    bool tail = false;  // a piece of the row's tail (decode_schedule_options::tail_percent)
};

// Cuts [0, n) into `parts` ranges whose lengths differ by at most one (longer ones first).
void cut_equal(int64_t b, int64_t c, int64_t n, int64_t parts, int64_t d_sum, std::vector<task> & out) {
    int64_t first = 0;
    for (int64_t i = 0; i < parts; ++i) {
        const int64_t len = n / parts + (i < n % parts ? 1 : 0);
        out.push_back({b, c, first, first + len, len * d_sum});
        first += len;
    }
}

// Cuts [0, n) into `parts` equal chunks, less the last tail_percent % of the tokens, which become
// pieces of about a quarter chunk marked as tail; none where a piece would cost less than
// kMinTailPieceCost (its start then outweighs what it evens out).
void cut_with_tail(int64_t b, int64_t c, int64_t n, int64_t parts, int64_t d_sum, int64_t tail_percent,
                   std::vector<task> & out) {
    const int64_t tail = n * tail_percent / 100;
    const int64_t bulk = n - tail;
    const int64_t piece = bulk / std::max<int64_t>(1, parts) / 4;
    if (tail == 0 || piece * d_sum < kMinTailPieceCost) return cut_equal(b, c, n, parts, d_sum, out);
    cut_equal(b, c, bulk, parts, d_sum, out);
    const int64_t pieces = std::max<int64_t>(1, tail / piece);  // each at least a piece
    const size_t at = out.size();
    cut_equal(b, c, tail, pieces, d_sum, out);
    for (size_t i = at; i < out.size(); ++i) out[i].first += bulk, out[i].end += bulk, out[i].tail = true;
}

// The rows' costs as the makespans count them: each plus the task's own cost.
std::vector<int64_t> costs_of(const std::vector<task> & tasks, int64_t task_cost) {
    std::vector<int64_t> c;
    c.reserve(tasks.size());
    for (const task & t : tasks) c.push_back(t.cost + task_cost);
    return c;
}

// The list schedule of costs in their order: each next task goes to the least loaded worker.
int64_t in_order_makespan(const std::vector<int64_t> & costs, int64_t n_workers) {
    std::priority_queue<int64_t, std::vector<int64_t>, std::greater<int64_t>> load;
    for (int64_t u = 0; u < n_workers; ++u) load.push(0);
    int64_t makespan = 0;
    for (int64_t c : costs) {
        const int64_t l = load.top() + c;
        load.pop();
        load.push(l);
        makespan = std::max(makespan, l);
    }
    return makespan;
}

}  // namespace

std::vector<int32_t> ragged_heads_table(const std::vector<int64_t> & k_widths,
                                        const std::vector<int64_t> & v_widths, int64_t max_width) {
    KVCOMP_CHECK_ARG(!k_widths.empty() && k_widths.size() == v_widths.size(),
                     "ragged_heads_table: ", k_widths.size(), " K widths and ", v_widths.size(),
                     " V widths (need the same, >= 1)");
    KVCOMP_CHECK_ARG(max_width >= 1 && max_width <= 256, "ragged_heads_table: max_width ", max_width,
                     " must be in [1, 256]");
    std::vector<int32_t> t;
    t.reserve(k_widths.size() * 4);
    int64_t k_off = 0, v_off = 0;
    for (size_t c = 0; c < k_widths.size(); ++c) {
        const int64_t kw = k_widths[c], vw = v_widths[c];
        KVCOMP_CHECK_ARG(kw >= 1 && kw <= max_width && vw >= 1 && vw <= max_width,
                         "ragged_heads_table: KV head ", c, " has k_width ", kw, ", v_width ", vw,
                         " (must be in [1, ", max_width, "])");
        t.insert(t.end(), {int32_t(kw), int32_t(k_off), int32_t(vw), int32_t(v_off)});
        k_off += kw;
        v_off += vw;
    }
    return t;
}

const char * policy_name(decode_policy p) {
    return p == decode_policy::plain ? "plain" : "balanced";
}

namespace {

// Validates the inputs and returns d_sum per KV head (k_width + v_width + token_cost) and the longest
// length.
std::vector<int64_t> check_inputs(const std::vector<int64_t> & seq_lens, const std::vector<int64_t> & k_widths,
                                  const std::vector<int64_t> & v_widths, const decode_schedule_options & opt,
                                  int64_t & max_len) {
    KVCOMP_CHECK_ARG(opt.n_workers >= 1 && opt.waves >= 1 && opt.min_chunk_tokens >= 1,
                     "build_decode_schedule: n_workers (", opt.n_workers, "), waves (", opt.waves,
                     ") and min_chunk_tokens (", opt.min_chunk_tokens, ") must be >= 1");
    KVCOMP_CHECK_ARG(opt.token_cost >= 0 && opt.token_cost <= 1 << 20, "build_decode_schedule: token_cost ",
                     opt.token_cost, " is outside [0, 2^20]");
    KVCOMP_CHECK_ARG(opt.task_cost >= 0 && opt.task_cost <= 1 << 30, "build_decode_schedule: task_cost ",
                     opt.task_cost, " is outside [0, 2^30]");
    KVCOMP_CHECK_ARG(opt.tail_percent >= 0 && opt.tail_percent <= 50, "build_decode_schedule: tail_percent ",
                     opt.tail_percent, " is outside [0, 50]");
    ragged_heads_table(k_widths, v_widths);  // validates the widths
    KVCOMP_CHECK_ARG(!seq_lens.empty(), "build_decode_schedule: no requests");
    max_len = 0;
    for (size_t b = 0; b < seq_lens.size(); ++b) {
        KVCOMP_CHECK_ARG(seq_lens[b] >= 0 && seq_lens[b] <= i32_max, "build_decode_schedule: request ", b,
                         " has length ", seq_lens[b]);
        max_len = std::max(max_len, seq_lens[b]);
    }
    std::vector<int64_t> d_sum(k_widths.size());
    for (size_t c = 0; c < k_widths.size(); ++c) d_sum[c] = k_widths[c] + v_widths[c] + opt.token_cost;
    return d_sum;
}

// The rows of `tasks` in dispatch order (balanced: descending cost, tail pieces after every full chunk,
// equal costs in (b, c, token) order so the list is reproducible), their tables, parts and (opt.stats)
// makespans.
decode_schedule finish(std::vector<task> tasks, int64_t batch, int64_t n_kv, const decode_schedule_options & opt) {
    if (opt.policy == decode_policy::balanced)
        std::stable_sort(tasks.begin(), tasks.end(), [](const task & x, const task & y) {
            return x.tail != y.tail ? y.tail : x.cost > y.cost;
        });
    KVCOMP_CHECK_ARG(int64_t(tasks.size()) + batch * n_kv + 1 <= i32_max,
                     "build_decode_schedule: too many tasks for i32 arrays (", tasks.size(), ")");

    decode_schedule s;
    s.n_tasks = int64_t(tasks.size());
    s.schedule.reserve(tasks.size() * 4);
    s.parts.assign(size_t(batch * n_kv), 0);
    for (const task & t : tasks) {
        s.schedule.insert(s.schedule.end(), {int32_t(t.b), int32_t(t.c), int32_t(t.first), int32_t(t.end)});
        s.costs.push_back(t.cost);
        if (!t.tail) ++s.parts[size_t(t.b * n_kv + t.c)];
    }
    // Merge table: per (b, c) its task numbers in token order (counting sort on (b, c), then by first).
    const int64_t n_lists = batch * n_kv;
    s.merge.assign(size_t(n_lists + 1 + s.n_tasks), 0);
    for (const task & t : tasks) ++s.merge[size_t(t.b * n_kv + t.c + 1)];
    for (int64_t i = 0; i < n_lists; ++i) s.merge[size_t(i + 1)] += s.merge[size_t(i)];
    std::vector<int32_t> fill(s.merge.begin(), s.merge.begin() + n_lists);
    std::vector<size_t> by_token(tasks.size());
    std::iota(by_token.begin(), by_token.end(), size_t(0));
    std::sort(by_token.begin(), by_token.end(),
              [&](size_t x, size_t y) { return tasks[x].first < tasks[y].first; });
    for (size_t i : by_token) {
        const int64_t list = tasks[i].b * n_kv + tasks[i].c;
        s.merge[size_t(n_lists + 1 + fill[size_t(list)]++)] = int32_t(i);
    }
    if (opt.stats) {
        const std::vector<int64_t> with_task = costs_of(tasks, opt.task_cost);
        s.dispatch_makespan = in_order_makespan(with_task, opt.n_workers);
        s.lpt_makespan = schedule_lpt(with_task, opt.n_workers).makespan;
        s.lower_bound = makespan_lower_bound(with_task, opt.n_workers);
    }
    return s;
}

}  // namespace

decode_schedule build_decode_schedule(const std::vector<int64_t> & seq_lens,
                                      const std::vector<int64_t> & k_widths,
                                      const std::vector<int64_t> & v_widths,
                                      const decode_schedule_options & opt) {
    int64_t max_len = 0;
    const std::vector<int64_t> d_sum = check_inputs(seq_lens, k_widths, v_widths, opt, max_len);
    const int64_t batch = int64_t(seq_lens.size()), n_kv = int64_t(k_widths.size());
    const int64_t target_tasks = opt.n_workers * opt.waves;

    // The plain cut, as the fp16 kernels: one split count from the longest request, one chunk length.
    std::vector<task> plain;
    {
        const int64_t groups = batch * n_kv;
        const int64_t want = (target_tasks + groups - 1) / groups;
        const int64_t by_len = std::max<int64_t>(1, max_len / opt.min_chunk_tokens);
        const int64_t splits = std::clamp<int64_t>(want, 1, by_len);
        const int64_t chunk = std::max<int64_t>(1, (max_len + splits - 1) / splits);
        for (int64_t b = 0; b < batch; ++b)
            for (int64_t c = 0; c < n_kv; ++c)
                for (int64_t first = 0; first < seq_lens[size_t(b)]; first += chunk) {
                    const int64_t end = std::min(seq_lens[size_t(b)], first + chunk);
                    plain.push_back({b, c, first, end, (end - first) * d_sum[size_t(c)]});
                }
    }
    if (opt.policy == decode_policy::plain) return finish(std::move(plain), batch, n_kv, opt);

    int64_t total = 0;
    for (int64_t b = 0; b < batch; ++b)
        for (int64_t c = 0; c < n_kv; ++c) {
            const int64_t cost = seq_lens[size_t(b)] * d_sum[size_t(c)];  // both < 2^31: no overflow
            KVCOMP_CHECK_ARG(total <= std::numeric_limits<int64_t>::max() - cost,
                             "build_decode_schedule: total cost overflows");
            total += cost;
        }
    // Candidate cuts: chunk costs near total / (w * n_workers) for w = 1 .. waves (counts rounded to
    // nearest and up), and the plain cut. Fewer, larger chunks mean fewer partials to merge and
    // task starts (task_cost); more waves even out the tail. The LPT makespan of each candidate
    // (balance_scheduler.h) decides; ties go to fewer tasks.
    int64_t best = schedule_lpt(costs_of(plain, opt.task_cost), opt.n_workers).makespan;
    std::vector<task> tasks = plain;
    for (int64_t w = 1; w <= opt.waves; ++w)
        for (bool round_up : {false, true}) {
            const int64_t target = std::max<int64_t>(1, (total + w * opt.n_workers - 1) / (w * opt.n_workers));
            std::vector<task> cut;
            for (int64_t b = 0; b < batch; ++b)
                for (int64_t c = 0; c < n_kv; ++c) {
                    const int64_t n = seq_lens[size_t(b)];
                    if (n == 0) continue;
                    const int64_t cost = n * d_sum[size_t(c)];
                    const int64_t want = (cost + (round_up ? target - 1 : target / 2)) / target;
                    // Chunks no shorter than min_chunk_tokens.
                    const int64_t parts = std::clamp<int64_t>(want, 1, std::max<int64_t>(1, n / opt.min_chunk_tokens));
                    cut_equal(b, c, n, parts, d_sum[size_t(c)], cut);
                }
            const int64_t makespan = schedule_lpt(costs_of(cut, opt.task_cost), opt.n_workers).makespan;
            if (makespan < best || (makespan == best && cut.size() < tasks.size())) {
                best = makespan;
                tasks = std::move(cut);
            }
        }
    if (opt.tail_percent == 0) return finish(std::move(tasks), batch, n_kv, opt);
    // The search weighs full chunks only; the winner's chunk counts are cut again with their tails.
    std::vector<int64_t> parts(size_t(batch * n_kv), 0);
    for (const task & t : tasks) ++parts[size_t(t.b * n_kv + t.c)];
    return schedule_with_parts(seq_lens, k_widths, v_widths, parts, opt);
}

decode_schedule schedule_with_parts(const std::vector<int64_t> & seq_lens, const std::vector<int64_t> & k_widths,
                                    const std::vector<int64_t> & v_widths, const std::vector<int64_t> & parts,
                                    const decode_schedule_options & opt) {
    int64_t max_len = 0;
    const std::vector<int64_t> d_sum = check_inputs(seq_lens, k_widths, v_widths, opt, max_len);
    const int64_t batch = int64_t(seq_lens.size()), n_kv = int64_t(k_widths.size());
    KVCOMP_CHECK_ARG(int64_t(parts.size()) == batch * n_kv, "schedule_with_parts: ", parts.size(),
                     " chunk counts for ", batch, " requests x ", n_kv, " KV heads");
    std::vector<task> tasks;
    for (int64_t b = 0; b < batch; ++b)
        for (int64_t c = 0; c < n_kv; ++c) {
            const int64_t n = seq_lens[size_t(b)];
            const int64_t p = std::clamp<int64_t>(parts[size_t(b * n_kv + c)], 1, std::max<int64_t>(1, n));
            if (n > 0 && opt.policy == decode_policy::balanced)
                cut_with_tail(b, c, n, p, d_sum[size_t(c)], opt.tail_percent, tasks);
            else if (n > 0)
                cut_equal(b, c, n, p, d_sum[size_t(c)], tasks);
        }
    return finish(std::move(tasks), batch, n_kv, opt);
}

int64_t default_token_cost(int64_t page_bits) {
    return page_bits == 4 ? 64 : 1;
}

bool schedule_cut_reusable(const std::vector<int64_t> & built, const std::vector<int64_t> & now) {
    if (built.size() != now.size()) return false;
    for (size_t b = 0; b < now.size(); ++b)
        if (now[b] < built[b] || now[b] - built[b] > std::max<int64_t>(16, built[b] / 16)) return false;
    return true;
}

}  // namespace kvcomp::host::lowrank
