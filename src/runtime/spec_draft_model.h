// Speculative drafting with a separate, smaller model of the same vocabulary
// (`--spec draft:FILE`): its own Session follows the committed tokens; it proposes
// autoregressively, one decode step per token, and rolls back what the target rejected with
// per-token marks. Greedy when the target is greedy (q one-hot, deterministic); otherwise it
// samples from its own processed distribution under the target's sampling parameters (its own
// random stream) and hands that distribution over as q. No confidence: its own probability of
// a token is no calibrated predictor of acceptance (on an untrained model it is ~1/vocab for
// tokens the target accepts every time), so the controller goes by the measured acceptance.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "model/model.h"
#include "runtime/sampler.h"
#include "runtime/session.h"
#include "runtime/spec_drafter.h"

namespace dsv4::spec {

// Bytes a decode step reads, roughly: every tensor but the embedding (one row is read), the
// routed experts scaled by top_k / n_experts. The ratio of two models' values is the draft
// cost hint.
double decode_step_bytes(const Model& m);

class DraftModelDrafter : public Drafter {
public:
    // UsageError when the vocabularies differ. options: the draft session's prefill options.
    // temperature >= 0 replaces the target's temperature for the drafter's own sampling (its
    // other sampling parameters stay the target's); < 0 keeps the target's. Any value keeps the
    // output exact (q is what was sampled from); it only changes the acceptance.
    DraftModelDrafter(const Model& draft, const Model& target, std::string name, PrefillOptions options = {},
                      float temperature = -1.0f);

    std::string name() const override { return name_; }
    int vocab() const override { return model_.config().vocab; }
    double cost_per_token() const override { return cost_; }

    void start(const StartContext& ctx) override;
    void propose(const DraftRequest& req, Draft& draft) override;
    void extend(std::span<const int32_t> tokens, const HiddenRows& hidden) override;

    const Session& session() const { return session_; }  // for tests: what it holds

private:
    // Room for running n more tokens in the draft model's context.
    bool fits(size_t n) const;

    const Model& model_;
    std::string name_;
    double cost_;
    float temperature_;
    Session session_;
    std::optional<Sampler> sampler_;  // per start(): the target's parameters, its own seed
    std::vector<int32_t> history_;    // the committed tokens (the repetition penalty reads them)
    std::vector<int32_t> unfed_;      // committed tokens the session has not run: at least the last
    std::vector<int32_t> proposed_;   // the last proposal
    std::vector<SessionMark> marks_;  // marks_[j]: the session before it ran proposed_[j]
    std::vector<float> logits_, probs_;
    std::vector<int32_t> hist_;       // scratch: history_ + the tokens proposed so far
};

}  // namespace dsv4::spec
