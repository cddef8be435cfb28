// Synthetic drafters with known behaviour, for tests and for benchmarks that want the bounds
// of speculative decoding (every draft right: the verification overhead alone; every draft
// wrong: the cost of the fallback). Everything they do is a fixed function of the seed and
// the position, so runs are reproducible.
#pragma once
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "runtime/spec_drafter.h"

namespace dsv4::spec {

struct ScriptOptions {
    std::string name = "script";
    // Probability that the token proposed for a position is the script's; otherwise a different
    // one. Drawn once per position (a hash of seed and position), so a re-proposal agrees.
    double right = 1.0;
    // With a confidence head whose values are uniform in [0, 1) per position (a head that knows
    // nothing); without one otherwise.
    bool random_confidence = false;
    uint64_t seed = 0;
    double cost_per_token = 0;  // what it tells the controller
};

// Proposes from a script: the expected whole sequence (prompt + continuation, e.g. the target's
// own greedy output). On the script, position t gets script[t] (or, with probability
// 1 - right, another token); once the committed tokens leave it, a hash token. Deterministic:
// q is one-hot (Draft::q empty).
class ScriptedDrafter : public Drafter {
public:
    ScriptedDrafter(std::vector<int32_t> script, int vocab, ScriptOptions options = {});

    std::string name() const override { return o_.name; }
    int vocab() const override { return vocab_; }
    bool has_confidence() const override { return o_.random_confidence; }
    double cost_per_token() const override { return o_.cost_per_token; }

    void start(const StartContext& ctx) override;
    void propose(const DraftRequest& req, Draft& draft) override;
    void extend(std::span<const int32_t> tokens, const HiddenRows& hidden) override;

    int64_t proposals() const { return proposals_; }  // propose() calls
    int64_t position() const { return n_; }           // committed tokens seen

private:
    std::vector<int32_t> script_;
    int vocab_;
    ScriptOptions o_;
    int64_t n_ = 0;          // committed length
    bool on_script_ = true;  // the committed tokens equal the script's prefix
    int64_t proposals_ = 0;
};

// Draws each proposal from a random distribution q over a few tokens (a fresh one per
// position, from the seed) and hands q over: the sampling counterpart of a wrong-ish drafter,
// for testing the rejection rule through the whole loop.
class RandomDrafter : public Drafter {
public:
    RandomDrafter(int vocab, int support, uint64_t seed, std::string name = "random");

    std::string name() const override { return name_; }
    int vocab() const override { return vocab_; }
    double cost_per_token() const override { return 0; }

    void start(const StartContext& ctx) override;
    void propose(const DraftRequest& req, Draft& draft) override;
    void extend(std::span<const int32_t> tokens, const HiddenRows& hidden) override;

    // The q of position t (what propose() draws from there).
    void distribution(int64_t t, std::vector<float>& q) const;

private:
    int vocab_, support_;
    uint64_t seed_;
    std::string name_;
    std::mt19937_64 rng_;
    int64_t n_ = 0;
};

}  // namespace dsv4::spec
