// dsv4::Tokenizer: the byte-level BPE of the DeepSeek-V3/V4 family, read from GGUF metadata
// (the tokenizer.ggml.* keys llama.cpp defines) or from a Hugging Face tokenizer.json.
//
//   encode: added tokens ("<｜User｜>", ...) are cut out of the text as whole units; each
//           section between them goes through the DeepSeek-V3 pre-tokenizer, then every piece
//           is mapped to GPT-2's byte alphabet and merged by rank.
//   decode: the exact inverse for ordinary tokens (bytes, even where a token ends inside a
//           UTF-8 character); added tokens decode to their text.
//
// A Tokenizer is immutable after construction and may be used from several threads at once.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace dsv4 {

namespace gguf {
class Reader;
class Writer;
}  // namespace gguf

// llama.cpp's token types, the values of tokenizer.ggml.token_type.
enum class TokenType : int32_t {
    Undefined = 0,
    Normal = 1,
    Unknown = 2,
    Control = 3,      // special tokens: BOS, EOS, "<｜User｜>", ...
    UserDefined = 4,  // added tokens that are not special
    Unused = 5,       // padding rows, "[PAD123]"
    Byte = 6,
};

// What a tokenizer consists of, in the form GGUF stores it.
struct TokenizerSpec {
    std::string model = "gpt2";       // tokenizer.ggml.model
    std::string pre = "deepseek-v3";  // tokenizer.ggml.pre
    std::vector<std::string> tokens;  // byte-alphabet text for ordinary tokens, plain text for added ones
    std::vector<TokenType> types;     // one per token
    std::vector<std::string> merges;  // "left right", best rank first
    int32_t bos = -1;                 // -1: none
    int32_t eos = -1;
    int32_t pad = -1;
    bool add_bos = true;              // what the model expects (the caller decides per encode)
    std::string source;               // names the origin (a file) in error messages
};

class Tokenizer {
public:
    // Validates the spec; throws dsv4::Error naming the first problem.
    explicit Tokenizer(TokenizerSpec spec);
    // From the tokenizer.ggml.* metadata of a GGUF file.
    explicit Tokenizer(const gguf::Reader& reader);
    // From a Hugging Face tokenizer.json. BOS, EOS, padding and add_bos_token come from
    // tokenizer_config.json: the given path, else the one beside tokenizer.json, else (for
    // DeepSeek files without one) the tokens "<｜begin▁of▁sentence｜>" / "<｜end▁of▁sentence｜>".
    static Tokenizer from_hf_json(const std::string& tokenizer_json, const std::string& tokenizer_config = "");

    // Sets the tokenizer.ggml.* keys. pad_to > vocab_size() appends "[PADn]" tokens of type
    // Unused up to that count, as llama.cpp's converter does to match the embedding rows.
    void write_gguf(gguf::Writer& writer, size_t pad_to = 0) const;

    // add_bos prepends the BOS id. parse_special = false leaves control tokens written in the
    // text as ordinary text (user-defined added tokens are still matched, as in llama.cpp).
    std::vector<int32_t> encode(std::string_view text, bool add_bos, bool parse_special = true) const;
    std::string decode(std::span<const int32_t> ids) const;
    // The bytes one token decodes to (streaming output joins these).
    const std::string& token_bytes(int32_t id) const;

    // Token id of a token's stored text ("<｜User｜>", or "Ġthe" for an ordinary token).
    std::optional<int32_t> find_token(std::string_view text) const;
    int32_t token_id(std::string_view text) const;  // throws if there is no such token
    const std::string& token_text(int32_t id) const;
    TokenType token_type(int32_t id) const;

    size_t vocab_size() const;
    int32_t bos_id() const;  // -1 when the tokenizer has none
    int32_t eos_id() const;
    int32_t pad_id() const;
    bool add_bos() const;
    const TokenizerSpec& spec() const;

private:
    struct Impl;
    std::shared_ptr<const Impl> impl_;
};

// Whether a GGUF file carries a tokenizer (the tokenizer.ggml.tokens key).
bool has_tokenizer(const gguf::Reader& reader);

}  // namespace dsv4
