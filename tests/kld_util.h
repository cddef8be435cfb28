// How far one model's next-token distributions are from another's on the same tokens: the mean
// and worst KL divergence KL(P_ref || P_test) per position and how often the argmax agrees.
// Used by the tests that measure what a narrower weight format does to the logits.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "model/model.h"

namespace dsv4::test {

struct LogitsDistance {
    double mean_kld = 0, max_kld = 0;  // nats
    double top1_agree = 0;             // fraction of positions with the same argmax
};

// log-softmax in double (the divergences measured are small differences of large logits).
inline std::vector<double> log_softmax(const float* x, int64_t n) {
    double mx = *std::max_element(x, x + n), sum = 0;
    for (int64_t i = 0; i < n; ++i) sum += std::exp(double(x[i]) - mx);
    const double lse = mx + std::log(sum);
    std::vector<double> out(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) out[size_t(i)] = double(x[i]) - lse;
    return out;
}

// ref and test: [T, V] logits.
inline LogitsDistance logits_distance(const std::vector<float>& ref, const std::vector<float>& test, int64_t V) {
    const int64_t T = int64_t(ref.size()) / V;
    LogitsDistance d;
    int agree = 0;
    for (int64_t t = 0; t < T; ++t) {
        const float *r = &ref[size_t(t * V)], *q = &test[size_t(t * V)];
        std::vector<double> lp = log_softmax(r, V), lq = log_softmax(q, V);
        double kld = 0;
        for (int64_t i = 0; i < V; ++i) kld += std::exp(lp[size_t(i)]) * (lp[size_t(i)] - lq[size_t(i)]);
        d.mean_kld += kld / double(T);
        d.max_kld = std::max(d.max_kld, kld);
        agree += (std::max_element(r, r + V) - r) == (std::max_element(q, q + V) - q);
    }
    d.top1_agree = double(agree) / double(T);
    return d;
}

// All-position logits of one forward over tokens from an empty state.
inline std::vector<float> all_logits(const Model& m, const std::vector<int32_t>& tokens) {
    std::vector<float> out(tokens.size() * size_t(m.config().vocab));
    State st(m.config());
    m.forward(tokens.data(), int64_t(tokens.size()), st, out.data());
    return out;
}

}  // namespace dsv4::test
