#include "runtime/quality_stats.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/error.h"

namespace dsv4 {

namespace {
// log sum_v exp(x_v), with the max taken out first.
double log_sum_exp(const float* x, int64_t V, double mx) {
    double s = 0;
    for (int64_t v = 0; v < V; ++v) s += std::exp(double(x[v]) - mx);
    return mx + std::log(s);
}
double row_max(const float* x, int64_t V) {
    double m = -INFINITY;
    for (int64_t v = 0; v < V; ++v) {
        if (std::isnan(x[v])) fail("NaN logit at vocabulary index ", v);
        m = std::max(m, double(x[v]));
    }
    return m;
}
}  // namespace

double kld_logits(const float* p, const float* q, int64_t V) {
    const double lp = log_sum_exp(p, V, row_max(p, V)), lq = log_sum_exp(q, V, row_max(q, V));
    double k = 0;
    for (int64_t v = 0; v < V; ++v) {
        const double a = double(p[v]) - lp;  // log p_v
        if (a < -745) continue;              // p_v underflows to 0: contributes nothing
        k += std::exp(a) * (a - (double(q[v]) - lq));
    }
    return std::max(k, 0.0);  // rounding can leave -1e-17 for equal rows
}

int32_t argmax_row(const float* x, int64_t V) { return int32_t(std::max_element(x, x + V) - x); }

void PairStats::add(const float* p, const float* q, int64_t V) {
    const double k = kld_logits(p, q, V);
    kld_sum += k;
    kld_max = std::max(kld_max, k);
    top1_agree += argmax_row(p, V) == argmax_row(q, V);
    ++positions;
}

void PairStats::add_rows(const float* p, const float* q, int64_t rows, int64_t V) {
    for (int64_t r = 0; r < rows; ++r) add(p + r * V, q + r * V, V);
}

void PairStats::merge(const PairStats& o) {
    positions += o.positions;
    top1_agree += o.top1_agree;
    kld_sum += o.kld_sum;
    kld_max = std::max(kld_max, o.kld_max);
}

int64_t common_prefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
    size_t n = std::min(a.size(), b.size()), i = 0;
    while (i < n && a[i] == b[i]) ++i;
    return int64_t(i);
}

double LimitRule::limit(double noise) const { return fixed ? *fixed : std::max(floor, noise_factor * noise); }

std::string LimitRule::describe() const {
    char buf[96];
    if (fixed) std::snprintf(buf, sizeof buf, "fixed %g", *fixed);
    else std::snprintf(buf, sizeof buf, "max(%g, %g x same-arm noise)", floor, noise_factor);
    return buf;
}

}  // namespace dsv4
