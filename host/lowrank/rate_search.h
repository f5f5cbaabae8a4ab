// From an overall KV compression target (ZACK's F_p) or from an accuracy constraint (FDC's F_p,
// the papers' "binary search for the maximum p that keeps 99 % of the baseline accuracy") to one
// shared removal rate r and the per-head ranks it gives (rank_selection.h).
//
// Shape of the map r -> compression(r): every head's rank is a step function of r that only
// changes when r crosses one of that head's tail fractions (tail_fractions()), and rounding ranks
// up to a multiple of rank_multiple merges neighbouring steps. compression(r) is therefore a non-decreasing
// step function of r, right-continuous, with at most layers * kv_heads * 2 * head_dim steps. A target
// generally falls inside a step; we pick the side that MEETS it: the smallest r whose compression
// is >= the target (digest §9.10). No bisection tolerance is involved: achievable_compressions()
// sweeps the tail fractions (the only values of r where a rank changes) in order and lists every
// step exactly; the target lookup is a binary search over that list.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "host/lowrank/rank_selection.h"

namespace kvcomp::host::lowrank {

struct rate_choice {
    double removal_rate = 0.0;  // r
    kv_ranks ranks;             // ranks_for_removal_rate(spectra, r, rank_multiple)
    double compression() const { return ranks.compression(); }
};

// One step of compression(r): from removal_rate on (up to the next step) every head has the ranks
// ranks_for_removal_rate(spectra, removal_rate, rank_multiple), which keep kept_dims dims in all.
struct rate_step {
    double removal_rate = 0.0;
    int64_t kept_dims = 0;
    double compression = 0.0;  // equal to kv_ranks::compression() of those ranks, bit for bit
};

// Every step, ascending in r and strictly ascending in compression; the first is r = 0. This is
// also the natural grid for search_compression_for_accuracy: no other compression can be realised.
// Validates the spectra and rank_multiple (in [1, head_dim]).
std::vector<rate_step> achievable_compressions(const kv_spectra & spectra, int64_t rank_multiple);

// Smallest r whose overall compression is >= target, with its ranks. Throws invalid_argument when
// the target is outside [0, 1) or above the largest reachable compression (every head at its lowest
// rank), naming that maximum.
rate_choice removal_rate_for_compression(const kv_spectra & spectra, double target, int64_t rank_multiple);

// --- accuracy-constrained search -------------------------------------------------------------------

struct accuracy_search_options {
    // Keep at least this fraction of the uncompressed score (the papers: 0.99). In (0, 1].
    double keep_fraction = 0.99;
};

struct accuracy_probe {
    double compression = 0.0;
    double score = 0.0;
    bool passed = false;  // score >= keep_fraction * baseline_score
};

struct accuracy_search_result {
    bool found = false;                  // false: even grid[0] failed (nothing meets the constraint)
    size_t index = 0;                    // into the grid, valid when found
    double compression = 0.0;            // grid[index]
    double score = 0.0;                  // the score measured there
    double threshold = 0.0;              // keep_fraction * baseline_score
    std::vector<accuracy_probe> probes;  // every evaluation, in call order
};

// Finds the largest compression in `grid` (strictly ascending, values in [0, 1)) whose score is at
// least keep_fraction * baseline_score, by bisection: about log2(grid.size()) + 1 calls of
// `score(compression)`.
//
// Assumptions (documented, not checked, because checking would need every point evaluated):
//   - higher score is better and baseline_score > 0 (pass 1/perplexity, not perplexity);
//   - the score is non-increasing in compression, up to noise. Bisection keeps the invariant
//     "lo passed, hi failed", so the answer is always a probed point that passed, never a guess;
//     with a non-monotone curve it is a local boundary, not necessarily the largest passing point.
// grid[0] is probed first; when it fails, found = false. The last grid point is probed next, and
// when it passes it is the answer. Throws invalid_argument for an empty or unsorted grid,
// keep_fraction outside (0, 1], a baseline that is not finite and > 0, or a score that is not finite
// (naming the compression it was measured at).
accuracy_search_result search_compression_for_accuracy(const std::vector<double> & grid,
                                                       const std::function<double(double)> & score,
                                                       double baseline_score,
                                                       const accuracy_search_options & options = {});

}  // namespace kvcomp::host::lowrank
