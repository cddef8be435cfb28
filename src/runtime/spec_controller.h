// The adaptive width of speculative decoding: how many draft tokens each round verifies.
//
// Cost model (units: one plain target decode step, which yields one token). With a_i the
// acceptance probability of draft i and C_i = a_1 * ... * a_i the probability that drafts 1..i
// are all accepted, a round with W drafts yields E_W = 1 + C_1 + ... + C_W tokens on average
// and costs
//     cost_W = 1 + W * c + verify_cost * R_W,   c = verify_cost + draft_cost,
// verify_cost being one more token in the verification forward, draft_cost proposing one, and
// R_W = sum_{n<W} C_n (1 - a_{n+1}) (n + 1) the tokens a rejection makes the next forward run
// again (after n acceptances: the old pending token and the n accepted drafts; see
// spec_target.h). Draft i is added while it raises tokens per cost, E_i / cost_i >
// E_{i-1} / cost_{i-1}; the width is that prefix, at most cap. W = 0 is a plain decoding round.
//
// a_i = min(1, kappa * conf_i): conf_i is the drafter's confidence (1 for a drafter without a
// confidence head), kappa the measured ratio of accepted drafts to their summed confidence over
// recent rounds (with conf = 1 that is the recent acceptance rate). A drafter without confidence
// gets its width before drafting; one with confidence is asked for cap tokens and stops where
// the rule fails on its actual confidences. So a badly drafting workload drives kappa, and the
// width, to 0 (plain decoding); after probe_every plain rounds one width-1 round re-measures,
// and each probe that leaves drafting off doubles that gap, up to probe_max.
// When even a draft that is surely accepted would not pay (2 tokens for 1 + c steps with c >= 1),
// no acceptance rate can change that: the controller never drafts and never probes.
//
// The controller is a pure function of the acceptances it observed (no timings), so a seeded
// sampling run is reproducible.
#pragma once
#include <span>
#include <string>

namespace dsv4::spec {

struct ControllerOptions {
    int cap = 4;               // widest round, 1..16 (cap 4 keeps at most one ratio-4 compressor boundary inside a verification)
    // > 0: one more token in a verification forward, in target decode steps; 0: the backend's
    // estimate, default_verify_cost() (what generate() does with it).
    double verify_cost = 0;
    double draft_cost = -1;    // >= 0: proposing one token, same unit; < 0 = the drafter's own hint
    int probe_every = 16;      // >= 1: after this many plain rounds in a row, one round of width 1
    int probe_max = 256;       // >= 1: the longest gap between probes (it doubles per fruitless probe)
    double memory = 0.8;       // in (0, 1): weight of the past per observed round
    double prior = 0.5;        // in (0, 1]: kappa before any round without a confidence head (1 with one),
                               // as if seen in `prior_weight` drafts
    double prior_weight = 2;   // > 0

    // Throws UsageError naming the field.
    void validate() const;
};

// The verification cost a controller uses when ControllerOptions::verify_cost is 0. The CPU
// backend is compute bound: a one-token decode runs on the calling thread while a K-token
// verification does K times the work spread over the threads, so one more token costs about
// 1.1 / threads of a step (measured on the embedded model with 2 threads: K = 2 is 1.55 steps,
// K = 3 1.85; one thread: K steps), never taken below 0.25. Other backends: 0.25 until
// measured (docs/SPECULATIVE.md).
double default_verify_cost(const std::string& backend, int threads);

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
    // Whether drafting cannot pay at any acceptance (then next_width() is always 0, no probes).
    bool never_pays() const { return never_pays_; }
    const ControllerOptions& options() const { return o_; }

private:
    // The longest prefix of drafts with acceptance probabilities a(i) that passes the rule.
    template <class Prob>
    int rule_width(int max, Prob a) const;

    ControllerOptions o_;
    double cv_, c_;  // verify_cost; verify_cost + draft_cost
    bool confidence_;
    double accepted_, tested_;  // decayed sums: accepted drafts, and confidence over tested drafts
    int plain_in_a_row_ = 0;
    int probe_gap_ = 0;   // plain rounds before the next probe (probe_every from the start)
    bool probing_ = false;
    bool never_pays_ = false;
};

}  // namespace dsv4::spec
