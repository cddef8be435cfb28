// The sampler against hand-derived distributions, empirical frequencies and a plain
// full-sort double-precision reference.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>
#include <random>
#include <set>
#include <string>

#include "core/error.h"
#include "runtime/sampler.h"

using namespace dsv4;

namespace {

// Six tokens with known probabilities, deliberately not in id order, so a filter that keeps
// "the first ids" instead of "the most likely" fails. Sorted: 0.40 (id 3), 0.25 (0), 0.15 (5),
// 0.10 (1), 0.06 (4), 0.04 (2); cumulative 0.40, 0.65, 0.80, 0.90, 0.96, 1.
const std::vector<double> kP = {0.25, 0.10, 0.04, 0.40, 0.06, 0.15};

std::vector<float> small_logits() {
    std::vector<float> l;
    for (double p : kP) l.push_back(float(std::log(p) + 1.5));  // shift: some positive, some negative
    return l;
}

// kP restricted to `keep` (or raised to 1/temperature first), renormalised.
std::vector<double> expected(const std::set<int>& keep, double temperature = 1.0) {
    std::vector<double> e(kP.size(), 0.0);
    double sum = 0;
    for (int t : keep) sum += e[size_t(t)] = std::pow(kP[size_t(t)], 1.0 / temperature);
    for (double& x : e) x /= sum;
    return e;
}
const std::set<int> kAll = {0, 1, 2, 3, 4, 5};

SamplingParams params(float temperature, int top_k = 0, float top_p = 1, float min_p = 0) {
    SamplingParams p;
    p.temperature = temperature;
    p.top_k = top_k;
    p.top_p = top_p;
    p.min_p = min_p;
    p.seed = 12345;
    return p;
}

std::vector<float> randn(size_t n, uint32_t seed, float scale) {
    std::mt19937 g(seed);
    std::normal_distribution<float> d(0.0f, scale);
    std::vector<float> v(n);
    for (float& x : v) x = d(g);
    return v;
}

std::vector<float> dist(const SamplingParams& p, const std::vector<float>& logits,
                        const std::vector<int32_t>& history = {}) {
    Sampler s(p);
    std::vector<float> probs;
    s.distribution(logits.data(), int(logits.size()), history, probs);
    return probs;
}

// distribution() matches `want` (sums to 1, and is zero exactly where want is zero).
void expect_distribution(const std::vector<float>& got, const std::vector<double>& want, double tol = 1e-6) {
    ASSERT_EQ(got.size(), want.size());
    EXPECT_NEAR(std::accumulate(got.begin(), got.end(), 0.0), 1.0, 1e-5);
    for (size_t t = 0; t < want.size(); ++t) {
        if (want[t] == 0)
            EXPECT_EQ(got[t], 0.0f) << "token " << t << " should be excluded";
        else {
            EXPECT_GT(got[t], 0.0f) << "token " << t << " should be kept";
            EXPECT_NEAR(got[t], want[t], tol) << "token " << t;
        }
    }
}

// Empirical frequencies of sample() within 5 standard errors of `want`; excluded tokens never
// drawn. Also checks distribution() against the same expectation.
void expect_frequencies(const SamplingParams& p, const std::vector<double>& want, int draws = 200000) {
    const std::vector<float> logits = small_logits();
    expect_distribution(dist(p, logits), want);
    Sampler s(p);
    std::vector<int> count(logits.size(), 0);
    for (int i = 0; i < draws; ++i) ++count[size_t(s.sample(logits.data(), int(logits.size()), {}))];
    for (size_t t = 0; t < want.size(); ++t) {
        const double f = double(count[t]) / draws;
        if (want[t] == 0) {
            EXPECT_EQ(count[t], 0) << "excluded token " << t << " was drawn";
        } else {
            const double se = std::sqrt(want[t] * (1 - want[t]) / draws);
            EXPECT_NEAR(f, want[t], 5 * se) << "token " << t;
        }
    }
}

// The specification, written the obvious way: full stable sort, double precision throughout.
std::vector<double> reference(const SamplingParams& p, const std::vector<float>& logits,
                              const std::vector<int32_t>& history) {
    const size_t n = logits.size();
    std::vector<double> l(logits.begin(), logits.end());
    size_t window = p.repeat_last_n < 0 ? history.size() : std::min(history.size(), size_t(p.repeat_last_n));
    std::set<int32_t> recent(history.end() - std::ptrdiff_t(window), history.end());
    for (int32_t t : recent) {
        double& x = l[size_t(t)];
        x = x > 0 ? double(float(x) / p.repeat_penalty) : double(float(x) * p.repeat_penalty);
    }
    std::vector<double> out(n, 0.0);
    if (p.temperature == 0) {
        out[size_t(std::max_element(l.begin(), l.end()) - l.begin())] = 1;
        return out;
    }
    std::vector<size_t> order(n);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return l[a] > l[b]; });
    if (p.top_k > 0 && size_t(p.top_k) < n) order.resize(size_t(p.top_k));
    double sum = 0;
    for (size_t t : order) sum += out[t] = std::exp((l[t] - l[order[0]]) / p.temperature);
    for (size_t t : order) out[t] /= sum;
    if (p.top_p < 1) {
        double mass = 0;
        size_t keep = 0;
        while (mass < p.top_p) mass += out[order[keep++]];
        for (size_t i = keep; i < order.size(); ++i) out[order[i]] = 0;
        order.resize(keep);
    }
    const double pmax = out[order[0]];
    for (size_t t : order)
        if (out[t] < p.min_p * pmax) out[t] = 0;
    const double kept = std::accumulate(out.begin(), out.end(), 0.0);
    for (double& x : out) x /= kept;
    return out;
}

