// The verification rule of speculative decoding for one round: given the target's logits at
// the draft positions, how many drafts are accepted and which token follows them.
//
// Greedy target (temperature 0): accept d_i iff it is the argmax the sampler would pick (the
// repetition penalty included); the next token is that argmax. The output is token for token
// the one plain decoding gives, and no random number is used.
// Sampling target: the standard rejection rule (Leviathan et al. 2023, Chen et al. 2023). With
// p_i the sampler's full processed distribution at position i (Sampler::distribution: penalty,
// temperature, top-k, top-p, min-p) and q_i the drafter's: accept d_i with probability
// min(1, p_i(d_i) / q_i(d_i)); at the first rejection draw the next token from
// norm(max(0, p_i - q_i)) and stop; when every draft is accepted draw a bonus token from
// p_{W+1} with Sampler::sample. Each emitted token then has exactly the distribution plain
// sampling gives it (docs/SPECULATIVE.md has the argument), though not the same draws.
#pragma once
#include <cstdint>
#include <vector>

#include "runtime/sampler.h"
#include "runtime/spec_drafter.h"

namespace dsv4::spec {

struct VerifyResult {
    int accepted = 0;   // leading drafts accepted
    int32_t next = -1;  // the corrected token after a rejection, or the bonus token
};

// rows: the target's logits [draft.tokens.size() + 1, vocab]; row i scores the position of
// draft token i, the last row the position after the whole draft. history: the committed
// tokens, oldest first; on return the accepted drafts and the next token are appended (the
// penalty of position i sees the drafts before it, as plain decoding would). Throws Error on
// a draft token outside the vocabulary or a q row that gives its own token probability 0.
VerifyResult verify(Sampler& sampler, const float* rows, int vocab, const Draft& draft,
                    std::vector<int32_t>& history);

}  // namespace dsv4::spec
