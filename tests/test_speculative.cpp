// Speculative decoding (docs/SPECULATIVE.md): greedy output equals plain decoding token for
// token with every kind of drafter, across compressor window boundaries and the sliding
// window; rejected drafts roll the state back exactly; the width controller widens on a
// drafter that is always right and falls back to plain decoding on one that is always wrong;
// the rejection rule keeps the target's distribution (a statistical test on a tiny vocabulary
// with a stated bound, and one through the whole loop on a fixture model).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <filesystem>
#include <map>
#include <memory>
#include <numeric>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/convert_hf.h"
#include "runtime/generator.h"
#include "runtime/spec_controller.h"
#include "runtime/spec_draft_model.h"
#include "runtime/spec_synthetic.h"
#include "runtime/spec_verify.h"
#include "fixture_util.h"

using namespace dsv4;
using namespace dsv4::spec;

namespace {

// A fixture converted with the byte-level test tokenizer embedded (generate() needs one), at a
// weight type; loaded once per (fixture, type) for the whole binary.
using Loaded = test::TextModel;
const Loaded& loaded(const std::string& fixture, gguf::TensorType dtype = gguf::TensorType::F32) {
    return test::text_fixture(fixture, dtype);
}

PrefillOptions no_admission(int64_t band = 2048) {
    PrefillOptions o;
    o.band = band;
    o.admission.headroom_bytes = 0;
    return o;
}

std::vector<int32_t> prompt_of(const std::string& fixture, size_t n) {
    std::vector<int32_t> t = test::fixture_tokens(fixture);
    if (n > t.size()) throw std::runtime_error("prompt longer than the fixture's tokens");
    return {t.begin(), t.begin() + std::ptrdiff_t(n)};
}

GenerateOptions greedy_options(int64_t n) {
    GenerateOptions o;
    o.max_tokens = n;
    o.ignore_eos = true;
    return o;
}

GenerateStats run(const Loaded& l, const std::vector<int32_t>& prompt, GenerateOptions o, Drafter* d = nullptr,
                  int64_t band = 2048) {
    Session s(*l.model, no_admission(band));
    o.drafter = d;
    return generate(s, *l.tok, prompt, o);
}

std::vector<int32_t> concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
}

