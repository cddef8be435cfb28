// The CPU engine against transformers' DeepseekV4ForCausalLM: every fixture under
// tests/fixtures (made by scripts/gpu/make_fixtures.py) is converted and run; the same token
// must win at every position and max |logit difference| <= 1e-3 x max |reference logit|.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "io/convert_hf.h"
#include "io/gguf.h"
#include "model/model.h"
#include "fixture_util.h"

namespace fs = std::filesystem;
using namespace dsv4;

namespace {

const std::vector<std::string> kFixtures = {"mini_flash", "legacy_hfnames", "odd_order", "long_seq"};

using test::fixture_dir;
using test::TempDir;
using test::convert_fixture;

std::vector<float> run(const Model& m, const std::vector<int32_t>& tokens, int64_t chunk) {
    const int64_t T = int64_t(tokens.size()), V = m.config().vocab;
    std::vector<float> logits(size_t(T * V));
    State st(m.config());
    for (int64_t b = 0; b < T; b += chunk) m.forward(&tokens[size_t(b)], std::min(chunk, T - b), st, &logits[size_t(b * V)]);
    return logits;
}

int64_t argmax(const float* x, int64_t n) { return std::max_element(x, x + n) - x; }

}  // namespace

class Fixture : public ::testing::TestWithParam<std::string> {};

TEST_P(Fixture, MatchesTransformersLogits) {
    const std::string name = GetParam();
    TempDir tmp;
    Model model(convert_fixture(name, tmp.path()));
    auto tokens = test::fixture_tokens(name);
    auto ref = test::fixture_logits(name);
    const int64_t V = model.config().vocab, T = int64_t(tokens.size());
    ASSERT_EQ(int64_t(ref.size()), T * V);
    auto got = run(model, tokens, T);
    float max_ref = 0, max_diff = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
        max_ref = std::max(max_ref, std::fabs(ref[i]));
        max_diff = std::max(max_diff, std::fabs(ref[i] - got[i]));
    }
    int mismatches = 0;
    for (int64_t t = 0; t < T; ++t) mismatches += argmax(&ref[size_t(t * V)], V) != argmax(&got[size_t(t * V)], V);
    std::printf("[fixture %s] %lld tokens: max|diff| %.3g = %.3g of max|ref| %.3g, argmax mismatches %d\n", name.c_str(),
                (long long)T, max_diff, max_diff / max_ref, max_ref, mismatches);
    EXPECT_EQ(mismatches, 0);
    EXPECT_LE(max_diff, 1e-3f * max_ref);
}

TEST_P(Fixture, ChunkedPrefillEqualsOneForward) {
    const std::string name = GetParam();
    TempDir tmp;
    Model model(convert_fixture(name, tmp.path()));
    auto tokens = test::fixture_tokens(name);
    auto full = run(model, tokens, int64_t(tokens.size()));
    float max_abs = 0;
    for (float x : full) max_abs = std::max(max_abs, std::fabs(x));
    for (int64_t chunk : {1, 7, 64}) {
        auto part = run(model, tokens, chunk);
        float d = 0;
        for (size_t i = 0; i < full.size(); ++i) d = std::max(d, std::fabs(full[i] - part[i]));
        EXPECT_LE(d, 1e-5f * max_abs) << "chunk " << chunk;  // float32 rounding only
    }
}

INSTANTIATE_TEST_SUITE_P(Transformers, Fixture, ::testing::ValuesIn(kFixtures));