int32_t argmax(const std::vector<float>& l) {
    int32_t best = 0;
    for (size_t i = 1; i < l.size(); ++i)
        if (l[i] > l[size_t(best)]) best = int32_t(i);
    return best;
}

}  // namespace

// ---- greedy ----

TEST(Sampler, GreedyIsArgmaxTiesToLowestId) {
    Sampler s(params(0));
    const std::vector<float> ties = {1, 3, -2, 3, 2};
    EXPECT_EQ(s.sample(ties.data(), 5, {}), 1);
    const std::vector<float> first = {7, 7, 7};
    EXPECT_EQ(s.sample(first.data(), 3, {}), 0);
    const std::vector<float> last = {-5, -4, -3};
    EXPECT_EQ(s.sample(last.data(), 3, {}), 2);
    for (uint32_t seed = 0; seed < 20; ++seed) {
        const std::vector<float> l = randn(1000, seed, 2);
        EXPECT_EQ(s.sample(l.data(), 1000, {}), argmax(l));
        std::vector<double> one_hot(1000, 0.0);
        one_hot[size_t(argmax(l))] = 1;
        expect_distribution(dist(params(0), l), one_hot);
    }
}

TEST(Sampler, GreedyFastPathAgreesWithThePenalisedPath) {
    // Greedy with no penalty takes a one-pass path; a penalty over an empty history takes the
    // copying one (penalise + argmax). Both must give the same id, ties and -inf included.
    SamplingParams slow_p = params(0);
    slow_p.repeat_penalty = 1.3f;
    Sampler fast(params(0)), slow(slow_p);
    const float inf = std::numeric_limits<float>::infinity();
    for (uint32_t seed = 0; seed < 40; ++seed) {
        std::vector<float> l = randn(777, seed, 3);
        if (seed % 4 == 1) l[600] = l[3] = l[size_t(argmax(l))];  // a tie at the top
        if (seed % 4 == 2) l.assign(l.size(), -inf);
        if (seed % 4 == 3) l[0] = inf;
        EXPECT_EQ(fast.sample(l.data(), int(l.size()), {}), slow.sample(l.data(), int(l.size()), {})) << seed;
    }
}

