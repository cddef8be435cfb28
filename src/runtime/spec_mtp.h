// Speculative drafting with the model's own MTP block (`--spec mtp`; REFERENCE.md §8). The
// block reads the target's pre-head streams h_t and the token x_{t+1} and predicts x_{t+2};
// it keeps its own sliding-window State at the target's positions, fed one (h_t, x_{t+1})
// pair per committed token. The pairs wait in a buffer of at most a window until a proposal
// needs them, so plain rounds (the controller's fallback) cost nothing, and a proposal runs the
// waiting pairs in one batched forward. A proposal of W tokens chains the block on itself:
// draft i + 1 reads the block's own output streams in place of the target streams it has not
// seen yet.
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
    // Queues pairs at positions pos .. pos + n - 1; keeps only the last window of them (older
    // rows fall out of the block's sliding window before any query that needs them).
    void queue(const float* hidden, const int32_t* next, int64_t n);
    // Runs the queued pairs through the block (a fresh State when some were dropped) and keeps
    // the last row's output streams.
    void flush();

    const Model& model_;
    double cost_;
    State state_;
    StateMark mark_;
    bool proposed_ = false;
    bool ready_ = false;               // a pair has been run since start()
    std::vector<float> logits_, out_;  // the last run pair's prediction and output streams
    std::vector<float> q_hidden_;      // queued pairs: streams [n, hc * hidden] ...
    std::vector<int32_t> q_next_;      // ... and the token after each
    int64_t q_pos_ = 0;                // position of the first queued pair
    bool q_dropped_ = false;           // pairs between the State and the queue were dropped
    std::vector<float> chain_logits_, chain_out_;
};

}  // namespace dsv4::spec
