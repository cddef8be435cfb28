// dsv4 eval retrieval: the portable RNG, task construction (deterministic for a seed, facts
// where they are said to be, distinct names, 5-digit codes), strict grading, prompt sizing,
// and a trial on a fixture model: answers asked from a mark equal answers from fresh sessions.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "core/error.h"
#include "fixture_util.h"
#include "runtime/generator.h"
#include "runtime/retrieval.h"

using namespace dsv4;

namespace {

RetrievalData small_data() {
    RetrievalData d;
    d.names = {"Abra", "Adena", "Adina", "Bertha", "Cyril", "Dagny", "Eamon", "Fenna"};
    std::string doc1, doc2;
    for (int i = 0; i < 60; ++i) doc1 += "Sentence number " + std::to_string(i) + " of the first document. ";
    for (int i = 0; i < 40; ++i) doc2 += "Line " + std::to_string(i) + " of the second document\n";
    d.docs = {doc1, doc2};
    return d;
}

uint32_t crc32(const std::string& s) {
    uint32_t c = 0xffffffffu;
    for (unsigned char b : s) {
        c ^= b;
        for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0xedb88320u & (0u - (c & 1u)));
    }
    return ~c;
}

using Loaded = test::TextModel;
const Loaded& loaded() { return test::text_fixture("mini_flash"); }

}  // namespace

TEST(Retrieval, PortableRngIsMt19937_64WithHandMadeDraws) {
    PortableRng a(42), b(42), c(43);
    std::mt19937_64 ref(42);
    const uint64_t first = ref();
    EXPECT_DOUBLE_EQ(a.uniform(), double(first >> 11) / 9007199254740992.0);
    b.uniform();
    for (int i = 0; i < 100; ++i) {
        uint64_t x = a.below(7);
        EXPECT_EQ(x, b.below(7));
        EXPECT_LT(x, 7u);
        int64_t r = c.range(10000, 99999);
        EXPECT_GE(r, 10000);
        EXPECT_LE(r, 99999);
    }
    EXPECT_THROW(a.below(0), Error);
}

TEST(Retrieval, TaskIsDeterministicAndFactsAreWhereTheTaskSays) {
    RetrievalData d = small_data();
    RetrievalTask t = build_task(d, 5, 2500, 7), same = build_task(d, 5, 2500, 7), other = build_task(d, 5, 2500, 8);
    EXPECT_EQ(t.body, same.body);
    EXPECT_EQ(t.codes, same.codes);
    EXPECT_EQ(t.order, same.order);
    EXPECT_NE(t.body, other.body);
    ASSERT_EQ(t.names.size(), 5u);
    EXPECT_EQ(std::set<std::string>(t.names.begin(), t.names.end()).size(), 5u);
    std::vector<int> order = t.order;
    std::sort(order.begin(), order.end());
    EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3, 4}));
    for (size_t i = 0; i < 5; ++i) {
        ASSERT_EQ(t.codes[i].size(), 5u);
        EXPECT_TRUE(std::all_of(t.codes[i].begin(), t.codes[i].end(), ::isdigit));
        const std::string fact = "The code for " + t.names[i] + " is " + t.codes[i] + ".";
        EXPECT_EQ(t.body.compare(t.fact_offsets[i], fact.size(), fact), 0) << fact;
        EXPECT_EQ(t.body.find(fact), t.fact_offsets[i]);  // once only
        if (i) {
            EXPECT_GE(t.fact_offsets[i], t.fact_offsets[i - 1]);
        }
        // Uniform in the first 92%, then moved to the next boundary (at most 400 characters on).
        EXPECT_LT(t.fact_offsets[i], size_t(0.92 * double(t.body.size())) + 400 + 50 * i);
        // A fact starts a line or follows a space (it never splits a word).
        if (t.fact_offsets[i] > 0) {
            const char before = t.body[t.fact_offsets[i] - 1];
            EXPECT_TRUE(before == ' ' || before == '\n') << int(before);
        }
    }
    EXPECT_THROW(build_task(d, 9, 2500, 1), UsageError);  // only 8 names
    EXPECT_THROW(build_task(d, 0, 2500, 1), UsageError);
}