// Controller options that make drafting cheap, so that wide rounds actually happen.
ControllerOptions cheap(int cap) {
    ControllerOptions c;
    c.cap = cap;
    c.verify_cost = 0.05;
    c.draft_cost = 0;
    return c;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Greedy equality with plain decoding

struct GreedyCase {
    std::string fixture;
    size_t prompt;   // tokens of the fixture used as the prompt
    int64_t gen;     // tokens generated
    int cap;
};

class GreedyEquality : public ::testing::TestWithParam<GreedyCase> {};

// long_seq: sliding window 24, CSA ratio 4, HCA ratio 64; mini_flash: window 16, CSA 4, HCA
// 16; legacy_hfnames: window 32, CSA 4, HCA 128. Prompts end on and off window boundaries, and the generated spans cross several CSA and
// HCA boundaries and wrap the sliding window many times.
INSTANTIATE_TEST_SUITE_P(
    Fixtures, GreedyEquality,
    ::testing::Values(GreedyCase{"long_seq", 1, 70, 4}, GreedyCase{"long_seq", 3, 66, 4},
                      GreedyCase{"long_seq", 23, 50, 2}, GreedyCase{"long_seq", 61, 80, 4},
                      GreedyCase{"long_seq", 64, 40, 8}, GreedyCase{"long_seq", 127, 60, 3},
                      GreedyCase{"mini_flash", 1, 60, 4}, GreedyCase{"mini_flash", 5, 45, 1},
                      GreedyCase{"mini_flash", 15, 70, 4}, GreedyCase{"mini_flash", 33, 50, 5},
                      GreedyCase{"legacy_hfnames", 7, 40, 4}, GreedyCase{"legacy_hfnames", 126, 30, 4}));

TEST_P(GreedyEquality, EveryDrafterGivesThePlainOutput) {
    const GreedyCase& gc = GetParam();
    const Loaded& l = loaded(gc.fixture);
    const int V = l.model->config().vocab;
    const std::vector<int32_t> prompt = prompt_of(gc.fixture, gc.prompt);
    const GenerateStats plain = run(l, prompt, greedy_options(gc.gen));
    ASSERT_EQ(plain.gen_tokens, gc.gen);
    EXPECT_EQ(plain.spec.method, "off");
    EXPECT_EQ(plain.spec.off_reason, "not requested");
    const std::vector<int32_t> script = concat(prompt, plain.tokens);

    GenerateOptions o = greedy_options(gc.gen);
    o.spec = cheap(gc.cap);

    {  // always right: every round is accepted in full
        ScriptedDrafter d(script, V);
        GenerateStats st = run(l, prompt, o, &d);
        EXPECT_EQ(st.tokens, plain.tokens);
        EXPECT_EQ(st.spec.accepted_tokens, st.spec.drafted_tokens);
        EXPECT_GT(st.spec.rounds, 0);
        EXPECT_EQ(st.spec.rollbacks, 0);
        EXPECT_EQ(st.spec.off_reason, "");
        // Fewer forwards than tokens: that is the point.
        EXPECT_LT(st.decode_steps, plain.decode_steps);
    }
    {  // always wrong: nothing is accepted, the output does not change
        ScriptOptions so;
        so.right = 0;
        ScriptedDrafter d(script, V, so);
        GenerateStats st = run(l, prompt, o, &d);
        EXPECT_EQ(st.tokens, plain.tokens);
        EXPECT_EQ(st.spec.accepted_tokens, 0);
        EXPECT_EQ(st.spec.rollbacks, st.spec.rounds);
    }
    {  // right 60% of the time, with a confidence that knows nothing
        ScriptOptions so;
        so.right = 0.6;
        so.random_confidence = true;
        so.seed = gc.prompt;
        ScriptedDrafter d(script, V, so);
        GenerateStats st = run(l, prompt, o, &d, 7);
        EXPECT_EQ(st.tokens, plain.tokens);
        EXPECT_GT(st.spec.rollbacks, 0);
    }
    {  // a real draft model: the same fixture with Q8_0 weights (it agrees often, not always)
        const Loaded& q8 = loaded(gc.fixture, gguf::TensorType::Q8_0);
        DraftModelDrafter d(*q8.model, *l.model, "draft:q8", no_admission());
        GenerateStats st = run(l, prompt, o, &d);
        EXPECT_EQ(st.tokens, plain.tokens);
        EXPECT_GT(st.spec.rounds, 0);
        EXPECT_GT(st.spec.accepted_tokens, 0);
        // Its session holds a prefix of the committed tokens (rejections were rolled back).
        const std::vector<int32_t> all = concat(prompt, st.tokens);
        const std::vector<int32_t>& held = d.session().tokens();
        ASSERT_LE(held.size(), all.size());
        EXPECT_TRUE(std::equal(held.begin(), held.end(), all.begin()));
    }
}

// The same model as its own draft model agrees with itself on every token.
TEST(Speculative, SelfDraftIsAlwaysAccepted) {
    const Loaded& l = loaded("long_seq");
    const std::vector<int32_t> prompt = prompt_of("long_seq", 40);
    const GenerateStats plain = run(l, prompt, greedy_options(48));
    GenerateOptions o = greedy_options(48);
    o.spec = cheap(4);
    DraftModelDrafter d(*l.model, *l.model, "draft:self", no_admission());
    EXPECT_DOUBLE_EQ(d.cost_per_token(), 1.0);  // its cost hint: the same bytes per step
    GenerateStats st = run(l, prompt, o, &d);
    EXPECT_EQ(st.tokens, plain.tokens);
    EXPECT_EQ(st.spec.accepted_tokens, st.spec.drafted_tokens);
    EXPECT_EQ(st.spec.full_rounds, st.spec.rounds);
    EXPECT_GE(st.spec.mean_width(), 3.0);
}

// With its real cost (a draft step costs a target step, and the default verification cost is
// at least 0.25), self-drafting cannot pay at any acceptance: the controller never drafts, not
// even to probe, says why, and the output is the plain one.
TEST(Speculative, ExpensiveDrafterFallsBackToPlainDecoding) {
    const Loaded& l = loaded("mini_flash");
    const std::vector<int32_t> prompt = prompt_of("mini_flash", 10);
    const GenerateStats plain = run(l, prompt, greedy_options(60));
    GenerateOptions o = greedy_options(60);
    DraftModelDrafter d(*l.model, *l.model, "draft:self", no_admission());
    GenerateStats st = run(l, prompt, o, &d);
    EXPECT_EQ(st.tokens, plain.tokens);
    EXPECT_EQ(st.spec.rounds, 0);
    EXPECT_EQ(st.spec.probe_rounds, 0);
    EXPECT_EQ(st.spec.plain_rounds, 59);
    EXPECT_NE(st.spec.off_reason.find("verification too dear"), std::string::npos) << st.spec.off_reason;
}

// ---------------------------------------------------------------------------------------------
// Rollback exactness

// After many rejected rounds (each a rewind to the mark before the round, then a re-feed of the
// committed part), the session's state continues exactly like one that never speculated: the
// same compressed rows and partial windows, and the same next logits.
TEST(Speculative, RejectedRoundsLeaveTheStateExact) {
    const Loaded& l = loaded("long_seq");
    const int64_t V = l.model->config().vocab;
    const std::vector<int32_t> prompt = prompt_of("long_seq", 29);
    const int64_t n = 75;  // to position 104: crosses CSA windows, an HCA window (64), the ring (24)
    Session plain_s(*l.model, no_admission());
    GenerateStats plain = generate(plain_s, *l.tok, prompt, greedy_options(n));
    const std::vector<int32_t> all = concat(prompt, plain.tokens);

    ScriptOptions so;
    so.right = 0.5;
    so.seed = 3;
    ScriptedDrafter d(all, int(V), so);
    GenerateOptions o = greedy_options(n);
    o.spec = cheap(4);
    o.drafter = &d;
    Session spec_s(*l.model, no_admission());
    GenerateStats st = generate(spec_s, *l.tok, prompt, o);
    ASSERT_EQ(st.tokens, plain.tokens);
    EXPECT_GT(st.spec.rollbacks, 5);
    EXPECT_GT(st.spec.refed_tokens, 0);

    // Both sessions hold a prefix of the committed tokens; bring the speculative one to where
    // plain decoding leaves its session (all but the last token) in one more forward.
    const std::vector<int32_t>& held = spec_s.tokens();
    ASSERT_LE(held.size(), all.size() - 1);
    ASSERT_TRUE(std::equal(held.begin(), held.end(), all.begin()));
    ASSERT_EQ(plain_s.tokens().size(), all.size() - 1);
    if (held.size() < all.size() - 1) {
        const size_t from = held.size();
        std::vector<float> scratch(static_cast<size_t>(int64_t(all.size() - 1 - from) * V));
        spec_s.decode(all.data() + from, int64_t(all.size() - 1 - from), scratch.data());
    }
    for (size_t i = 0; i < plain_s.state().layers.size(); ++i) {
        const LayerState& a = plain_s.state().layers[i];
        const LayerState& b = spec_s.state().layers[i];
        EXPECT_EQ(a.n_window, b.n_window) << "layer " << i;
        EXPECT_EQ(a.comp.n_rows, b.comp.n_rows) << "layer " << i;
        EXPECT_EQ(a.comp.n_buf, b.comp.n_buf) << "layer " << i;
        EXPECT_EQ(a.idx.n_rows, b.idx.n_rows) << "layer " << i;
        EXPECT_EQ(a.comp.has_prev, b.comp.has_prev) << "layer " << i;
    }
    EXPECT_EQ(plain_s.state().bytes().total(), spec_s.state().bytes().total());
    std::vector<float> la(static_cast<size_t>(V)), lb(static_cast<size_t>(V));
    plain_s.decode(&all.back(), 1, la.data());
    spec_s.decode(&all.back(), 1, lb.data());
    float scale = 0, worst = 0;
    for (int64_t v = 0; v < V; ++v) {
        scale = std::max(scale, std::fabs(la[size_t(v)]));
        worst = std::max(worst, std::fabs(la[size_t(v)] - lb[size_t(v)]));
    }
    EXPECT_LE(worst, 1e-5f * scale);  // float32 rounding of differently batched forwards only
}

// ---------------------------------------------------------------------------------------------
// Stops inside a round, prefix reuse, cancellation

// A round commits several tokens at once; generation must still end exactly where plain
// decoding ends (token limit, stop string), and the session must hold only committed tokens.
TEST(Speculative, StopsInsideARoundMatchPlainDecoding) {
    const Loaded& l = loaded("mini_flash");
    const int V = l.model->config().vocab;
    const std::vector<int32_t> prompt = prompt_of("mini_flash", 12);
    const GenerateStats long_run = run(l, prompt, greedy_options(40));
    const std::vector<int32_t> script = concat(prompt, long_run.tokens);
    for (int64_t n = 1; n <= 11; ++n) {
        ScriptedDrafter d(script, V);
        GenerateOptions o = greedy_options(n);
        o.spec = cheap(4);
        o.drafter = &d;
        Session s(*l.model, no_admission());
        GenerateStats st = generate(s, *l.tok, prompt, o);
        EXPECT_EQ(st.tokens, std::vector<int32_t>(long_run.tokens.begin(), long_run.tokens.begin() + n)) << n;
        EXPECT_EQ(st.stop, StopReason::Length);
        const std::vector<int32_t>& held = s.tokens();
        ASSERT_LE(held.size(), prompt.size() + size_t(n) - 1) << n;
        EXPECT_TRUE(std::equal(held.begin(), held.end(), script.begin())) << n;
        // One token comes from the prefill alone; with two, the round that yields the second
        // has no room for a draft (it would be thrown away).
        if (n == 1) {
            EXPECT_EQ(st.spec.off_reason, "generation ended before the first round");
        } else if (n == 2) {
            EXPECT_EQ(st.spec.off_reason, "no room for drafts (the token limit or the context length is reached)");
        } else {
            EXPECT_GT(st.spec.rounds, 0);
        }
    }
    // A stop string that ends in the middle of what the drafts gave.
    ASSERT_GE(long_run.text.size(), 12u);
    GenerateOptions o = greedy_options(40);
    o.stop = {long_run.text.substr(7, 3)};
    const GenerateStats plain = run(l, prompt, o);
    ASSERT_EQ(plain.stop, StopReason::StopString);
    ScriptedDrafter d(script, V);
    o.spec = cheap(4);
    GenerateStats st = run(l, prompt, o, &d);
    EXPECT_EQ(st.stop, StopReason::StopString);
    EXPECT_EQ(st.tokens, plain.tokens);
    EXPECT_EQ(st.text, plain.text);
}

TEST(Speculative, ANextTurnReusesBothSessions) {
    const Loaded& l = loaded("long_seq");
    const Loaded& q8 = loaded("long_seq", gguf::TensorType::Q8_0);
    const std::vector<int32_t> first = prompt_of("long_seq", 30);
    DraftModelDrafter d(*q8.model, *l.model, "draft:q8", no_admission());
    GenerateOptions o = greedy_options(20);
    o.spec = cheap(4);
    o.drafter = &d;
    Session s(*l.model, no_admission());
    GenerateStats a = generate(s, *l.tok, first, o);
    // The next turn: what the session holds, then more prompt.
    std::vector<int32_t> next = s.tokens();
    for (int32_t t : {5, 17, 99}) next.push_back(t);
    GenerateStats b = generate(s, *l.tok, next, o);
    EXPECT_EQ(b.cached_tokens, int64_t(next.size()) - 3);
    EXPECT_GE(b.cached_tokens, int64_t(first.size()));
    const GenerateStats fresh = run(l, next, greedy_options(20));
    EXPECT_EQ(b.tokens, fresh.tokens);
    (void)a;
}

TEST(Speculative, CancelStopsAtARoundBoundary) {
    const Loaded& l = loaded("mini_flash");
    const std::vector<int32_t> prompt = prompt_of("mini_flash", 9);
    const GenerateStats plain = run(l, prompt, greedy_options(60));
    ScriptedDrafter d(concat(prompt, plain.tokens), l.model->config().vocab);
    std::atomic<bool> cancel{false};
    GenerateEvents ev;
    int pieces = 0;
    ev.on_text = [&](std::string_view) {
        if (++pieces == 5) cancel = true;
    };
    ev.cancel = &cancel;
    GenerateOptions o = greedy_options(60);
    o.spec = cheap(4);
    o.drafter = &d;
    Session s(*l.model, no_admission());
    GenerateStats st = generate(s, *l.tok, prompt, o, ev);
    EXPECT_EQ(st.stop, StopReason::Cancelled);
    EXPECT_LT(st.gen_tokens, 60);
    EXPECT_TRUE(std::equal(st.tokens.begin(), st.tokens.end(), plain.tokens.begin()));
}

TEST(Speculative, ADrafterOfAnotherVocabularyIsRefused) {
    const Loaded& l = loaded("long_seq");
    const Loaded& other = loaded("mini_flash");
    try {
        DraftModelDrafter d(*other.model, *l.model, "draft:mini", no_admission());
        FAIL() << "a draft model of another vocabulary was accepted";
    } catch (const UsageError& e) {
        EXPECT_NE(std::string(e.what()).find("vocabulary of 384 tokens, the model's is 512"), std::string::npos) << e.what();
    }
    ScriptedDrafter d({1, 2, 3}, 384);
    GenerateOptions o = greedy_options(5);
    o.drafter = &d;
    Session s(*l.model, no_admission());
    EXPECT_THROW(generate(s, *l.tok, prompt_of("long_seq", 4), o), UsageError);
    EXPECT_TRUE(s.tokens().empty());
}

namespace {
// A fixture with a shorter context (max_position_embeddings = ctx): a copy of its folder with
// the config changed. Its compressed rope sets its yarn factor explicitly, so nothing else moves.
Loaded load_with_context(const std::string& fixture, int ctx, const test::TempDir& dir) {
    namespace fs = std::filesystem;
    const fs::path src = test::fixture_dir(fixture), hf = dir.path() / (fixture + std::to_string(ctx));
    fs::create_directories(hf);
    for (const char* f : {"model.safetensors", "generation_config.json"}) fs::copy_file(src / f, hf / f);
    nlohmann::json cfg = nlohmann::json::parse(test::read_text((src / "config.json").string()));
    cfg["max_position_embeddings"] = ctx;
    test::write_file((hf / "config.json").string(), cfg.dump());
    return test::load_text_model(hf.string());
}
}  // namespace

// At the end of the context speculation commits exactly what plain decoding commits (never a
// token past the last position), and a draft model with a shorter context stops drafting.
TEST(Speculative, TheContextEndIsRespected) {
    test::TempDir dir;
    const Loaded target = load_with_context("long_seq", 100, dir);
    const Loaded small = load_with_context("long_seq", 84, dir);
    ASSERT_EQ(target.model->config().max_positions, 100);
    const std::vector<int32_t> prompt = prompt_of("long_seq", 70);
    const GenerateStats plain = run(target, prompt, greedy_options(60));
    EXPECT_EQ(plain.stop, StopReason::ContextFull);
    EXPECT_EQ(plain.gen_tokens, 31);  // positions 70..99 run, plus the token after the last
    ScriptedDrafter right(concat(prompt, plain.tokens), target.model->config().vocab);
    GenerateOptions o = greedy_options(60);
    o.spec = cheap(4);
    GenerateStats st = run(target, prompt, o, &right);
    EXPECT_EQ(st.tokens, plain.tokens);
    EXPECT_EQ(st.stop, StopReason::ContextFull);
    EXPECT_EQ(st.spec.accepted_tokens, st.spec.drafted_tokens);

    DraftModelDrafter d(*small.model, *target.model, "draft:short", no_admission());
    st = run(target, prompt, o, &d);
    EXPECT_EQ(st.tokens, plain.tokens);
    EXPECT_EQ(st.stop, StopReason::ContextFull);
    EXPECT_GT(st.spec.rounds, 0);
    EXPECT_LE(d.session().position(), 84);
    EXPECT_GT(st.spec.plain_rounds, 0);  // once the draft model is full
}

// ---------------------------------------------------------------------------------------------
// The width controller

namespace {
// The controller tests state their verification cost rather than depend on the default.
ControllerOptions with_verify_cost(double v) {
    ControllerOptions o;
    o.verify_cost = v;
    return o;
}

// Runs rounds where the drafter's tokens are accepted with the given pattern; returns widths.
template <class Accepted>
std::vector<int> drive(WidthController& c, int rounds, Accepted accepted) {
    std::vector<int> widths;
    for (int r = 0; r < rounds; ++r) {
        const int w = c.next_width();
        widths.push_back(w);
        c.observe({}, w, accepted(w));
    }
    return widths;
}
}  // namespace

TEST(Controller, AlwaysRightWidensToTheCapAndStays) {
    WidthController c(with_verify_cost(0.1), 0.0, false);
    std::vector<int> w = drive(c, 30, [](int w) { return w; });
    EXPECT_GE(w[0], 1);
    for (size_t i = 2; i < w.size(); ++i) EXPECT_EQ(w[i], 4) << "round " << i;
    EXPECT_GT(c.kappa(), 0.95);
}

TEST(Controller, AlwaysWrongFallsBackToPlainAndProbes) {
    ControllerOptions o = with_verify_cost(0.1);
    o.probe_every = 16;
    WidthController c(o, 0.0, false);
    std::vector<int> w = drive(c, 200, [](int) { return 0; });
    // Plain within a few rounds...
    auto first_plain = std::find(w.begin(), w.end(), 0);
    ASSERT_NE(first_plain, w.end());
    EXPECT_LE(first_plain - w.begin(), 8);
    // ...then one width-1 probe after 16 plain rounds, and each fruitless probe doubles the gap.
    int probes = 0, run = 0;
    for (auto it = first_plain; it != w.end(); ++it) {
        ASSERT_LE(*it, 1);
        if (*it == 1) {
            EXPECT_EQ(run, 16 << probes) << "probe " << probes;
            ++probes;
            run = 0;
        } else {
            ++run;
        }
    }
    EXPECT_EQ(probes, 3);  // after 16, 32 and 64 plain rounds; the next comes after 128
    // When the drafter becomes right, the next probe finds out, the width comes back, and the
    // gap is back to 16 when drafting stops paying again.
    std::vector<int> back = drive(c, 160, [](int w) { return w; });
    EXPECT_EQ(back.back(), 4);
    std::vector<int> off = drive(c, 60, [](int) { return 0; });
    auto again = std::find(off.begin(), off.end(), 0);
    ASSERT_NE(again, off.end());
    EXPECT_EQ(std::find(again, off.end(), 1) - again, 16);
}

TEST(Controller, TheWidthFollowsTheCostOfDrafting) {
    // The same history (70% of the drafts accepted, in a fixed pattern), three draft costs.
    auto widths = [](double hint) {
        WidthController c(with_verify_cost(0.1), hint, false);
        int k = 0;
        std::vector<int> w = drive(c, 200, [&](int w) {
            int a = 0;
            while (a < w && (k++ % 10) < 7) ++a;
            return a;
        });
        return std::vector<int>(w.end() - 50, w.end());
    };
    const std::vector<int> free_ = widths(0.0), some = widths(0.3), self = widths(1.0);
    const double mean_free = std::accumulate(free_.begin(), free_.end(), 0.0) / 50;
    const double mean_some = std::accumulate(some.begin(), some.end(), 0.0) / 50;
    EXPECT_GE(mean_free, 2.0);
    EXPECT_LT(mean_some, mean_free);
    // A draft step that costs a target step never pays: plain decoding but for the probes.
    EXPECT_LE(std::count(self.begin(), self.end(), 1), 3);
    EXPECT_EQ(std::count(self.begin(), self.end(), 0) + std::count(self.begin(), self.end(), 1), 50);
}

// When even a surely accepted draft would not pay (verification 0.9 + drafting 0.2 steps for
// one more token), no acceptance can change the decision: never a draft, never a probe.
TEST(Controller, ADraftThatCannotPayIsNeverProbed) {
    for (bool conf : {false, true}) {
        WidthController c(with_verify_cost(0.9), 0.2, conf);
        EXPECT_TRUE(c.never_pays());
        std::vector<int> w = drive(c, 100, [](int w) { return w; });
        EXPECT_EQ(std::count(w.begin(), w.end(), 0), 100) << conf;
        EXPECT_FALSE(c.probing());
    }
    // Below the line it probes, and drafts once the acceptance it measures (from a prior of
    // 0.5, by probes at growing gaps: after 16, 32, 64, ... plain rounds) passes the 0.875 the
    // rule needs at a draft cost of 0.8 (the fifth probe, about round 500).
    WidthController ok(with_verify_cost(0.6), 0.2, false);
    EXPECT_FALSE(ok.never_pays());
    std::vector<int> w = drive(ok, 1000, [](int w) { return w; });
    EXPECT_GT(w.back(), 0);
}

TEST(Controller, DefaultVerifyCostFollowsTheBackend) {
    EXPECT_DOUBLE_EQ(default_verify_cost("cpu", 1), 1.1);
    EXPECT_DOUBLE_EQ(default_verify_cost("cpu", 2), 0.55);
    EXPECT_DOUBLE_EQ(default_verify_cost("cpu", 4), 0.275);
    EXPECT_DOUBLE_EQ(default_verify_cost("cpu", 16), 0.25);
    EXPECT_DOUBLE_EQ(default_verify_cost("cuda", 2), 0.25);
}

TEST(Controller, ConfidenceCutsTheDraftAndIsCalibrated) {
    WidthController c(with_verify_cost(0.1), 0.0, true);
    EXPECT_EQ(c.next_width(), 4);  // a confidence drafter is asked for the cap; keep() cuts
    const std::vector<float> sure = {0.9f, 0.9f, 0.9f}, drop = {0.9f, 0.02f}, low = {0.05f};
    EXPECT_TRUE(c.keep(sure));
    EXPECT_FALSE(c.keep(drop));  // cumulative 0.018: not worth a token of verification
    EXPECT_FALSE(c.keep(low));
    // A head that underestimates (says 0.05, is always right) gets calibrated up...
    const std::vector<float> four(4, 0.05f);
    for (int r = 0; r < 10; ++r) c.observe(four, 4, 4);
    EXPECT_TRUE(c.keep(low));
    EXPECT_GT(c.kappa(), 10.0);
    // ...and one that overestimates (0.95, never right) down, to plain decoding.
    WidthController over(with_verify_cost(0.1), 0.0, true);
    const std::vector<float> high = {0.95f};
    for (int r = 0; r < 10; ++r) over.observe(high, 1, 0);
    EXPECT_EQ(over.next_width(), 0);
    EXPECT_FALSE(over.keep(high));
}

TEST(Controller, BadOptionsAreUsageErrors) {
    ControllerOptions o;
    o.cap = 0;
    EXPECT_THROW(o.validate(), UsageError);
    o = {};
    o.verify_cost = -1;
    EXPECT_THROW(o.validate(), UsageError);
    o = {};
    o.verify_cost = 0;  // the backend's estimate: valid, but generate() must resolve it
    EXPECT_NO_THROW(o.validate());
    EXPECT_ANY_THROW(WidthController(o, 0.0, false));
    o = {};
    o.memory = 1;
    EXPECT_THROW(o.validate(), UsageError);
    o = {};
    o.cap = 17;
    try {
        WidthController c(o, 0.0, false);
        FAIL();
    } catch (const UsageError& e) {
        EXPECT_NE(std::string(e.what()).find("cap"), std::string::npos) << e.what();
    }
}

// ---------------------------------------------------------------------------------------------
// The verification rule

TEST(Verify, GreedyAcceptsExactlyTheArgmaxPrefixAndDrawsNothing) {
    const int V = 6;
    // Rows whose argmax is 2, 4, 1, 5.
    std::vector<float> rows(4 * V, 0.0f);
    rows[0 * V + 2] = rows[1 * V + 4] = rows[2 * V + 1] = rows[3 * V + 5] = 3.0f;
    SamplingParams greedy;
    greedy.seed = 5;
    auto check = [&](std::vector<int32_t> drafts, bool with_q, int accepted, int32_t next) {
        Sampler s(greedy);
        Draft d;
        d.tokens = drafts;
        if (with_q) d.q.assign(drafts.size() * V, 1.0f / V);  // a sampling drafter: irrelevant when greedy
        std::vector<int32_t> hist = {0};
        VerifyResult r = verify(s, rows.data(), V, d, hist);
        EXPECT_EQ(r.accepted, accepted);
        EXPECT_EQ(r.next, next);
        EXPECT_EQ(hist.size(), size_t(1 + accepted + 1));
        Sampler fresh(greedy);
        EXPECT_EQ(s.uniform(), fresh.uniform());  // no random number was used
    };
    check({2, 4, 3}, false, 2, 1);
    check({2, 4, 1}, true, 3, 5);
    check({5, 4, 1}, true, 0, 2);
}

// The repetition penalty of draft i's position sees the drafts accepted before it, as plain
// decoding's history would.
TEST(Verify, ThePenaltySeesTheAcceptedDrafts) {
    const int V = 4;
    std::vector<float> rows = {0, 0, 0, 5,      // row 0: 3
                               1.9f, 0, 0, 2};  // row 1: 3, unless 3 is penalised: then 0
    rows.resize(3 * V, 0.0f);
    SamplingParams p;
    p.repeat_penalty = 1.5f;
    Sampler s(p);
    Draft d;
    d.tokens = {3, 3};
    std::vector<int32_t> hist = {1};
    VerifyResult r = verify(s, rows.data(), V, d, hist);
    EXPECT_EQ(r.accepted, 1);
    EXPECT_EQ(r.next, 0);
    EXPECT_EQ(hist, (std::vector<int32_t>{1, 3, 0}));
}

TEST(Verify, AMalformedDraftIsAnError) {
    const int V = 4;
    std::vector<float> rows(2 * V, 0.0f);
    SamplingParams p;
    p.temperature = 1;
    Sampler s(p);
    std::vector<int32_t> hist = {0};
    Draft d;
    d.tokens = {7};
    EXPECT_THROW(verify(s, rows.data(), V, d, hist), Error);
    d.tokens = {1};
    d.q = {0.5f, 0.0f, 0.5f, 0.0f};  // its own token has probability 0: it cannot have drawn it
    EXPECT_THROW(verify(s, rows.data(), V, d, hist), Error);
    d.q = {1.0f};  // not [W, vocab]
    EXPECT_THROW(verify(s, rows.data(), V, d, hist), Error);
}

// ---------------------------------------------------------------------------------------------
// Rejection sampling keeps the target's distribution

namespace {
uint64_t mix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}
// A made-up target on a tiny vocabulary: logits in [-2, 2] that depend on the last two tokens.
void toy_logits(const std::vector<int32_t>& ctx, int V, float* out) {
    const uint64_t key = uint64_t(ctx[ctx.size() - 1]) * 131 + uint64_t(ctx[ctx.size() - 2]) * 7 + ctx.size();
    for (int v = 0; v < V; ++v) out[v] = float(4.0 * double(mix64(key * 31 + uint64_t(v)) >> 11) * 0x1.0p-53 - 2.0);
}
// A drafter distribution that differs from the target: uneven weights over 3 tokens, one of
// them usually outside the target's top-k.
void toy_q(const std::vector<int32_t>& ctx, int V, std::vector<float>& q) {
    q.assign(size_t(V), 0.0f);
    const uint64_t h = mix64(uint64_t(ctx.back()) * 977 + ctx.size());
    const int first = int(h % uint64_t(V));
    const float w[3] = {0.6f, 0.3f, 0.1f};
    for (int j = 0; j < 3; ++j) q[size_t((first + j) % V)] = w[j];
}

enum class Rule { Verify, AcceptEverything };

// Empirical distribution of the first L generated tokens, from rounds of W drafts verified by
// spec::verify (or, as a control, by a wrong rule that accepts every draft).
std::vector<double> speculative_histogram(const SamplingParams& sp, int V, int L, int W, int trials, bool sampled_q,
                                          Rule rule) {
    Sampler sampler(sp);
    std::mt19937_64 drafter_rng(99);
    std::vector<double> hist(size_t(std::pow(V, L)), 0.0);
    std::vector<float> rows, q;
    for (int trial = 0; trial < trials; ++trial) {
        std::vector<int32_t> ctx = {1, 3};
        while (int(ctx.size()) - 2 < L) {
            Draft d;
            std::vector<int32_t> c = ctx;
            rows.assign(size_t((W + 1) * V), 0.0f);
            for (int i = 0; i < W; ++i) {
                toy_logits(c, V, &rows[size_t(i * V)]);
                int32_t tok;
                if (sampled_q) {
                    toy_q(c, V, q);
                    double u = double(drafter_rng() >> 11) * 0x1.0p-53, cum = 0;
                    tok = V - 1;
                    for (int v = 0; v < V; ++v)
                        if (q[size_t(v)] > 0 && u < (cum += q[size_t(v)])) {
                            tok = v;
                            break;
                        }
                    while (q[size_t(tok)] == 0) --tok;
                    d.q.insert(d.q.end(), q.begin(), q.end());
                } else {
                    tok = int32_t((c.back() + 1) % V);  // deterministic: q one-hot
                }
                d.tokens.push_back(tok);
                c.push_back(tok);
            }
            toy_logits(c, V, &rows[size_t(W * V)]);
            if (rule == Rule::Verify) {
                verify(sampler, rows.data(), V, d, ctx);
            } else {
                ctx.insert(ctx.end(), d.tokens.begin(), d.tokens.end());
            }
        }
        size_t cell = 0;
        for (int i = 0; i < L; ++i) cell = cell * size_t(V) + size_t(ctx[size_t(2 + i)]);
        hist[cell] += 1.0 / trials;
    }
    return hist;
}

// The exact distribution of the first L tokens under plain sampling: the product of the
// sampler's processed distributions along each sequence.
std::vector<double> exact_distribution(const SamplingParams& sp, int V, int L) {
    Sampler sampler(sp);
    std::vector<double> out(size_t(std::pow(V, L)), 0.0);
    std::vector<float> logits(static_cast<size_t>(V)), p;
    for (size_t cell = 0; cell < out.size(); ++cell) {
        std::vector<int32_t> seq(static_cast<size_t>(L));
        for (int i = L - 1, x = int(cell); i >= 0; --i, x /= V) seq[size_t(i)] = x % V;
        std::vector<int32_t> ctx = {1, 3};
        double prob = 1;
        for (int32_t t : seq) {
            toy_logits(ctx, V, logits.data());
            sampler.distribution(logits.data(), V, ctx, p);
            prob *= p[size_t(t)];
            ctx.push_back(t);
        }
        out[cell] = prob;
    }
    return out;
}

// The largest deviation in standard errors (binomial, N trials); a cell the target excludes
// must never occur.
double worst_z(const std::vector<double>& emp, const std::vector<double>& exact, int N, bool& excluded_seen) {
    double worst = 0;
    excluded_seen = false;
    for (size_t i = 0; i < emp.size(); ++i) {
        if (exact[i] == 0) {
            excluded_seen |= emp[i] > 0;
            continue;
        }
        const double se = std::sqrt(exact[i] * (1 - exact[i]) / N);
        worst = std::max(worst, std::fabs(emp[i] - exact[i]) / se);
    }
    return worst;
}
}  // namespace

