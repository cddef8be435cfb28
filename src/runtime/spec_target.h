// The target model's side of the decode loop, plain and speculative alike: the committed
// tokens the session has not run yet ("pending"), one forward over pending + drafts per
// round, the verification, and the exact rollback of rejected drafts.
//
// Why pending can hold more than one token: a rejection leaves the session having run drafts
// that are not committed. Rewinding to the mark taken before the round loses the committed
// prefix of that forward too (a state mark exists only at forward boundaries), so the
// accepted tokens go back into pending and ride along in the next round's forward instead of
// costing a forward of their own. Their rows in the rejected forward were exact (causal), so
// the drafter gets their streams at once.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "runtime/sampler.h"
#include "runtime/session.h"
#include "runtime/spec_drafter.h"
#include "runtime/spec_stats.h"
#include "runtime/spec_verify.h"

namespace dsv4::spec {

class TargetRounds {
public:
    // want_hidden: keep the pre-head streams of every forward for a drafter.
    TargetRounds(Session& session, Sampler& sampler, bool want_hidden);

    // The first generated token: committed, not yet run.
    void start(int32_t first);
    size_t pending() const { return pending_.size(); }
    int64_t forwards() const { return forwards_; }  // target decode forwards run so far

    struct Outcome {
        VerifyResult verdict;
        std::span<const int32_t> committed;  // the tokens this round committed: accepted drafts, then next
        HiddenRows hidden;                   // their rows (empty unless want_hidden)
    };
    // One forward over pending + draft.tokens (draft empty: a plain decode step), then the
    // verification. history: the committed tokens; the new ones are appended. The returned
    // spans live until the next call.
    Outcome round(const Draft& draft, std::vector<int32_t>& history, SpecStats& stats);

    // At the end of generation: makes the session hold a prefix of the first `keep` committed
    // tokens (generation may have stopped in the middle of a round's accepted tokens).
    void settle(size_t keep);

private:
    Session& s_;
    Sampler& sampler_;
    bool want_hidden_;
    std::vector<int32_t> pending_, batch_, committed_;
    std::vector<float> logits_, hidden_;
    SessionMark mark_;
    bool has_mark_ = false;
    int64_t forwards_ = 0;
};

}  // namespace dsv4::spec
