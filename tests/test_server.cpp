// dsv4 serve in-process, driven over loopback HTTP: every endpoint's shape, whole and streamed
// (the streamed text must equal the whole answer for the same greedy request), timings, the
// prefix cache across turns, and the errors bad input gets (in each API's own error shape, with
// the server still serving afterwards).
#include <gtest/gtest.h>

#include "test_server_util.h"

using namespace dsv4;
using namespace dsv4::test;

namespace {

TestServer& shared_server() {
    static TestServer s;
    return s;
}

std::string chat_stream_text(const std::vector<SseEvent>& ev, std::string* finish = nullptr) {
    std::string text;
    for (const SseEvent& e : ev) {
        if (!e.j.is_object() || e.j["choices"].empty()) continue;
        const json& c = e.j["choices"][0];
        if (c["delta"].contains("content")) text += c["delta"]["content"].get<std::string>();
        if (finish && !c["finish_reason"].is_null()) *finish = c["finish_reason"];
    }
    return text;
}

void expect_timings(const json& t, int64_t prompt_tokens) {
    ASSERT_TRUE(t.is_object()) << t.dump();
    EXPECT_EQ(t["prompt_tokens"], prompt_tokens);
    for (const char* k : {"cached_tokens", "prefill_tokens", "prefill_s", "prefill_tok_s", "generated_tokens", "decode_s",
                          "decode_tok_s", "queue_s", "total_s"})
        EXPECT_TRUE(t.contains(k) && t[k].is_number()) << k << " in " << t.dump();
    EXPECT_EQ(t["prefill_tokens"].get<int64_t>() + t["cached_tokens"].get<int64_t>(), prompt_tokens);
    EXPECT_TRUE(t["prefix_cache"] == "hit" || t["prefix_cache"] == "miss");
    EXPECT_GE(t["total_s"].get<double>(), t["prefill_s"].get<double>());
}

}  // namespace

TEST(ServerInfo, HealthAndModels) {
    TestServer& s = shared_server();
    Reply h = s.get("/health");
    ASSERT_EQ(h.status, 200);
    EXPECT_EQ(h.j["status"], "ok");
    EXPECT_EQ(h.j["model"], kModelName);
    Reply m = s.get("/v1/models");
    ASSERT_EQ(m.status, 200);
    EXPECT_EQ(m.j["object"], "list");
    ASSERT_EQ(m.j["data"].size(), 1u);
    EXPECT_EQ(m.j["data"][0]["id"], kModelName);
    EXPECT_EQ(m.j["data"][0]["type"], "model");  // Anthropic's field beside OpenAI's
    EXPECT_EQ(s.get(std::string("/v1/models/") + kModelName).status, 200);
    Reply nf = s.get("/v1/models/gpt-4");
    EXPECT_EQ(nf.status, 404);
    EXPECT_EQ(nf.j["error"]["code"], "model_not_found");
}

TEST(ServerChat, WholeAnswerHasUsageAndTimings) {
    TestServer& s = shared_server();
    Reply r = s.post("/v1/chat/completions", user_chat("hello there", 10));
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.j["object"], "chat.completion");
    EXPECT_EQ(r.j["model"], kModelName);
    EXPECT_EQ(r.j["id"].get<std::string>().rfind("chatcmpl-", 0), 0u);
    const json& c = r.j["choices"][0];
    EXPECT_EQ(c["message"]["role"], "assistant");
    EXPECT_TRUE(c["message"]["content"].is_string());
    EXPECT_TRUE(c["finish_reason"] == "stop" || c["finish_reason"] == "length");
    const json& u = r.j["usage"];
    EXPECT_GT(u["prompt_tokens"].get<int64_t>(), 0);
    EXPECT_LE(u["completion_tokens"].get<int64_t>(), 10);
    EXPECT_EQ(u["total_tokens"], u["prompt_tokens"].get<int64_t>() + u["completion_tokens"].get<int64_t>());
    expect_timings(r.j["timings"], u["prompt_tokens"]);
    EXPECT_EQ(r.j["timings"]["generated_tokens"], u["completion_tokens"]);
}

