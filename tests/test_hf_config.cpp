// Hugging Face config.json -> ModelConfig: every fixture checked against its own JSON (read
// independently here), transformers' defaults and legacy keys, and bad input that must throw
// dsv4::Error naming the field.
#include <gtest/gtest.h>

#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/hf_config.h"
#include "model/config.h"
#include "test_util.h"

namespace {

using namespace dsv4;
using dsv4::test::read_text;
using nlohmann::json;

const std::vector<std::string> kFixtures = {"mini_flash", "legacy_hfnames", "odd_order", "long_seq"};

std::string fixture_path(const std::string& name) {
    return std::string(DSV4_SOURCE_DIR) + "/tests/fixtures/" + name + "/config.json";
}
json fixture_json(const std::string& name) { return json::parse(read_text(fixture_path(name))); }
ModelConfig fixture_config(const std::string& name) {
    return config_from_hf_json(read_text(fixture_path(name)), fixture_path(name));
}

bool contains(const std::string& haystack, const std::string& needle) {
    return haystack.find(needle) != std::string::npos;
}

AttnType attn_of(const std::string& layer_type) {
    if (layer_type == "sliding_attention") return AttnType::Sliding;
    if (layer_type == "compressed_sparse_attention") return AttnType::CSA;
    if (layer_type == "heavily_compressed_attention") return AttnType::HCA;
    throw std::logic_error("unexpected layer type " + layer_type);
}

// transformers' default schedule (configuration_deepseek_v4.py): min(n, 2) HCA layers, then
// for i in range(n - 2): CSA if i % 2 else HCA.
std::vector<AttnType> transformers_default_layers(int n) {
    std::vector<AttnType> out;
    for (int l = 0; l < std::min(n, 2); ++l) out.push_back(AttnType::HCA);
    for (int i = 0; i < n - 2; ++i) out.push_back(i % 2 ? AttnType::CSA : AttnType::HCA);
    return out;
}

// Value of `key` in `j`, or `fallback` (transformers' default) when it is absent.
template <class T>
T value_or(const json& j, const char* key, T fallback) {
    return j.contains(key) && !j[key].is_null() ? j[key].get<T>() : fallback;
}

void expect_plain_rope(const RopeParams& r, double theta, const char* which) {
    SCOPED_TRACE(which);
    EXPECT_EQ(r.theta, theta);
    EXPECT_FALSE(r.yarn);
}

// ---------------------------------------------------------------------------------------------
// Fixtures

class HfConfigFixture : public ::testing::TestWithParam<std::string> {};

TEST_P(HfConfigFixture, EveryFieldFollowsTheJson) {
    const json j = fixture_json(GetParam());
    const ModelConfig c = fixture_config(GetParam());

    EXPECT_EQ(c.vocab, j.at("vocab_size").get<int>());
    EXPECT_EQ(c.hidden, j.at("hidden_size").get<int>());
    EXPECT_EQ(c.n_layers, j.at("num_hidden_layers").get<int>());
    EXPECT_EQ(c.n_heads, j.at("num_attention_heads").get<int>());
    EXPECT_EQ(c.head_dim, j.at("head_dim").get<int>());
    EXPECT_EQ(c.q_lora, j.at("q_lora_rank").get<int>());
    EXPECT_EQ(c.o_groups, j.at("o_groups").get<int>());
    EXPECT_EQ(c.o_lora, j.at("o_lora_rank").get<int>());
    EXPECT_EQ(c.window, j.at("sliding_window").get<int>());
    EXPECT_EQ(c.index_heads, j.at("index_n_heads").get<int>());
    EXPECT_EQ(c.index_head_dim, j.at("index_head_dim").get<int>());
    EXPECT_EQ(c.index_topk, j.at("index_topk").get<int>());
    EXPECT_EQ(c.n_experts, j.at("n_routed_experts").get<int>());
    EXPECT_EQ(c.top_k, j.at("num_experts_per_tok").get<int>());
    EXPECT_EQ(c.moe_inter, j.at("moe_intermediate_size").get<int>());
    EXPECT_EQ(c.hc_mult, j.at("hc_mult").get<int>());
    EXPECT_EQ(c.hc_iters, j.at("hc_sinkhorn_iters").get<int>());
    EXPECT_EQ(c.n_shared, value_or(j, "n_shared_experts", 1));
    EXPECT_EQ(c.hc_eps, value_or(j, "hc_eps", 1e-6));
    EXPECT_EQ(c.norm_eps, value_or(j, "rms_norm_eps", 1e-6));
    EXPECT_EQ(c.routed_scale, value_or(j, "routed_scaling_factor", 1.5));
    EXPECT_EQ(c.swiglu_limit, value_or(j, "swiglu_limit", 10.0));
    EXPECT_EQ(c.norm_topk, value_or(j, "norm_topk_prob", true));
    EXPECT_EQ(c.max_positions, value_or<int64_t>(j, "max_position_embeddings", 1048576));
    EXPECT_EQ(c.bos, value_or(j, "bos_token_id", 0));
    EXPECT_EQ(c.eos, value_or(j, "eos_token_id", 1));
    EXPECT_EQ(c.n_nextn, 0) << "MTP blocks are counted from the tensors, not the config";

    // Rope dimension: head_dim * partial_rotary_factor, else the legacy qk_rope_head_dim.
    if (j.contains("partial_rotary_factor")) {
        EXPECT_EQ(c.rope_dim, int(c.head_dim * j["partial_rotary_factor"].get<double>()));
    }
    if (j.contains("qk_rope_head_dim")) {
        EXPECT_EQ(c.rope_dim, j["qk_rope_head_dim"].get<int>());
    }
    EXPECT_EQ(c.nope_dim(), c.head_dim - c.rope_dim);

    // Attention schedule: layer_types with compress_rates, or legacy compress_ratios (whose
    // trailing MTP entries are dropped) with compress_rate_csa / compress_rate_hca.
    const int n = c.n_layers;
    ASSERT_EQ(c.attn.size(), size_t(n));
    ASSERT_EQ(c.ratio.size(), size_t(n));
    if (j.contains("layer_types")) {
        const json& rates = j.at("compress_rates");
        for (int l = 0; l < n; ++l) {
            std::string type = j["layer_types"][size_t(l)];
            EXPECT_EQ(c.attn[size_t(l)], attn_of(type)) << "layer " << l;
            EXPECT_EQ(c.ratio[size_t(l)], type == "sliding_attention" ? 0 : rates.at(type).get<int>()) << "layer " << l;
        }
    } else {
        const json& ratios = j.at("compress_ratios");
        ASSERT_GE(ratios.size(), size_t(n));
        for (int l = 0; l < n; ++l) {
            int r = ratios[size_t(l)];
            AttnType want = r == 0 ? AttnType::Sliding : r == 4 ? AttnType::CSA : AttnType::HCA;
            EXPECT_EQ(c.attn[size_t(l)], want) << "layer " << l;
            int rate = r == 0 ? 0 : r == 4 ? value_or(j, "compress_rate_csa", 4) : value_or(j, "compress_rate_hca", 128);
            EXPECT_EQ(c.ratio[size_t(l)], rate) << "layer " << l;
        }
    }

    // MLP schedule: mlp_layer_types, or the first num_hash_layers layers.
    ASSERT_EQ(c.mlp.size(), size_t(n));
    for (int l = 0; l < n; ++l) {
        bool hash = j.contains("mlp_layer_types") ? j["mlp_layer_types"][size_t(l)] == "hash_moe"
                                                  : l < j.at("num_hash_layers").get<int>();
        EXPECT_EQ(c.mlp[size_t(l)], hash ? MlpType::Hash : MlpType::TopK) << "layer " << l;
    }

    // Rope tables: nested {main, compress}, or rope_theta plain + compress_rope_theta with the
    // flat (legacy) rope_scaling.
    const json* rp = j.contains("rope_parameters") ? &j["rope_parameters"] : nullptr;
    if (rp && rp->contains("main")) {
        const json& main = rp->at("main");
        const json& comp = rp->at("compress");
        expect_plain_rope(c.rope_main, main.at("rope_theta").get<double>(), "main");
        EXPECT_EQ(c.rope_compress.theta, comp.at("rope_theta").get<double>());
        bool yarn = comp.at("rope_type") == "yarn";
        EXPECT_EQ(c.rope_compress.yarn, yarn);
        if (yarn) {
            EXPECT_EQ(c.rope_compress.factor, comp.at("factor").get<double>());
            EXPECT_EQ(c.rope_compress.original_context, comp.at("original_max_position_embeddings").get<double>());
            EXPECT_EQ(c.rope_compress.beta_fast, value_or(comp, "beta_fast", 32.0));
            EXPECT_EQ(c.rope_compress.beta_slow, value_or(comp, "beta_slow", 1.0));
        }
    } else {
        const json& flat = j.at("rope_scaling");
        expect_plain_rope(c.rope_main, value_or(j, "rope_theta", 10000.0), "main");
        EXPECT_EQ(c.rope_compress.theta, value_or(j, "compress_rope_theta", 160000.0));
        ASSERT_TRUE(c.rope_compress.yarn);
        EXPECT_EQ(c.rope_compress.factor, flat.at("factor").get<double>());
        EXPECT_EQ(c.rope_compress.original_context, flat.at("original_max_position_embeddings").get<double>());
        EXPECT_EQ(c.rope_compress.beta_fast, value_or(flat, "beta_fast", 32.0));
        EXPECT_EQ(c.rope_compress.beta_slow, value_or(flat, "beta_slow", 1.0));
    }
    for (int l = 0; l < n; ++l) {
        EXPECT_EQ(&c.rope_for(l), c.attn[size_t(l)] == AttnType::Sliding ? &c.rope_main : &c.rope_compress);
    }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, HfConfigFixture, ::testing::ValuesIn(kFixtures));

// The facts the fixtures were made to exercise, stated outright.
TEST(HfConfig, MiniFlashUsesCsa4Hca16AndYarnOnCompressedLayers) {
    ModelConfig c = fixture_config("mini_flash");
    EXPECT_EQ(c.attn, (std::vector<AttnType>{AttnType::Sliding, AttnType::Sliding, AttnType::CSA, AttnType::HCA,
                                             AttnType::CSA, AttnType::HCA}));
    EXPECT_EQ(c.ratio, (std::vector<int>{0, 0, 4, 16, 4, 16}));
    EXPECT_EQ(c.csa_ratio(), 4);
    EXPECT_EQ(c.rope_dim, 16);
    EXPECT_EQ(c.hc_mult, 4);
    EXPECT_EQ(c.mix_dim(), (2 + 4) * 4);
    EXPECT_TRUE(c.rope_compress.yarn);
    EXPECT_EQ(c.rope_compress.factor, 16.0);
    EXPECT_EQ(c.rope_compress.original_context, 65536.0);
    EXPECT_EQ(c.rope_compress.theta, 160000.0);
    EXPECT_FALSE(c.rope_main.yarn);
    EXPECT_EQ(c.rope_main.theta, 10000.0);
}

TEST(HfConfig, LegacyNamesUseFlatRopeScalingAndCompressRatios) {
    ModelConfig c = fixture_config("legacy_hfnames");
    EXPECT_EQ(c.n_layers, 4);
    EXPECT_EQ(c.attn, (std::vector<AttnType>{AttnType::Sliding, AttnType::CSA, AttnType::HCA, AttnType::CSA}));
    EXPECT_EQ(c.ratio, (std::vector<int>{0, 4, 128, 4}));
    EXPECT_EQ(c.mlp, (std::vector<MlpType>{MlpType::Hash, MlpType::TopK, MlpType::TopK, MlpType::TopK}));
    EXPECT_EQ(c.rope_dim, 8);
    EXPECT_EQ(c.hc_mult, 2);
    EXPECT_TRUE(c.rope_compress.yarn);
    EXPECT_EQ(c.rope_compress.factor, 4.0);
    EXPECT_EQ(c.rope_compress.original_context, 256.0);
    EXPECT_EQ(c.rope_compress.theta, 50000.0);
    EXPECT_FALSE(c.rope_main.yarn);
}

TEST(HfConfig, OddOrderHasNoYarn) {
    ModelConfig c = fixture_config("odd_order");
    EXPECT_EQ(c.attn, (std::vector<AttnType>{AttnType::CSA, AttnType::Sliding, AttnType::HCA}));
    EXPECT_EQ(c.ratio, (std::vector<int>{4, 0, 32}));
    EXPECT_EQ(c.mlp, (std::vector<MlpType>{MlpType::Hash, MlpType::TopK, MlpType::Hash}));
    EXPECT_FALSE(c.rope_compress.yarn);
    EXPECT_FALSE(c.rope_main.yarn);
    EXPECT_EQ(c.rope_compress.theta, 160000.0);
}

// ---------------------------------------------------------------------------------------------
// transformers' defaults

TEST(HfConfig, MinimalConfigGivesTheV4FlashDefaults) {
    ModelConfig c = config_from_hf_json(R"({"model_type": "deepseek_v4"})", "minimal.json");
    // DeepseekV4Config's field defaults.
    EXPECT_EQ(c.vocab, 129280);
    EXPECT_EQ(c.hidden, 4096);
    EXPECT_EQ(c.n_layers, 43);
    EXPECT_EQ(c.n_heads, 64);
    EXPECT_EQ(c.head_dim, 512);
    EXPECT_EQ(c.rope_dim, 64);  // head_dim * 64 / 512
    EXPECT_EQ(c.q_lora, 1024);
    EXPECT_EQ(c.o_groups, 8);
    EXPECT_EQ(c.o_lora, 1024);
    EXPECT_EQ(c.window, 128);
    EXPECT_EQ(c.index_heads, 64);
    EXPECT_EQ(c.index_head_dim, 128);
    EXPECT_EQ(c.index_topk, 512);
    EXPECT_EQ(c.n_experts, 256);
    EXPECT_EQ(c.top_k, 6);
    EXPECT_EQ(c.n_shared, 1);
    EXPECT_EQ(c.moe_inter, 2048);
    EXPECT_EQ(c.hc_mult, 4);
    EXPECT_EQ(c.hc_iters, 20);
    EXPECT_EQ(c.hc_eps, 1e-6);
    EXPECT_EQ(c.norm_eps, 1e-6);
    EXPECT_EQ(c.routed_scale, 1.5);
    EXPECT_EQ(c.swiglu_limit, 10.0);
    EXPECT_TRUE(c.norm_topk);
    EXPECT_EQ(c.max_positions, 1048576);
    EXPECT_EQ(c.bos, 0);
    EXPECT_EQ(c.eos, 1);
    // Layers: HCA, HCA, then HCA/CSA alternating from layer 2 (HCA first); rates 4 and 128.
    std::vector<AttnType> want = transformers_default_layers(43);
    EXPECT_EQ(c.attn, want);
    EXPECT_EQ(c.attn[0], AttnType::HCA);
    EXPECT_EQ(c.attn[1], AttnType::HCA);
    EXPECT_EQ(c.attn[2], AttnType::HCA);
    EXPECT_EQ(c.attn[3], AttnType::CSA);
    EXPECT_EQ(c.attn[42], AttnType::HCA);
    for (int l = 0; l < 43; ++l) EXPECT_EQ(c.ratio[size_t(l)], want[size_t(l)] == AttnType::CSA ? 4 : 128) << l;
    // MLP: the first 3 layers hash-routed.
    for (int l = 0; l < 43; ++l) EXPECT_EQ(c.mlp[size_t(l)], l < 3 ? MlpType::Hash : MlpType::TopK) << l;
    expect_plain_rope(c.rope_main, 10000.0, "main");
    expect_plain_rope(c.rope_compress, 160000.0, "compress");
}

TEST(HfConfig, DefaultScheduleForFewLayers) {
    for (int n : {1, 2, 3, 4, 5}) {
        SCOPED_TRACE(n);
        ModelConfig c = config_from_hf_json(json{{"model_type", "deepseek_v4"}, {"num_hidden_layers", n}}.dump(), "few.json");
        EXPECT_EQ(c.attn, transformers_default_layers(n));
        ASSERT_EQ(c.mlp.size(), size_t(n));
        for (int l = 0; l < n; ++l) EXPECT_EQ(c.mlp[size_t(l)], l < 3 ? MlpType::Hash : MlpType::TopK);
    }
}

// ---------------------------------------------------------------------------------------------
// Variants on a fixture

json mini_flash_with(const std::function<void(json&)>& edit) {
    json j = fixture_json("mini_flash");
    edit(j);
    return j;
}
ModelConfig parse(const json& j) { return config_from_hf_json(j.dump(), "variant.json"); }

TEST(HfConfig, LegacyScalarRatesOverrideCompressRates) {
    ModelConfig c = parse(mini_flash_with([](json& j) { j["compress_rate_hca"] = 32; }));
    EXPECT_EQ(c.ratio, (std::vector<int>{0, 0, 4, 32, 4, 32}));
}

TEST(HfConfig, RopeDimFromQkRopeHeadDimOrHeadDimOverEight) {
    ModelConfig a = parse(mini_flash_with([](json& j) {
        j.erase("partial_rotary_factor");
        j["qk_rope_head_dim"] = 32;
    }));
    EXPECT_EQ(a.rope_dim, 32);
    ModelConfig b = parse(mini_flash_with([](json& j) {
        j.erase("partial_rotary_factor");
        j.erase("qk_rope_head_dim");
    }));
    EXPECT_EQ(b.rope_dim, 64 / 8);
}

TEST(HfConfig, EosListTakesTheFirstId) {
    ModelConfig c = parse(mini_flash_with([](json& j) { j["eos_token_id"] = {2, 3}; }));
    EXPECT_EQ(c.eos, 2);
}

TEST(HfConfig, FlatRopeParametersApplyToTheCompressedLayers) {
    ModelConfig c = parse(mini_flash_with([](json& j) {
        j["rope_parameters"] = {{"rope_type", "yarn"}, {"factor", 8.0}, {"original_max_position_embeddings", 1024},
                                {"beta_fast", 16.0}, {"rope_theta", 999.0}};
        j["rope_theta"] = 20000.0;
        j["compress_rope_theta"] = 40000.0;
    }));
    expect_plain_rope(c.rope_main, 20000.0, "main");
    EXPECT_EQ(c.rope_compress.theta, 40000.0) << "compress_rope_theta overrides the dict's rope_theta";
    EXPECT_TRUE(c.rope_compress.yarn);
    EXPECT_EQ(c.rope_compress.factor, 8.0);
    EXPECT_EQ(c.rope_compress.original_context, 1024.0);
    EXPECT_EQ(c.rope_compress.beta_fast, 16.0);
    EXPECT_EQ(c.rope_compress.beta_slow, 1.0) << "transformers' default";
}

TEST(HfConfig, YarnWithoutFactorUsesTheContextRatio) {
    ModelConfig c = parse(mini_flash_with([](json& j) {
        j["rope_parameters"]["compress"]["factor"] = nullptr;
        j["rope_parameters"]["compress"].erase("beta_fast");
        j["rope_parameters"]["compress"]["beta_slow"] = nullptr;
    }));
    EXPECT_EQ(c.rope_compress.factor, 1048576.0 / 65536.0);  // max_position_embeddings / original
    EXPECT_EQ(c.rope_compress.beta_fast, 32.0);
    EXPECT_EQ(c.rope_compress.beta_slow, 1.0);
}

// ---------------------------------------------------------------------------------------------
// Bad input

// Expects config_from_hf_json(text) to throw dsv4::Error naming the source and every part.
void expect_bad(const std::string& text, std::vector<std::string> parts) {
    const std::string source = "bad/config.json";
    try {
        config_from_hf_json(text, source);
        ADD_FAILURE() << "accepted: " << text.substr(0, 200);
    } catch (const Error& e) {
        parts.push_back(source);
        for (const std::string& p : parts) EXPECT_TRUE(contains(e.what(), p)) << "message: " << e.what() << "\nlacks: " << p;
    }
}

struct BadCase {
    const char* label;
    const char* base;  // fixture to edit
    std::function<void(json&)> edit;
    std::vector<std::string> parts;
};

TEST(HfConfigBad, NotJsonOrNotAnObject) {
    expect_bad("{\"model_type\": ", {"not valid JSON"});
    expect_bad("", {"not valid JSON"});
    expect_bad("[1, 2]", {"not a JSON object"});
    expect_bad("\"deepseek_v4\"", {"not a JSON object"});
}

TEST(HfConfigBad, EachBadFieldIsNamed) {
    const std::vector<BadCase> cases = {
        {"wrong model_type", "mini_flash", [](json& j) { j["model_type"] = "deepseek_v3"; }, {"model_type", "deepseek_v3"}},
        {"missing model_type", "mini_flash", [](json& j) { j.erase("model_type"); }, {"model_type"}},
        {"model_type not a string", "mini_flash", [](json& j) { j["model_type"] = 4; }, {"'model_type'"}},
        {"hidden_size string", "mini_flash", [](json& j) { j["hidden_size"] = "64"; }, {"'hidden_size'", "\"64\""}},
        {"hidden_size float", "mini_flash", [](json& j) { j["hidden_size"] = 64.5; }, {"'hidden_size'"}},
        {"hidden_size bool", "mini_flash", [](json& j) { j["hidden_size"] = true; }, {"'hidden_size'"}},
        {"hidden_size list", "mini_flash", [](json& j) { j["hidden_size"] = {64}; }, {"'hidden_size'"}},
        {"num_hidden_layers list", "mini_flash", [](json& j) { j["num_hidden_layers"] = {6, 7}; }, {"'num_hidden_layers'"}},
        {"num_hidden_layers float", "mini_flash", [](json& j) { j["num_hidden_layers"] = 2.5; }, {"'num_hidden_layers'"}},
        {"negative vocab_size", "mini_flash", [](json& j) { j["vocab_size"] = -5; }, {"'vocab_size'"}},
        {"huge vocab_size", "mini_flash", [](json& j) { j["vocab_size"] = 1ll << 40; }, {"'vocab_size'"}},
        {"rms_norm_eps string", "mini_flash", [](json& j) { j["rms_norm_eps"] = "small"; }, {"'rms_norm_eps'"}},
        {"swiglu_limit string", "mini_flash", [](json& j) { j["swiglu_limit"] = "10"; }, {"'swiglu_limit'"}},
        {"norm_topk_prob number", "mini_flash", [](json& j) { j["norm_topk_prob"] = 1; }, {"'norm_topk_prob'"}},
        {"scoring_func softmax", "mini_flash", [](json& j) { j["scoring_func"] = "softmax"; }, {"scoring_func", "softmax"}},
        {"scoring_func sigmoid", "mini_flash", [](json& j) { j["scoring_func"] = "sigmoid"; }, {"scoring_func", "sigmoid"}},
        {"hidden_act gelu", "mini_flash", [](json& j) { j["hidden_act"] = "gelu"; }, {"hidden_act", "gelu"}},
        {"expert groups", "mini_flash", [](json& j) { j["n_group"] = 8; }, {"n_group"}},
        {"compress_ratios entry 7", "legacy_hfnames", [](json& j) { j["compress_ratios"][2] = 7; }, {"compress_ratios", "7"}},
        {"compress_ratios string entry", "legacy_hfnames", [](json& j) { j["compress_ratios"][1] = "4"; }, {"'compress_ratios'"}},
        {"compress_ratios not a list", "legacy_hfnames", [](json& j) { j["compress_ratios"] = 4; }, {"'compress_ratios'"}},
        {"compress_ratios too short", "legacy_hfnames", [](json& j) { j["compress_ratios"] = {0, 4, 128}; }, {"compress_ratios"}},
        {"layer_types too short", "mini_flash", [](json& j) { j["layer_types"].erase(5); }, {"layer_types"}},
        {"layer_types empty", "mini_flash", [](json& j) { j["layer_types"] = json::array(); }, {"layer_types"}},
        {"layer_types unknown entry", "mini_flash", [](json& j) { j["layer_types"][1] = "full_attention"; }, {"layer_types", "full_attention"}},
        {"layer_types not strings", "mini_flash", [](json& j) { j["layer_types"][1] = 0; }, {"'layer_types'"}},
        {"layer_types not a list", "mini_flash", [](json& j) { j["layer_types"] = "sliding_attention"; }, {"'layer_types'"}},
        {"mlp_layer_types too short", "mini_flash", [](json& j) { j["mlp_layer_types"].erase(0); }, {"mlp_layer_types"}},
        {"mlp_layer_types unknown entry", "mini_flash", [](json& j) { j["mlp_layer_types"][4] = "dense"; }, {"'mlp_layer_types'", "dense"}},
        {"compress_rates not an object", "mini_flash", [](json& j) { j["compress_rates"] = 4; }, {"'compress_rates'"}},
        {"compress_rates zero", "mini_flash", [](json& j) { j["compress_rates"]["heavily_compressed_attention"] = 0; }, {"compress_rates.heavily_compressed_attention"}},
        {"compress_rates unknown key", "mini_flash", [](json& j) { j["compress_rates"]["sliding_attention"] = 2; }, {"compress_rates", "sliding_attention"}},
        {"yarn without original", "mini_flash", [](json& j) { j["rope_parameters"]["compress"].erase("original_max_position_embeddings"); }, {"original_max_position_embeddings"}},
        {"legacy yarn without original", "legacy_hfnames", [](json& j) { j["rope_scaling"].erase("original_max_position_embeddings"); }, {"original_max_position_embeddings"}},
        {"attention_factor 1.2", "mini_flash", [](json& j) { j["rope_parameters"]["compress"]["attention_factor"] = 1.2; }, {"attention_factor", "1.2"}},
        {"legacy attention_factor", "legacy_hfnames", [](json& j) { j["rope_scaling"]["attention_factor"] = 0.5; }, {"attention_factor"}},
        {"yarn factor string", "mini_flash", [](json& j) { j["rope_parameters"]["compress"]["factor"] = "16"; }, {"'factor'"}},
        {"rope type linear", "mini_flash", [](json& j) { j["rope_parameters"]["compress"]["rope_type"] = "linear"; }, {"rope type", "linear"}},
        {"yarn truncate false", "mini_flash", [](json& j) { j["rope_parameters"]["compress"]["truncate"] = false; }, {"truncate"}},
        {"yarn on main", "mini_flash", [](json& j) { j["rope_parameters"]["main"] = j["rope_parameters"]["compress"]; }, {"main"}},
        {"rope_parameters not an object", "mini_flash", [](json& j) { j["rope_parameters"] = 5; }, {"'rope_parameters'"}},
        {"rope_scaling not an object", "legacy_hfnames", [](json& j) { j["rope_scaling"] = "yarn"; }, {"'rope_scaling'"}},
        {"partial_rotary_factor string", "mini_flash", [](json& j) { j["partial_rotary_factor"] = "0.25"; }, {"'partial_rotary_factor'"}},
        {"odd rope dimension", "mini_flash", [](json& j) { j["partial_rotary_factor"] = 1.0 / 64; }, {"rope dimension 1"}},
        {"o_groups not dividing heads", "mini_flash", [](json& j) { j["o_groups"] = 3; }, {"o_groups"}},
        {"top_k above experts", "mini_flash", [](json& j) { j["num_experts_per_tok"] = 9; }, {"num_experts_per_tok"}},
        {"two shared experts", "mini_flash", [](json& j) { j["n_shared_experts"] = 2; }, {"n_shared_experts"}},
        {"zero hc_mult", "mini_flash", [](json& j) { j["hc_mult"] = 0; }, {"hc_mult"}},
        {"zero layers", "mini_flash", [](json& j) { j["num_hidden_layers"] = 0; }, {"num_hidden_layers"}},
        {"index_head_dim odd", "mini_flash", [](json& j) { j["index_head_dim"] = 17; }, {"index_head_dim"}},
        {"bos outside vocab", "mini_flash", [](json& j) { j["bos_token_id"] = 384; }, {"bos"}},
        {"eos empty list", "mini_flash", [](json& j) { j["eos_token_id"] = json::array(); }, {"'eos_token_id'"}},
        {"eos list of strings", "mini_flash", [](json& j) { j["eos_token_id"] = {"</s>"}; }, {"'eos_token_id'"}},
    };
    for (const BadCase& c : cases) {
        SCOPED_TRACE(c.label);
        json j = fixture_json(c.base);
        c.edit(j);
        expect_bad(j.dump(), c.parts);
    }
}

}  // namespace