// V = 5, three generated tokens (125 sequences), temperature 0.8, top-k 4 (so a fifth of the
// sequences have probability 0), repetition penalty 1.3; rounds of two drafts. Bound: every
// sequence's frequency within 5 binomial standard errors of its exact probability (for one
// cell a correct rule exceeds it with probability 6e-7; 125 cells, about 1e-4; the seeds are
// fixed, so the outcome is too), and no excluded sequence ever appears.
TEST(RejectionSampling, KeepsTheTargetDistribution) {
    SamplingParams sp;
    sp.temperature = 0.8f;
    sp.top_k = 4;
    sp.repeat_penalty = 1.3f;
    sp.seed = 2024;
    const int V = 5, L = 3, N = 100000;
    const std::vector<double> exact = exact_distribution(sp, V, L);
    EXPECT_NEAR(std::accumulate(exact.begin(), exact.end(), 0.0), 1.0, 1e-5);
    bool excluded = false;
    for (bool sampled_q : {true, false}) {
        const std::vector<double> emp = speculative_histogram(sp, V, L, 2, N, sampled_q, Rule::Verify);
        EXPECT_LT(worst_z(emp, exact, N, excluded), 5.0) << (sampled_q ? "sampling drafter" : "deterministic drafter");
        EXPECT_FALSE(excluded);
    }
    // The control: accepting every draft gives the drafter's distribution, which the same
    // bound rejects by far; so the test above can fail.
    const std::vector<double> wrong = speculative_histogram(sp, V, L, 2, N, true, Rule::AcceptEverything);
    const double z = worst_z(wrong, exact, N, excluded);
    EXPECT_TRUE(z > 20.0 || excluded) << z;
}