TEST(ServerChat, MaxTokensEndsWithLength) {
    TestServer& s = shared_server();
    json req = user_chat("count", 5);
    req["ignore_eos"] = true;
    Reply r = s.post("/v1/chat/completions", req);
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.j["choices"][0]["finish_reason"], "length");
    EXPECT_EQ(r.j["usage"]["completion_tokens"], 5);
}

TEST(ServerChat, StreamEqualsTheWholeAnswer) {
    TestServer& s = shared_server();
    json req = user_chat("stream me a story", 16);
    req["ignore_eos"] = true;
    Reply whole = s.post("/v1/chat/completions", req);
    ASSERT_EQ(whole.status, 200);
    req["stream"] = true;
    req["stream_options"] = {{"include_usage", true}};
    Reply r = s.post("/v1/chat/completions", req);
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_NE(r.header("Content-Type").find("text/event-stream"), std::string::npos);
    std::vector<SseEvent> ev = parse_sse(r.body);
    ASSERT_GE(ev.size(), 4u);
    EXPECT_EQ(ev.front().j["choices"][0]["delta"]["role"], "assistant");
    EXPECT_EQ(ev.back().data, "[DONE]");
    std::string finish;
    EXPECT_EQ(chat_stream_text(ev, &finish), whole.j["choices"][0]["message"]["content"].get<std::string>());
    EXPECT_EQ(finish, "length");
    // The usage chunk (include_usage) comes last before [DONE], with no choices.
    const json& usage_chunk = ev[ev.size() - 2].j;
    EXPECT_TRUE(usage_chunk["choices"].empty());
    EXPECT_EQ(usage_chunk["usage"]["completion_tokens"], 16);
    // The finish chunk carries the timings.
    expect_timings(ev[ev.size() - 3].j["timings"], usage_chunk["usage"]["prompt_tokens"]);
    for (const SseEvent& e : ev)
        if (e.j.is_object()) {
            EXPECT_EQ(e.j["id"], ev.front().j["id"]);
        }
}

TEST(ServerChat, SeededSamplingRepeatsAndSeedsDiffer) {
    TestServer& s = shared_server();
    json req = user_chat("random", 20);
    req["ignore_eos"] = true;
    req["temperature"] = 1.5;
    req["seed"] = 42;
    Reply a = s.post("/v1/chat/completions", req), b = s.post("/v1/chat/completions", req);
    ASSERT_EQ(a.status, 200);
    EXPECT_EQ(a.j["choices"][0]["message"]["content"], b.j["choices"][0]["message"]["content"]);
    req["seed"] = 43;
    Reply c = s.post("/v1/chat/completions", req);
    EXPECT_NE(a.j["choices"][0]["message"]["content"], c.j["choices"][0]["message"]["content"]);
}

TEST(ServerChat, StopStringEndsTheAnswerBeforeIt) {
    TestServer& s = shared_server();
    json req = user_chat("abc", 30);
    req["ignore_eos"] = true;
    Reply free_run = s.post("/v1/chat/completions", req);
    const std::string text = free_run.j["choices"][0]["message"]["content"];
    // Two ASCII bytes of what the model writes anyway (random weights write any bytes; a stop
    // string must be whole characters).
    size_t at = 1;
    while (at + 2 <= text.size() && (uint8_t(text[at]) >= 0x80 || uint8_t(text[at + 1]) >= 0x80 || uint8_t(text[at - 1]) >= 0x80)) ++at;
    ASSERT_LT(at + 2, text.size() + 1) << "no two ASCII bytes in " << text;
    const std::string stop = text.substr(at, 2);
    req["stop"] = stop;
    Reply r = s.post("/v1/chat/completions", req);
    ASSERT_EQ(r.status, 200);
    EXPECT_EQ(r.j["choices"][0]["finish_reason"], "stop");
    EXPECT_EQ(r.j["choices"][0]["message"]["content"], text.substr(0, text.find(stop)));
    EXPECT_EQ(r.j["timings"]["stop"], "stop");
}

