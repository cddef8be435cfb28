#include "backend/cpu/rope.h"

#include <algorithm>
#include <cmath>

namespace dsv4::cpu {

Rope::Rope(const RopeParams& p, int dim) : dim_(dim) {
    const int half = dim / 2;
    inv_freq_.resize(static_cast<size_t>(half));
    // As transformers computes it in float32: pos_freqs = base ** (2i / dim).
    std::vector<float> pos_freq(static_cast<size_t>(half));
    for (int i = 0; i < half; ++i)
        pos_freq[size_t(i)] = float(std::pow(double(float(p.theta)), double(float(2 * i) / float(dim))));
    if (!p.yarn) {
        for (int i = 0; i < half; ++i) inv_freq_[size_t(i)] = 1.0f / pos_freq[size_t(i)];
        return;
    }
    auto correction_dim = [&](double rotations) {
        return (dim * std::log(p.original_context / (rotations * 2 * M_PI))) / (2 * std::log(p.theta));
    };
    double low = std::max(std::floor(correction_dim(p.beta_fast)), 0.0);
    double high = std::min(std::ceil(correction_dim(p.beta_slow)), double(dim - 1));
    if (low == high) high += 0.001;
    const float factor = float(p.factor);
    for (int i = 0; i < half; ++i) {
        float ramp = std::clamp((float(i) - float(low)) / (float(high) - float(low)), 0.0f, 1.0f);
        float extrapolation = 1.0f - ramp;
        float inv_extra = 1.0f / pos_freq[size_t(i)];
        float inv_inter = 1.0f / (factor * pos_freq[size_t(i)]);
        inv_freq_[size_t(i)] = inv_inter * (1.0f - extrapolation) + inv_extra * extrapolation;
    }
}

void Rope::apply(float* v, int width, int64_t pos, bool inverse) const {
    float* r = v + (width - dim_);
    for (int i = 0; i < dim_ / 2; ++i) {
        float angle = float(pos) * inv_freq_[size_t(i)];  // one fp32 product, as in the reference
        float c = float(std::cos(double(angle)));
        float s = float(std::sin(double(angle)));
        if (inverse) s = -s;
        float x0 = r[2 * i], x1 = r[2 * i + 1];
        r[2 * i] = x0 * c - x1 * s;
        r[2 * i + 1] = x1 * c + x0 * s;
    }
}

}  // namespace dsv4::cpu