TEST(Retrieval, GradingIsStrict) {
    EXPECT_TRUE(answer_correct("12345", "12345"));
    EXPECT_TRUE(answer_correct("12345\nQuestion: more", "12345"));
    EXPECT_TRUE(answer_correct(" 12345 ", "12345"));
    EXPECT_FALSE(answer_correct("12345.", "12345"));
    EXPECT_FALSE(answer_correct("1234", "12345"));
    EXPECT_FALSE(answer_correct("123456", "12345"));
    EXPECT_FALSE(answer_correct("", "12345"));
    EXPECT_FALSE(answer_correct("The code is 12345", "12345"));
    EXPECT_EQ(question_text("Ada"), "Question: What is the code for Ada?\nAnswer: ");
}

TEST(Retrieval, ShippedDataAreHeldOutNamesAndFiller) {
    const std::string models = std::string(DSV4_SOURCE_DIR) + "/models/";
    RetrievalData d = load_retrieval_data(models + "retrieval_names.txt", models + "retrieval_filler.txt");
    EXPECT_GT(d.names.size(), 500u);
    for (const std::string& n : d.names) EXPECT_EQ(crc32(n) % 10, 0u) << n << " was not held out of training";
    EXPECT_GE(d.docs.size(), 10u);
    size_t chars = 0;
    for (const std::string& doc : d.docs) chars += doc.size();
    EXPECT_GT(chars, 60000u);
    EXPECT_THROW(load_retrieval_data(models + "no_such_file.txt", models + "retrieval_filler.txt"), Error);
}

TEST(Retrieval, PromptIsSizedToTheTarget) {
    const Loaded& l = loaded();
    RetrievalData d = small_data();
    for (int64_t target : {300, 900}) {
        RetrievalTask t = build_task_for_tokens(d, *l.tok, 3, target, 11);
        int64_t longest = 0;
        for (const std::string& n : t.names)
            longest = std::max(longest, int64_t(l.tok->encode(t.body + "\n\n" + question_text(n), true).size()));
        EXPECT_LE(longest, target);
        EXPECT_GE(longest, target - 16);
    }
    EXPECT_THROW(build_task_for_tokens(d, *l.tok, 3, 10, 1), UsageError);
}

TEST(Retrieval, TrialAnswersFromAMarkEqualFreshSessionsAndAreDeterministic) {
    const Loaded& l = loaded();
    RetrievalTask task = build_task(small_data(), 3, 600, 5);
    PrefillOptions po;
    po.admission.headroom_bytes = 0;
    po.band = 64;
    Session s(*l.model, po);
    RetrievalTrial r = run_trial(s, *l.tok, task, 5, 6);
    ASSERT_EQ(r.answers.size(), 3u);
    EXPECT_GT(r.shared_tokens, 0);
    EXPECT_GT(r.prompt_tokens, r.shared_tokens);
    int correct = 0;
    for (size_t q = 0; q < 3; ++q) {
        const int i = task.order[q];
        // The same question on a fresh session over the whole prompt.
        Session fresh(*l.model, po);
        GenerateOptions go;
        go.max_tokens = 6;
        go.stop = {"\n"};
        GenerateStats st = generate(fresh, *l.tok, l.tok->encode(task.body + "\n\n" + question_text(task.names[size_t(i)]), true), go);
        EXPECT_EQ(r.answers[q], answer_text(st.text)) << q;
        // the distance: the whole prompt less what comes before the fact's first character
        const std::string prompt = task.body + "\n\n" + question_text(task.names[size_t(i)]);
        const int64_t before = int64_t(l.tok->encode(task.body.substr(0, task.fact_offsets[size_t(i)]), true).size());
        ASSERT_EQ(r.distance_tokens.size(), 3u);
        EXPECT_EQ(r.distance_tokens[q], int64_t(l.tok->encode(prompt, true).size()) - before) << q;
        EXPECT_GT(r.distance_tokens[q], int64_t(l.tok->encode(question_text(task.names[size_t(i)]), false).size())) << q;
        EXPECT_EQ(bool(r.correct[q]), answer_correct(st.text, task.codes[size_t(i)]));
        correct += r.correct[q];
    }
    EXPECT_EQ(r.n_correct, correct);
    EXPECT_EQ(r.pass, correct == 3);
    RetrievalTrial again = run_trial(s, *l.tok, task, 5, 6);
    EXPECT_EQ(again.output_sha256, r.output_sha256);
    EXPECT_EQ(again.answers, r.answers);
    EXPECT_EQ(r.output_sha256.size(), 64u);
}
