#include "io/convert_dspark.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "backend/cpu/quant.h"
#include "core/error.h"
#include "io/names.h"
#include "io/safetensors.h"

namespace dsv4 {

namespace n = names;
using gguf::TensorType;
using gguf::Value;

namespace {

int field(const nlohmann::json& j, const std::string& key, const std::string& path) {
    if (!j.contains(key) || !j[key].is_number_integer() || j[key].get<int64_t>() <= 0)
        fail(path, ": field '", key, "' must be a positive integer");
    return j[key].get<int>();
}

}  // namespace

size_t convert_dspark(const DsparkConvertOptions& o) {
    const std::string cfg_path = o.dir + "/dspark_config.json";
    std::ifstream in(cfg_path);
    if (!in) fail(cfg_path, ": cannot open");
    nlohmann::json j;
    try {
        j = nlohmann::json::parse(in);
    } catch (const nlohmann::json::exception& e) {
        fail(cfg_path, ": not valid JSON (", e.what(), ")");
    }
    const int W = field(j, "block_size", cfg_path), layers = field(j, "n_layers", cfg_path);
    const int heads = field(j, "n_heads", cfg_path), hd = field(j, "head_dim", cfg_path);
    const int ffn = field(j, "ffn", cfg_path), rank = field(j, "markov_rank", cfg_path);
    const int vocab = field(j, "vocab_size", cfg_path);
    if (!j.contains("noise_token_id") || !j["noise_token_id"].is_number_integer())
        fail(cfg_path, ": field 'noise_token_id' must be an integer");
    const int noise = j["noise_token_id"].get<int>();
    if (noise < 0 || noise >= vocab) fail(cfg_path, ": noise_token_id ", noise, " is outside the vocabulary");

    SafeTensors st;
    st.add_file(o.dir + "/dspark.safetensors");
    const StTensor* mp = st.find(n::dspark("main_proj.weight"));
    if (!mp || mp->shape.size() != 2 || mp->shape[0] != mp->shape[1])
        fail(o.dir, "/dspark.safetensors: missing or non-square tensor 'dspark.main_proj.weight'");
    const int64_t D = mp->shape[0], HD = int64_t(heads) * hd;

    gguf::Writer w;
    w.set(n::kArchitecture, Value::str(n::kDsparkArch));
    w.set(n::kName, Value::str("dsv4 DSpark drafter from " + o.dir));
    auto u32 = [&](const std::string& k, int64_t v) { w.set(k, Value::u32(uint32_t(v))); };
    u32(n::kDsparkBlockSize, W);
    u32(n::kDsparkLayerCount, layers);
    u32(n::kDsparkHeadCount, heads);
    u32(n::kDsparkHeadDim, hd);
    u32(n::kDsparkFfnLength, ffn);
    u32(n::kDsparkMarkovRank, rank);
    u32(n::kDsparkNoiseToken, noise);
    u32(n::kDsparkVocab, vocab);
    u32(n::kDsparkHidden, D);
    w.set(n::kDsparkRmsEps, Value::f32(float(j.value("rms_eps", 1e-6))));

    size_t count = 0;
    std::set<std::string> used;
    auto add = [&](const std::string& name, std::vector<int64_t> shape, bool matrix) {
        const StTensor* t = st.find(name);
        if (!t) fail(o.dir, "/dspark.safetensors: missing tensor '", name, "'");
        if (t->shape != shape) fail(o.dir, "/dspark.safetensors: tensor '", name, "' has the wrong shape");
        const int64_t cols = shape.back();
        TensorType type = matrix ? o.dtype : TensorType::F32;
        if (gguf::type_block_elems(type) > 1 && cols % gguf::type_block_elems(type) != 0) type = TensorType::F16;
        std::vector<int64_t> ne(shape.rbegin(), shape.rend());
        std::vector<float> x = st.to_f32(*t);
        const size_t rb = cpu::row_bytes(type, cols);
        const int64_t rows = int64_t(x.size()) / cols;
        std::vector<uint8_t> bytes(rb * size_t(rows));
        for (int64_t r = 0; r < rows; ++r) cpu::quantize_row(type, x.data() + r * cols, cols, bytes.data() + rb * size_t(r));
        w.add_tensor(name, type, ne, std::move(bytes));
        used.insert(name);
        ++count;
    };
    add(n::dspark("main_proj.weight"), {D, D}, true);
    add(n::dspark("main_norm.weight"), {D}, false);
    add(n::dspark("pos"), {W, D}, false);
    for (int i = 0; i < layers; ++i) {
        add(n::dspark_blk(i, "attn_norm.weight"), {D}, false);
        for (const char* p : {"q", "k", "v"}) add(n::dspark_blk(i, std::string(p) + ".weight"), {HD, D}, true);
        add(n::dspark_blk(i, "o.weight"), {D, HD}, true);
        add(n::dspark_blk(i, "ffn_norm.weight"), {D}, false);
        add(n::dspark_blk(i, "gate.weight"), {ffn, D}, true);
        add(n::dspark_blk(i, "up.weight"), {ffn, D}, true);
        add(n::dspark_blk(i, "down.weight"), {D, ffn}, true);
    }
    add(n::dspark("final_norm.weight"), {D}, false);
    add(n::dspark("markov_a"), {vocab, rank}, true);
    add(n::dspark("markov_b"), {vocab, rank}, true);
    add(n::dspark("conf.weight"), {1, D}, false);
    add(n::dspark("conf.bias"), {1}, false);
    for (const auto& [name, t] : st.all())
        if (!used.count(name)) fail(t.file, ": unknown tensor '", name, "' (not part of a DSpark drafter)");
    w.write(o.out_path);
    return count;
}

}  // namespace dsv4
