#include "model/config_gguf.h"

#include <algorithm>

#include "core/error.h"
#include "io/names.h"

namespace dsv4 {

using gguf::Value;
using gguf::ValueType;
namespace n = names;

namespace {

std::vector<int64_t> int_array(const gguf::Reader& f, const std::string& key) {
    const Value& v = f.get(key);
    if (v.type != ValueType::ARRAY) fail(f.path(), ": metadata key '", key, "' is not an array");
    std::vector<int64_t> out;
    for (const Value& e : v.arr) {
        if (!e.is_number() || e.type == ValueType::F32 || e.type == ValueType::F64)
            fail(f.path(), ": metadata key '", key, "' must hold integers");
        out.push_back(e.integer());
    }
    return out;
}

// llama.cpp writes swiglu_clamp_* as one float per block; older files may hold a scalar.
double first_float(const gguf::Reader& f, const std::string& key, double fallback) {
    const Value* v = f.find(key);
    if (!v) return fallback;
    if (v->type == ValueType::ARRAY) {
        if (v->arr.empty() || !v->arr[0].is_number()) fail(f.path(), ": metadata key '", key, "' is empty");
        double x = v->arr[0].number();
        for (const Value& e : v->arr)
            if (!e.is_number() || e.number() != x)
                fail(f.path(), ": metadata key '", key, "': per-layer values that differ are not supported");
        return x;
    }
    return f.get_number(key);
}

int to_int(const gguf::Reader& f, const std::string& key) {
    int64_t v = f.get_int(key);
    if (v < 0 || v > (int64_t(1) << 31) - 1) fail(f.path(), ": metadata key '", key, "' value ", v, " is out of range");
    return int(v);
}

Value int_array_value(const std::vector<int>& xs) {
    std::vector<Value> items;
    for (int x : xs) items.push_back(Value::i32(x));
    return Value::array(ValueType::I32, std::move(items));
}

Value float_array_value(size_t count, double x) {
    std::vector<Value> items(count, Value::f32(float(x)));
    return Value::array(ValueType::F32, std::move(items));
}

}  // namespace

ModelConfig config_from_gguf(const gguf::Reader& f) {
    std::string arch = f.get_string(n::kArchitecture);
    if (arch != n::kArch) fail(f.path(), ": architecture is '", arch, "', expected '", n::kArch, "'");
    ModelConfig c;
    int blocks = to_int(f, n::kBlockCount);
    c.n_nextn = f.find(n::kNextnPredictLayers) ? to_int(f, n::kNextnPredictLayers) : 0;
    if (c.n_nextn >= blocks)
        fail(f.path(), ": ", n::kNextnPredictLayers, " ", c.n_nextn, " leaves no main layer of ", n::kBlockCount, " ", blocks);
    c.n_layers = blocks - c.n_nextn;
    c.hidden = to_int(f, n::kEmbeddingLength);
    c.n_heads = to_int(f, n::kHeadCount);
    c.head_dim = to_int(f, n::kKeyLength);
    if (to_int(f, n::kValueLength) != c.head_dim) fail(f.path(), ": key_length and value_length differ");
    if (f.find(n::kHeadCountKv) && to_int(f, n::kHeadCountKv) != 1)
        fail(f.path(), ": ", n::kHeadCountKv, " must be 1 (one shared latent K=V row)");
    c.rope_dim = to_int(f, n::kRopeDimensionCount);
    c.q_lora = to_int(f, n::kQLoraRank);
    c.o_groups = to_int(f, n::kOutputGroupCount);
    c.o_lora = to_int(f, n::kOutputLoraRank);
    c.window = to_int(f, n::kSlidingWindow);
    c.norm_eps = f.get_number(n::kRmsEps);
    c.n_experts = to_int(f, n::kExpertCount);
    c.top_k = to_int(f, n::kExpertUsedCount);
    c.n_shared = to_int(f, n::kExpertSharedCount);
    c.moe_inter = to_int(f, n::kExpertFeedForwardLength);
    c.routed_scale = f.get_number(n::kExpertWeightsScale);
    c.norm_topk = f.get_number(n::kExpertWeightsNorm) != 0;
    if (to_int(f, n::kExpertGatingFunc) != n::kGatingSqrtSoftplus)
        fail(f.path(), ": ", n::kExpertGatingFunc, " must be ", n::kGatingSqrtSoftplus, " (sqrt-softplus)");
    for (const std::string& k : {n::kExpertGroupCount, n::kExpertGroupUsedCount})
        if (f.find(k) && to_int(f, k) > 1) fail(f.path(), ": expert groups (", k, ") are not supported");
    c.hc_mult = to_int(f, n::kHcCount);
    c.hc_iters = to_int(f, n::kHcSinkhornIters);
    c.hc_eps = f.get_number(n::kHcEpsilon);
    c.swiglu_limit = first_float(f, n::kSwigluClampExp, 0.0);
    if (first_float(f, n::kSwigluClampShexp, c.swiglu_limit) != c.swiglu_limit)
        fail(f.path(), ": routed and shared SwiGLU clamps differ, which is not supported");
    c.max_positions = f.find(n::kContextLength) ? f.get_int(n::kContextLength) : 0;
    c.bos = f.find(n::kBosTokenId) ? to_int(f, n::kBosTokenId) : 0;
    c.eos = f.find(n::kEosTokenId) ? to_int(f, n::kEosTokenId) : 1;

    c.rope_main.theta = f.get_number(n::kRopeFreqBase);
    c.rope_compress.theta = f.get_number(n::kCompressRopeFreqBase);
    if (const Value* t = f.find(n::kRopeScalingType)) {
        if (t->type != ValueType::STRING) fail(f.path(), ": ", n::kRopeScalingType, " is not a string");
        if (t->s == "yarn") {
            c.rope_compress.yarn = true;
            c.rope_compress.factor = f.get_number(n::kRopeScalingFactor);
            c.rope_compress.original_context = f.get_number(n::kRopeScalingOrigCtx);
            if (f.find(n::kRopeYarnBetaFast)) c.rope_compress.beta_fast = f.get_number(n::kRopeYarnBetaFast);
            if (f.find(n::kRopeYarnBetaSlow)) c.rope_compress.beta_slow = f.get_number(n::kRopeYarnBetaSlow);
        } else if (t->s != "none") {
            fail(f.path(), ": rope scaling type '", t->s, "' is not supported (yarn or none)");
        }
    }

    std::vector<int64_t> ratios = int_array(f, n::kCompressRatios);
    if (int64_t(ratios.size()) < blocks)
        fail(f.path(), ": ", n::kCompressRatios, " has ", ratios.size(), " entries for ", blocks, " blocks");
    int csa = f.find(n::kDsv4CsaRatio) ? to_int(f, n::kDsv4CsaRatio) : 4;
    for (int l = 0; l < c.n_layers; ++l) {
        int r = int(ratios[size_t(l)]);
        c.ratio.push_back(r);
        c.attn.push_back(r == 0 ? AttnType::Sliding : r == csa ? AttnType::CSA : AttnType::HCA);
    }
    // Required with CSA layers; read whenever present so that a round trip keeps them.
    bool has_csa = std::find(c.attn.begin(), c.attn.end(), AttnType::CSA) != c.attn.end();
    auto indexer = [&](const std::string& k) { return has_csa || f.find(k) ? to_int(f, k) : 0; };
    c.index_heads = indexer(n::kIndexerHeadCount);
    c.index_head_dim = indexer(n::kIndexerKeyLength);
    c.index_topk = indexer(n::kIndexerTopK);
    if (f.find(n::kDsv4HashLayers)) {
        std::vector<int64_t> h = int_array(f, n::kDsv4HashLayers);
        if (int64_t(h.size()) != c.n_layers) fail(f.path(), ": ", n::kDsv4HashLayers, " needs one entry per layer");
        for (int64_t x : h) c.mlp.push_back(x ? MlpType::Hash : MlpType::TopK);
    } else {
        int hash = f.find(n::kHashLayerCount) ? to_int(f, n::kHashLayerCount) : 0;
        for (int l = 0; l < c.n_layers; ++l) c.mlp.push_back(l < hash ? MlpType::Hash : MlpType::TopK);
    }
    const gguf::TensorInfo* emb = f.find_tensor(n::kTokenEmbd);
    if (!emb || emb->ne.size() != 2) fail(f.path(), ": missing or malformed tensor '", n::kTokenEmbd, "'");
    c.vocab = f.find(n::kVocabSize) ? to_int(f, n::kVocabSize) : int(emb->ne[1]);
    c.validate(f.path());
    return c;
}

void config_to_gguf(const ModelConfig& c, gguf::Writer& w) {
    auto u32 = [&](const std::string& k, long long v) { w.set(k, Value::u32(uint32_t(v))); };
    auto f32 = [&](const std::string& k, double v) { w.set(k, Value::f32(float(v))); };
    w.set(n::kArchitecture, Value::str(n::kArch));
    int blocks = c.n_layers + c.n_nextn;
    u32(n::kBlockCount, blocks);
    u32(n::kContextLength, c.max_positions);
    u32(n::kEmbeddingLength, c.hidden);
    u32(n::kEmbeddingLengthOut, int64_t(c.hidden) * c.hc_mult);
    u32(n::kVocabSize, c.vocab);
    u32(n::kFeedForwardLength, c.moe_inter);
    u32(n::kHeadCount, c.n_heads);
    u32(n::kHeadCountKv, 1);
    u32(n::kKeyLength, c.head_dim);
    u32(n::kValueLength, c.head_dim);
    u32(n::kQLoraRank, c.q_lora);
    u32(n::kOutputLoraRank, c.o_lora);
    u32(n::kOutputGroupCount, c.o_groups);
    u32(n::kSlidingWindow, c.window);
    std::vector<int> ratios = c.ratio;
    ratios.resize(static_cast<size_t>(blocks), 0);  // MTP blocks are sliding-window blocks
    w.set(n::kCompressRatios, int_array_value(ratios));
    f32(n::kCompressRopeFreqBase, c.rope_compress.theta);
    f32(n::kRmsEps, c.norm_eps);
    u32(n::kIndexerHeadCount, c.index_heads);
    u32(n::kIndexerKeyLength, c.index_head_dim);
    u32(n::kIndexerTopK, c.index_topk);
    u32(n::kRopeDimensionCount, c.rope_dim);
    f32(n::kRopeFreqBase, c.rope_main.theta);
    if (c.rope_compress.yarn) {
        w.set(n::kRopeScalingType, Value::str("yarn"));
        f32(n::kRopeScalingFactor, c.rope_compress.factor);
        u32(n::kRopeScalingOrigCtx, int64_t(c.rope_compress.original_context));
        f32(n::kRopeYarnBetaFast, c.rope_compress.beta_fast);
        f32(n::kRopeYarnBetaSlow, c.rope_compress.beta_slow);
    }
    u32(n::kExpertCount, c.n_experts);
    u32(n::kExpertUsedCount, c.top_k);
    u32(n::kExpertSharedCount, c.n_shared);
    u32(n::kExpertFeedForwardLength, c.moe_inter);
    f32(n::kExpertWeightsScale, c.routed_scale);
    w.set(n::kExpertWeightsNorm, Value::boolean(c.norm_topk));
    u32(n::kExpertGatingFunc, n::kGatingSqrtSoftplus);
    u32(n::kExpertGroupCount, 0);
    u32(n::kExpertGroupUsedCount, 0);
    int leading_hash = 0;
    while (leading_hash < c.n_layers && c.mlp[size_t(leading_hash)] == MlpType::Hash) ++leading_hash;
    u32(n::kHashLayerCount, leading_hash);
    std::vector<int> hash_layers;
    for (MlpType m : c.mlp) hash_layers.push_back(m == MlpType::Hash ? 1 : 0);
    w.set(n::kDsv4HashLayers, int_array_value(hash_layers));
    // Always written, 0 without CSA layers: the reader's default of 4 would turn HCA layers of
    // ratio 4 into CSA layers.
    u32(n::kDsv4CsaRatio, c.csa_ratio());
    u32(n::kHcCount, c.hc_mult);
    u32(n::kHcSinkhornIters, c.hc_iters);
    f32(n::kHcEpsilon, c.hc_eps);
    w.set(n::kSwigluClampExp, float_array_value(static_cast<size_t>(blocks), c.swiglu_limit));
    w.set(n::kSwigluClampShexp, float_array_value(static_cast<size_t>(blocks), c.swiglu_limit));
    if (c.n_nextn) u32(n::kNextnPredictLayers, c.n_nextn);
    u32(n::kBosTokenId, c.bos);
    u32(n::kEosTokenId, c.eos);
}

}  // namespace dsv4
