// The generation loop: text streaming (UTF-8 and stop strings held back until decided), and
// generate() on a fixture model with a small byte-level tokenizer: greedy output equals the
// argmax chain of full forwards, prefix reuse gives the same output, stop reasons, cancellation.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>

#include "core/error.h"
#include "io/convert_hf.h"
#include "runtime/generator.h"
#include "runtime/text_stream.h"
#include "fixture_util.h"

using namespace dsv4;

namespace {

using test::byte_tokenizer_json;
using Loaded = test::TextModel;

// mini_flash with the byte tokenizer embedded, loaded once.
const Loaded& loaded() { return test::text_fixture("mini_flash"); }

PrefillOptions no_admission(int64_t band = 2048) {
    PrefillOptions o;
    o.band = band;
    o.admission.headroom_bytes = 0;
    return o;
}

int32_t argmax(const float* x, int64_t n) { return int32_t(std::max_element(x, x + n) - x); }

}  // namespace

TEST(TextStream, HoldsBackAnUnfinishedUtf8Character) {
    TextStream s;
    const std::string euro = "\xE2\x82\xAC";  // one character in three bytes
    EXPECT_EQ(s.push("a" + euro.substr(0, 1)), "a");
    EXPECT_EQ(s.push(euro.substr(1, 1)), "");
    EXPECT_EQ(s.push(euro.substr(2, 1) + "b"), euro + "b");
    EXPECT_EQ(s.push("\xF0\x9F"), "");  // half an emoji at the end...
    EXPECT_EQ(s.finish(), "\xEF\xBF\xBD");  // ...becomes U+FFFD
}

TEST(TextStream, StopStringAcrossPiecesIsNeverShown) {
    TextStream s({"</end>", "STOP"});
    std::string shown = s.push("hello </");
    EXPECT_EQ(shown, "hello ");  // "</" could start "</end>"
    shown += s.push("en");
    EXPECT_FALSE(s.stopped());
    shown += s.push("d> tail");
    EXPECT_TRUE(s.stopped());
    EXPECT_EQ(shown, "hello ");
    EXPECT_EQ(s.stop_found(), "</end>");
    EXPECT_EQ(s.push("more"), "");
    EXPECT_EQ(s.finish(), "");
}

TEST(TextStream, APrefixThatDoesNotBecomeAStopIsReleased) {
    TextStream s({"STOP"});
    EXPECT_EQ(s.push("ST"), "");
    EXPECT_EQ(s.push("ART"), "START");
    EXPECT_EQ(s.push("S"), "");
    EXPECT_EQ(s.finish(), "S");
    EXPECT_FALSE(s.stopped());
}

TEST(TextStream, EarliestStopWins) {
    TextStream s({"bc", "ab"});
    EXPECT_EQ(s.push("xabc"), "x");
    EXPECT_EQ(s.stop_found(), "ab");
}

TEST(Generate, GreedyEqualsTheArgmaxChainOfFullForwards) {
    const Loaded& l = loaded();
    const int64_t V = l.model->config().vocab;
    std::vector<int32_t> prompt = l.tok->encode("the cat sat on the mat", true);
    Session s(*l.model, no_admission(7));
    GenerateOptions o;
    o.max_tokens = 24;
    o.ignore_eos = true;
    GenerateStats st = generate(s, *l.tok, prompt, o);
    ASSERT_EQ(st.gen_tokens, 24);
    EXPECT_EQ(st.stop, StopReason::Length);
    EXPECT_EQ(st.decode_steps, 23);
    EXPECT_EQ(int64_t(s.tokens().size()), int64_t(prompt.size()) + 23);

    // The same chain from one full forward over prompt + generated tokens.
    std::vector<int32_t> all = prompt;
    all.insert(all.end(), st.tokens.begin(), st.tokens.end());
    State ref(l.model->config());
    std::vector<float> logits(static_cast<size_t>(int64_t(all.size()) * V));
    l.model->forward(all.data(), int64_t(all.size()), ref, logits.data());
    for (size_t i = 0; i < st.tokens.size(); ++i)
        EXPECT_EQ(st.tokens[i], argmax(logits.data() + int64_t(prompt.size() - 1 + i) * V, V)) << "token " << i;
    EXPECT_EQ(st.text, l.tok->decode(st.tokens));
}

TEST(Generate, StreamedPiecesJoinToTheText) {
    const Loaded& l = loaded();
    Session s(*l.model, no_admission());
    GenerateOptions o;
    o.max_tokens = 30;
    o.ignore_eos = true;
    o.sampling.temperature = 0.9f;
    o.sampling.seed = 7;
    std::string joined;
    GenerateEvents ev;
    ev.on_text = [&](std::string_view p) { joined += p; };
    GenerateStats st = generate(s, *l.tok, l.tok->encode("once upon", true), o, ev);
    EXPECT_EQ(joined, st.text);
    // Same seed, same tokens.
    Session s2(*l.model, no_admission());
    EXPECT_EQ(generate(s2, *l.tok, l.tok->encode("once upon", true), o).tokens, st.tokens);
}

