// The runtime on the transformers fixtures: banded prefill of any band size and frontier,
// then one-token decode, gives the full-forward logits; marks rewind exactly; snapshots are
// exact; memory admission refuses before touching the state.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <cstring>
#include <fstream>
#include <map>

#include "core/error.h"
#include "io/convert_hf.h"
#include "runtime/session.h"
#include "fixture_util.h"

namespace fs = std::filesystem;
using namespace dsv4;

namespace {


// One converted model per fixture for the whole test binary.
const Model& model(const std::string& name) {
    static std::map<std::string, std::unique_ptr<Model>> cache;
    auto& m = cache[name];
    if (!m) {
        test::TempDir dir;  // removed after loading: the mapping stays valid after the unlink
        m = std::make_unique<Model>(test::convert_fixture(name, dir.path()));
    }
    return *m;
}

PrefillOptions options(int64_t band, int frontier) {
    PrefillOptions o;
    o.band = band;
    o.frontier_bands = frontier;
    o.admission.headroom_bytes = 0;
    return o;
}

int64_t argmax(const float* x, int64_t n) { return std::max_element(x, x + n) - x; }

}  // namespace

struct BandCase {
    std::string fixture;
    int64_t band;
    int frontier;
    int64_t prompt;  // tokens prefilled; the rest are decoded one by one
};

class Banded : public ::testing::TestWithParam<BandCase> {};

TEST_P(Banded, PrefillThenDecodeEqualsFullForward) {
    const BandCase& bc = GetParam();
    const Model& m = model(bc.fixture);
    auto toks = test::fixture_tokens(bc.fixture);
    auto ref = test::fixture_logits(bc.fixture);
    const int64_t V = m.config().vocab, T = int64_t(toks.size());
    State full_state(m.config());
    std::vector<float> full(static_cast<size_t>(T * V));
    m.forward(toks.data(), T, full_state, full.data());
    float scale = 0;
    for (float x : full) scale = std::max(scale, std::fabs(x));

    Session s(m, options(bc.band, bc.frontier));
    std::vector<float> logits(static_cast<size_t>(V));
    s.prefill(toks.data(), bc.prompt, logits.data());
    float worst = 0;
    int mismatches = 0;
    auto check = [&](int64_t pos) {
        for (int64_t v = 0; v < V; ++v) worst = std::max(worst, std::fabs(logits[size_t(v)] - full[size_t(pos * V + v)]));
        mismatches += argmax(logits.data(), V) != argmax(&ref[size_t(pos * V)], V);
    };
    check(bc.prompt - 1);
    for (int64_t t = bc.prompt; t < T; ++t) {
        s.decode(&toks[size_t(t)], 1, logits.data());
        check(t);
    }
    EXPECT_EQ(s.position(), T);
    EXPECT_LE(worst, 1e-5f * scale);  // float32 rounding of differently grouped sums only
    EXPECT_EQ(mismatches, 0);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Banded,
                         ::testing::Values(BandCase{"long_seq", 1, 1, 40}, BandCase{"long_seq", 7, 3, 301},
                                           BandCase{"long_seq", 64, 2, 500}, BandCase{"long_seq", 2048, 5, 599},
                                           BandCase{"mini_flash", 7, 1, 100}, BandCase{"mini_flash", 2048, 5, 131},
                                           BandCase{"legacy_hfnames", 64, 1, 257}, BandCase{"odd_order", 1, 2, 97}));

TEST(Session, MarkAndRewindAreExact) {
    const Model& m = model("long_seq");
    auto toks = test::fixture_tokens("long_seq");
    const int64_t V = m.config().vocab;
    Session s(m, options(64, 1));
    std::vector<float> a(static_cast<size_t>(4 * V)), b(static_cast<size_t>(4 * V)), last(static_cast<size_t>(V));
    s.prefill(toks.data(), 253, last.data());  // ends inside a CSA window (253 % 4 == 1)
    SessionMark mk = s.mark();
    s.decode(&toks[253], 4, a.data());    // crosses a CSA window boundary
    s.decode(&toks[100], 3, b.data());    // wrong continuation, to be rolled back
    s.rewind(mk);
    EXPECT_EQ(s.position(), 253);
    EXPECT_EQ(s.tokens().size(), 253u);
    s.decode(&toks[253], 4, b.data());
    EXPECT_EQ(a, b);  // bitwise
}

