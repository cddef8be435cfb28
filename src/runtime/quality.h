// dsv4 quality's engine: teacher-forced comparison of two arms on one token tape.
//
// Each arm runs the tape four times in ABBA order (A1 B1 B2 A2), every run from an empty state
// through the arm's own prefill schedule (steps of band x frontier tokens, all logits kept),
// then greedy_tokens greedy decode steps past the end of the tape. A1 and B1 are kept whole;
// B2 and A2 are compared as they stream, so memory is 2 x tokens x vocab floats plus a step.
//   KLD(A||B)      mean over positions of the cross pairs (A1,B1) (A1,B2) (A2,B1)
//   top-1          fraction of those positions whose argmaxes agree
//   greedy prefix  tokens until A1's and B1's greedy continuations first differ
//   noise          same-arm KLD: max of KLD(A1||A2) and KLD(B1||B2) (nondeterminism, not change)
//   pass           KLD(A||B) <= LimitRule::limit(noise)
#pragma once
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "model/model.h"
#include "runtime/quality_stats.h"
#include "runtime/session.h"

namespace dsv4 {

struct QualityArm {
    const Model* model = nullptr;
    PrefillOptions prefill;  // band and frontier_bands are used
};

struct QualityOptions {
    int64_t greedy_tokens = 32;  // greedy continuation past the tape, per run
    LimitRule limit;
    std::function<void(int64_t tokens)> progress;  // tokens processed since the last call
};

struct TapeResult {
    std::string name;
    int64_t tokens = 0;
    PairStats cross;              // the three cross pairs together
    PairStats noise_a, noise_b;   // A1 vs A2, B1 vs B2
    int64_t greedy_prefix = 0;    // A1 vs B1
    int64_t greedy_prefix_noise = 0;  // min over A1 vs A2 and B1 vs B2
    int64_t greedy_tokens = 0;
    double noise = 0;             // max(noise_a.kld_mean(), noise_b.kld_mean())
    double limit = 0;
    bool pass = false;
    double wall_s = 0;
};

// One arm's run over tokens: calls on_rows(first_row, rows, logits [rows, vocab]) for every
// prefill step, in order, then returns the greedy continuation (n_greedy tokens; the first is
// the argmax after the last tape token). Teacher-forced logits need Logits::All, which
// Session::prefill does not return, so this follows the session's step schedule itself.
std::vector<int32_t> run_arm(const QualityArm& arm, std::span<const int32_t> tokens, int64_t n_greedy,
                             const std::function<void(int64_t, int64_t, const float*)>& on_rows);

// Throws dsv4::Error when the arms' vocabularies differ or the tape is empty.
TapeResult compare_on_tape(const std::string& name, std::span<const int32_t> tokens, const QualityArm& a,
                           const QualityArm& b, const QualityOptions& opt);

}  // namespace dsv4
