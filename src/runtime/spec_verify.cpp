#include "runtime/spec_verify.h"

#include <cmath>

#include "core/error.h"

namespace dsv4::spec {

namespace {

// The drafter's probability of its own token: one for a deterministic drafter (q one-hot).
double q_of(const Draft& d, size_t i, int vocab) {
    if (d.q.empty()) return 1.0;
    const double q = d.q[i * size_t(vocab) + size_t(d.tokens[i])];
    if (!(q > 0 && q <= 1.0 + 1e-5))
        fail("speculative: the drafter's q gives its own token ", d.tokens[i], " probability ", q,
             " (a drawn token must have probability in (0, 1])");
    return q;
}

// norm(max(0, p - q)) up to the normalisation (Sampler::draw normalises). Its mass equals the
// rejection probability, which is positive whenever a rejection happened, except for float
// rounding when p and q are (nearly) equal: then p itself is the right fallback.
void residual(const std::vector<float>& p, const Draft& d, size_t i, int vocab, std::vector<float>& out) {
    out = p;
    if (d.q.empty()) {
        out[size_t(d.tokens[i])] = 0.0f;
    } else {
        const float* q = d.q.data() + i * size_t(vocab);
        for (size_t v = 0; v < out.size(); ++v) out[v] = std::max(0.0f, p[v] - q[v]);
    }
    double mass = 0;
    for (float x : out) mass += x;
    if (!(mass > 0)) out = p;
}

}  // namespace

VerifyResult verify(Sampler& sampler, const float* rows, int vocab, const Draft& draft,
                    std::vector<int32_t>& history) {
    const size_t W = draft.tokens.size();
    if (!draft.q.empty() && draft.q.size() != W * size_t(vocab))
        fail("speculative: the drafter gave ", draft.q.size(), " q values for ", W, " tokens of a vocabulary of ", vocab);
    for (int32_t t : draft.tokens)
        if (t < 0 || t >= vocab) fail("speculative: draft token ", t, " is outside the vocabulary [0, ", vocab, ")");

    VerifyResult r;
    const bool greedy = sampler.params().temperature == 0.0f;
    std::vector<float> p, res;
    for (size_t i = 0; i < W; ++i) {
        const float* row = rows + i * size_t(vocab);
        const int32_t d = draft.tokens[i];
        if (greedy) {
            // Sampler::sample at temperature 0 is the penalised argmax and draws nothing.
            const int32_t best = sampler.sample(row, vocab, history);
            if (best != d) {
                r.next = best;
                history.push_back(best);
                return r;
            }
        } else {
            sampler.distribution(row, vocab, history, p);
            const double pd = p[size_t(d)], qd = q_of(draft, i, vocab);
            // u < p/q, written without the division; always true when p >= q.
            if (!(sampler.uniform() * qd < pd)) {
                residual(p, draft, i, vocab, res);
                r.next = sampler.draw(res);
                history.push_back(r.next);
                return r;
            }
        }
        ++r.accepted;
        history.push_back(d);
    }
    r.next = sampler.sample(rows + W * size_t(vocab), vocab, history);
    history.push_back(r.next);
    return r;
}

}  // namespace dsv4::spec
