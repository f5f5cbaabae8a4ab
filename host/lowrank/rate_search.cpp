// Removal rate for a compression target, and the accuracy-constrained search. See rate_search.h.
#include "host/lowrank/rate_search.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace kvcomp::host::lowrank {

namespace {

// A head's rank drops to `level` (or below) once r reaches `r`.
struct rank_event {
    double r;
    size_t head;  // index into the flattened K-then-V head list
    int64_t level;
};

}  // namespace

std::vector<rate_step> achievable_compressions(const kv_spectra & spectra, int64_t rank_multiple) {
    spectra.validate();
    const int64_t d = spectra.head_dim;
    KVCOMP_CHECK_ARG(rank_multiple >= 1 && rank_multiple <= d,
                     "achievable_compressions: rank_multiple = ", rank_multiple,
                     " must be in [1, head_dim = ", d, "]");

    // The rounded rank takes the levels m, 2m, ... and head_dim. Its raw rank is <= level L exactly
    // when tail(L) <= r (tail is non-increasing), so the rounded rank at r is the smallest level with
    // tail(level) <= r: an event per level below head_dim, at r = tail(level). This is the same
    // comparison ranks_for_removal_rate makes, on the same numbers, so both agree at every r.
    std::vector<rank_event> events;
    std::vector<int64_t> rank;
    const auto add_head = [&](const std::vector<double> & sigma) {
        const std::vector<double> tail = tail_fractions(sigma);
        const size_t h = rank.size();
        rank.push_back(d);
        for (int64_t level = rank_multiple; level < d; level += rank_multiple)
            events.push_back({tail[size_t(level)], h, level});
    };
    for (const auto & s : spectra.sigma_k) add_head(s);
    for (const auto & s : spectra.sigma_v) add_head(s);
    std::sort(events.begin(), events.end(),
              [](const rank_event & a, const rank_event & b) { return a.r < b.r; });

    const int64_t full = 2 * spectra.num_layers * spectra.num_kv_heads * d;
    int64_t kept = int64_t(rank.size()) * d;
    std::vector<rate_step> steps;
    size_t i = 0;
    bool first = true;
    while (i < events.size() || first) {
        // Apply every event at this r together: a step exists at r, not between equal r's.
        const double r = first ? 0.0 : events[i].r;
        for (; i < events.size() && events[i].r <= r; ++i) {
            int64_t & k = rank[events[i].head];
            if (events[i].level < k) {
                kept -= k - events[i].level;
                k = events[i].level;
            }
        }
        if (first || kept < steps.back().kept_dims)
            steps.push_back({r, kept, 1.0 - double(kept) / double(full)});
        first = false;
    }
    return steps;
}

rate_choice removal_rate_for_compression(const kv_spectra & spectra, double target, int64_t rank_multiple) {
    KVCOMP_CHECK_ARG(target >= 0.0 && target < 1.0, "removal_rate_for_compression: target compression ",
                     target, " must be in [0, 1)");
    const std::vector<rate_step> steps = achievable_compressions(spectra, rank_multiple);
    const auto it = std::lower_bound(steps.begin(), steps.end(), target,
                                     [](const rate_step & s, double t) { return s.compression < t; });
    KVCOMP_CHECK_ARG(it != steps.end(), "removal_rate_for_compression: target compression ", target,
                     " is above the largest reachable with rank_multiple ", rank_multiple, " (",
                     steps.back().compression, ", every head at its lowest rank)");
    rate_choice out;
    out.removal_rate = it->removal_rate;
    out.ranks = ranks_for_removal_rate(spectra, it->removal_rate, rank_multiple);
    KVCOMP_ASSERT(out.ranks.kept_dims() == it->kept_dims);
    return out;
}

accuracy_search_result search_compression_for_accuracy(const std::vector<double> & grid,
                                                       const std::function<double(double)> & score,
                                                       double baseline_score,
                                                       const accuracy_search_options & options) {
    const char * fn = "search_compression_for_accuracy";
    KVCOMP_CHECK_ARG(!grid.empty(), fn, ": empty compression grid");
    for (size_t i = 0; i < grid.size(); ++i) {
        KVCOMP_CHECK_ARG(std::isfinite(grid[i]) && grid[i] >= 0.0 && grid[i] < 1.0, fn, ": grid[", i,
                         "] = ", grid[i], " must be in [0, 1)");
        KVCOMP_CHECK_ARG(i == 0 || grid[i] > grid[i - 1], fn, ": grid[", i, "] = ", grid[i],
                         " is not above grid[", i - 1, "] = ", grid[i - 1],
                         " (the grid must be strictly ascending)");
    }
    KVCOMP_CHECK_ARG(options.keep_fraction > 0.0 && options.keep_fraction <= 1.0, fn, ": keep_fraction ",
                     options.keep_fraction, " must be in (0, 1]");
    KVCOMP_CHECK_ARG(std::isfinite(baseline_score) && baseline_score > 0.0, fn, ": baseline score ",
                     baseline_score, " must be finite and > 0 (higher is better; pass 1/perplexity)");
    KVCOMP_CHECK_ARG(bool(score), fn, ": no score callback");

    accuracy_search_result res;
    res.threshold = options.keep_fraction * baseline_score;
    const auto passes = [&](size_t i) {
        const double s = score(grid[i]);
        KVCOMP_CHECK_ARG(std::isfinite(s), fn, ": score at compression ", grid[i], " is ", s,
                         " (not finite)");
        res.probes.push_back({grid[i], s, s >= res.threshold});
        return res.probes.back().passed;
    };
    const auto answer = [&](size_t i) {
        for (const auto & p : res.probes)
            if (p.compression == grid[i]) res.score = p.score;
        res.found = true;
        res.index = i;
        res.compression = grid[i];
        return res;
    };

    if (!passes(0)) return res;
    const size_t last = grid.size() - 1;
    if (last == 0 || passes(last)) return answer(last);
    // Invariant: grid[lo] passed, grid[hi] failed.
    size_t lo = 0, hi = last;
    while (hi - lo > 1) {
        const size_t mid = lo + (hi - lo) / 2;
        if (passes(mid))
            lo = mid;
        else
            hi = mid;
    }
    return answer(lo);
}

}  // namespace kvcomp::host::lowrank