namespace {

// Copies a GGUF with one change: a tensor dropped, reshaped, or added.
void rewrite(const std::string& src, const std::string& dst, const std::string& drop, const std::string& reshape,
             bool add_extra) {
    gguf::Reader r(src);
    gguf::Writer w(r.alignment());
    for (const auto& [k, v] : r.metadata()) w.set(k, v);
    for (const auto& t : r.tensors()) {
        if (t.name == drop) continue;
        std::vector<int64_t> ne = t.ne;
        std::vector<uint8_t> bytes(t.data, t.data + t.nbytes);
        if (t.name == reshape) {  // same bytes, dims swapped
            std::swap(ne[0], ne[1]);
        }
        w.add_tensor(t.name, t.type, ne, std::move(bytes));
    }
    if (add_extra) w.add_tensor("blk.0.mystery.weight", gguf::TensorType::F32, {4}, std::vector<uint8_t>(16, 0));
    w.write(dst);
}

std::string load_error(const std::string& path) {
    try {
        Model m(path);
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

}  // namespace

TEST(BadModel, MissingWrongShapeOrUnknownTensorIsNamed) {
    TempDir tmp;
    std::string good = convert_fixture("mini_flash", tmp.path());
    std::string bad = (tmp.path() / "bad.gguf").string();
    rewrite(good, bad, "blk.2.indexer.proj.weight", "", false);
    EXPECT_NE(load_error(bad).find("missing tensor 'blk.2.indexer.proj.weight'"), std::string::npos) << load_error(bad);
    rewrite(good, bad, "", "blk.1.attn_q_b.weight", false);
    EXPECT_NE(load_error(bad).find("'blk.1.attn_q_b.weight' has ggml dims"), std::string::npos) << load_error(bad);
    rewrite(good, bad, "", "", true);
    EXPECT_NE(load_error(bad).find("unknown tensor 'blk.0.mystery.weight'"), std::string::npos) << load_error(bad);
}

TEST(BadCheckpoint, ConverterNamesTheProblem) {
    TempDir tmp;
    auto cfg = nlohmann::json::parse(std::ifstream(fixture_dir("mini_flash") / "config.json"));
    auto try_convert = [&](const nlohmann::json& config) -> std::string {
        fs::path dir = tmp.path() / "ckpt";
        fs::remove_all(dir);
        fs::create_directories(dir);
        std::ofstream(dir / "config.json") << config.dump();
        fs::create_symlink(fixture_dir("mini_flash") / "model.safetensors", dir / "model.safetensors");
        ConvertOptions o;
        o.hf_dir = dir.string();
        o.out_path = (tmp.path() / "out.gguf").string();
        o.quiet = true;
        try {
            convert_hf(o);
        } catch (const Error& e) {
            EXPECT_FALSE(fs::exists(o.out_path)) << "a failed conversion must leave no output";
            return e.what();
        }
        return "";
    };
    auto wrong = cfg;
    wrong["q_lora_rank"] = 48;
    std::string e = try_convert(wrong);
    EXPECT_NE(e.find("attn.wq_a.weight' has shape [32, 64], expected [48, 64]"), std::string::npos) << e;
    auto fewer = cfg;
    fewer["num_hidden_layers"] = 5;
    fewer["layer_types"].erase(5);
    fewer["mlp_layer_types"].erase(5);
    e = try_convert(fewer);
    EXPECT_NE(e.find("unknown tensor 'model.layers.5."), std::string::npos) << e;
    auto more = cfg;
    more["num_hidden_layers"] = 7;
    more["layer_types"].push_back("sliding_attention");
    more["mlp_layer_types"].push_back("moe");
    e = try_convert(more);
    EXPECT_NE(e.find("missing tensor 'layers.6."), std::string::npos) << e;
}

TEST(Conversion, NarrowTypesStillAgreeWithTheReference) {
    // F16/Q8_0 storage perturbs every weight; in a random model that flips some discrete choices
    // (experts, indexer rows), so logits move, but a wrongly decoded format would leave next to no
    // agreement (chance is 1/vocab). Measured on mini_flash: F16 192/192, Q8_0 169/192.
    TempDir tmp;
    for (auto type : {gguf::TensorType::F16, gguf::TensorType::Q8_0}) {
        Model model(convert_fixture("mini_flash", tmp.path(), type));
        auto tokens = test::fixture_tokens("mini_flash");
        auto ref = test::fixture_logits("mini_flash");
        auto got = run(model, tokens, int64_t(tokens.size()));
        const int64_t V = model.config().vocab, T = int64_t(tokens.size());
        int same = 0;
        float max_ref = 0, max_diff = 0;
        for (size_t i = 0; i < ref.size(); ++i) {
            max_ref = std::max(max_ref, std::fabs(ref[i]));
            max_diff = std::max(max_diff, std::fabs(ref[i] - got[i]));
        }
        for (int64_t t = 0; t < T; ++t) same += argmax(&ref[size_t(t * V)], V) == argmax(&got[size_t(t * V)], V);
        std::printf("[%s] max|diff| %.3g of max|ref| %.3g, argmax agreement %d/%lld\n", gguf::type_name(type), max_diff,
                    max_ref, same, (long long)T);
        EXPECT_GE(same, T * 3 / 4) << gguf::type_name(type);
        EXPECT_LT(max_diff, max_ref) << gguf::type_name(type);
    }
}

// The CPU-only engine has no device backend registered: asking for one is a usage error that
// names it (the front end registers "cuda" when the build has it).
TEST(Backend, UnavailableBackendIsAUsageErrorNamingIt) {
    TempDir tmp;
    const std::string path = convert_fixture("mini_flash", tmp.path());
    auto message = [&](const std::string& backend) {
        try {
            Model m(path, backend);
        } catch (const UsageError& e) {
            return std::string(e.what());
        }
        return std::string("no error");
    };
    EXPECT_NE(message("cuda").find("no CUDA backend"), std::string::npos) << message("cuda");
    EXPECT_NE(message("tpu").find("--backend tpu: unknown backend"), std::string::npos) << message("tpu");
}