TEST(Session, SnapshotCopyContinuesIdentically) {
    const Model& m = model("mini_flash");
    auto toks = test::fixture_tokens("mini_flash");
    const int64_t V = m.config().vocab;
    State st(m.config());
    m.forward(toks.data(), 150, st, nullptr, {Logits::None});
    State snap = st;  // the prefix-cache snapshot
    std::vector<float> a(static_cast<size_t>(V)), b(static_cast<size_t>(V));
    m.forward(&toks[150], 30, st, a.data(), {Logits::Last});
    m.forward(&toks[150], 30, snap, b.data(), {Logits::Last});
    EXPECT_EQ(a, b);
    EXPECT_EQ(st.bytes().total(), snap.bytes().total());
}

TEST(Session, StateBytesGrowAsDocumented) {
    const Model& m = model("long_seq");
    auto toks = test::fixture_tokens("long_seq");
    State st(m.config());
    m.forward(toks.data(), 512, st, nullptr, {Logits::None});
    StateBytes b = st.bytes();
    StateGrowth g = state_growth(m.config());
    // long_seq: CSA layers 1 and 3 (ratio 4), HCA layer 2 (ratio 64); 512 tokens
    EXPECT_EQ(b.compressed, size_t(2 * (512 / 4) * 32 * 4 + (512 / 64) * 32 * 4));
    EXPECT_EQ(b.indexer, size_t(2 * (512 / 4) * 32 * 4));
    EXPECT_EQ(b.window, size_t(4) * g.fixed_per_layer);
    EXPECT_DOUBLE_EQ(g.all_layers_per_token, 2 * (32 + 32) / 4.0 * 4 + 32 / 64.0 * 4);
}

TEST(Session, AdmissionRefusesBeforeTouchingTheState) {
    const Model& m = model("mini_flash");
    auto toks = test::fixture_tokens("mini_flash");
    PrefillOptions o = options(2048, 5);
    o.admission.headroom_bytes = uint64_t(4) << 30;
    o.admission.available = [] { return uint64_t(3) << 30; };  // less than the headroom alone
    Session s(m, o);
    std::vector<float> logits(static_cast<size_t>(m.config().vocab));
    try {
        s.prefill(toks.data(), 100, logits.data());
        FAIL() << "admission should have refused";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("refused"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("3072 MiB are available"), std::string::npos) << e.what();
    }
    EXPECT_EQ(s.position(), 0);
    o.admission.available = [] { return uint64_t(5) << 30; };
    Session ok(m, o);
    ok.prefill(toks.data(), 100, logits.data());
    EXPECT_EQ(ok.position(), 100);
}

TEST(Session, EstimateIsLinearInTokens) {
    const ModelConfig& c = model("long_seq").config();
    MemoryEstimate a = estimate_prefill(c, 2048, 10240, false), b = estimate_prefill(c, 10240, 10240, false);
    MemoryEstimate big = estimate_prefill(c, 1 << 20, 10240, false);
    EXPECT_GT(b.state_bytes, a.state_bytes);
    EXPECT_EQ(big.scratch_bytes, b.scratch_bytes);  // scratch is per step, not per prompt
    EXPECT_NEAR(double(big.state_bytes - b.state_bytes) / double((1 << 20) - 10240),
                state_growth(c).all_layers_per_token, 0.01);
}

// The drafters read the target's pre-head streams: a banded prefill's tail of them, and
// decode's rows, equal the rows of one full forward.
TEST(Session, HiddenStreamsMatchTheFullForward) {
    const Model& m = model("long_seq");
    auto toks = test::fixture_tokens("long_seq");
    const int64_t nD = int64_t(m.config().hc_mult) * m.config().hidden, n = 200, tail = 70;
    State st(m.config());
    ForwardOptions fo{Logits::None};
    std::vector<float> full(static_cast<size_t>((n + 2) * nD)), got(static_cast<size_t>(tail * nD));
    fo.hidden = full.data();
    m.forward(toks.data(), n + 2, st, nullptr, fo);

    Session s(m, options(16, 2));  // steps of 32 tokens: the tail spans three steps
    s.prefill(toks.data(), n, nullptr, got.data(), tail);
    EXPECT_EQ(std::vector<float>(full.begin() + (n - tail) * nD, full.begin() + n * nD), got);
    std::vector<float> logits(static_cast<size_t>(2 * m.config().vocab)), dec(static_cast<size_t>(2 * nD));
    s.decode(&toks[n], 2, logits.data(), dec.data());
    for (size_t i = 0; i < dec.size(); ++i) ASSERT_NEAR(dec[i], full[size_t(n * nD) + i], 1e-4f) << i;
}