TEST(ServerCompletions, TextEchoAndStream) {
    TestServer& s = shared_server();
    json req{{"model", kModelName}, {"prompt", "once upon a time"}, {"max_tokens", 12}, {"ignore_eos", true}};
    Reply r = s.post("/v1/completions", req);
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.j["object"], "text_completion");
    const std::string text = r.j["choices"][0]["text"];
    EXPECT_EQ(r.j["choices"][0]["finish_reason"], "length");
    EXPECT_EQ(r.j["usage"]["completion_tokens"], 12);
    // The byte tokenizer: BOS + one token per byte at most (a few merges).
    EXPECT_LE(r.j["usage"]["prompt_tokens"].get<int>(), 17);

    req["echo"] = true;
    Reply e = s.post("/v1/completions", req);
    EXPECT_EQ(e.j["choices"][0]["text"], "once upon a time" + text);

    req["echo"] = false;
    req["stream"] = true;
    Reply st = s.post("/v1/completions", req);
    std::vector<SseEvent> ev = parse_sse(st.body);
    ASSERT_FALSE(ev.empty());
    EXPECT_EQ(ev.back().data, "[DONE]");
    std::string joined, finish;
    for (const SseEvent& x : ev)
        if (x.j.is_object() && !x.j["choices"].empty()) {
            joined += x.j["choices"][0]["text"].get<std::string>();
            if (!x.j["choices"][0]["finish_reason"].is_null()) finish = x.j["choices"][0]["finish_reason"];
        }
    EXPECT_EQ(joined, text);
    EXPECT_EQ(finish, "length");
}

TEST(ServerCompletions, TokenIdPrompt) {
    TestServer& s = shared_server();
    Reply r = s.post("/v1/completions", json{{"model", kModelName}, {"prompt", {0, 80, 81, 82}}, {"max_tokens", 3}});
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.j["usage"]["prompt_tokens"], 4);
    Reply bad = s.post("/v1/completions", json{{"model", kModelName}, {"prompt", {0, 999999}}, {"max_tokens", 3}});
    EXPECT_EQ(bad.status, 400);
    EXPECT_NE(bad.j["error"]["message"].get<std::string>().find("outside the vocabulary"), std::string::npos);
}

TEST(ServerMessages, WholeAndStreamedAgree) {
    TestServer& s = shared_server();
    json req{{"model", kModelName},
             {"max_tokens", 14},
             {"ignore_eos", true},
             {"system", "be brief"},
             {"messages", json::array({{{"role", "user"}, {"content", json::array({{{"type", "text"}, {"text", "hi"}}})}}})}};
    Reply r = s.post("/v1/messages", req);
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.j["type"], "message");
    EXPECT_EQ(r.j["role"], "assistant");
    EXPECT_EQ(r.j["id"].get<std::string>().rfind("msg_", 0), 0u);
    EXPECT_EQ(r.j["stop_reason"], "max_tokens");
    ASSERT_EQ(r.j["content"].size(), 1u);
    EXPECT_EQ(r.j["content"][0]["type"], "text");
    const json& u = r.j["usage"];
    EXPECT_EQ(u["output_tokens"], 14);
    expect_timings(r.j["timings"], u["input_tokens"].get<int64_t>() + u["cache_read_input_tokens"].get<int64_t>());

    req["stream"] = true;
    Reply st = s.post("/v1/messages", req);
    ASSERT_EQ(st.status, 200);
    std::vector<SseEvent> ev = parse_sse(st.body);
    std::vector<std::string> kinds;
    std::string text;
    for (const SseEvent& e : ev) {
        EXPECT_EQ(e.event, e.j["type"]) << e.data;  // event: line and data type agree
        if (kinds.empty() || kinds.back() != e.event) kinds.push_back(e.event);
        if (e.event == "content_block_delta") text += e.j["delta"]["text"].get<std::string>();
    }
    EXPECT_EQ(kinds, (std::vector<std::string>{"message_start", "content_block_start", "content_block_delta",
                                               "content_block_stop", "message_delta", "message_stop"}));
    EXPECT_EQ(text, r.j["content"][0]["text"].get<std::string>());
    const json& delta = ev[ev.size() - 2].j;
    EXPECT_EQ(delta["delta"]["stop_reason"], "max_tokens");
    EXPECT_EQ(delta["usage"]["output_tokens"], 14);
}

