// select_salient: the reference selection (contract in core/op.h). Plain and slow on purpose: every
// (prompt, KV head) sorts its tokens by (key descending, index ascending), takes the first n_hi as
// salient and writes kv_quantize's rows from that order. The device kernels select with a radix
// select instead; both must give these integers exactly.
#include <algorithm>
#include <cstring>
#include <numeric>
#include <vector>

#include "cpu/cpu_common.h"

namespace kvcomp::cpu {

namespace {

// The order-preserving 64-bit key of a score (core/op.h): a larger key is a larger score, -0 and
// +0 share a key, NaN gets 0 (below every number).
uint64_t score_key(double score) {
    if (score != score) return 0;
    if (score == 0.0) score = 0.0;  // -0 -> +0
    uint64_t bits = 0;
    std::memcpy(&bits, &score, sizeof(bits));
    return (bits >> 63) ? ~bits : bits | (uint64_t(1) << 63);
}

int64_t ceil_div(int64_t a, int64_t b) {
    return b > 0 ? (a + b - 1) / b : 0;
}

}  // namespace

void run_select_salient(const op_desc & op) {
    const auto & p = op.get<select_salient_params>();
    const float * sums = ptr<const float>(op.src[0]);
    const int32_t * count = ptr<const int32_t>(op.src[1]);
    const int32_t * prompts = ptr<const int32_t>(op.src[2]);
    int32_t * rows = ptr<int32_t>(op.dst[0]);
    const int64_t H = p.n_kv_heads, G = int64_t(p.hi_tokens) + p.lo_tokens;
    struct prompt {
        int64_t first_row, n, n_hi, n_lo, first_block, nb;
    };
    // The table comes from the host; a bad one is a caller's bug, reported (before anything is
    // written) rather than guessed at.
    std::vector<prompt> table;
    std::vector<char> owned(static_cast<size_t>(p.n_blocks), 0);
    for (int64_t b = 0; b < p.n_prompts; ++b) {
        const int64_t first_row = prompts[4 * b], n = prompts[4 * b + 1], n_hi = prompts[4 * b + 2];
        const int64_t first_block = prompts[4 * b + 3], n_lo = n - n_hi;
        const int64_t nb = std::max(ceil_div(n_hi, p.hi_tokens), ceil_div(n_lo, p.lo_tokens));
        KVCOMP_CHECK_ARG(n >= 0 && first_row >= 0 && first_row + n <= p.n_tokens, describe(op), ": prompt ",
                         b, " ranks tokens [", first_row, ", ", first_row + n, ") outside the ", p.n_tokens,
                         " columns");
        KVCOMP_CHECK_ARG(n_hi >= 0 && n_hi <= n, describe(op), ": prompt ", b, " has n_hi ", n_hi, " of ", n,
                         " tokens");
        KVCOMP_CHECK_ARG((n_hi == 0 || p.hi_tokens > 0) && (n_lo == 0 || p.lo_tokens > 0), describe(op),
                         ": prompt ", b, " puts tokens in a segment of capacity 0 (", n_hi, " salient, ",
                         n_lo, " regular)");
        KVCOMP_CHECK_ARG(first_block >= 0 && first_block + nb <= p.n_blocks, describe(op), ": prompt ", b,
                         " needs blocks [", first_block, ", ", first_block + nb, ") outside the ", p.n_blocks,
                         " blocks");
        for (int64_t bi = 0; bi < nb; ++bi) {
            KVCOMP_CHECK_ARG(!owned[size_t(first_block + bi)], describe(op), ": block ", first_block + bi,
                             " belongs to two prompts");
            owned[size_t(first_block + bi)] = 1;
        }
        table.push_back({first_row, n, n_hi, n_lo, first_block, nb});
    }
    for (const auto & [first_row, n, n_hi, n_lo, first_block, nb] : table) {
        for (int64_t h = 0; h < H; ++h) {
            std::vector<uint64_t> key(static_cast<size_t>(n));
            for (int64_t i = 0; i < n; ++i) {
                const int64_t c = first_row + i;
                const double score = count[c] > 0 ? double(sums[h * p.n_tokens + c]) / double(count[c]) : 0.0;
                key[size_t(i)] = score_key(score);
            }
            std::vector<int32_t> by_rank(static_cast<size_t>(n));
            std::iota(by_rank.begin(), by_rank.end(), 0);
            std::sort(by_rank.begin(), by_rank.end(), [&](int32_t a, int32_t c) {
                return key[size_t(a)] > key[size_t(c)] || (key[size_t(a)] == key[size_t(c)] && a < c);
            });
            std::vector<char> salient(static_cast<size_t>(n), 0);
            for (int64_t r = 0; r < n_hi; ++r) salient[size_t(by_rank[size_t(r)])] = 1;
            std::vector<int32_t> o;
            for (int32_t i = 0; i < int32_t(n); ++i)
                if (salient[size_t(i)]) o.push_back(i);
            for (int32_t i = 0; i < int32_t(n); ++i)
                if (!salient[size_t(i)]) o.push_back(i);
            for (int64_t bi = 0; bi < nb; ++bi) {
                const int64_t hi_b = std::clamp<int64_t>(n_hi - bi * p.hi_tokens, 0, p.hi_tokens);
                const int64_t lo_b = std::clamp<int64_t>(n_lo - bi * p.lo_tokens, 0, p.lo_tokens);
                int32_t * dst = rows + ((first_block + bi) * H + h) * G;
                for (int64_t x = 0; x < G; ++x) {
                    int64_t at = -1;
                    if (x < hi_b)
                        at = bi * p.hi_tokens + x;
                    else if (x - hi_b < lo_b)
                        at = n_hi + bi * p.lo_tokens + (x - hi_b);
                    dst[x] = at < 0 ? 0 : int32_t(first_row + o[size_t(at)]);
                }
            }
        }
    }
}

}  // namespace kvcomp::cpu
