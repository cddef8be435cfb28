// Token sampler: turns one position's logits into the next token id.
//
// Order of operations (docs/SAMPLING.md has the details):
//   1. repetition penalty on the logits of the distinct tokens among the last repeat_last_n of
//      the history (CTRL / llama.cpp: a positive logit is divided by the penalty, a negative one
//      multiplied, so the token always becomes less likely when penalty > 1);
//   2. temperature == 0: argmax, ties to the lowest id (no random draw);
//   3. otherwise: logits / temperature -> top-k -> softmax -> top-p -> min-p -> renormalise ->
//      one draw from the sampler's own mt19937_64.
// distribution() returns exactly the probabilities sample() draws from, so a speculative
// verifier can do rejection sampling against the same target distribution.
#pragma once
#include <cstdint>
#include <random>
#include <vector>

namespace dsv4 {

struct SamplingParams {
    float temperature = 0.0f;   // 0 = greedy
    int top_k = 0;              // keep the k most likely tokens; 0 (or >= vocab) = off
    float top_p = 1.0f;         // nucleus mass in (0, 1]; 1 = off
    float min_p = 0.0f;         // drop tokens with p < min_p * p_max; in [0, 1); 0 = off
    float repeat_penalty = 1.0f;  // > 0; 1 = off; > 1 discourages repeats
    int repeat_last_n = 64;     // how many recent history tokens the penalty looks at; -1 = all
    uint64_t seed = 0;

    // Throws UsageError naming the field for a value out of range (NaN included).
    void validate() const;
};

class Sampler {
public:
    // Validates params (UsageError) and seeds the RNG.
    explicit Sampler(const SamplingParams& params);

    // The next token for one position's logits [vocab]. history holds the tokens so far
    // (prompt and generated), oldest first; only the penalty reads it. Consumes exactly one
    // 64-bit RNG output when temperature > 0, none when greedy. Throws Error on a NaN logit,
    // a non-finite largest logit (when sampling) or a history token outside [0, vocab).
    int32_t sample(const float* logits, int vocab, const std::vector<int32_t>& history);

    // The distribution sample() draws from, as probs[vocab] summing to 1: zero exactly on the
    // tokens the filters exclude; one-hot on the argmax when greedy. Uses no randomness.
    void distribution(const float* logits, int vocab, const std::vector<int32_t>& history,
                      std::vector<float>& probs);

    // A draw from probs (non-negative weights, not necessarily normalised) with this sampler's
    // RNG: for the residual distribution of speculative rejection sampling.
    int32_t draw(const std::vector<float>& probs);

    // Uniform double in [0, 1) from the top 53 bits of one 64-bit RNG output. Done by hand
    // because std::uniform_real_distribution's algorithm is implementation-defined; this way
    // a seed gives the same stream on every platform.
    double uniform();

    const SamplingParams& params() const { return params_; }

private:
    struct Candidate {
        float p;     // scaled logit, then exp(logit - max logit) (unnormalised weight)
        int32_t id;
    };

    // Step 1: the penalised logits into logits_ (fails on NaN logits or out-of-range history).
    void penalise(const float* logits, int vocab, const std::vector<int32_t>& history);
    // Step 3 up to the draw: fills cands_ with the surviving tokens and their unnormalised
    // weights; returns the weights' sum (the renormaliser).
    double filter();
    int32_t argmax() const;
    // Temperature 0 without a penalty: argmax straight from the caller's logits.
    int32_t greedy(const float* logits, int vocab) const;

    SamplingParams params_;
    std::mt19937_64 rng_;
    std::vector<float> logits_;     // scratch, reused across calls (vocab is ~129k)
    std::vector<Candidate> cands_;  // scratch
    std::vector<int32_t> recent_;   // scratch: distinct tokens in the penalty window
};

}  // namespace dsv4