// Through generate() on a fixture model: three sampled tokens (temperature 0.3, top-k 3: 27
// sequences; repetition penalty 0.7, which pulls prompt tokens into the top 3, so each
// position's history matters), one run per seed, drafted by the model itself sampling at
// temperature 3 (same support, a much flatter q: about 20% of the drafts are rejected, so both
// the acceptance and the residual draw run). The same 5-standard-error bound against the exact
// distribution computed from the model's logits, on the 27 sequences and on the marginals of
// the second and third token. Power, checked by mutation: drawing the residual from p instead
// of norm(max(0, p - q)) gives 6.2 (sequences) and 6.4 (marginals) errors at this N; the
// correct rule 2.2.
TEST(RejectionSampling, TheWholeLoopKeepsTheModelDistribution) {
    const Loaded& l = loaded("mini_flash");
    const int V = l.model->config().vocab;
    const std::vector<int32_t> prompt = prompt_of("mini_flash", 6);
    SamplingParams sp;
    sp.temperature = 0.3f;
    sp.top_k = 3;
    sp.repeat_penalty = 0.7f;
    const int N = 3000;
    std::map<std::vector<int32_t>, double> emp;
    std::map<std::pair<int, int32_t>, double> emp_marginal;  // (position, token)
    int64_t rounds = 0, accepted = 0;
    // Every run starts from the same prefilled prompt but its last token (as the server's
    // prefix cache does), so it prefills one token.
    Session s(*l.model, no_admission());
    s.prefill(prompt.data(), int64_t(prompt.size() - 1), nullptr);
    const SessionMark start = s.mark();
    for (int i = 0; i < N; ++i) {
        s.rewind(start);
        DraftModelDrafter d(*l.model, *l.model, "draft:self-hot", no_admission(), 3.0f);
        GenerateOptions o = greedy_options(3);
        o.sampling = sp;
        o.sampling.seed = uint64_t(i);
        o.spec = cheap(2);
        o.drafter = &d;
        GenerateStats st = generate(s, *l.tok, prompt, o);
        ASSERT_EQ(st.tokens.size(), 3u);
        rounds += st.spec.rounds;
        accepted += st.spec.accepted_tokens;
        emp[st.tokens] += 1.0 / N;
        for (int k = 1; k < 3; ++k) emp_marginal[{k, st.tokens[size_t(k)]}] += 1.0 / N;
    }
    // Every run's second token went through a verification (its third too, when the draft
    // was accepted), and drafts were both accepted and rejected.
    EXPECT_EQ(rounds, N);
    EXPECT_GT(accepted, N / 3);
    EXPECT_LT(accepted, N * 9 / 10);  // one draft a run (the token limit): 10% rejected at least

    // Exact: p(t1) p(t2 | t1) p(t3 | t1 t2) from plain forwards and the sampler's distribution.
    Sampler sampler(sp);
    std::vector<float> logits(static_cast<size_t>(V)), p1, p2, p3;
    Session e(*l.model, no_admission());
    e.prefill(prompt.data(), int64_t(prompt.size()), logits.data());
    sampler.distribution(logits.data(), V, prompt, p1);
    auto z = [N](double f, double exact) { return std::fabs(f - exact) / std::sqrt(exact * (1 - exact) / N); };
    std::map<std::pair<int, int32_t>, double> marginal;
    double total = 0, worst = 0;
    int cells = 0;
    for (int32_t a = 0; a < V; ++a) {
        if (p1[size_t(a)] == 0) continue;
        SessionMark m0 = e.mark();
        e.decode(&a, 1, logits.data());
        const std::vector<int32_t> ha = concat(prompt, {a});
        sampler.distribution(logits.data(), V, ha, p2);
        for (int32_t b = 0; b < V; ++b) {
            if (p2[size_t(b)] == 0) continue;
            SessionMark m1 = e.mark();
            e.decode(&b, 1, logits.data());
            sampler.distribution(logits.data(), V, concat(ha, {b}), p3);
            for (int32_t c = 0; c < V; ++c) {
                if (p3[size_t(c)] == 0) continue;
                const double exact = double(p1[size_t(a)]) * p2[size_t(b)] * p3[size_t(c)];
                const std::vector<int32_t> key = {a, b, c};
                const double f = emp.count(key) ? emp[key] : 0.0;
                worst = std::max(worst, z(f, exact));
                marginal[{1, b}] += exact;
                marginal[{2, c}] += exact;
                total += f;
                ++cells;
            }
            e.rewind(m1);
        }
        e.rewind(m0);
    }
    EXPECT_EQ(cells, 27);
    EXPECT_NEAR(total, 1.0, 1e-9);  // no sequence outside the target's support
    EXPECT_LT(worst, 5.0);
    double worst_marginal = 0, marginal_total = 0;
    for (const auto& [key, exact] : marginal) {
        worst_marginal = std::max(worst_marginal, z(emp_marginal.count(key) ? emp_marginal[key] : 0.0, exact));
        marginal_total += emp_marginal.count(key) ? emp_marginal[key] : 0.0;
    }
    EXPECT_NEAR(marginal_total, 2.0, 1e-9);
    EXPECT_LT(worst_marginal, 5.0);
}

