// Reading a Hugging Face tokenizer.json (plus tokenizer_config.json for BOS/EOS). Only what
// the DeepSeek-V3 family uses is accepted; anything else (another pre-tokenizer, a normalizer,
// byte fallback, stripping added tokens, ...) is refused with a message naming it, because
// tokenizing it as if it were DeepSeek's would silently give wrong ids.
//
// Token types follow llama.cpp's converter, so a GGUF written from here matches one written
// by llama.cpp: an added token is Control when it is special or looks special ("<｜...｜>",
// "<|...|>"), otherwise UserDefined; ids no token claims become "[PADn]" of type Unused.
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "tokenizer/pretokenize.h"
#include "tokenizer/tokenizer.h"

namespace dsv4 {
namespace {

using nlohmann::json;

json read_json(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) fail(path, ": cannot open");
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    try {
        return json::parse(text);
    } catch (const json::exception& e) {
        fail(path, ": not valid JSON: ", e.what());
    }
}

// A field of a JSON object, or a failure naming it.
const json& field(const json& obj, const char* key, const std::string& where) {
    if (!obj.is_object() || !obj.contains(key)) fail(where, ": missing field '", key, "'");
    return obj.at(key);
}

bool is_true(const json& obj, const char* key) {
    auto it = obj.find(key);
    return it != obj.end() && it->is_boolean() && it->get<bool>();
}

bool is_unset_string(const json& obj, const char* key) {
    auto it = obj.find(key);
    return it == obj.end() || it->is_null() || (it->is_string() && it->get<std::string>().empty());
}

bool looks_special(const std::string& t) {
    const auto wraps = [&](std::string_view open, std::string_view close) {
        return t.size() >= open.size() + close.size() && t.starts_with(open) && t.ends_with(close);
    };
    return t == "<pad>" || t == "<mask>" || t == "<2mass>" || t == "[@BOS@]" || wraps("<|", "|>") ||
           wraps("<｜", "｜>") || wraps("<unused", ">");
}

void check_model(const json& model, const std::string& where) {
    const json& type = field(model, "type", where + " model");
    if (type != "BPE") fail(where, ": model type ", type.dump(), " is not supported (only BPE)");
    if (is_true(model, "byte_fallback")) fail(where, ": BPE byte_fallback is not supported");
    if (is_true(model, "ignore_merges")) fail(where, ": BPE ignore_merges is not supported");
    if (!is_unset_string(model, "continuing_subword_prefix") || !is_unset_string(model, "end_of_word_suffix"))
        fail(where, ": BPE subword prefixes/suffixes are not supported");
    auto dropout = model.find("dropout");
    if (dropout != model.end() && !dropout->is_null() && !(dropout->is_number() && dropout->get<double>() == 0.0))
        fail(where, ": BPE dropout is not supported");
}

void check_normalizer(const json& root, const std::string& where) {
    auto it = root.find("normalizer");
    if (it == root.end() || it->is_null()) return;
    const json& n = *it;
    const bool empty_sequence = n.value("type", "") == "Sequence" && n.contains("normalizers") &&
                                n["normalizers"].is_array() && n["normalizers"].empty();
    if (!empty_sequence) fail(where, ": normalizer ", n.dump(), " is not supported (DeepSeek-V3 has none)");
}

// The pre_tokenizer must be DeepSeek-V3's, regex for regex.
void check_pre_tokenizer(const json& root, const std::string& where) {
    const json& pre = field(root, "pre_tokenizer", where);
    const auto refuse = [&](const std::string& why) {
        fail(where, ": pre_tokenizer is not DeepSeek-V3's (", why, "), the only one dsv4 implements");
    };
    if (!pre.is_object() || pre.value("type", "") != "Sequence" || !pre.contains("pretokenizers"))
        refuse("not a Sequence");
    const json& steps = pre["pretokenizers"];
    if (!steps.is_array() || steps.size() != 4) refuse("not three Splits and a ByteLevel");
    for (size_t i = 0; i < 3; ++i) {
        const json& s = steps[i];
        if (s.value("type", "") != "Split") refuse(cat("step ", i, " is not a Split"));
        const json* regex = s.contains("pattern") && s["pattern"].is_object() && s["pattern"].contains("Regex")
                                ? &s["pattern"]["Regex"] : nullptr;
        if (!regex || *regex != kDeepSeekV3SplitRegexes[i]) refuse(cat("Split ", i, " has another pattern"));
        if (s.value("behavior", "") != "Isolated" || s.value("invert", true)) refuse(cat("Split ", i, " is not Isolated"));
    }
    const json& bl = steps[3];
    if (bl.value("type", "") != "ByteLevel" || bl.value("add_prefix_space", true) || bl.value("use_regex", true))
        refuse("the last step is not ByteLevel without prefix space and regex");
}

void check_decoder(const json& root, const std::string& where) {
    const json& d = field(root, "decoder", where);
    if (!d.is_object() || d.value("type", "") != "ByteLevel")
        fail(where, ": decoder ", d.dump(), " is not supported (only ByteLevel)");
}

// bos_token and friends: a string, an AddedToken object {"content": ...}, or null.
std::optional<std::string> config_token(const json& config, const char* key, const std::string& where) {
    auto it = config.find(key);
    if (it == config.end() || it->is_null()) return std::nullopt;
    if (it->is_string()) return it->get<std::string>();
    if (it->is_object() && it->contains("content") && (*it)["content"].is_string())
        return (*it)["content"].get<std::string>();
    fail(where, ": ", key, " is neither a string nor an AddedToken");
}

}  // namespace

