// The MTP block and the DSpark drafter against their PyTorch reference: random heads of the
// structure scripts/gpu/train_heads.py trains, on the mini_flash trunk, with outputs made by
// scripts/gpu/make_head_fixtures.py (tests/fixtures/mini_flash_heads). Same bound as the
// trunk fixtures: the same token wins everywhere and max |difference| <= 1e-3 x max |reference|.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>

#include "core/error.h"
#include "io/convert_dspark.h"
#include "io/convert_hf.h"
#include "model/dspark.h"
#include "model/model.h"
#include "fixture_util.h"

namespace fs = std::filesystem;
using namespace dsv4;

namespace {

fs::path heads_dir() { return test::fixture_dir("mini_flash_heads"); }

std::vector<float> floats(const fs::path& p) {
    std::vector<uint8_t> b = test::read_file(p.string());
    std::vector<float> out(b.size() / 4);
    std::memcpy(out.data(), b.data(), out.size() * 4);
    return out;
}

// The trunk with the MTP block: the fixture's checkpoint plus mtp.safetensors in one folder.
std::string convert_with_mtp(const test::TempDir& tmp) {
    fs::path hf = tmp.path() / "hf";
    fs::create_directories(hf);
    for (const char* f : {"config.json", "model.safetensors"}) fs::copy_file(test::fixture_dir("mini_flash") / f, hf / f);
    fs::copy_file(heads_dir() / "mtp.safetensors", hf / "mtp.safetensors");
    ConvertOptions o;
    o.hf_dir = hf.string();
    o.out_path = tmp.file("mtp.gguf");
    o.quiet = true;
    ConvertReport r = convert_hf(o);
    EXPECT_EQ(r.mtp_blocks, 1);
    EXPECT_EQ(r.skipped, 0u);
    return o.out_path;
}

struct Compare {
    float max_ref = 0, max_diff = 0;
    int mismatches = 0;
};

Compare compare(const float* ref, const float* got, int64_t rows, int64_t V) {
    Compare c;
    for (int64_t i = 0; i < rows * V; ++i) {
        c.max_ref = std::max(c.max_ref, std::fabs(ref[i]));
        c.max_diff = std::max(c.max_diff, std::fabs(ref[i] - got[i]));
    }
    for (int64_t r = 0; r < rows; ++r)
        c.mismatches += std::max_element(ref + r * V, ref + (r + 1) * V) - ref - r * V !=
                        std::max_element(got + r * V, got + (r + 1) * V) - got - r * V;
    return c;
}

// The trunk's pre-head streams of every fixture token.
std::vector<float> trunk_streams(const Model& m, const std::vector<int32_t>& toks) {
    const int64_t nD = int64_t(m.config().hc_mult) * m.config().hidden;
    std::vector<float> hidden(toks.size() * size_t(nD));
    State st(m.config());
    ForwardOptions fo{Logits::None};
    fo.hidden = hidden.data();
    m.forward(toks.data(), int64_t(toks.size()), st, nullptr, fo);
    return hidden;
}

}  // namespace

TEST(Mtp, ConvertedBlockMatchesTheReference) {
    test::TempDir tmp;
    Model m(convert_with_mtp(tmp));
    ASSERT_TRUE(m.has_mtp());
    auto toks = test::fixture_tokens("mini_flash");
    const int64_t T = int64_t(toks.size()), V = m.config().vocab, nD = int64_t(m.config().hc_mult) * m.config().hidden;
    auto ref = floats(heads_dir() / "mtp_logits.f32");
    ASSERT_EQ(int64_t(ref.size()), (T - 1) * V);
    auto hidden = trunk_streams(m, toks);

    std::vector<float> got(ref.size());
    State st(m.mtp_config());
    m.mtp_forward(hidden.data(), &toks[1], T - 1, st, got.data());
    Compare c = compare(ref.data(), got.data(), T - 1, V);
    std::printf("[mtp] %lld rows: max|diff| %.3g of max|ref| %.3g, argmax mismatches %d\n", (long long)(T - 1),
                c.max_diff, c.max_ref, c.mismatches);
    EXPECT_EQ(c.mismatches, 0);
    EXPECT_LE(c.max_diff, 1e-3f * c.max_ref);

    // Incremental: in chunks across the sliding window (16) and one row at a time, equal to
    // the whole pass within float32 rounding.
    std::vector<float> inc(ref.size());
    State s2(m.mtp_config());
    for (int64_t b = 0, k = 1; b < T - 1; b += k, k = k == 1 ? 23 : 1) {
        const int64_t n = std::min(k, T - 1 - b);
        m.mtp_forward(&hidden[size_t(b * nD)], &toks[size_t(b + 1)], n, s2, &inc[size_t(b * V)]);
    }
    Compare ci = compare(got.data(), inc.data(), T - 1, V);
    EXPECT_EQ(ci.mismatches, 0);
    EXPECT_LE(ci.max_diff, 1e-5f * c.max_ref);
}

