// ModelConfig <-> GGUF metadata: every fixture config survives config_to_gguf -> file ->
// config_from_gguf unchanged (every field, the per-layer vectors and both rope tables), each
// required key is required and named when missing, optional keys fall back to their defaults,
// and bad values throw dsv4::Error naming the key.
#include <gtest/gtest.h>

#include <functional>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/gguf.h"
#include "io/hf_config.h"
#include "model/config.h"
#include "model/config_gguf.h"
#include "test_util.h"

namespace {

using namespace dsv4;
using gguf::Value;
using gguf::ValueType;
using dsv4::test::read_text;
using dsv4::test::TempDir;
using nlohmann::json;
using Meta = std::vector<std::pair<std::string, Value>>;

const std::vector<std::string> kFixtures = {"mini_flash", "legacy_hfnames", "odd_order", "long_seq"};

std::string fixture_path(const std::string& name) {
    return std::string(DSV4_SOURCE_DIR) + "/tests/fixtures/" + name + "/config.json";
}
json fixture_json(const std::string& name) { return json::parse(read_text(fixture_path(name))); }
ModelConfig from_hf(const json& j) { return config_from_hf_json(j.dump(), "config.json"); }

bool contains(const std::string& haystack, const std::string& needle) {
    return haystack.find(needle) != std::string::npos;
}

// GGUF stores these as f32 (llama.cpp reads them so): identical means identical after rounding.
void expect_same_f32(double want, double got, const char* field) {
    EXPECT_EQ(float(want), float(got)) << field;
}

void expect_same_rope(const RopeParams& want, const RopeParams& got, const char* which) {
    SCOPED_TRACE(which);
    expect_same_f32(want.theta, got.theta, "theta");
    EXPECT_EQ(want.yarn, got.yarn);
    expect_same_f32(want.factor, got.factor, "factor");
    EXPECT_EQ(want.original_context, got.original_context);
    expect_same_f32(want.beta_fast, got.beta_fast, "beta_fast");
    expect_same_f32(want.beta_slow, got.beta_slow, "beta_slow");
}

void expect_same_config(const ModelConfig& want, const ModelConfig& got) {
    EXPECT_EQ(want.vocab, got.vocab);
    EXPECT_EQ(want.hidden, got.hidden);
    EXPECT_EQ(want.n_layers, got.n_layers);
    EXPECT_EQ(want.n_heads, got.n_heads);
    EXPECT_EQ(want.head_dim, got.head_dim);
    EXPECT_EQ(want.rope_dim, got.rope_dim);
    EXPECT_EQ(want.q_lora, got.q_lora);
    EXPECT_EQ(want.o_groups, got.o_groups);
    EXPECT_EQ(want.o_lora, got.o_lora);
    EXPECT_EQ(want.window, got.window);
    EXPECT_EQ(want.index_heads, got.index_heads);
    EXPECT_EQ(want.index_head_dim, got.index_head_dim);
    EXPECT_EQ(want.index_topk, got.index_topk);
    EXPECT_EQ(want.n_experts, got.n_experts);
    EXPECT_EQ(want.top_k, got.top_k);
    EXPECT_EQ(want.n_shared, got.n_shared);
    EXPECT_EQ(want.moe_inter, got.moe_inter);
    EXPECT_EQ(want.hc_mult, got.hc_mult);
    EXPECT_EQ(want.hc_iters, got.hc_iters);
    expect_same_f32(want.hc_eps, got.hc_eps, "hc_eps");
    expect_same_f32(want.norm_eps, got.norm_eps, "norm_eps");
    expect_same_f32(want.routed_scale, got.routed_scale, "routed_scale");
    expect_same_f32(want.swiglu_limit, got.swiglu_limit, "swiglu_limit");
    EXPECT_EQ(want.norm_topk, got.norm_topk);
    EXPECT_EQ(want.max_positions, got.max_positions);
    EXPECT_EQ(want.bos, got.bos);
    EXPECT_EQ(want.eos, got.eos);
    EXPECT_EQ(want.n_nextn, got.n_nextn);
    expect_same_rope(want.rope_main, got.rope_main, "rope_main");
    expect_same_rope(want.rope_compress, got.rope_compress, "rope_compress");
    EXPECT_EQ(want.attn, got.attn);
    EXPECT_EQ(want.ratio, got.ratio);
    EXPECT_EQ(want.mlp, got.mlp);
}

// ---------------------------------------------------------------------------------------------
// Files

// Writes `meta` and a dummy token embedding of ggml dims `emb_ne` (empty: no embedding).
std::string write_meta(const TempDir& dir, const Meta& meta, const std::vector<int64_t>& emb_ne,
                       const std::string& name = "cfg.gguf") {
    gguf::Writer w;
    for (const auto& [k, v] : meta) w.set(k, v);
    if (!emb_ne.empty()) {
        size_t n = 2;  // F16
        for (int64_t d : emb_ne) n *= size_t(d);
        w.add_tensor("token_embd.weight", gguf::TensorType::F16, emb_ne, std::vector<uint8_t>(n, 0));
    }
    std::string path = dir.file(name);
    w.write(path);
    return path;
}

// The metadata config_to_gguf writes for `c`.
Meta meta_of(const ModelConfig& c) {
    TempDir dir;
    gguf::Writer w;
    config_to_gguf(c, w);
    std::string path = dir.file("meta.gguf");
    w.write(path);
    return gguf::Reader(path).metadata();
}

ModelConfig load(const std::string& path) {
    gguf::Reader r(path);
    return config_from_gguf(r);
}

// config_to_gguf -> file (with token_embd.weight [hidden, vocab]) -> config_from_gguf.
ModelConfig round_trip(const ModelConfig& c) {
    TempDir dir;
    gguf::Writer w;
    config_to_gguf(c, w);
    w.add_tensor("token_embd.weight", gguf::TensorType::F16, {c.hidden, c.vocab},
                 [&c](std::vector<uint8_t>& out) { out.assign(size_t(c.hidden) * size_t(c.vocab) * 2, 0); });
    std::string path = dir.file("rt.gguf");
    w.write(path);
    return load(path);
}

void set_key(Meta& m, const std::string& key, Value v) {
    for (auto& kv : m)
        if (kv.first == key) {
            kv.second = std::move(v);
            return;
        }
    m.emplace_back(key, std::move(v));
}
Meta without(Meta m, const std::string& key) {
    std::erase_if(m, [&](const auto& kv) { return kv.first == key; });
    return m;
}
Value i32_array(const std::vector<int>& xs) {
    std::vector<Value> items;
    for (int x : xs) items.push_back(Value::i32(x));
    return Value::array(ValueType::I32, items);
}

// ---------------------------------------------------------------------------------------------
// Round trips

class ConfigGgufFixture : public ::testing::TestWithParam<std::string> {};

TEST_P(ConfigGgufFixture, RoundTripGivesTheSameConfig) {
    ModelConfig want = from_hf(fixture_json(GetParam()));
    expect_same_config(want, round_trip(want));
}

TEST_P(ConfigGgufFixture, RoundTripWithAnMtpBlock) {
    ModelConfig want = from_hf(fixture_json(GetParam()));
    want.n_nextn = 1;
    Meta m = meta_of(want);
    const Value* blocks = nullptr;
    for (const auto& kv : m)
        if (kv.first == "deepseek4.block_count") blocks = &kv.second;
    ASSERT_NE(blocks, nullptr);
    EXPECT_EQ(blocks->integer(), want.n_layers + 1) << "block_count counts the MTP block";
    expect_same_config(want, round_trip(want));
}

INSTANTIATE_TEST_SUITE_P(Fixtures, ConfigGgufFixture, ::testing::ValuesIn(kFixtures));

TEST(ConfigGguf, RoundTripOfVariants) {
    const std::vector<std::pair<const char*, std::function<void(json&)>>> variants = {
        {"no CSA layer", [](json& j) {
             j["layer_types"] = {"sliding_attention", "heavily_compressed_attention", "sliding_attention",
                                 "heavily_compressed_attention", "sliding_attention", "sliding_attention"};
         }},
        {"HCA at rate 4 without CSA", [](json& j) {
             j["layer_types"] = {"sliding_attention", "heavily_compressed_attention", "sliding_attention",
                                 "heavily_compressed_attention", "sliding_attention", "sliding_attention"};
             j["compress_rates"]["heavily_compressed_attention"] = 4;
         }},
        {"yarn with other betas", [](json& j) {
             j["rope_parameters"]["compress"]["beta_fast"] = 16.0;
             j["rope_parameters"]["compress"]["beta_slow"] = 2.0;
         }},
        {"non-leading hash layers", [](json& j) { j["mlp_layer_types"] = {"moe", "hash_moe", "moe", "hash_moe", "moe", "moe"}; }},
        {"no hash layers", [](json& j) { j["mlp_layer_types"] = {"moe", "moe", "moe", "moe", "moe", "moe"}; }},
        {"other scalars", [](json& j) {
             j["bos_token_id"] = 5;
             j["eos_token_id"] = 7;
             j["norm_topk_prob"] = false;
             j["swiglu_limit"] = 0.0;
             j["routed_scaling_factor"] = 2.5;
             j["rms_norm_eps"] = 1e-5;
             j["max_position_embeddings"] = 4096;
             j["rope_theta"] = 50000.0;
         }},
        {"transformers defaults, small", [](json& j) {
             j = {{"model_type", "deepseek_v4"}, {"vocab_size", 64}, {"hidden_size", 32}, {"num_hidden_layers", 5}};
         }},
    };
    for (const auto& [label, edit] : variants) {
        SCOPED_TRACE(label);
        json j = fixture_json("mini_flash");
        edit(j);
        ModelConfig want = from_hf(j);
        expect_same_config(want, round_trip(want));
    }
}

// ---------------------------------------------------------------------------------------------
// Required and optional keys

// Keys config_from_gguf cannot do without, for a model with CSA layers and a YaRN rope.
const std::set<std::string> kRequired = {
    "general.architecture",
    "deepseek4.block_count",
    "deepseek4.embedding_length",
    "deepseek4.attention.head_count",
    "deepseek4.attention.key_length",
    "deepseek4.attention.value_length",
    "deepseek4.rope.dimension_count",
    "deepseek4.attention.q_lora_rank",
    "deepseek4.attention.output_group_count",
    "deepseek4.attention.output_lora_rank",
    "deepseek4.attention.sliding_window",
    "deepseek4.attention.layer_norm_rms_epsilon",
    "deepseek4.expert_count",
    "deepseek4.expert_used_count",
    "deepseek4.expert_shared_count",
    "deepseek4.expert_feed_forward_length",
    "deepseek4.expert_weights_scale",
    "deepseek4.expert_weights_norm",
    "deepseek4.expert_gating_func",
    "deepseek4.hyper_connection.count",
    "deepseek4.hyper_connection.sinkhorn_iterations",
    "deepseek4.hyper_connection.epsilon",
    "deepseek4.rope.freq_base",
    "deepseek4.attention.compress_rope_freq_base",
    "deepseek4.attention.compress_ratios",
    "deepseek4.attention.indexer.head_count",
    "deepseek4.attention.indexer.key_length",
    "deepseek4.attention.indexer.top_k",
    "deepseek4.rope.scaling.factor",
    "deepseek4.rope.scaling.original_context_length",
};

// Optional keys whose absence changes nothing for mini_flash (their defaults or a duplicate
// source give the same value).
const std::set<std::string> kRedundant = {
    "deepseek4.embedding_length_out",
    "deepseek4.vocab_size",  // the embedding's ne[1]
    "deepseek4.feed_forward_length",
    "deepseek4.attention.head_count_kv",
    "deepseek4.rope.scaling.yarn_beta_fast",
    "deepseek4.rope.scaling.yarn_beta_slow",
    "deepseek4.expert_group_count",
    "deepseek4.expert_group_used_count",
    "deepseek4.hash_layer_count",
    "dsv4.hash_layers",  // the 3 leading hash layers are hash_layer_count
    "dsv4.attention.csa_ratio",
    "tokenizer.ggml.bos_token_id",
    "tokenizer.ggml.eos_token_id",
};

TEST(ConfigGguf, EveryKeyIsRequiredOrHasAFallback) {
    TempDir dir;
    ModelConfig want = from_hf(fixture_json("mini_flash"));
    const std::vector<int64_t> emb = {want.hidden, want.vocab};
    Meta full = meta_of(want);
    std::set<std::string> written;
    for (const auto& kv : full) written.insert(kv.first);
    for (const std::string& k : kRequired) EXPECT_TRUE(written.count(k)) << "not written: " << k;
    for (const std::string& k : kRedundant) EXPECT_TRUE(written.count(k)) << "not written: " << k;

    for (const auto& kv : full) {
        const std::string& key = kv.first;
        // Without only the routed clamp the two clamps differ (see DefaultsOfTheOptionalKeys).
        if (key == "deepseek4.swiglu_clamp_exp") continue;
        SCOPED_TRACE("without " + key);
        std::string path = write_meta(dir, without(full, key), emb);
        if (kRequired.count(key)) {
            try {
                load(path);
                ADD_FAILURE() << "loaded without a required key";
            } catch (const Error& e) {
                EXPECT_TRUE(contains(e.what(), key)) << e.what();
                EXPECT_TRUE(contains(e.what(), path)) << e.what();
            }
        } else {
            ModelConfig got;
            ASSERT_NO_THROW(got = load(path));
            if (kRedundant.count(key)) expect_same_config(want, got);
        }
    }
}

TEST(ConfigGguf, DefaultsOfTheOptionalKeys) {
    TempDir dir;
    ModelConfig want = from_hf(fixture_json("mini_flash"));
    const std::vector<int64_t> emb = {want.hidden, want.vocab};
    Meta full = meta_of(want);
    EXPECT_EQ(load(write_meta(dir, without(full, "deepseek4.context_length"), emb)).max_positions, 0);
    ModelConfig no_yarn = load(write_meta(dir, without(full, "deepseek4.rope.scaling.type"), emb));
    EXPECT_FALSE(no_yarn.rope_compress.yarn);
    Meta none = full;
    set_key(none, "deepseek4.rope.scaling.type", Value::str("none"));
    EXPECT_FALSE(load(write_meta(dir, none, emb)).rope_compress.yarn);
    Meta no_clamp = without(without(full, "deepseek4.swiglu_clamp_exp"), "deepseek4.swiglu_clamp_shexp");
    EXPECT_EQ(load(write_meta(dir, no_clamp, emb)).swiglu_limit, 0.0);
    EXPECT_EQ(load(write_meta(dir, without(full, "deepseek4.swiglu_clamp_shexp"), emb)).swiglu_limit, 10.0)
        << "the shared clamp defaults to the routed one";
    EXPECT_THROW(load(write_meta(dir, without(full, "deepseek4.swiglu_clamp_exp"), emb)), Error)
        << "no routed clamp but a shared one: the clamps differ";
    Meta scalar_clamp = full;  // older files hold one scalar
    set_key(scalar_clamp, "deepseek4.swiglu_clamp_exp", Value::f32(7.0f));
    set_key(scalar_clamp, "deepseek4.swiglu_clamp_shexp", Value::f32(7.0f));
    EXPECT_EQ(load(write_meta(dir, scalar_clamp, emb)).swiglu_limit, 7.0);
    // The vocabulary comes from the embedding when vocab_size is absent.
    EXPECT_EQ(load(write_meta(dir, without(full, "deepseek4.vocab_size"), {want.hidden, 500})).vocab, 500);
    // hash_layer_count alone gives the leading hash layers.
    Meta leading = without(full, "dsv4.hash_layers");
    set_key(leading, "deepseek4.hash_layer_count", Value::u32(2));
    std::vector<MlpType> two = {MlpType::Hash, MlpType::Hash, MlpType::TopK, MlpType::TopK, MlpType::TopK, MlpType::TopK};
    EXPECT_EQ(load(write_meta(dir, leading, emb)).mlp, two);
    // An unsigned or 64-bit integer type is as good as the u32 that is written.
    Meta wide = full;
    set_key(wide, "deepseek4.embedding_length", Value::u64(uint64_t(want.hidden)));
    set_key(wide, "deepseek4.attention.head_count", Value::i32(want.n_heads));
    expect_same_config(want, load(write_meta(dir, wide, emb)));
}

// ---------------------------------------------------------------------------------------------
// Bad files

struct BadCase {
    const char* label;
    std::function<void(Meta&, std::vector<int64_t>& emb)> edit;
    std::vector<std::string> parts;
};

TEST(ConfigGgufBad, EachBadKeyIsNamed) {
    ModelConfig base = from_hf(fixture_json("mini_flash"));
    const int L = base.n_layers;
    const std::vector<BadCase> cases = {
        {"wrong architecture", [](Meta& m, auto&) { set_key(m, "general.architecture", Value::str("llama")); },
         {"architecture", "'llama'", "deepseek4"}},
        {"architecture not a string", [](Meta& m, auto&) { set_key(m, "general.architecture", Value::u32(4)); },
         {"general.architecture"}},
        {"compress_ratios shorter than the layers",
         [L](Meta& m, auto&) { set_key(m, "deepseek4.attention.compress_ratios", i32_array(std::vector<int>(size_t(L - 1), 0))); },
         {"deepseek4.attention.compress_ratios"}},
        {"compress_ratios shorter than block_count (MTP block)",
         [L](Meta& m, auto&) {
             set_key(m, "deepseek4.block_count", Value::u32(uint32_t(L + 1)));
             set_key(m, "deepseek4.nextn_predict_layers", Value::u32(1));
             set_key(m, "deepseek4.attention.compress_ratios", i32_array({0, 0, 4, 16, 4, 16}));
         },
         {"deepseek4.attention.compress_ratios"}},
        {"compress_ratios not an array", [](Meta& m, auto&) { set_key(m, "deepseek4.attention.compress_ratios", Value::u32(4)); },
         {"deepseek4.attention.compress_ratios"}},
        {"compress_ratios of floats",
         [L](Meta& m, auto&) {
             set_key(m, "deepseek4.attention.compress_ratios",
                     Value::array(ValueType::F32, std::vector<Value>(size_t(L), Value::f32(4.0f))));
         },
         {"deepseek4.attention.compress_ratios"}},
        {"expert_gating_func 3", [](Meta& m, auto&) { set_key(m, "deepseek4.expert_gating_func", Value::u32(3)); },
         {"deepseek4.expert_gating_func"}},
        {"expert_gating_func 1", [](Meta& m, auto&) { set_key(m, "deepseek4.expert_gating_func", Value::u32(1)); },
         {"deepseek4.expert_gating_func"}},
        {"expert groups", [](Meta& m, auto&) { set_key(m, "deepseek4.expert_group_count", Value::u32(8)); },
         {"deepseek4.expert_group_count"}},
        {"several kv heads", [](Meta& m, auto&) { set_key(m, "deepseek4.attention.head_count_kv", Value::u32(2)); },
         {"deepseek4.attention.head_count_kv"}},
        {"value_length differs", [](Meta& m, auto&) { set_key(m, "deepseek4.attention.value_length", Value::u32(32)); },
         {"value_length"}},
        {"negative embedding_length",
         [](Meta& m, auto&) { set_key(m, "deepseek4.embedding_length", Value::i32(-64)); },
         {"deepseek4.embedding_length"}},
        {"embedding_length too large",
         [](Meta& m, auto&) { set_key(m, "deepseek4.embedding_length", Value::u64(1ull << 40)); },
         {"deepseek4.embedding_length"}},
        {"embedding_length a string",
         [](Meta& m, auto&) { set_key(m, "deepseek4.embedding_length", Value::str("64")); },
         {"deepseek4.embedding_length"}},
        {"rms epsilon a string",
         [](Meta& m, auto&) { set_key(m, "deepseek4.attention.layer_norm_rms_epsilon", Value::str("1e-6")); },
         {"deepseek4.attention.layer_norm_rms_epsilon"}},
        {"unknown rope scaling", [](Meta& m, auto&) { set_key(m, "deepseek4.rope.scaling.type", Value::str("linear")); },
         {"'linear'"}},
        {"rope scaling type not a string", [](Meta& m, auto&) { set_key(m, "deepseek4.rope.scaling.type", Value::u32(1)); },
         {"deepseek4.rope.scaling.type"}},
        {"per-layer clamps that differ",
         [L](Meta& m, auto&) {
             std::vector<Value> v(size_t(L), Value::f32(10.0f));
             v.back() = Value::f32(5.0f);
             set_key(m, "deepseek4.swiglu_clamp_exp", Value::array(ValueType::F32, v));
         },
         {"deepseek4.swiglu_clamp_exp"}},
        {"empty clamp array",
         [](Meta& m, auto&) { set_key(m, "deepseek4.swiglu_clamp_exp", Value::array(ValueType::F32, {})); },
         {"deepseek4.swiglu_clamp_exp"}},
        {"hash_layers of the wrong length", [](Meta& m, auto&) { set_key(m, "dsv4.hash_layers", i32_array({1, 1})); },
         {"dsv4.hash_layers"}},
        {"as many MTP blocks as blocks",
         [L](Meta& m, auto&) { set_key(m, "deepseek4.nextn_predict_layers", Value::u32(uint32_t(L))); },
         {"deepseek4.nextn_predict_layers"}},
        {"more MTP blocks than blocks",
         [L](Meta& m, auto&) { set_key(m, "deepseek4.nextn_predict_layers", Value::u32(uint32_t(L + 3))); },
         {"deepseek4.nextn_predict_layers"}},
        {"no token embedding", [](Meta&, std::vector<int64_t>& emb) { emb.clear(); }, {"token_embd.weight"}},
        {"3-d token embedding", [](Meta&, std::vector<int64_t>& emb) { emb.push_back(2); }, {"token_embd.weight"}},
        {"bos outside the vocabulary", [](Meta& m, auto&) { set_key(m, "tokenizer.ggml.bos_token_id", Value::u32(100000)); },
         {"bos"}},
    };
    TempDir dir;
    for (const BadCase& c : cases) {
        SCOPED_TRACE(c.label);
        Meta m = meta_of(base);
        std::vector<int64_t> emb = {base.hidden, base.vocab};
        c.edit(m, emb);
        std::string path = write_meta(dir, m, emb);
        try {
            load(path);
            ADD_FAILURE() << "loaded";
        } catch (const Error& e) {
            EXPECT_TRUE(contains(e.what(), path)) << e.what();
            for (const std::string& p : c.parts) EXPECT_TRUE(contains(e.what(), p)) << "message: " << e.what() << "\nlacks: " << p;
        }
    }
}

}  // namespace