Tokenizer Tokenizer::from_hf_json(const std::string& tokenizer_json, const std::string& tokenizer_config) {
    const std::string& where = tokenizer_json;
    const json root = read_json(tokenizer_json);
    if (!root.is_object()) fail(where, ": not a tokenizer.json (not an object)");
    const json& model = field(root, "model", where);
    check_model(model, where);
    check_normalizer(root, where);
    check_pre_tokenizer(root, where);
    check_decoder(root, where);

    TokenizerSpec s;
    s.source = tokenizer_json;

    // Ordinary tokens, by id; then the added tokens over them.
    const json& vocab = field(model, "vocab", where + " model");
    if (!vocab.is_object()) fail(where, ": model.vocab is not an object");
    const json& added = root.contains("added_tokens") ? root["added_tokens"] : json::array();
    if (!added.is_array()) fail(where, ": added_tokens is not an array");
    int64_t max_id = -1;
    for (const auto& [text, id] : vocab.items()) {
        if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX)
            fail(where, ": vocab entry '", text, "' has id ", id.dump());
        max_id = std::max(max_id, id.get<int64_t>());
    }
    for (const json& a : added) {
        const json& id = field(a, "id", where + " added token");
        if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX)
            fail(where, ": added token ", a.dump(), " has a bad id");
        max_id = std::max(max_id, id.get<int64_t>());
    }
    const size_t n = size_t(max_id + 1);
    std::vector<bool> claimed(n, false);
    s.tokens.resize(n);
    s.types.resize(n, TokenType::Normal);
    for (const auto& [text, id] : vocab.items()) {
        const size_t i = size_t(id.get<int64_t>());
        if (claimed[i]) fail(where, ": two vocab entries share id ", i);
        claimed[i] = true;
        s.tokens[i] = text;
    }
    for (const json& a : added) {
        const json& content = field(a, "content", where + " added token");
        if (!content.is_string()) fail(where, ": added token ", a.dump(), " has no string content");
        if (is_true(a, "lstrip") || is_true(a, "rstrip") || is_true(a, "single_word"))
            fail(where, ": added token ", content.dump(), " uses lstrip/rstrip/single_word, which is not supported");
        const size_t i = size_t(a["id"].get<int64_t>());
        claimed[i] = true;
        s.tokens[i] = content.get<std::string>();
        s.types[i] = is_true(a, "special") || looks_special(s.tokens[i]) ? TokenType::Control : TokenType::UserDefined;
    }
    for (size_t i = 0; i < n; ++i)
        if (!claimed[i]) {
            s.tokens[i] = cat("[PAD", i, "]");
            s.types[i] = TokenType::Unused;
        }

    const json& merges = field(model, "merges", where + " model");
    if (!merges.is_array()) fail(where, ": model.merges is not an array");
    s.merges.reserve(merges.size());
    for (const json& m : merges) {
        if (m.is_string()) {
            s.merges.push_back(m.get<std::string>());
        } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
            s.merges.push_back(m[0].get<std::string>() + " " + m[1].get<std::string>());
        } else {
            fail(where, ": merge ", m.dump(), " is neither \"a b\" nor [\"a\", \"b\"]");
        }
    }

    // BOS/EOS/padding live in tokenizer_config.json.
    std::string config_path = tokenizer_config;
    if (config_path.empty()) {
        const auto beside = std::filesystem::path(tokenizer_json).parent_path() / "tokenizer_config.json";
        if (std::filesystem::exists(beside)) config_path = beside.string();
    }
    const auto id_of = [&](const std::optional<std::string>& text, const char* what, const std::string& from) {
        if (!text) return int32_t(-1);
        for (size_t i = 0; i < n; ++i)
            if (s.tokens[i] == *text) return int32_t(i);
        fail(from, ": ", what, " '", *text, "' is not a token of ", where);
    };
    if (!config_path.empty()) {
        const json config = read_json(config_path);
        if (!config.is_object()) fail(config_path, ": not a JSON object");
        s.bos = id_of(config_token(config, "bos_token", config_path), "bos_token", config_path);
        s.eos = id_of(config_token(config, "eos_token", config_path), "eos_token", config_path);
        s.pad = id_of(config_token(config, "pad_token", config_path), "pad_token", config_path);
        auto add = config.find("add_bos_token");
        s.add_bos = add == config.end() || !add->is_boolean() || add->get<bool>();
    } else {
        const auto known = [&](const char* text) {
            for (size_t i = 0; i < n; ++i)
                if (s.tokens[i] == text) return int32_t(i);
            return int32_t(-1);
        };
        s.bos = known("<｜begin▁of▁sentence｜>");
        s.eos = known("<｜end▁of▁sentence｜>");
    }
    return Tokenizer(std::move(s));
}

}  // namespace dsv4