TEST(Generate, AnExtendedPromptReusesTheSessionAndGivesTheSameOutput) {
    const Loaded& l = loaded();
    GenerateOptions o;
    o.max_tokens = 8;
    o.ignore_eos = true;
    Session s(*l.model, no_admission());
    std::vector<int32_t> first = l.tok->encode("in the beginning", true);
    GenerateStats a = generate(s, *l.tok, first, o);
    // The next turn: everything the session holds, plus more text.
    std::vector<int32_t> next = s.tokens();
    std::vector<int32_t> more = l.tok->encode(" and then", false);
    next.insert(next.end(), more.begin(), more.end());
    GenerateStats b = generate(s, *l.tok, next, o);
    EXPECT_EQ(b.cached_tokens, int64_t(first.size()) + a.decode_steps);
    Session fresh(*l.model, no_admission());
    GenerateStats c = generate(fresh, *l.tok, next, o);
    EXPECT_EQ(c.cached_tokens, 0);
    EXPECT_EQ(b.tokens, c.tokens);
    // A prompt that does not extend the session starts over.
    GenerateStats d = generate(s, *l.tok, first, o);
    EXPECT_EQ(d.cached_tokens, 0);
    EXPECT_EQ(d.tokens, a.tokens);
}

TEST(Generate, StopStringEndsGenerationAndIsNotInTheText) {
    const Loaded& l = loaded();
    GenerateOptions o;
    o.max_tokens = 40;
    o.ignore_eos = true;
    Session s(*l.model, no_admission());
    GenerateStats free_run = generate(s, *l.tok, l.tok->encode("abc", true), o);
    ASSERT_GE(free_run.text.size(), 6u);
    // Stop on a piece of what the model produces anyway.
    o.stop = {free_run.text.substr(3, 2)};
    GenerateStats st = generate(s, *l.tok, l.tok->encode("abc", true), o);
    EXPECT_EQ(st.stop, StopReason::StopString);
    EXPECT_EQ(st.text, free_run.text.substr(0, free_run.text.find(o.stop[0])));
    EXPECT_LT(st.gen_tokens, free_run.gen_tokens);
}

TEST(Generate, CancelStopsBeforeTheNextToken) {
    const Loaded& l = loaded();
    std::atomic<bool> cancel{false};
    GenerateEvents ev;
    int pieces = 0;
    ev.on_text = [&](std::string_view) {
        if (++pieces == 3) cancel = true;
    };
    ev.cancel = &cancel;
    GenerateOptions o;
    o.max_tokens = 100;
    o.ignore_eos = true;
    Session s(*l.model, no_admission());
    GenerateStats st = generate(s, *l.tok, l.tok->encode("hello", true), o, ev);
    EXPECT_EQ(st.stop, StopReason::Cancelled);
    EXPECT_LT(st.gen_tokens, 100);
}

TEST(Generate, EosEndsGeneration) {
    const Loaded& l = loaded();
    const int64_t V = l.model->config().vocab;
    // Find a prompt position whose greedy next token we can force to be EOS via max_tokens 1:
    // instead, use a sampler that can only pick EOS: top_k 1 after a huge repeat penalty is not
    // possible, so check the rule directly — an EOS sampled ends with reason eos and no text.
    Session s(*l.model, no_admission());
    std::vector<int32_t> prompt = l.tok->encode("x", true);
    GenerateOptions o;
    o.max_tokens = 200;
    GenerateStats st = generate(s, *l.tok, prompt, o);
    if (st.stop == StopReason::Eos) {
        EXPECT_EQ(st.tokens.back(), l.tok->eos_id());
    } else {
        EXPECT_EQ(std::count(st.tokens.begin(), st.tokens.end(), l.tok->eos_id()), 0);
        EXPECT_EQ(st.stop, StopReason::Length);
    }
    (void)V;
}

TEST(Generate, BadInputIsAUsageError) {
    const Loaded& l = loaded();
    Session s(*l.model, no_admission());
    GenerateOptions o;
    std::vector<int32_t> empty;
    EXPECT_THROW(generate(s, *l.tok, empty, o), UsageError);
    std::vector<int32_t> bad = {0, int32_t(l.model->config().vocab)};
    EXPECT_THROW(generate(s, *l.tok, bad, o), UsageError);
    o.max_tokens = -1;
    EXPECT_THROW(generate(s, *l.tok, l.tok->encode("a", true), o), UsageError);
    EXPECT_TRUE(s.tokens().empty());
}

TEST(Generate, ConverterEmbedsTheTokenizerPaddedToTheVocabulary) {
    const Loaded& l = loaded();
    EXPECT_EQ(l.tok->vocab_size(), size_t(l.model->config().vocab));
    Tokenizer direct = Tokenizer::from_hf_json(byte_tokenizer_json());
    std::string text = "the quick brown fox, 123 — é";
    EXPECT_EQ(l.tok->encode(text, true), direct.encode(text, true));
    EXPECT_EQ(l.tok->decode(l.tok->encode(text, false)), text);
}