TEST(ServerMessages, PrefillContinuesTheAssistantTurn) {
    TestServer& s = shared_server();
    json base{{"model", kModelName}, {"max_tokens", 6}, {"ignore_eos", true}};
    json a = base, b = base;
    a["messages"] = json::array({{{"role", "user"}, {"content", "hi"}}});
    b["messages"] = json::array({{{"role", "user"}, {"content", "hi"}}, {{"role", "assistant"}, {"content", "Sure:"}}});
    Reply ra = s.post("/v1/messages", a), rb = s.post("/v1/messages", b);
    ASSERT_EQ(rb.status, 200) << rb.body;
    // The prefill's 5 bytes are part of the prompt (byte tokenizer: at most one token each).
    const auto prompt = [](const Reply& r) {
        return r.j["usage"]["input_tokens"].get<int>() + r.j["usage"]["cache_read_input_tokens"].get<int>();
    };
    EXPECT_GT(prompt(rb), prompt(ra));
    EXPECT_LE(prompt(rb), prompt(ra) + 5);
}

TEST(ServerMessages, CountTokens) {
    TestServer& s = shared_server();
    json req{{"model", kModelName}, {"messages", json::array({{{"role", "user"}, {"content", "hello"}}})}};
    Reply c = s.post("/v1/messages/count_tokens", req);
    ASSERT_EQ(c.status, 200) << c.body;
    req["max_tokens"] = 1;
    Reply m = s.post("/v1/messages", req);
    EXPECT_EQ(c.j["input_tokens"].get<int64_t>(),
              m.j["usage"]["input_tokens"].get<int64_t>() + m.j["usage"]["cache_read_input_tokens"].get<int64_t>());
}

TEST(ServerResponses, WholeAndStreamedAgree) {
    TestServer& s = shared_server();
    json req{{"model", kModelName},
             {"instructions", "be brief"},
             {"input", json::array({{{"role", "user"}, {"content", json::array({{{"type", "input_text"}, {"text", "hi"}}})}}})},
             {"max_output_tokens", 9},
             {"ignore_eos", true}};
    Reply r = s.post("/v1/responses", req);
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.j["object"], "response");
    EXPECT_EQ(r.j["status"], "incomplete");
    EXPECT_EQ(r.j["incomplete_details"]["reason"], "max_output_tokens");
    EXPECT_EQ(r.j["instructions"], "be brief");  // request fields are echoed
    ASSERT_EQ(r.j["output"].size(), 1u);
    const json& msg = r.j["output"][0];
    EXPECT_EQ(msg["type"], "message");
    const std::string text = msg["content"][0]["text"];
    EXPECT_EQ(r.j["usage"]["output_tokens"], 9);

    req["stream"] = true;
    Reply st = s.post("/v1/responses", req);
    std::vector<SseEvent> ev = parse_sse(st.body);
    ASSERT_GE(ev.size(), 6u);
    EXPECT_EQ(ev[0].event, "response.created");
    EXPECT_EQ(ev[1].event, "response.in_progress");
    EXPECT_EQ(ev.back().event, "response.incomplete");
    std::string deltas;
    for (size_t i = 0; i < ev.size(); ++i) {
        EXPECT_EQ(ev[i].j["sequence_number"], int64_t(i));
        EXPECT_EQ(ev[i].event, ev[i].j["type"]);
        if (ev[i].event == "response.output_text.delta") deltas += ev[i].j["delta"].get<std::string>();
    }
    EXPECT_EQ(deltas, text);
    const json& final_resp = ev.back().j["response"];
    EXPECT_EQ(final_resp["output"][0]["content"][0]["text"], text);
    EXPECT_EQ(final_resp["usage"]["output_tokens"], 9);
    expect_timings(final_resp["timings"], final_resp["usage"]["input_tokens"]);
}

