// The statistics of a teacher-forced comparison of two arms, on logits rows: full-vocabulary
// KL divergence, top-1 agreement, greedy prefix length, and the pass/fail limit rule.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace dsv4 {

// KLD(P||Q) = sum_v p_v (log p_v - log q_v), in nats, where P = softmax(p_logits) and
// Q = softmax(q_logits) over all V entries; computed in double with log-sum-exp. Throws
// dsv4::Error on a NaN logit. Exactly 0 when the rows are equal.
double kld_logits(const float* p_logits, const float* q_logits, int64_t V);

// The index of the largest entry (ties to the lowest index).
int32_t argmax_row(const float* x, int64_t V);

// Accumulates per-position statistics of one (P, Q) pair of logits sequences.
struct PairStats {
    int64_t positions = 0;
    int64_t top1_agree = 0;
    double kld_sum = 0;
    double kld_max = 0;

    void add(const float* p_logits, const float* q_logits, int64_t V);  // one position
    void add_rows(const float* p, const float* q, int64_t rows, int64_t V);
    void merge(const PairStats& o);
    double kld_mean() const { return positions ? kld_sum / double(positions) : 0.0; }
    double top1() const { return positions ? double(top1_agree) / double(positions) : 1.0; }
};

// Tokens until two greedy continuations first differ (the whole length when one is a prefix
// of the other).
int64_t common_prefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b);

// The pass limit on mean KLD, fixed before the run: `fixed` when given (--limit), else
// max(floor, noise_factor x same-arm noise).
struct LimitRule {
    double floor = 0.006;
    double noise_factor = 1.25;
    std::optional<double> fixed;

    double limit(double noise_kld) const;
    std::string describe() const;  // "max(0.006, 1.25 x same-arm noise)" or "fixed 0.01"
};

}  // namespace dsv4
