// Rotary position embedding on the trailing `dim` channels of a vector, interleaved pairs
// (c, c+1). Frequencies follow transformers: plain theta^(-2i/dim), or YaRN's blend of
// interpolated and extrapolated frequencies (no magnitude scaling; V4 uses none).
#pragma once
#include <cstdint>
#include <vector>

#include "model/config.h"

namespace dsv4::cpu {

class Rope {
public:
    Rope() = default;
    Rope(const RopeParams& p, int dim);

    int dim() const { return dim_; }
    const std::vector<float>& inv_freq() const { return inv_freq_; }
    // Rotates v[width - dim, width) by the angle of `pos` (inverse: by minus that angle).
    void apply(float* v, int width, int64_t pos, bool inverse = false) const;

private:
    int dim_ = 0;
    std::vector<float> inv_freq_;
};

}  // namespace dsv4::cpu