TEST(ServerResponses, FunctionCallItemsAreAccepted) {
    TestServer& s = shared_server();
    json req{{"model", kModelName},
             {"max_output_tokens", 3},
             {"tools", json::array({{{"type", "function"}, {"name", "get_weather"},
                                     {"parameters", {{"type", "object"}, {"properties", {{"city", {{"type", "string"}}}}}}}},
                                    {{"type", "web_search"}}})},
             {"input", json::array({{{"role", "user"}, {"content", "weather in Paris?"}},
                                    {{"type", "function_call"}, {"call_id", "c1"}, {"name", "get_weather"},
                                     {"arguments", "{\"city\":\"Paris\"}"}},
                                    {{"type", "function_call_output"}, {"call_id", "c1"}, {"output", "sunny"}}})}};
    Reply r = s.post("/v1/responses", req);
    ASSERT_EQ(r.status, 200) << r.body;
    req["previous_response_id"] = "resp_x";
    Reply p = s.post("/v1/responses", req);
    EXPECT_EQ(p.status, 400);
    EXPECT_EQ(p.j["error"]["param"], "previous_response_id");
}

TEST(ServerPrefixCache, TheNextTurnReusesTheConversation) {
    TestServer s;
    json turn1 = user_chat("tell me about the sea", 8);
    turn1["ignore_eos"] = true;
    Reply r1 = s.post("/v1/chat/completions", turn1);
    ASSERT_EQ(r1.status, 200);
    EXPECT_EQ(r1.j["timings"]["prefix_cache"], "miss");
    json turn2 = turn1;
    turn2["messages"].push_back({{"role", "assistant"}, {"content", r1.j["choices"][0]["message"]["content"]}});
    turn2["messages"].push_back({{"role", "user"}, {"content", "and the sky?"}});
    Reply r2 = s.post("/v1/chat/completions", turn2);
    ASSERT_EQ(r2.status, 200);
    const json& t = r2.j["timings"];
    EXPECT_EQ(t["prefix_cache"], "hit");
    // At least everything of turn 1's prompt but its last token is reused.
    EXPECT_GE(t["cached_tokens"].get<int64_t>(), r1.j["usage"]["prompt_tokens"].get<int64_t>() - 1);
    EXPECT_EQ(r2.j["usage"]["prompt_tokens_details"]["cached_tokens"], t["cached_tokens"]);
    EXPECT_GE(s.metric("dsv4_prefix_cache_requests_total{result=\"hit\"}"), 1);

    // The reuse is invisible in the output: a server without a cache answers the same.
    TestServer nocache([](server::ServerOptions& o) { o.scheduler.cache_entries = 0; });
    Reply fresh = nocache.post("/v1/chat/completions", turn2);
    EXPECT_EQ(fresh.j["timings"]["prefix_cache"], "miss");
    EXPECT_EQ(fresh.j["choices"][0]["message"]["content"], r2.j["choices"][0]["message"]["content"]);
}

TEST(ServerMetrics, PrometheusTextCountsRequestsAndTokens) {
    TestServer s;
    json req = user_chat("metrics", 4);
    req["ignore_eos"] = true;
    ASSERT_EQ(s.post("/v1/chat/completions", req).status, 200);
    s.post("/v1/chat/completions", std::string("{"));
    EXPECT_EQ(s.get("/no/such/route").status, 404);
    // Each request is counted before its answer is sent: scraping right after sees them all.
    Reply m = s.get("/metrics");
    ASSERT_EQ(m.status, 200);
    EXPECT_NE(m.header("Content-Type").find("text/plain"), std::string::npos);
    EXPECT_EQ(s.metric("dsv4_requests_total{endpoint=\"/v1/chat/completions\",status=\"200\"}"), 1);
    EXPECT_EQ(s.metric("dsv4_requests_total{endpoint=\"/v1/chat/completions\",status=\"400\"}"), 1);
    EXPECT_EQ(s.metric("dsv4_requests_total{endpoint=\"other\",status=\"404\"}"), 1);
    EXPECT_EQ(s.metric("dsv4_generated_tokens_total"), 4);
    EXPECT_EQ(s.metric("dsv4_queue_depth"), 0);
    EXPECT_GT(s.metric("dsv4_process_resident_bytes"), 1e6);
    EXPECT_GT(s.metric("dsv4_prefill_tokens_per_second"), 0);
    EXPECT_GT(s.metric("dsv4_decode_tokens_per_second"), 0);
    EXPECT_NE(m.body.find("# TYPE dsv4_requests_total counter"), std::string::npos);
}

// ---- bad input ----

