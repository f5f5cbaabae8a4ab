// Per-head ranks from one shared singular-value removal rate r (ZACK Eq. 6 = FDC Eq. 1), and the
// overall KV compression those ranks give.
//
// The rule (digest research/zack_fdc.md §2, with the §10.3 resolution): for a head whose singular
// values are s_0 >= s_1 >= ... >= s_{d-1} >= 0 (d = head_dim), the raw rank is the smallest k >= 1
// whose removed tail carries at most a fraction r of the plain sum of singular values (not sigma^2):
//
//     tail(k) = (s_k + ... + s_{d-1}) / (s_0 + ... + s_{d-1}) <= r
//
// r = 0 keeps every non-zero singular value; r -> 1 keeps one. The raw rank is then rounded UP to a
// multiple of `rank_multiple` (tensor-core tiles want multiples of 16; rounding the rank keeps real
// dims instead of zero padding, §10.10) and clamped to [rank_multiple, head_dim]: a head never ends
// up with more dims than it has, and when head_dim is not a multiple the top rank is head_dim itself.
//
// Overall compression (§2, "overall compression-rate accounting"): only K and V are cached, Q's rank
// costs no memory, and the K rank is the rank of the shared Q-K basis, so
//     kept_fraction = sum_{layer, kv head} (k + v) / (2 * layers * kv_heads * head_dim)
//     compression   = 1 - kept_fraction   (the papers' p: the fraction of KV dims removed)
#pragma once

#include <cstdint>
#include <vector>

namespace kvcomp::host::lowrank {

// Singular values of every (layer, KV head) basis, K (the shared Q-K basis) and V.
// sigma_k / sigma_v are indexed [layer * num_kv_heads + kv_head]; each holds head_dim values in
// non-increasing order (finite, >= 0), as svd_basis.h returns them.
struct kv_spectra {
    int64_t num_layers = 0;
    int64_t num_kv_heads = 0;
    int64_t head_dim = 0;
    std::vector<std::vector<double>> sigma_k;
    std::vector<std::vector<double>> sigma_v;

    // Throws invalid_argument naming the first bad field: counts <= 0, a list of the wrong length,
    // a sigma that is negative, not finite or increasing (names layer, head, K/V and the index).
    void validate() const;
};

// Ranks per (layer, KV head), indexed like kv_spectra.
struct kv_ranks {
    int64_t num_layers = 0;
    int64_t num_kv_heads = 0;
    int64_t head_dim = 0;
    std::vector<int64_t> k;
    std::vector<int64_t> v;

    int64_t kept_dims() const;  // sum of k and v over every head
    int64_t full_dims() const;  // 2 * num_layers * num_kv_heads * head_dim
    double kept_fraction() const { return double(kept_dims()) / double(full_dims()); }
    double compression() const { return 1.0 - kept_fraction(); }
};

// tail(k) for k = 0 .. d (d + 1 values: 1 at k = 0 unless every sigma is 0, then all 0; 0 at k = d).
// sigma is not checked here. These are the only values of r at which a head's rank changes.
std::vector<double> tail_fractions(const std::vector<double> & sigma);

// The raw rank of one head (before rounding): smallest k in [1, d] with tail(k) <= r. A head whose
// singular values are all zero gets 1. Throws invalid_argument when r is outside [0, 1] or sigma is
// empty, negative, not finite or increasing.
int64_t raw_rank_for_removal_rate(const std::vector<double> & sigma, double r);

// Rounds a raw rank up to a multiple of rank_multiple and clamps it to [rank_multiple, head_dim].
// Throws invalid_argument when rank_multiple < 1, rank_multiple > head_dim (the range would be
// empty), or raw_rank is outside [1, head_dim].
int64_t round_rank(int64_t raw_rank, int64_t head_dim, int64_t rank_multiple);

// One head: raw rank, then round_rank.
int64_t rank_for_removal_rate(const std::vector<double> & sigma, double r, int64_t rank_multiple);

// Every head of the model at one shared r. Validates the spectra first.
kv_ranks ranks_for_removal_rate(const kv_spectra & spectra, double r, int64_t rank_multiple);

}  // namespace kvcomp::host::lowrank
