// The server with speculative decoding (`dsv4 serve --spec ...`): answers equal those of
// plain decoding under greedy sampling, and every answer's timings carry the speculative
// figures. The draft model is the test model itself, so every draft is accepted.
#include <gtest/gtest.h>

#include "runtime/spec_factory.h"
#include "test_server_util.h"

using namespace dsv4;
using namespace dsv4::test;

TEST(ServerSpec, GreedyAnswersEqualPlainOnesAndTimingsSayHowItWent) {
    TempDir dir;
    ConvertOptions o;
    o.hf_dir = fixture_dir("mini_flash").string();
    o.out_path = dir.file("draft.gguf");
    o.tokenizer_json = byte_tokenizer_json();
    o.quiet = true;
    convert_hf(o);
    spec::DrafterFactory drafters(spec::parse_spec("draft:" + o.out_path), *test_model().model);
    TestServer plain;
    TestServer spec([&](server::ServerOptions& so) {
        so.scheduler.drafters = &drafters;
        so.scheduler.spec.verify_cost = 0.001;  // draft every round: a self-draft priced as free
        so.scheduler.spec.draft_cost = 0;
    });
    for (const char* text : {"hello there", "tell me a story about a boat"}) {
        Reply a = plain.post("/v1/chat/completions", user_chat(text, 24));
        Reply b = spec.post("/v1/chat/completions", user_chat(text, 24));
        ASSERT_EQ(a.status, 200) << a.body;
        ASSERT_EQ(b.status, 200) << b.body;
        EXPECT_EQ(a.j["choices"][0]["message"]["content"], b.j["choices"][0]["message"]["content"]);
        EXPECT_FALSE(a.j["timings"].contains("speculative")) << a.j["timings"].dump();
        const json& sp = b.j["timings"]["speculative"];
        ASSERT_TRUE(sp.is_object()) << b.j["timings"].dump();
        EXPECT_EQ(sp["method"], "draft:" + o.out_path);
        EXPECT_GT(sp["rounds"].get<int64_t>(), 0) << sp.dump();
        EXPECT_EQ(sp["accepted_tokens"], sp["drafted_tokens"]) << sp.dump();  // a model drafting for itself
    }
    Reply m = spec.get("/metrics");
    EXPECT_NE(m.body.find("dsv4_speculative_rounds_total"), std::string::npos);
}