TEST(Sampler, GreedyNaNLogitFailsNamingIt) {
    Sampler s(params(0));
    std::vector<float> l(100, 0.5f);
    l[42] = std::nanf("");
    try {
        s.sample(l.data(), 100, {});
        FAIL() << "a NaN logit was sampled";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("logit 42 is NaN"), std::string::npos) << e.what();
    }
    EXPECT_THROW(s.sample(l.data(), 0, {}), Error);
}

TEST(Sampler, TopK1IsGreedyAtAnyTemperature) {
    for (float t : {0.01f, 0.7f, 1.0f, 3.0f, 100.0f}) {
        Sampler s(params(t, 1));
        for (uint32_t seed = 0; seed < 30; ++seed) {
            std::vector<float> l = randn(1000, seed, 1);
            if (seed % 3 == 0) l[999] = l[500] = l[size_t(argmax(l))] + 0.5f;  // a tie at the top
            EXPECT_EQ(s.sample(l.data(), 1000, {}), argmax(l)) << "temperature " << t;
        }
    }
}

// ---- the RNG ----

TEST(Sampler, SameSeedSameDrawsDifferentSeedDifferent) {
    const std::vector<float> flat(100, 0.0f);
    auto draws = [&](uint64_t seed) {
        SamplingParams p = params(1);
        p.seed = seed;
        Sampler s(p);
        std::vector<int32_t> out;
        for (int i = 0; i < 1000; ++i) out.push_back(s.sample(flat.data(), 100, {}));
        return out;
    };
    EXPECT_EQ(draws(7), draws(7));
    EXPECT_NE(draws(7), draws(8));
}

TEST(Sampler, UniformIsMt19937_64Top53Bits) {
    // The standard fixes mt19937_64: the 10000th output for seed 5489 is 9981545732273789042.
    SamplingParams p;
    p.seed = 5489;
    Sampler s(p);
    std::mt19937_64 g(5489);
    double u = 0;
    for (int i = 0; i < 10000; ++i) {
        u = s.uniform();
        // Truncated to 53 bits, not rounded (as generate_canonical may): exactly this formula.
        ASSERT_EQ(u, double(g() >> 11) * 0x1.0p-53) << "draw " << i;
        ASSERT_LT(u, 1.0);
    }
    EXPECT_EQ(u, double(9981545732273789042ull >> 11) * 0x1.0p-53);
}

TEST(Sampler, GreedyDrawsNothingSamplingDrawsOnce) {
    const std::vector<float> l = small_logits();
    SamplingParams p = params(0);
    Sampler greedy(p), fresh(p);
    for (int i = 0; i < 10; ++i) greedy.sample(l.data(), 6, {});
    EXPECT_EQ(greedy.uniform(), fresh.uniform());

    p = params(1, 1);  // one candidate left, but the draw is still made
    Sampler sampling(p), ref(p);
    for (int i = 0; i < 10; ++i) sampling.sample(l.data(), 6, {});
    for (int i = 0; i < 10; ++i) ref.uniform();
    EXPECT_EQ(sampling.uniform(), ref.uniform());
}

// ---- distributions and frequencies ----

TEST(Sampler, FrequenciesTemperature1) { expect_frequencies(params(1), expected(kAll)); }

TEST(Sampler, FrequenciesTemperatureHalf) { expect_frequencies(params(0.5f), expected(kAll, 0.5)); }

TEST(Sampler, FrequenciesTopK) { expect_frequencies(params(1, 3), expected({3, 0, 5})); }

TEST(Sampler, FrequenciesTopPKeepsBoundaryToken) {
    // 0.40 + 0.25 = 0.65 < 0.75: the 0.15 token that crosses 0.75 is kept, the rest dropped.
    expect_frequencies(params(1, 0, 0.75f), expected({3, 0, 5}));
}

