// Tokenizer core: validation of a TokenizerSpec, the lookup tables built from it, encode and
// decode. The GGUF and tokenizer.json front doors live in tokenizer_gguf.cpp / tokenizer_hf.cpp.
#include "tokenizer/tokenizer.h"

#include <array>
#include <mutex>
#include <unordered_map>

#include "core/error.h"
#include "tokenizer/added_tokens.h"
#include "tokenizer/bpe.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/pretokenize.h"

namespace dsv4 {

struct Tokenizer::Impl {
    TokenizerSpec spec;
    std::unordered_map<std::string_view, int32_t> ids;  // keys view spec.tokens
    std::vector<std::string> bytes;                     // what each token decodes to
    std::array<int32_t, 256> byte_token{};              // the token of each single byte
    BpeMerges merges;
    AddedTokenMatcher added;

    // Words repeat a lot in text, so merged pieces are remembered (bounded, shared by threads).
    static constexpr size_t kCacheEntries = 1 << 16;
    static constexpr size_t kCacheMaxPiece = 64;
    mutable std::mutex cache_mutex;
    mutable std::unordered_map<std::string, std::vector<int32_t>> cache;

    std::string where() const { return spec.source.empty() ? std::string("tokenizer") : spec.source; }
    void encode_piece(std::string_view piece, std::vector<int32_t>& out) const;
    void encode_section(std::string_view section, std::vector<int32_t>& out) const;
};

namespace {

void check_special_id(const std::string& where, const char* what, int32_t id, size_t n) {
    if (id < -1 || (id >= 0 && size_t(id) >= n))
        fail(where, ": ", what, " token id ", id, " is out of range (vocabulary of ", n, " tokens)");
}

}  // namespace

Tokenizer::Tokenizer(TokenizerSpec spec) {
    auto impl = std::make_shared<Impl>();
    impl->spec = std::move(spec);
    Impl& m = *impl;
    const TokenizerSpec& s = m.spec;
    const std::string where = m.where();

    if (s.model != "gpt2") fail(where, ": tokenizer model '", s.model, "' is not supported (only gpt2, byte-level BPE)");
    if (s.pre != "deepseek-v3")
        fail(where, ": pre-tokenizer '", s.pre, "' is not supported (only deepseek-v3)");
    if (s.tokens.empty()) fail(where, ": the vocabulary is empty");
    if (s.types.size() != s.tokens.size())
        fail(where, ": ", s.types.size(), " token types for ", s.tokens.size(), " tokens");
    if (s.tokens.size() > size_t(INT32_MAX)) fail(where, ": too many tokens");
    check_special_id(where, "BOS", s.bos, s.tokens.size());
    check_special_id(where, "EOS", s.eos, s.tokens.size());
    check_special_id(where, "padding", s.pad, s.tokens.size());

    m.ids.reserve(s.tokens.size());
    m.bytes.resize(s.tokens.size());
    for (size_t i = 0; i < s.tokens.size(); ++i) {
        const std::string& text = s.tokens[i];
        const int32_t id = int32_t(i);
        m.ids.try_emplace(text, id);  // a repeated text keeps its first id
        switch (s.types[i]) {
            case TokenType::Control:
            case TokenType::UserDefined:
                m.bytes[i] = text;
                m.added.add(text, id, s.types[i] == TokenType::Control);
                break;
            case TokenType::Unused:
                break;  // padding rows decode to nothing
            default:
                if (!byte_level::decode_text(text, m.bytes[i])) m.bytes[i] = text;
                break;
        }
    }
    for (int b = 0; b < 256; ++b) {
        const std::string& text = byte_level::encode_byte(uint8_t(b));
        auto it = m.ids.find(text);
        if (it == m.ids.end())
            fail(where, ": the vocabulary lacks the byte-level token '", text, "' of byte ", b);
        m.byte_token[size_t(b)] = it->second;
    }
    for (size_t r = 0; r < s.merges.size(); ++r) {
        const std::string& merge = s.merges[r];
        const size_t sp = merge.find(' ', 1);  // a token never starts with a space here
        if (sp == std::string::npos || sp + 1 >= merge.size())
            fail(where, ": merge ", r, " '", merge, "' is not two tokens separated by a space");
        const std::string_view left(merge.data(), sp), right(merge.data() + sp + 1, merge.size() - sp - 1);
        const auto l = m.ids.find(left), rt = m.ids.find(right);
        if (l == m.ids.end()) fail(where, ": merge ", r, " '", merge, "' names unknown token '", left, "'");
        if (rt == m.ids.end()) fail(where, ": merge ", r, " '", merge, "' names unknown token '", right, "'");
        const std::string joined = cat(left, right);
        const auto j = m.ids.find(joined);
        if (j == m.ids.end()) fail(where, ": merge ", r, " '", merge, "' makes '", joined, "', which is not a token");
        m.merges.add(l->second, rt->second, j->second);
    }
    impl_ = std::move(impl);
}

void Tokenizer::Impl::encode_piece(std::string_view piece, std::vector<int32_t>& out) const {
    const bool cacheable = piece.size() <= kCacheMaxPiece;
    if (cacheable) {
        std::lock_guard<std::mutex> lock(cache_mutex);
        auto it = cache.find(std::string(piece));
        if (it != cache.end()) {
            out.insert(out.end(), it->second.begin(), it->second.end());
            return;
        }
    }
    std::vector<int32_t> symbols;
    symbols.reserve(piece.size());
    for (char c : piece) symbols.push_back(byte_token[uint8_t(c)]);
    merges.apply(symbols);
    out.insert(out.end(), symbols.begin(), symbols.end());
    if (cacheable) {
        std::lock_guard<std::mutex> lock(cache_mutex);
        if (cache.size() >= kCacheEntries) cache.clear();
        cache.emplace(std::string(piece), std::move(symbols));
    }
}

void Tokenizer::Impl::encode_section(std::string_view section, std::vector<int32_t>& out) const {
    std::vector<std::string_view> pieces;
    pretokenize_deepseek_v3(section, pieces);
    for (std::string_view p : pieces) encode_piece(p, out);
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_bos, bool parse_special) const {
    const Impl& m = *impl_;
    std::vector<int32_t> out;
    out.reserve(text.size() / 3 + 2);
    if (add_bos) {
        if (m.spec.bos < 0) fail(m.where(), ": cannot add BOS, the tokenizer has no BOS token");
        out.push_back(m.spec.bos);
    }
    size_t start = 0;  // of the section not yet encoded
    for (size_t pos = 0; pos < text.size();) {
        if (m.added.may_start(uint8_t(text[pos]))) {
            const AddedTokenMatcher::Match hit = m.added.longest_at(text, pos, parse_special);
            if (hit.len > 0) {
                m.encode_section(text.substr(start, pos - start), out);
                out.push_back(hit.id);
                pos += hit.len;
                start = pos;
                continue;
            }
        }
        ++pos;
    }
    m.encode_section(text.substr(start), out);
    return out;
}

const std::string& Tokenizer::token_bytes(int32_t id) const {
    if (id < 0 || size_t(id) >= impl_->bytes.size())
        fail(impl_->where(), ": token id ", id, " is out of range (vocabulary of ", impl_->bytes.size(), " tokens)");
    return impl_->bytes[size_t(id)];
}

std::string Tokenizer::decode(std::span<const int32_t> ids) const {
    std::string out;
    for (int32_t id : ids) out += token_bytes(id);
    return out;
}

std::optional<int32_t> Tokenizer::find_token(std::string_view text) const {
    auto it = impl_->ids.find(text);
    if (it == impl_->ids.end()) return std::nullopt;
    return it->second;
}

int32_t Tokenizer::token_id(std::string_view text) const {
    if (auto id = find_token(text)) return *id;
    fail(impl_->where(), ": no token '", text, "'");
}

const std::string& Tokenizer::token_text(int32_t id) const {
    token_bytes(id);  // range check
    return impl_->spec.tokens[size_t(id)];
}

TokenType Tokenizer::token_type(int32_t id) const {
    token_bytes(id);
    return impl_->spec.types[size_t(id)];
}

size_t Tokenizer::vocab_size() const { return impl_->spec.tokens.size(); }
int32_t Tokenizer::bos_id() const { return impl_->spec.bos; }
int32_t Tokenizer::eos_id() const { return impl_->spec.eos; }
int32_t Tokenizer::pad_id() const { return impl_->spec.pad; }
bool Tokenizer::add_bos() const { return impl_->spec.add_bos; }
const TokenizerSpec& Tokenizer::spec() const { return impl_->spec; }

}  // namespace dsv4
