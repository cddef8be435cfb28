// The streaming attention kernel (each key row loaded once for all heads, online softmax)
// against the compact one (scores, then the weighted sum), on key sets built by the engine's
// visibility rules at long shapes: 10,240 queries from position 0, and a 129-token tail at
// position 122,880. Synthetic rows; float32 tolerance 2e-6 relative to the output scale.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "backend/cpu/attention.h"

using namespace dsv4;

namespace {

constexpr int kHeads = 4, kWidth = 32, kWindow = 128, kCsaRatio = 4, kHcaRatio = 128, kTopK = 512;

std::vector<float> randn(size_t n, uint32_t seed) {
    std::mt19937 g(seed);
    std::normal_distribution<float> d(0.0f, 1.0f);
    std::vector<float> v(n);
    for (float& x : v) x = d(g);
    return v;
}

struct Case {
    int64_t pos0, T;
    std::vector<float> cache, chunk, csa_rows, hca_rows, q, sinks;
    int64_t cache_rows;
    Case(int64_t p0, int64_t n, uint32_t seed) : pos0(p0), T(n) {
        cache_rows = std::min<int64_t>(p0, kWindow - 1);
        cache = randn(static_cast<size_t>(cache_rows * kWidth), seed);
        chunk = randn(static_cast<size_t>(T * kWidth), seed + 1);
        csa_rows = randn(static_cast<size_t>((p0 + n) / kCsaRatio * kWidth), seed + 2);
        hca_rows = randn(static_cast<size_t>((p0 + n) / kHcaRatio * kWidth), seed + 3);
        q = randn(static_cast<size_t>(T * kHeads * kWidth), seed + 4);
        for (float& x : q) x *= 0.5f;  // keep the softmax away from one-hot
        sinks = randn(kHeads, seed + 5);
    }
};

// Builds the key set of query t the way attention_block does: window, then compressed rows.
void keys_for(const Case& c, int64_t t, bool csa, cpu::KeySet& keys, std::mt19937& pick) {
    cpu::LatentRows rows{c.cache.data(), c.pos0 - c.cache_rows, c.chunk.data(), c.pos0, kWidth, kWindow};
    const int64_t p = c.pos0 + t;
    keys.rows.clear();
    cpu::window_keys(rows, p, keys);
    if (csa) {
        int64_t n_vis = (p + 1) / kCsaRatio;
        std::vector<float> scores(static_cast<size_t>(n_vis));
        for (float& s : scores) s = float(pick() % 100000);
        std::vector<int32_t> sel;
        cpu::indexer_select(scores.data(), n_vis, kTopK, sel);
        for (int32_t r : sel) keys.rows.push_back(&c.csa_rows[size_t(r) * kWidth]);
    } else {
        for (int64_t r = 0; r < (p + 1) / kHcaRatio; ++r) keys.rows.push_back(&c.hca_rows[size_t(r * kWidth)]);
    }
}

void compare(const Case& c, bool csa) {
    std::mt19937 pick(7);
    cpu::KeySet keys;
    std::vector<float> a(kHeads * kWidth), b(kHeads * kWidth);
    const float scale = 1.0f / std::sqrt(float(kWidth));
    float worst = 0;
    size_t max_keys = 0;
    for (int64_t t = 0; t < c.T; ++t) {
        keys_for(c, t, csa, keys, pick);
        max_keys = std::max(max_keys, keys.rows.size());
        const float* qt = &c.q[size_t(t * kHeads * kWidth)];
        for (int h = 0; h < kHeads; ++h)
            cpu::attend_one(qt + h * kWidth, keys, kWidth, scale, c.sinks[h], &a[size_t(h * kWidth)]);
        cpu::attend_heads(qt, kHeads, keys, kWidth, scale, c.sinks.data(), b.data());
        for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::fabs(a[i] - b[i]));
    }
    // Outputs are convex combinations of unit-scale rows: O(1). Reordered float32 sums differ
    // by a few ulps.
    EXPECT_LE(worst, 2e-6f) << (csa ? "CSA" : "HCA");
    std::printf("[%s] pos0 %lld, %lld queries, up to %zu keys: max |streaming - compact| %.3g\n", csa ? "CSA" : "HCA",
                (long long)c.pos0, (long long)c.T, max_keys, worst);
}

}  // namespace

TEST(AttentionKernels, StreamingEqualsCompactOver10240Queries) {
    Case c(0, 10240, 11);
    compare(c, true);
    compare(c, false);
}

TEST(AttentionKernels, StreamingEqualsCompactOnTailAt122880) {
    Case c(122880, 129, 21);
    compare(c, true);
    compare(c, false);
}

TEST(AttentionKernels, WindowKeysFollowPositions) {
    Case c(1000, 5, 31);
    cpu::LatentRows rows{c.cache.data(), c.pos0 - c.cache_rows, c.chunk.data(), c.pos0, kWidth, kWindow};
    cpu::KeySet keys;
    cpu::window_keys(rows, 1002, keys);  // positions 875 .. 1002: 125 cached, 3 from the chunk
    ASSERT_EQ(keys.rows.size(), size_t(kWindow));
    EXPECT_EQ(keys.rows.front(), &c.cache[size_t((875 - (1000 - 127)) * kWidth)]);
    EXPECT_EQ(keys.rows.back(), &c.chunk[size_t(2 * kWidth)]);
    keys.rows.clear();
    Case s(0, 3, 41);
    cpu::LatentRows first{s.cache.data(), 0, s.chunk.data(), 0, kWidth, kWindow};
    cpu::window_keys(first, 2, keys);  // near the start the window is shorter
    EXPECT_EQ(keys.rows.size(), 3u);
}
