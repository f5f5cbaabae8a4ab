// ZipCache's salient-token selection on the host (paper §4.2-4.3, digest zipcache.md §3-4):
// probe positions, the normalized attention score (column sums from the probe_scores op divided
// by the structural count of probes that see each token) and the top-r split into salient (high
// bits) and regular (low bits) tokens.
#pragma once

#include <cstdint>
#include <vector>

namespace kvcomp::host::quant {

// Probe rows of a prompt of `len` tokens (indices 0..len-1): the n_recent = max(1, len -
// floor((1 - recent_frac) * len)) most recent tokens, plus floor(random_frac * len) distinct tokens
// drawn uniformly (seeded) from the earlier ones. Sorted ascending. The last token is always a probe.
std::vector<int32_t> prompt_probes(int64_t len, double recent_frac, double random_frac, uint64_t seed);

// How the column sums are normalized (digest §9 A6).
enum class nnz_mode {
    probe,   // paper Eq. 8 on probe rows: divide by the number of probes at or after the token
    causal,  // the authors' code in prefill: divide by the full causal count (tokens at or after it)
};

// The structural count of each key at key_pos given probe positions: the probes that may attend to
// it per nnz_mode (never values that happen to be 0). last_pos is the position of the last token
// the keys' request has (for causal mode). Layer-independent: the device selection (the
// select_salient op) takes these counts once per step.
std::vector<int64_t> normalization_counts(const std::vector<int32_t> & key_pos,
                                          const std::vector<int32_t> & probe_pos, nnz_mode mode,
                                          int32_t last_pos);

// Normalized scores of keys at key_pos from column sums `sums` given probe positions:
// (double)sums[i] / (double)count(i) with normalization_counts' count; count(i) = 0 gives 0.
std::vector<double> normalized_scores(const float * sums, const std::vector<int32_t> & key_pos,
                                      const std::vector<int32_t> & probe_pos, nnz_mode mode, int32_t last_pos);

// Tokens per precision for n tokens at saliency ratio r (the authors' convention):
// n_lo = floor((1 - r) * n), n_hi = n - n_lo.
int64_t regular_count(int64_t n, double ratio);

// Splits key indices 0..n-1 by score: the n - regular_count(n, r) highest-scoring are salient
// (ties: the earlier index first). Returns salient indices then regular indices, each ascending.
std::vector<int32_t> split_by_saliency(const std::vector<double> & scores, double ratio);

}  // namespace kvcomp::host::quant
