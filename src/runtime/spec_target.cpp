#include "runtime/spec_target.h"

#include "core/error.h"

namespace dsv4::spec {

namespace {
// Pending beyond this many tokens (several rejections in a row, each keeping some accepted
// drafts) is run in a forward of its own, so that a round's forward stays bounded.
constexpr size_t kMaxPending = 9;
}  // namespace

TargetRounds::TargetRounds(Session& s, Sampler& sampler, bool want_hidden)
    : s_(s), sampler_(sampler), want_hidden_(want_hidden) {}

void TargetRounds::start(int32_t first) {
    pending_.assign(1, first);
    has_mark_ = false;
}

TargetRounds::Outcome TargetRounds::round(const Draft& draft, std::vector<int32_t>& history, SpecStats& stats) {
    if (pending_.empty()) fail("speculative: a round without a pending token");
    const ModelConfig& c = s_.model().config();
    const int64_t V = c.vocab, nD = int64_t(c.hc_mult) * c.hidden;
    if (pending_.size() > kMaxPending) {
        // Done here, before the round, not after the rejection: generation may still stop
        // inside the tokens just committed, and then the session must not hold them (settle()).
        const int64_t run = int64_t(pending_.size() - 1);
        logits_.resize(size_t(run * V));
        s_.decode(pending_.data(), run, logits_.data());
        ++forwards_;
        stats.refed_tokens += run;
        pending_.erase(pending_.begin(), pending_.end() - 1);
    }
    const size_t P = pending_.size(), W = draft.tokens.size();
    batch_ = pending_;
    batch_.insert(batch_.end(), draft.tokens.begin(), draft.tokens.end());
    const int64_t K = int64_t(batch_.size());
    stats.refed_tokens += int64_t(P - 1);

    // A mark only when something may need rolling back; it copies the windows (O(window)).
    has_mark_ = W > 0;
    if (has_mark_) mark_ = s_.mark();
    logits_.resize(size_t(K * V));
    if (want_hidden_) hidden_.resize(size_t(K * nD));
    s_.decode(batch_.data(), K, logits_.data(), want_hidden_ ? hidden_.data() : nullptr);
    ++forwards_;

    const float* rows = logits_.data() + (P - 1) * size_t(V);
    Outcome out;
    if (W == 0) {
        out.verdict.next = sampler_.sample(rows, int(V), history);
        history.push_back(out.verdict.next);
    } else {
        out.verdict = verify(sampler_, rows, int(V), draft, history);
    }
    const size_t n = size_t(out.verdict.accepted);
    committed_.assign(draft.tokens.begin(), draft.tokens.begin() + std::ptrdiff_t(n));
    committed_.push_back(out.verdict.next);
    out.committed = committed_;
    if (want_hidden_) out.hidden = {hidden_.data() + (P - 1) * size_t(nD), int64_t(n + 1), nD};

    if (n == W) {
        pending_.assign(1, out.verdict.next);  // the session holds pending + every draft
        return out;
    }
    // Rejected: undo the whole forward, keep its committed part as pending.
    ++stats.rollbacks;
    s_.rewind(mark_);
    pending_.insert(pending_.end(), committed_.begin(), committed_.end());
    return out;
}

void TargetRounds::settle(size_t keep) {
    if (s_.tokens().size() <= keep) return;
    // Only the last round can have run past the end, and its mark holds what came before it.
    if (!has_mark_ || mark_.n_tokens > keep)
        fail("speculative: the session holds ", s_.tokens().size(), " tokens, more than the ", keep,
             " generation kept, and no mark to rewind to");
    s_.rewind(mark_);
}

}  // namespace dsv4::spec
