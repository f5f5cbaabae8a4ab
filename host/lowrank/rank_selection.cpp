// Per-head ranks from a shared removal rate. See rank_selection.h for the rule.
#include "host/lowrank/rank_selection.h"

#include <cmath>

#include "core/error.h"

namespace kvcomp::host::lowrank {

namespace {

// Checks one spectrum; `where` prefixes messages ("layer 3 kv_head 1 K sigma").
void check_sigma(const std::vector<double> & sigma, const std::string & where) {
    KVCOMP_CHECK_ARG(!sigma.empty(), where, ": no singular values");
    for (size_t i = 0; i < sigma.size(); ++i) {
        KVCOMP_CHECK_ARG(std::isfinite(sigma[i]) && sigma[i] >= 0.0, where, "[", i, "] = ", sigma[i],
                         ": singular values must be finite and >= 0");
        KVCOMP_CHECK_ARG(i == 0 || sigma[i] <= sigma[i - 1], where, "[", i, "] = ", sigma[i], " > [", i - 1,
                         "] = ", sigma[i - 1], ": singular values must be in non-increasing order");
    }
}

int64_t raw_rank_unchecked(const std::vector<double> & sigma, double r) {
    const std::vector<double> tail = tail_fractions(sigma);
    // tail(k) is non-increasing in k, so the first k that satisfies the bound is the answer.
    const int64_t d = int64_t(sigma.size());
    for (int64_t k = 1; k <= d; ++k)
        if (tail[size_t(k)] <= r) return k;
    return d;  // unreachable: tail(d) = 0 <= r
}

}  // namespace

void kv_spectra::validate() const {
    KVCOMP_CHECK_ARG(num_layers > 0 && num_kv_heads > 0 && head_dim > 0, "kv_spectra: num_layers (",
                     num_layers, "), num_kv_heads (", num_kv_heads, ") and head_dim (", head_dim,
                     ") must be > 0");
    const size_t n = size_t(num_layers * num_kv_heads);
    KVCOMP_CHECK_ARG(sigma_k.size() == n && sigma_v.size() == n, "kv_spectra: sigma_k has ", sigma_k.size(),
                     " and sigma_v ", sigma_v.size(), " heads, expected num_layers * num_kv_heads = ", n);
    for (size_t i = 0; i < n; ++i) {
        for (int part = 0; part < 2; ++part) {
            const auto & s = part == 0 ? sigma_k[i] : sigma_v[i];
            const std::string where = concat("kv_spectra layer ", int64_t(i) / num_kv_heads, " kv_head ",
                                             int64_t(i) % num_kv_heads, part == 0 ? " K" : " V", " sigma");
            KVCOMP_CHECK_ARG(int64_t(s.size()) == head_dim, where, " has ", s.size(),
                             " values, expected head_dim ", head_dim);
            check_sigma(s, where);
        }
    }
}

std::vector<double> tail_fractions(const std::vector<double> & sigma) {
    const size_t d = sigma.size();
    // Suffix sums from the small end: exact zeros stay exactly zero (so r = 0 keeps precisely the
    // non-zero values), and a small tail is not the difference of two large numbers.
    std::vector<double> tail(d + 1, 0.0);
    for (size_t i = d; i-- > 0;) tail[i] = tail[i + 1] + sigma[i];
    const double total = tail[0];
    if (total == 0.0) return std::vector<double>(d + 1, 0.0);
    // Divide (rather than compare tail <= r * total) so that r set to one of these values selects
    // exactly that k: rate_search.cpp searches over these same numbers.
    for (double & t : tail) t /= total;
    return tail;
}

int64_t kv_ranks::kept_dims() const {
    int64_t sum = 0;
    for (int64_t x : k) sum += x;
    for (int64_t x : v) sum += x;
    return sum;
}

int64_t kv_ranks::full_dims() const {
    return 2 * num_layers * num_kv_heads * head_dim;
}

int64_t raw_rank_for_removal_rate(const std::vector<double> & sigma, double r) {
    KVCOMP_CHECK_ARG(r >= 0.0 && r <= 1.0, "raw_rank_for_removal_rate: removal rate r = ", r,
                     " must be in [0, 1]");
    check_sigma(sigma, "raw_rank_for_removal_rate: sigma");
    return raw_rank_unchecked(sigma, r);
}

int64_t round_rank(int64_t raw_rank, int64_t head_dim, int64_t rank_multiple) {
    KVCOMP_CHECK_ARG(rank_multiple >= 1 && rank_multiple <= head_dim,
                     "round_rank: rank_multiple = ", rank_multiple, " must be in [1, head_dim = ", head_dim,
                     "]");
    KVCOMP_CHECK_ARG(raw_rank >= 1 && raw_rank <= head_dim, "round_rank: raw rank ", raw_rank,
                     " must be in [1, head_dim = ", head_dim, "]");
    const int64_t up = (raw_rank + rank_multiple - 1) / rank_multiple * rank_multiple;
    return up > head_dim ? head_dim : up;  // up >= rank_multiple since raw_rank >= 1
}

int64_t rank_for_removal_rate(const std::vector<double> & sigma, double r, int64_t rank_multiple) {
    return round_rank(raw_rank_for_removal_rate(sigma, r), int64_t(sigma.size()), rank_multiple);
}

kv_ranks ranks_for_removal_rate(const kv_spectra & spectra, double r, int64_t rank_multiple) {
    spectra.validate();
    KVCOMP_CHECK_ARG(r >= 0.0 && r <= 1.0, "ranks_for_removal_rate: removal rate r = ", r,
                     " must be in [0, 1]");
    KVCOMP_CHECK_ARG(rank_multiple >= 1 && rank_multiple <= spectra.head_dim,
                     "ranks_for_removal_rate: rank_multiple = ", rank_multiple,
                     " must be in [1, head_dim = ", spectra.head_dim, "]");
    kv_ranks out;
    out.num_layers = spectra.num_layers;
    out.num_kv_heads = spectra.num_kv_heads;
    out.head_dim = spectra.head_dim;
    out.k.reserve(spectra.sigma_k.size());
    out.v.reserve(spectra.sigma_v.size());
    for (const auto & s : spectra.sigma_k)
        out.k.push_back(round_rank(raw_rank_unchecked(s, r), spectra.head_dim, rank_multiple));
    for (const auto & s : spectra.sigma_v)
        out.v.push_back(round_rank(raw_rank_unchecked(s, r), spectra.head_dim, rank_multiple));
    return out;
}

}  // namespace kvcomp::host::lowrank