TEST(Sampler, FrequenciesMinP) {
    // threshold 0.2 * 0.40 = 0.08: keeps 0.10, drops 0.06 and 0.04.
    expect_frequencies(params(1, 0, 1, 0.2f), expected({3, 0, 5, 1}));
}

TEST(Sampler, FrequenciesTopKTopPMinPAtTemperature2) {
    // T = 2 gives weights sqrt(p): 0.632, 0.5, 0.387, 0.316, 0.245, 0.2. top_k 5 drops 0.2;
    // of the remaining 2.080, top_p 0.7 needs 0.632 + 0.5 + 0.387 (0.730 >= 0.7) but not 0.316;
    // min_p 0.62 (threshold 0.392) would then drop 0.387 too.
    expect_frequencies(params(2, 5, 0.7f), expected({3, 0, 5}, 2));
    expect_frequencies(params(2, 5, 0.7f, 0.62f), expected({3, 0}, 2));
}

TEST(Sampler, TopPCutsAtTheSmallestSufficientSet) {
    const std::vector<float> l = small_logits();
    // cumulative 0.40, 0.65, 0.80, 0.90, 0.96, 1: sorted ids 3, 0, 5, 1, 4, 2.
    const std::vector<std::pair<float, std::set<int>>> cases = {
        {0.30f, {3}},          {0.41f, {3, 0}},          {0.64f, {3, 0}},
        {0.66f, {3, 0, 5}},    {0.79f, {3, 0, 5}},       {0.81f, {3, 0, 5, 1}},
        {0.91f, {3, 0, 5, 1, 4}}, {0.97f, kAll},         {1.0f, kAll}};
    for (const auto& [top_p, keep] : cases) {
        SCOPED_TRACE(top_p);
        expect_distribution(dist(params(1, 0, top_p), l), expected(keep));
    }
}

TEST(Sampler, MinPThresholdIsRelativeToTheTopToken) {
    const std::vector<float> l = small_logits();
    expect_distribution(dist(params(1, 0, 1, 0.5f), l), expected({3, 0}));        // >= 0.20
    expect_distribution(dist(params(1, 0, 1, 0.3f), l), expected({3, 0, 5}));     // >= 0.12
    expect_distribution(dist(params(1, 0, 1, 0.99f), l), expected({3}));          // top only
    // At T = 0.5 the weights are p^2: 0.16, 0.0625, 0.0225, ...; 0.2 * 0.16 = 0.032.
    expect_distribution(dist(params(0.5f, 0, 1, 0.2f), l), expected({3, 0}, 0.5));
}

TEST(Sampler, TopKTiesKeepLowestIds) {
    const std::vector<float> l = {1, 2, 2, 2, 0};
    expect_distribution(dist(params(1, 2), l), {0, 0.5, 0.5, 0, 0});
}

TEST(Sampler, NegativeInfinityLogitsAreExcluded) {
    const float inf = std::numeric_limits<float>::infinity();
    const std::vector<float> l = {0, -inf, 0, -inf};
    expect_distribution(dist(params(1), l), {0.5, 0, 0.5, 0});
    Sampler s(params(1));
    for (int i = 0; i < 2000; ++i) {
        const int32_t t = s.sample(l.data(), 4, {});
        EXPECT_TRUE(t == 0 || t == 2) << t;
    }
}

