// Token sampling on the host: greedy, temperature, top-k and top-p (nucleus), seeded.
#pragma once

#include <cstdint>
#include <random>

namespace kvcomp::engine {

struct sampling_params {
    float temperature = 0.0f;  // 0: greedy (argmax, lowest index on ties)
    int32_t top_k = 0;         // 0: no limit
    float top_p = 1.0f;        // 1: no nucleus cut
    uint64_t seed = 0;         // per request; the same seed gives the same tokens
};

// Draws a token from logits[0..vocab). Greedy ignores the generator.
int32_t sample_token(const float * logits, int64_t vocab, const sampling_params & p, std::mt19937_64 & rng);

// Throws invalid_argument naming the bad value (negative temperature, top_p outside (0,1], ...).
void check_sampling(const sampling_params & p);

}  // namespace kvcomp::engine
