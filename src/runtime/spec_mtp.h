// Speculative drafting with the model's own MTP block (`--spec mtp`; REFERENCE.md §8). The
// block reads the target's pre-head streams h_t and the token x_{t+1} and predicts x_{t+2};
// it keeps its own sliding-window State at the target's positions, fed one (h_t, x_{t+1})
// pair per committed token. A proposal of W tokens chains the block on itself: draft i + 1
// reads the block's own output streams in place of the target streams it has not seen yet.
// Drafts are greedy (q one-hot, docs/SPECULATIVE.md), so the exact rejection rule holds at
// any temperature; the block has no confidence head, the controller goes by acceptance.
#pragma once
#include <string>
#include <vector>

#include "model/model.h"
#include "model/state.h"
#include "runtime/spec_drafter.h"

namespace dsv4::spec {

class MtpDrafter : public Drafter {
public:
    // UsageError when the model has no MTP block.
    explicit MtpDrafter(const Model& model);

    std::string name() const override { return "mtp"; }
    int vocab() const override { return model_.config().vocab; }
    double cost_per_token() const override { return cost_; }
    // The block attends over a sliding window: that many prompt rows make its cache exact.
    int64_t hidden_rows() const override { return model_.config().window; }

    void start(const StartContext& ctx) override;
    void propose(const DraftRequest& req, Draft& draft) override;
    void extend(std::span<const int32_t> tokens, const HiddenRows& hidden) override;

private:
    // Runs (hidden rows, next tokens) through the block and keeps the last row's output; its
    // logits wait for the next proposal (a plain round never needs them).
    void feed(const float* hidden, const int32_t* next, int64_t n);

    const Model& model_;
    double cost_;
    State state_;
    StateMark mark_;
    bool proposed_ = false;
    bool ready_ = false;               // a pair has been fed since start()
    std::vector<float> logits_, out_;  // the last fed pair's prediction and output streams
    std::vector<float> chain_logits_, chain_out_;
};

}  // namespace dsv4::spec