TEST(Sampler, MatchesFullSortReferenceAtFullVocab) {
    // 129280 tokens: the partial sorts (top-k, the growing top-p prefix) against a full sort.
    std::vector<int32_t> history;
    for (int i = 0; i < 200; ++i) history.push_back(int32_t((i * 7919) % 129280));
    struct Case {
        float scale, temperature;
        int top_k;
        float top_p, min_p, penalty;
    };
    const std::vector<Case> cases = {
        {3, 1.0f, 0, 1.0f, 0.0f, 1.0f},    {3, 0.8f, 40, 1.0f, 0.0f, 1.0f},
        {3, 1.0f, 0, 0.9f, 0.0f, 1.0f},    {10, 0.7f, 0, 0.95f, 0.0f, 1.0f},
        {3, 0.7f, 50, 0.95f, 0.05f, 1.0f}, {3, 1.3f, 0, 1.0f, 0.1f, 1.0f},
        {3, 0.6f, 0, 0.5f, 0.0f, 1.3f},    {3, 0.0f, 0, 1.0f, 0.0f, 1.3f},
        {2, 1.0f, 2000, 0.99f, 0.01f, 1.1f}};
    uint32_t seed = 100;
    for (const Case& c : cases) {
        SCOPED_TRACE(testing::Message() << "T " << c.temperature << " k " << c.top_k << " p " << c.top_p
                                        << " min_p " << c.min_p << " penalty " << c.penalty);
        SamplingParams p = params(c.temperature, c.top_k, c.top_p, c.min_p);
        p.repeat_penalty = c.penalty;
        p.repeat_last_n = 150;
        const std::vector<float> l = randn(129280, seed++, c.scale);
        const std::vector<double> want = reference(p, l, history);
        expect_distribution(dist(p, l, history), want, 1e-6);
    }
}

// ---- repetition penalty ----

TEST(Sampler, RepeatPenaltyConvention) {
    // Token 0 (positive, twice in the history) is divided once: 2 -> 1, not 0.5. Token 1
    // (negative) is multiplied: -1 -> -2, not -0.5. Tokens 2 and 3 are untouched.
    const std::vector<float> l = {2, -1, 0.5f, 1};
    SamplingParams p = params(1);
    p.repeat_penalty = 2;
    const std::vector<double> raw = {1, -2, 0.5, 1};
    std::vector<double> want;
    double sum = 0;
    for (double x : raw) sum += std::exp(x);
    for (double x : raw) want.push_back(std::exp(x) / sum);
    const std::vector<float> got = dist(p, l, {0, 1, 0});
    expect_distribution(got, want);

    // Both repeated tokens, positive and negative, became less likely.
    const std::vector<float> plain = dist(params(1), l, {0, 1, 0});
    EXPECT_LT(got[0], plain[0]);
    EXPECT_LT(got[1], plain[1]);

    // Greedy sees the penalised logits: 2 / 2 = 1 < 1.5.
    const std::vector<float> two = {2, 1.5f};
    SamplingParams g = params(0);
    Sampler plain_greedy(g);
    EXPECT_EQ(plain_greedy.sample(two.data(), 2, {0}), 0);
    g.repeat_penalty = 2;
    Sampler penalised_greedy(g);
    EXPECT_EQ(penalised_greedy.sample(two.data(), 2, {0}), 1);
}

TEST(Sampler, RepeatPenaltyOnlyLooksAtTheLastN) {
    const std::vector<float> l = {1, 1, 1, 1};
    const std::vector<int32_t> history = {0, 1, 2, 2};
    auto want = [](std::set<int> penalised) {  // penalty 2 on logit 1 -> 0.5
        std::vector<double> w;
        for (int t = 0; t < 4; ++t) w.push_back(std::exp(penalised.count(t) ? 0.5 : 1.0));
        const double sum = std::accumulate(w.begin(), w.end(), 0.0);
        for (double& x : w) x /= sum;
        return w;
    };
    const std::vector<std::pair<int, std::set<int>>> cases = {
        {0, {}}, {1, {2}}, {2, {2}}, {3, {1, 2}}, {4, {0, 1, 2}}, {100, {0, 1, 2}}, {-1, {0, 1, 2}}};
    for (const auto& [n, penalised] : cases) {
        SCOPED_TRACE(n);
        SamplingParams p = params(1);
        p.repeat_penalty = 2;
        p.repeat_last_n = n;
        expect_distribution(dist(p, l, history), want(penalised));
    }
}