namespace {
void expect_openai_error(const Reply& r, int status, const std::string& needle, const std::string& param = "") {
    EXPECT_EQ(r.status, status) << r.body;
    ASSERT_TRUE(r.j.is_object() && r.j.contains("error")) << r.body;
    const json& e = r.j["error"];
    EXPECT_TRUE(e["message"].is_string());
    EXPECT_NE(e["message"].get<std::string>().find(needle), std::string::npos) << e["message"];
    EXPECT_TRUE(e.contains("type") && e.contains("param") && e.contains("code"));
    if (!param.empty()) {
        EXPECT_EQ(e["param"], param);
    }
}
}  // namespace

TEST(ServerErrors, MalformedAndMistypedRequestsNameTheProblem) {
    TestServer& s = shared_server();
    const std::string chat = "/v1/chat/completions";
    expect_openai_error(s.post(chat, std::string("{\"model\": ")), 400, "not valid JSON");
    expect_openai_error(s.post(chat, std::string("")), 400, "empty");
    expect_openai_error(s.post(chat, std::string("[1]")), 400, "must be a JSON object");
    expect_openai_error(s.post(chat, json{{"messages", json::array()}}), 400, "missing required field 'model'", "model");
    expect_openai_error(s.post(chat, json{{"model", kModelName}}), 400, "'messages'", "messages");
    expect_openai_error(s.post(chat, json{{"model", kModelName}, {"messages", "hi"}}), 400, "expected an array, got a string",
                        "messages");
    json r = user_chat("x");
    r["temperature"] = "warm";
    expect_openai_error(s.post(chat, r), 400, "expected a number, got a string", "temperature");
    r = user_chat("x");
    r["temperature"] = 3;
    expect_openai_error(s.post(chat, r), 400, "out of range", "temperature");
    r = user_chat("x");
    r["messages"][0]["role"] = "robot";
    expect_openai_error(s.post(chat, r), 400, "unknown role 'robot'", "messages[0].role");
    r = user_chat("x");
    r["messages"][0]["content"] = json::array({{{"type", "image_url"}, {"image_url", {{"url", "http://x"}}}}});
    expect_openai_error(s.post(chat, r), 400, "'image_url' is not supported", "messages[0].content[0].type");
    r = user_chat("x");
    r["n"] = 2;
    expect_openai_error(s.post(chat, r), 400, "only n = 1", "n");
    r = user_chat("x");
    r["stream"] = "yes";
    expect_openai_error(s.post(chat, r), 400, "expected a boolean", "stream");
    r = user_chat("x");
    r["messages"].push_back({{"role", "assistant"}, {"tool_calls", {{{"type", "function"}, {"function", {{"name", "f"}, {"arguments", "[1]"}}}}}}});
    expect_openai_error(s.post(chat, r), 400, "must be a JSON object", "messages[1].tool_calls[0].function.arguments");
    r = user_chat("x");
    r["frequency_penalty"] = 0.5;
    expect_openai_error(s.post(chat, r), 400, "repeat_penalty", "frequency_penalty");
    EXPECT_EQ(s.get("/health").status, 200);
}

TEST(ServerErrors, MaxTokensOutOfRange) {
    TestServer s([](server::ServerOptions& o) { o.ctx = 128; });
    expect_openai_error(s.post("/v1/chat/completions", user_chat("x", 0)), 400, "out of range", "max_tokens");
    expect_openai_error(s.post("/v1/chat/completions", user_chat("x", 129)), 400, "context length of 128", "max_tokens");
    json r = user_chat("x");
    r["max_tokens"] = 2.5;
    expect_openai_error(s.post("/v1/chat/completions", r), 400, "expected an integer", "max_tokens");
    // Within range but past what the prompt leaves: cut to fit, ending with "length".
    json fit = user_chat("x", 128);
    fit["ignore_eos"] = true;
    Reply ok = s.post("/v1/chat/completions", fit);
    ASSERT_EQ(ok.status, 200) << ok.body;
    EXPECT_EQ(ok.j["choices"][0]["finish_reason"], "length");
    EXPECT_EQ(ok.j["usage"]["total_tokens"], 128);
}

