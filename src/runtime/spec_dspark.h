// Speculative drafting with the DSpark block drafter (`--spec dspark:FILE`; model/dspark.h).
// Each proposal is one pass anchored on the last committed token: the target's streams at
// the position before it and the token itself. Slots are decoded left to right (each slot's
// Markov term reads the draft token before it), greedily (q one-hot, docs/SPECULATIVE.md);
// the confidence head feeds the width controller, which may cut the block short.
#pragma once
#include <string>
#include <vector>

#include "model/dspark.h"
#include "runtime/spec_drafter.h"

namespace dsv4::spec {

class DsparkDrafter : public Drafter {
public:
    DsparkDrafter(const Dspark& dspark, const Model& target, std::string name);

    std::string name() const override { return name_; }
    int vocab() const override { return dspark_.config().vocab; }
    bool has_confidence() const override { return true; }
    double cost_per_token() const override { return cost_; }
    int64_t hidden_rows() const override { return 1; }

    void start(const StartContext& ctx) override;
    void propose(const DraftRequest& req, Draft& draft) override;
    void extend(std::span<const int32_t> tokens, const HiddenRows& hidden) override;

private:
    const Dspark& dspark_;
    std::string name_;
    double cost_;
    std::vector<float> anchor_;  // the target's streams before the last committed token
    int32_t last_ = -1;          // the last committed token
    std::vector<float> base_, conf_, logits_;
};

}  // namespace dsv4::spec