TEST(Sampler, BadInputsThrow) {
    SamplingParams p = params(1);
    p.repeat_penalty = 1.2f;
    Sampler s(p);
    std::vector<float> l = {0, 1, 2, 3};
    EXPECT_THROW(s.sample(l.data(), 4, {4}), Error);
    EXPECT_THROW(s.sample(l.data(), 4, {-1}), Error);
    EXPECT_NO_THROW(s.sample(l.data(), 4, {3}));
    EXPECT_THROW(s.sample(l.data(), 0, {}), Error);
    l[2] = std::nanf("");
    EXPECT_THROW(s.sample(l.data(), 4, {}), Error);
    const float inf = std::numeric_limits<float>::infinity();
    const std::vector<float> all_masked = {-inf, -inf};
    EXPECT_THROW(s.sample(all_masked.data(), 2, {}), Error);
}

// ---- draw() for rejection sampling ----

TEST(Sampler, DrawFollowsGivenWeights) {
    Sampler s(params(1));
    const std::vector<float> w = {0.4f, 0.0f, 1.0f, 0.6f};  // unnormalised: 0.2, 0, 0.5, 0.3
    const std::vector<double> want = {0.2, 0, 0.5, 0.3};
    const int draws = 200000;
    std::vector<int> count(4, 0);
    for (int i = 0; i < draws; ++i) ++count[size_t(s.draw(w))];
    EXPECT_EQ(count[1], 0);
    for (size_t t : {0, 2, 3})
        EXPECT_NEAR(double(count[t]) / draws, want[t], 5 * std::sqrt(want[t] * (1 - want[t]) / draws));
    EXPECT_THROW(s.draw({0.5f, -0.1f}), Error);
    EXPECT_THROW(s.draw({0.0f, 0.0f}), Error);
}

// ---- validate() ----

TEST(Sampler, ValidateNamesTheBadField) {
    const float nan = std::nanf("");
    const std::vector<std::pair<std::function<void(SamplingParams&)>, std::string>> bad = {
        {[](SamplingParams& p) { p.temperature = -0.1f; }, "temperature"},
        {[nan](SamplingParams& p) { p.temperature = nan; }, "temperature"},
        {[](SamplingParams& p) { p.top_k = -1; }, "top_k"},
        {[](SamplingParams& p) { p.top_p = 0; }, "top_p"},
        {[](SamplingParams& p) { p.top_p = 1.01f; }, "top_p"},
        {[nan](SamplingParams& p) { p.top_p = nan; }, "top_p"},
        {[](SamplingParams& p) { p.min_p = -0.01f; }, "min_p"},
        {[](SamplingParams& p) { p.min_p = 1; }, "min_p"},
        {[](SamplingParams& p) { p.repeat_penalty = 0; }, "repeat_penalty"},
        {[](SamplingParams& p) { p.repeat_penalty = -1; }, "repeat_penalty"},
        {[](SamplingParams& p) { p.repeat_last_n = -2; }, "repeat_last_n"},
    };
    for (const auto& [mutate, field] : bad) {
        SamplingParams p;
        mutate(p);
        try {
            p.validate();
            ADD_FAILURE() << field << ": no exception";
        } catch (const UsageError& e) {
            EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
        }
        EXPECT_THROW(Sampler{p}, UsageError) << field;
    }

    // The edges of the valid ranges are accepted.
    SamplingParams edge;
    edge.temperature = 0;
    edge.top_k = 0;
    edge.top_p = 1;
    edge.min_p = 0;
    edge.repeat_penalty = 0.5f;
    edge.repeat_last_n = -1;
    EXPECT_NO_THROW(edge.validate());
    edge.top_p = 1e-6f;
    edge.min_p = 0.999f;
    EXPECT_NO_THROW(edge.validate());
}