TEST(ServerErrors, PromptLongerThanTheContext) {
    TestServer s([](server::ServerOptions& o) { o.ctx = 64; });
    Reply r = s.post("/v1/chat/completions", user_chat(std::string(200, 'x'), 4));
    expect_openai_error(r, 400, "context length is 64", "messages");
    EXPECT_EQ(r.j["error"]["code"], "context_length_exceeded");
    Reply c = s.post("/v1/completions", json{{"model", kModelName}, {"prompt", std::string(200, 'y')}});
    expect_openai_error(c, 400, "context length is 64", "prompt");
    Reply a = s.post("/v1/messages", json{{"model", kModelName}, {"max_tokens", 4},
                                          {"messages", {{{"role", "user"}, {"content", std::string(200, 'z')}}}}});
    EXPECT_EQ(a.status, 400);
    EXPECT_EQ(a.j["type"], "error");
    EXPECT_EQ(a.j["error"]["type"], "invalid_request_error");
    EXPECT_EQ(s.post("/v1/chat/completions", user_chat("short", 4)).status, 200);  // still serving
}

TEST(ServerErrors, UnknownModelRouteMethodAndHugeBody) {
    TestServer s([](server::ServerOptions& o) { o.max_body_bytes = 4096; });
    json r = user_chat("x");
    r["model"] = "gpt-4o";
    expect_openai_error(s.post("/v1/chat/completions", r), 404, "'gpt-4o' is not served here", "model");
    expect_openai_error(s.get("/v1/nope"), 404, "no route for GET /v1/nope");
    expect_openai_error(s.get("/v1/chat/completions"), 405, "use POST");
    expect_openai_error(s.post("/v1/chat/completions", user_chat(std::string(8000, 'x'))), 413, "larger than");
    EXPECT_EQ(s.get("/health").status, 200);
}

TEST(ServerErrors, AnthropicShape) {
    TestServer& s = shared_server();
    Reply r = s.post("/v1/messages", json{{"model", kModelName}, {"messages", {{{"role", "user"}, {"content", "x"}}}}});
    EXPECT_EQ(r.status, 400);
    EXPECT_EQ(r.j["type"], "error");
    EXPECT_EQ(r.j["error"]["type"], "invalid_request_error");
    EXPECT_NE(r.j["error"]["message"].get<std::string>().find("max_tokens"), std::string::npos);
    Reply m = s.post("/v1/messages", std::string("{oops"));
    EXPECT_EQ(m.status, 400);
    EXPECT_EQ(m.j["type"], "error");
    Reply role = s.post("/v1/messages", json{{"model", kModelName}, {"max_tokens", 3}, {"messages", {{{"role", "system"}, {"content", "x"}}}}});
    EXPECT_EQ(role.status, 400);
    EXPECT_NE(role.j["error"]["message"].get<std::string>().find("messages[0].role"), std::string::npos);
    Reply nf = s.post("/v1/messages", json{{"model", "claude-x"}, {"max_tokens", 3}, {"messages", {{{"role", "user"}, {"content", "x"}}}}});
    EXPECT_EQ(nf.status, 404);
    EXPECT_EQ(nf.j["error"]["type"], "not_found_error");
}

TEST(ServerErrors, ApiKey) {
    TestServer s([](server::ServerOptions& o) { o.api_key = "sekret"; });
    Reply none = s.post("/v1/chat/completions", user_chat("x", 2));
    EXPECT_EQ(none.status, 401);
    EXPECT_EQ(none.j["error"]["type"], "authentication_error");
    EXPECT_EQ(s.post("/v1/chat/completions", user_chat("x", 2), {{"Authorization", "Bearer wrong"}}).status, 401);
    EXPECT_EQ(s.post("/v1/chat/completions", user_chat("x", 2), {{"Authorization", "Bearer sekret"}}).status, 200);
    json m{{"model", kModelName}, {"max_tokens", 2}, {"messages", {{{"role", "user"}, {"content", "x"}}}}};
    Reply a = s.post("/v1/messages", m);
    EXPECT_EQ(a.status, 401);
    EXPECT_EQ(a.j["type"], "error");
    EXPECT_EQ(s.post("/v1/messages", m, {{"x-api-key", "sekret"}}).status, 200);
    EXPECT_EQ(s.get("/health").status, 200);  // health needs no key
}
