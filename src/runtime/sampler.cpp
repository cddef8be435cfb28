#include "runtime/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"

namespace dsv4 {

namespace {

[[noreturn]] void bad_param(const char* field, const char* rule, double value) {
    throw UsageError(cat("sampling parameter ", field, " must be ", rule, " (got ", value, ")"));
}

// The first index whose running sum of weight(i) exceeds x. When rounding lets x reach the
// total, the last token with positive weight, never a zero-weight (excluded) one.
template <class Weight>
size_t pick(size_t n, double x, Weight weight) {
    double cum = 0;
    size_t last = 0;
    for (size_t i = 0; i < n; ++i) {
        const double w = weight(i);
        if (w <= 0) continue;
        cum += w;
        last = i;
        if (x < cum) return i;
    }
    return last;
}

}  // namespace

void SamplingParams::validate() const {
    // Written as !(in range) so that NaN is rejected too.
    if (!(std::isfinite(temperature) && temperature >= 0)) bad_param("temperature", "a finite number >= 0", temperature);
    if (top_k < 0) bad_param("top_k", ">= 0", top_k);
    if (!(top_p > 0 && top_p <= 1)) bad_param("top_p", "in (0, 1]", top_p);
    if (!(min_p >= 0 && min_p < 1)) bad_param("min_p", "in [0, 1)", min_p);
    if (!(std::isfinite(repeat_penalty) && repeat_penalty > 0)) bad_param("repeat_penalty", "a finite number > 0", repeat_penalty);
    if (repeat_last_n < -1) bad_param("repeat_last_n", ">= -1 (-1 = whole history)", repeat_last_n);
}

Sampler::Sampler(const SamplingParams& params) : params_(params), rng_(params.seed) {
    params_.validate();
}

double Sampler::uniform() {
    return double(rng_() >> 11) * 0x1.0p-53;
}

void Sampler::penalise(const float* logits, int vocab, const std::vector<int32_t>& history) {
    if (vocab <= 0) fail("sampler: vocab must be positive (got ", vocab, ")");
    logits_.assign(logits, logits + vocab);
    // A NaN would break argmax and the sorts' ordering; it means a bug upstream.
    for (size_t i = 0; i < logits_.size(); ++i)
        if (std::isnan(logits_[i])) fail("sampler: logit ", i, " is NaN");
    if (params_.repeat_penalty == 1.0f || params_.repeat_last_n == 0) return;

    size_t n = history.size();
    if (params_.repeat_last_n > 0) n = std::min(n, size_t(params_.repeat_last_n));
    recent_.assign(history.end() - std::ptrdiff_t(n), history.end());
    // Each distinct token once: a token seen five times is penalised once, not penalty^5.
    std::sort(recent_.begin(), recent_.end());
    recent_.erase(std::unique(recent_.begin(), recent_.end()), recent_.end());
    for (int32_t t : recent_) {
        if (t < 0 || t >= vocab) fail("sampler: history token ", t, " is outside the vocabulary [0, ", vocab, ")");
        // Dividing a negative logit would raise it; multiplying makes it more negative, so a
        // penalty > 1 always lowers the token's probability.
        float& l = logits_[size_t(t)];
        l = l > 0 ? l / params_.repeat_penalty : l * params_.repeat_penalty;
    }
}

int32_t Sampler::greedy(const float* logits, int vocab) const {
    // Greedy without a penalty, every decode step's case: no copy of the logits, and loops the
    // compiler vectorises (kLanes running maxima, NaN flagged rather than branched on; a scalar
    // loop with the checks costs ~0.5 ms for a 129,280-token vocabulary, a step of a small model).
    // The same id as penalise() + argmax(): the first of equal maxima, a NaN anywhere an error.
    if (vocab <= 0) fail("sampler: vocab must be positive (got ", vocab, ")");
    constexpr int kLanes = 8;
    float lane_max[kLanes];
    std::fill(lane_max, lane_max + kLanes, -std::numeric_limits<float>::infinity());
    bool nan = false;
    int i = 0;
    for (; i + kLanes <= vocab; i += kLanes)
        for (int k = 0; k < kLanes; ++k) {
            const float v = logits[i + k];
            nan |= v != v;
            lane_max[k] = v > lane_max[k] ? v : lane_max[k];
        }
    float max = *std::max_element(lane_max, lane_max + kLanes);
    for (; i < vocab; ++i) {
        nan |= logits[i] != logits[i];
        max = logits[i] > max ? logits[i] : max;
    }
    if (nan)
        for (int j = 0; j < vocab; ++j)
            if (std::isnan(logits[j])) fail("sampler: logit ", j, " is NaN");
    return int32_t(std::find(logits, logits + vocab, max) - logits);
}

int32_t Sampler::argmax() const {
    // max_element returns the first of equal maxima: ties go to the lowest id.
    return int32_t(std::max_element(logits_.begin(), logits_.end()) - logits_.begin());
}

double Sampler::filter() {
    // Most likely first; equal values by lowest id, so cuts through ties are deterministic.
    const auto more_likely = [](const Candidate& a, const Candidate& b) {
        return a.p > b.p || (a.p == b.p && a.id < b.id);
    };
    const size_t n = logits_.size();
    cands_.resize(n);
    // The largest scaled logit survives every filter, so it is found here, once.
    float max = -std::numeric_limits<float>::infinity();
    for (size_t i = 0; i < n; ++i) {
        cands_[i] = {logits_[i] / params_.temperature, int32_t(i)};
        max = std::max(max, cands_[i].p);
    }

    // cands_[0, sorted) holds the most likely tokens in order. The vocabulary is sorted only as
    // far as a filter needs it, not fully: a small block by partial_sort (a heap of the block,
    // about one comparison per remaining token), a large one by nth_element (O(n)) and a sort
    // of the block alone.
    size_t sorted = 0;
    const auto sort_prefix = [&](size_t to) {
        const auto from = cands_.begin() + std::ptrdiff_t(sorted), end = cands_.begin() + std::ptrdiff_t(to);
        if (64 * (to - sorted) <= cands_.size() - sorted) {
            std::partial_sort(from, end, cands_.end(), more_likely);
        } else {
            std::nth_element(from, end, cands_.end(), more_likely);
            std::sort(from, end, more_likely);
        }
        sorted = to;
    };
    const size_t k = size_t(params_.top_k);
    if (k > 0 && k < n) {
        sort_prefix(k);
        cands_.resize(k);
    }

    // Softmax weights relative to the largest logit: the top token's weight is exactly 1.
    // Normalising is deferred to the end (the filters below only need ratios and the sum).
    double total = 0;
    for (Candidate& c : cands_) {
        c.p = std::exp(c.p - max);
        total += c.p;
    }
    // An infinite largest logit (+inf, or all -inf) gives inf - inf = NaN.
    if (!std::isfinite(total)) fail("sampler: the largest logit is ", max, ", not a finite number");

    // Top-p: the shortest most-likely-first prefix whose mass reaches top_p (at least one
    // token, the boundary token included). The sorted prefix grows geometrically, so a peaked
    // distribution sorts only a few dozen tokens.
    if (params_.top_p < 1.0f) {
        const double target = double(params_.top_p) * total;
        double mass = 0;
        size_t keep = 0;
        while (mass < target && keep < cands_.size()) {
            if (keep == sorted) sort_prefix(std::min(cands_.size(), std::max<size_t>(64, 2 * sorted)));
            mass += cands_[keep++].p;
        }
        cands_.resize(keep);
    }

    // Min-p: p < min_p * p_max is the same as weight < min_p, as p_max's weight is 1. Always
    // keeps the top token (min_p < 1).
    if (params_.min_p > 0.0f) {
        const float min_p = params_.min_p;
        std::erase_if(cands_, [min_p](const Candidate& c) { return c.p < min_p; });
    }

    double kept = 0;
    for (const Candidate& c : cands_) kept += c.p;
    return kept;
}

int32_t Sampler::sample(const float* logits, int vocab, const std::vector<int32_t>& history) {
    if (params_.temperature == 0.0f && (params_.repeat_penalty == 1.0f || params_.repeat_last_n == 0))
        return greedy(logits, vocab);
    penalise(logits, vocab, history);
    if (params_.temperature == 0.0f) return argmax();
    const double total = filter();
    const double x = uniform() * total;
    return cands_[pick(cands_.size(), x, [this](size_t i) { return double(cands_[i].p); })].id;
}

void Sampler::distribution(const float* logits, int vocab, const std::vector<int32_t>& history,
                           std::vector<float>& probs) {
    penalise(logits, vocab, history);
    probs.assign(size_t(vocab), 0.0f);
    if (params_.temperature == 0.0f) {
        probs[size_t(argmax())] = 1.0f;
        return;
    }
    const double total = filter();
    for (const Candidate& c : cands_) probs[size_t(c.id)] = float(c.p / total);
}

int32_t Sampler::draw(const std::vector<float>& probs) {
    double total = 0;
    for (float p : probs) {
        if (!(p >= 0 && std::isfinite(p))) fail("sampler: draw() weight ", p, " is not a finite number >= 0");
        total += p;
    }
    if (!(total > 0)) fail("sampler: draw() needs a positive total weight (got ", total, ")");
    const double x = uniform() * total;
    return int32_t(pick(probs.size(), x, [&probs](size_t i) { return double(probs[i]); }));
}

}  // namespace dsv4