// Seeded sampling with speculation is reproducible (the controller uses no timings), and a
// self-draft under sampling has q = p, so every draft is accepted.
TEST(RejectionSampling, SeededRunsRepeatAndSelfDraftAcceptsAll) {
    const Loaded& l = loaded("long_seq");
    const std::vector<int32_t> prompt = prompt_of("long_seq", 20);
    GenerateOptions o = greedy_options(40);
    o.sampling.temperature = 0.8f;
    o.sampling.top_p = 0.9f;
    o.sampling.seed = 77;
    o.spec = cheap(4);
    auto with = [&](Drafter& d) { return run(l, prompt, o, &d); };
    RandomDrafter r1(l.model->config().vocab, 3, 5), r2(l.model->config().vocab, 3, 5);
    GenerateStats a = with(r1), b = with(r2);
    EXPECT_EQ(a.tokens, b.tokens);
    EXPECT_EQ(a.spec.rounds, b.spec.rounds);
    DraftModelDrafter self(*l.model, *l.model, "draft:self", no_admission());
    GenerateStats st = with(self);
    EXPECT_GT(st.spec.drafted_tokens, 20);
    // p and q come from the same weights in forwards of different batch sizes: equal up to
    // float32 rounding, so a rejection is a 1e-6 event per token.
    EXPECT_EQ(st.spec.accepted_tokens, st.spec.drafted_tokens);
}
