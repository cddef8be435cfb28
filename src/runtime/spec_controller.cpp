#include "runtime/spec_controller.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace dsv4::spec {

namespace {
[[noreturn]] void bad(const char* field, const char* rule, double v) {
    throw UsageError(cat("speculative option ", field, " must be ", rule, " (got ", v, ")"));
}
}  // namespace

void ControllerOptions::validate() const {
    // Written as !(in range) so that NaN is rejected too.
    if (!(cap >= 1 && cap <= 16)) bad("cap", "in 1..16", cap);
    if (!(verify_cost >= 0 && std::isfinite(verify_cost)))
        bad("verify_cost", "a finite number >= 0 (0 = the backend's estimate)", verify_cost);
    if (!std::isfinite(draft_cost)) bad("draft_cost", "finite (< 0 = the drafter's hint)", draft_cost);
    if (probe_every < 1) bad("probe_every", ">= 1", probe_every);
    if (probe_max < 1) bad("probe_max", ">= 1", probe_max);
    if (!(memory > 0 && memory < 1)) bad("memory", "in (0, 1)", memory);
    if (!(prior > 0 && prior <= 1)) bad("prior", "in (0, 1]", prior);
    if (!(prior_weight > 0 && std::isfinite(prior_weight))) bad("prior_weight", "a finite number > 0", prior_weight);
}

WidthController::WidthController(const ControllerOptions& o, double hint, bool has_confidence)
    : o_(o), confidence_(has_confidence) {
    o_.validate();
    if (!(hint >= 0 && std::isfinite(hint))) fail("speculative: the drafter's cost hint ", hint, " is not a finite number >= 0");
    if (!(o_.verify_cost > 0)) fail("speculative: verify_cost 0 (the backend's estimate) was not resolved");
    cv_ = o_.verify_cost;
    probe_gap_ = o_.probe_every;
    c_ = cv_ + (o_.draft_cost >= 0 ? o_.draft_cost : hint);
    never_pays_ = rule_width(1, [](int) { return 1.0; }) == 0;
    // The prior decays with the evidence (both sums are multiplied by memory every round), so
    // after a few rounds kappa is the measured ratio alone and can reach 0.
    // A confidence head is trusted (kappa 1) until the evidence says otherwise.
    accepted_ = (has_confidence ? 1.0 : o_.prior) * o_.prior_weight;
    tested_ = o_.prior_weight;
}

template <class Prob>
int WidthController::rule_width(int max, Prob a) const {
    // Tokens E and cost of the round for the prefix of w drafts, extended one draft at a time.
    // R: the tokens a rejection makes the next forward run again (the old pending token and
    // the n accepted drafts, after n acceptances).
    double C = 1, E = 1, R = 0;
    int w = 0;
    while (w < max) {
        const double ai = std::min(1.0, a(w)), Ci = C * ai;
        const double Ri = R + C * (1 - ai) * (w + 1);
        const double cost = 1 + w * c_ + cv_ * R, cost_i = 1 + (w + 1) * c_ + cv_ * Ri;
        // Strictly better, so that a tie (or C_i = 0) keeps the narrower round.
        if (!((E + Ci) * cost > E * cost_i)) break;
        C = Ci;
        E += Ci;
        R = Ri;
        ++w;
    }
    return w;
}

int WidthController::next_width() {
    if (never_pays_) return 0;
    // Even a drafter that turns out fully confident (conf = 1) would get a_1 = min(1, kappa):
    // if that does not pass the rule, drafting is not worth its cost this round.
    const double k = kappa();
    int w = rule_width(o_.cap, [&](int i) { return confidence_ && i > 0 ? 1.0 : k; });
    if (confidence_ && w > 0) w = o_.cap;  // the actual confidences cut it (keep())
    // After probe_gap_ rounds without drafts (by this rule, or keep() cutting every draft). A
    // probe that leaves drafting off doubles the gap (up to probe_max): on the CPU a probe costs
    // about three plain steps, so probing every 16 rounds where drafting cannot win lost 15-25%.
    // Drafting that pays again brings the gap back to probe_every.
    if (w > 0) probe_gap_ = o_.probe_every;
    else if (probing_) probe_gap_ = std::min(2 * probe_gap_, std::max(o_.probe_every, o_.probe_max));
    probing_ = plain_in_a_row_ >= probe_gap_;
    return probing_ ? 1 : w;
}

bool WidthController::keep(std::span<const float> conf) const {
    if (conf.empty()) return true;
    if (probing_ && conf.size() == 1) return true;
    const double k = kappa();
    const int n = int(conf.size());
    return rule_width(n, [&](int i) { return k * std::clamp(double(conf[size_t(i)]), 0.0, 1.0); }) == n;
}

void WidthController::observe(std::span<const float> conf, int drafted, int accepted) {
    // A round without drafts, by next_width()'s choice or because keep() cut the whole draft:
    // towards the next probe. Without probes a confidence the rule always cuts would never be
    // calibrated.
    if (drafted <= 0) {
        ++plain_in_a_row_;
        return;
    }
    plain_in_a_row_ = 0;
    if (accepted < 0 || accepted > drafted) fail("speculative: ", accepted, " of ", drafted, " drafts accepted");
    // The tokens the target actually judged: the accepted ones and the first rejected one.
    const int tested = std::min(accepted + 1, drafted);
    double expected = 0;
    for (int i = 0; i < tested; ++i) expected += conf.empty() ? 1.0 : std::clamp(double(conf[size_t(i)]), 0.0, 1.0);
    accepted_ = o_.memory * accepted_ + accepted;
    tested_ = o_.memory * tested_ + expected;
    // Confidences of 0 on accepted tokens would make kappa unbounded; a_i is clamped to 1, and
    // the floor keeps the division defined.
    tested_ = std::max(tested_, 1e-9);
}

double default_verify_cost(const std::string& backend, int threads) {
    if (backend == "cpu") return std::max(0.25, 1.1 / std::max(1, threads));
    return 0.25;
}

}  // namespace dsv4::spec
