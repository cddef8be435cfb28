// The tokenizer.ggml.* metadata keys, as llama.cpp reads and writes them for a "gpt2"
// (byte-level BPE) vocabulary. Every key is checked for presence and type, so a malformed
// file fails with a message naming the key instead of tokenizing wrongly.
#include <algorithm>
#include <string>

#include "core/error.h"
#include "io/gguf.h"
#include "tokenizer/tokenizer.h"

namespace dsv4 {
namespace {

namespace k {
const std::string kModel = "tokenizer.ggml.model";
const std::string kPre = "tokenizer.ggml.pre";
const std::string kTokens = "tokenizer.ggml.tokens";
const std::string kTokenType = "tokenizer.ggml.token_type";
const std::string kMerges = "tokenizer.ggml.merges";
const std::string kBos = "tokenizer.ggml.bos_token_id";
const std::string kEos = "tokenizer.ggml.eos_token_id";
const std::string kPad = "tokenizer.ggml.padding_token_id";
const std::string kAddBos = "tokenizer.ggml.add_bos_token";
}  // namespace k

using gguf::Value;
using gguf::ValueType;

bool is_integer_type(ValueType t) {
    switch (t) {
        case ValueType::U8: case ValueType::I8: case ValueType::U16: case ValueType::I16:
        case ValueType::U32: case ValueType::I32: case ValueType::U64: case ValueType::I64:
            return true;
        default:
            return false;
    }
}

const Value& require(const gguf::Reader& r, const std::string& key) {
    const Value* v = r.find(key);
    if (!v) fail(r.path(), ": missing metadata key '", key, "' (the file carries no usable tokenizer)");
    return *v;
}

std::string require_string(const gguf::Reader& r, const std::string& key) {
    const Value& v = require(r, key);
    if (v.type != ValueType::STRING) fail(r.path(), ": metadata key '", key, "' must be a string");
    return v.s;
}

const std::vector<Value>& require_array(const gguf::Reader& r, const std::string& key, bool strings) {
    const Value& v = require(r, key);
    const bool ok = v.type == ValueType::ARRAY && (strings ? v.elem == ValueType::STRING : is_integer_type(v.elem));
    if (!ok) fail(r.path(), ": metadata key '", key, "' must be an array of ", strings ? "strings" : "integers");
    return v.arr;
}

int32_t optional_id(const gguf::Reader& r, const std::string& key) {
    const Value* v = r.find(key);
    if (!v) return -1;
    if (!is_integer_type(v->type)) fail(r.path(), ": metadata key '", key, "' must be an integer");
    const int64_t id = v->integer();
    if (id < 0 || id > INT32_MAX) fail(r.path(), ": metadata key '", key, "' = ", id, " is not a token id");
    return int32_t(id);
}

TokenizerSpec spec_from_gguf(const gguf::Reader& r) {
    TokenizerSpec s;
    s.source = r.path();
    s.model = require_string(r, k::kModel);
    if (s.model != "gpt2")
        fail(r.path(), ": ", k::kModel, " = '", s.model, "' is not supported (only gpt2, byte-level BPE)");
    s.pre = require_string(r, k::kPre);

    const std::vector<Value>& tokens = require_array(r, k::kTokens, true);
    s.tokens.reserve(tokens.size());
    for (const Value& t : tokens) s.tokens.push_back(t.s);

    const std::vector<Value>& types = require_array(r, k::kTokenType, false);
    if (types.size() != tokens.size())
        fail(r.path(), ": ", k::kTokenType, " has ", types.size(), " entries for ", tokens.size(), " tokens");
    s.types.reserve(types.size());
    for (size_t i = 0; i < types.size(); ++i) {
        const int64_t t = types[i].integer();
        if (t < 0 || t > int64_t(TokenType::Byte))
            fail(r.path(), ": ", k::kTokenType, "[", i, "] = ", t, " is not a token type (0..6)");
        s.types.push_back(TokenType(t));
    }

    const std::vector<Value>& merges = require_array(r, k::kMerges, true);
    s.merges.reserve(merges.size());
    for (const Value& m : merges) s.merges.push_back(m.s);

    s.bos = optional_id(r, k::kBos);
    s.eos = optional_id(r, k::kEos);
    s.pad = optional_id(r, k::kPad);
    if (const Value* v = r.find(k::kAddBos)) {
        if (v->type != ValueType::BOOL) fail(r.path(), ": metadata key '", k::kAddBos, "' must be a bool");
        s.add_bos = v->u != 0;
    }
    return s;
}

}  // namespace

Tokenizer::Tokenizer(const gguf::Reader& reader) : Tokenizer(spec_from_gguf(reader)) {}

void Tokenizer::write_gguf(gguf::Writer& w, size_t pad_to) const {
    const TokenizerSpec& s = spec();
    if (pad_to != 0 && pad_to < s.tokens.size())
        fail("cannot pad the vocabulary of ", s.tokens.size(), " tokens down to ", pad_to);
    const size_t n = std::max(pad_to, s.tokens.size());

    std::vector<Value> tokens, types, merges;
    tokens.reserve(n);
    types.reserve(n);
    for (size_t i = 0; i < n; ++i) {
        const bool pad = i >= s.tokens.size();
        tokens.push_back(Value::str(pad ? cat("[PAD", i, "]") : s.tokens[i]));
        types.push_back(Value::i32(int32_t(pad ? TokenType::Unused : s.types[i])));
    }
    merges.reserve(s.merges.size());
    for (const std::string& m : s.merges) merges.push_back(Value::str(m));

    w.set(k::kModel, Value::str(s.model));
    w.set(k::kPre, Value::str(s.pre));
    w.set(k::kTokens, Value::array(ValueType::STRING, std::move(tokens)));
    w.set(k::kTokenType, Value::array(ValueType::I32, std::move(types)));
    w.set(k::kMerges, Value::array(ValueType::STRING, std::move(merges)));
    if (s.bos >= 0) w.set(k::kBos, Value::u32(uint32_t(s.bos)));
    if (s.eos >= 0) w.set(k::kEos, Value::u32(uint32_t(s.eos)));
    if (s.pad >= 0) w.set(k::kPad, Value::u32(uint32_t(s.pad)));
    w.set(k::kAddBos, Value::boolean(s.add_bos));
}

bool has_tokenizer(const gguf::Reader& r) { return r.find(k::kTokens) != nullptr; }

}  // namespace dsv4