TEST(Mtp, ModelWithoutTheBlockSaysSo) {
    test::TempDir tmp;
    Model m(test::convert_fixture("mini_flash", tmp.path()));
    EXPECT_FALSE(m.has_mtp());
    State st(m.mtp_config());
    std::vector<float> h(size_t(m.config().hc_mult * m.config().hidden)), out(size_t(m.config().vocab));
    int32_t t = 5;
    EXPECT_THROW(m.mtp_forward(h.data(), &t, 1, st, out.data()), Error);
}

TEST(Dspark, ConvertedDrafterMatchesTheReference) {
    test::TempDir tmp;
    Model m(test::convert_fixture("mini_flash", tmp.path()));
    DsparkConvertOptions o;
    o.dir = heads_dir().string();
    o.out_path = tmp.file("dspark.gguf");
    convert_dspark(o);
    Dspark ds(o.out_path, m);
    const int W = ds.config().block;
    auto toks = test::fixture_tokens("mini_flash");
    const int64_t V = m.config().vocab, nD = int64_t(m.config().hc_mult) * m.config().hidden;
    auto hidden = trunk_streams(m, toks);
    std::vector<int64_t> anchors;
    {
        std::ifstream in(heads_dir() / "dspark_anchors.txt");
        int64_t a;
        while (in >> a) anchors.push_back(a);
    }
    auto ref = floats(heads_dir() / "dspark_logits.f32");
    auto ref_conf = floats(heads_dir() / "dspark_conf.f32");
    ASSERT_EQ(ref.size(), anchors.size() * size_t(W * V));
    std::vector<float> got(ref.size()), conf(static_cast<size_t>(W));
    float conf_diff = 0;
    for (size_t i = 0; i < anchors.size(); ++i) {
        const int64_t t = anchors[i];
        float* g = &got[i * size_t(W * V)];
        ds.propose(&hidden[size_t(t * nD)], toks[size_t(t + 1)], W, g, conf.data());
        for (int j = 0; j < W; ++j) {
            ds.add_markov(toks[size_t(t + 1 + j)], g + j * V);  // teacher forced, as the reference
            const float p = 1.0f / (1.0f + std::exp(-ref_conf[i * size_t(W) + size_t(j)]));
            conf_diff = std::max(conf_diff, std::fabs(p - conf[size_t(j)]));
        }
    }
    Compare c = compare(ref.data(), got.data(), int64_t(anchors.size()) * W, V);
    std::printf("[dspark] %zu anchors x %d slots: max|diff| %.3g of max|ref| %.3g, argmax mismatches %d, "
                "confidence max|diff| %.3g\n", anchors.size(), W, c.max_diff, c.max_ref, c.mismatches, conf_diff);
    EXPECT_EQ(c.mismatches, 0);
    EXPECT_LE(c.max_diff, 1e-3f * c.max_ref);
    EXPECT_LE(conf_diff, 1e-4f);

    // Fewer slots give the same first slots (causal inside the block).
    std::vector<float> two(static_cast<size_t>(2 * V)), conf2(2);
    ds.propose(&hidden[size_t(anchors[3] * nD)], toks[size_t(anchors[3] + 1)], 2, two.data(), conf2.data());
    std::vector<float> all(static_cast<size_t>(W * V));
    ds.propose(&hidden[size_t(anchors[3] * nD)], toks[size_t(anchors[3] + 1)], W, all.data(), conf.data());
    for (int64_t i = 0; i < 2 * V; ++i) ASSERT_NEAR(two[size_t(i)], all[size_t(i)], 1e-5f) << i;
    EXPECT_NEAR(conf2[1], conf[1], 1e-6f);
}

TEST(Dspark, RefusesADrafterForAnotherModel) {
    test::TempDir tmp;
    Model other(test::convert_fixture("long_seq", tmp.path()));  // vocabulary 512, not 384
    DsparkConvertOptions o;
    o.dir = heads_dir().string();
    o.out_path = tmp.file("dspark.gguf");
    convert_dspark(o);
    try {
        Dspark ds(o.out_path, other);
        FAIL() << "loaded a drafter of another vocabulary";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("vocabulary 384"), std::string::npos) << e.what();
    }
}

// A drafter feeds the MTP block only the last rows of a prompt, starting its State at a later
// position: with at least a window of rows, the last logits are those of the whole pass.
TEST(Mtp, StartingFromTheLastWindowIsExact) {
    test::TempDir tmp;
    Model m(convert_with_mtp(tmp));
    auto toks = test::fixture_tokens("mini_flash");
    const int64_t T = int64_t(toks.size()), V = m.config().vocab, nD = int64_t(m.config().hc_mult) * m.config().hidden;
    auto hidden = trunk_streams(m, toks);
    std::vector<float> full(static_cast<size_t>(V)), tail(static_cast<size_t>(V));
    State a(m.mtp_config());
    m.mtp_forward(hidden.data(), &toks[1], T - 1, a, full.data(), {Logits::Last});
    const int64_t K = m.config().window + 3, from = T - 1 - K;  // rows from .. T-2
    State b(m.mtp_config());
    b.pos = from;
    m.mtp_forward(&hidden[size_t(from * nD)], &toks[size_t(from + 1)], K, b, tail.data(), {Logits::Last});
    for (int64_t v = 0; v < V; ++v) ASSERT_NEAR(full[size_t(v)], tail[size_t(v)], 1e-5f) << v;
}
