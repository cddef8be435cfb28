// The adaptive width of speculative decoding: how many draft tokens each round verifies.
//
// Cost model (units: one plain target decode step, which yields one token): a round with W
// drafts costs 1 + W * c, where c = verify_cost (one more token in the verification forward)
// + draft_cost (proposing it). It yields 1 + C_1 + ... + C_W tokens on average, where C_i is
// the probability that drafts 1..i are all accepted: C_i = a_1 * ... * a_i with a_i the
// acceptance probability of draft i. Draft i is worth verifying iff it raises tokens per cost:
//     C_i * cost_{i-1} > c * E_{i-1}   (E_{i-1} = 1 + C_1 + ... + C_{i-1}, cost_{i-1} = 1 + (i-1) c)
// and the width is the longest prefix of drafts that passes, at most cap. W = 0 is a plain
// decoding round.
//
// a_i = min(1, kappa * conf_i): conf_i is the drafter's confidence (1 for a drafter without a
// confidence head), kappa the measured ratio of accepted drafts to their summed confidence over
// recent rounds (with conf = 1 that is the recent acceptance rate). A drafter without confidence
// gets its width before drafting; one with confidence is asked for cap tokens and stops where
// the rule fails on its actual confidences. So a badly drafting workload drives kappa, and the
// width, to 0 (plain decoding); every probe_every plain rounds one width-1 round re-measures.
//
// The controller is a pure function of the acceptances it observed (no timings), so a seeded
// sampling run is reproducible.
#pragma once
#include <span>

namespace dsv4::spec {

struct ControllerOptions {
    int cap = 4;               // widest round, 1..16 (cap 4 keeps at most one ratio-4 compressor boundary inside a verification)
    double verify_cost = 0.1;  // > 0: one more token in a verification forward, in target decode steps
    double draft_cost = -1;    // >= 0: proposing one token, same unit; < 0 = the drafter's own hint
    int probe_every = 16;      // >= 1: after this many plain rounds in a row, one round of width 1
    double memory = 0.8;       // in (0, 1): weight of the past per observed round
    double prior = 0.5;        // in (0, 1]: kappa before any round without a confidence head (1 with one),
                               // as if seen in `prior_weight` drafts
    double prior_weight = 2;   // > 0

    // Throws UsageError naming the field.
    void validate() const;
};

class WidthController {
public:
    // draft_cost_hint: the drafter's cost_per_token(), used unless options.draft_cost >= 0.
    WidthController(const ControllerOptions& options, double draft_cost_hint, bool has_confidence);

    // The width to request for the next round, 0..cap (0: decode plainly, do not draft).
    int next_width();
    // With a confidence head: whether to keep the newest proposed token, given the confidences
    // of the tokens so far (confidence[0..i], the newest last): the whole prefix must pass the
    // rule. Always true for the single token of a probe round.
    bool keep(std::span<const float> confidence) const;
    // After every round next_width() was asked for: the drafted tokens' confidences (empty
    // without a head), how many were verified (0 for a plain round) and how many of them the
    // target accepted.
    void observe(std::span<const float> confidence, int drafted, int accepted);

    double kappa() const { return accepted_ / tested_; }
    double cost_per_draft() const { return c_; }
    bool probing() const { return probing_; }
    const ControllerOptions& options() const { return o_; }

private:
    // The longest prefix of drafts with acceptance probabilities a(i) that passes the rule.
    template <class Prob>
    int rule_width(int max, Prob a) const;

    ControllerOptions o_;
    double c_;
    bool confidence_;
    double accepted_, tested_;  // decayed sums: accepted drafts, and confidence over tested drafts
    int plain_in_a_row_ = 0;
    bool probing_ = false;
};

}  // namespace dsv4::spec
