// dsv4 serve under load and misbehaving clients, in-process: tool calls and reasoning through
// every dialect (a scripted generation writes what random weights never would, through the real
// parsing and streaming paths), client disconnects cancel (streamed, whole, and still queued),
// concurrent clients get the answers they would get alone, and the queue, memory admission
// and the timeout answer with errors instead of hanging.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "test_server_util.h"

using namespace dsv4;
using namespace dsv4::test;
using namespace std::chrono_literals;

namespace {

const std::string D = "｜DSML｜";

// A generation that writes `script` in pieces of 3 bytes (markers split across pieces) and
// touches no model.
server::GenerateFn scripted(std::string script) {
    return [script](Session&, const Tokenizer&, std::span<const int32_t> prompt, const GenerateOptions&,
                    const GenerateEvents& ev) {
        GenerateStats st;
        st.prompt_tokens = int64_t(prompt.size());
        for (size_t i = 0; i < script.size(); i += 3) {
            std::string piece = script.substr(i, 3);
            st.text += piece;
            if (ev.on_text) ev.on_text(piece);
            ++st.gen_tokens;
        }
        st.stop = StopReason::Eos;
        return st;
    };
}

const std::string kToolScript = "Checking.\n\n<" + D + "tool_calls>\n<" + D + "invoke name=\"get_weather\">\n<" + D +
                                "parameter name=\"city\" string=\"true\">Paris</" + D + "parameter>\n<" + D +
                                "parameter name=\"days\" string=\"false\">3</" + D + "parameter>\n</" + D +
                                "invoke>\n</" + D + "tool_calls>";
const json kArgs = {{"city", "Paris"}, {"days", 3}};

json weather_tool_openai() {
    return json::array({{{"type", "function"},
                         {"function", {{"name", "get_weather"}, {"parameters", {{"type", "object"}}}}}}});
}

// Waits until a metric reaches a value (the server updates counters as handlers finish).
bool eventually(const TestServer& s, const std::string& metric, double value, std::chrono::seconds limit = 20s) {
    auto until = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < until) {
        if (s.metric(metric) == value) return true;
        std::this_thread::sleep_for(50ms);
    }
    return false;
}

// Streams a request and drops the connection once it has read for `after`.
void stream_and_drop(int port, const std::string& path, const json& body, std::chrono::milliseconds after) {
    httplib::Client c("127.0.0.1", port);
    httplib::Request req;
    req.method = "POST";
    req.path = path;
    req.body = body.dump();
    req.set_header("Content-Type", "application/json");
    const auto until = std::chrono::steady_clock::now() + after;
    req.content_receiver = [&](const char*, size_t, uint64_t, uint64_t) { return std::chrono::steady_clock::now() < until; };
    c.send(req);
}

json long_chat(int max_tokens = 100000) {
    json r = user_chat("go on forever", max_tokens);
    r["ignore_eos"] = true;
    return r;
}

}  // namespace

TEST(ServerTools, OpenAIChatWholeAndStreamed) {
    TestServer s([](server::ServerOptions& o) { o.scheduler.generate = scripted(kToolScript); });
    json req = user_chat("weather in Paris?");
    req["tools"] = weather_tool_openai();
    Reply r = s.post("/v1/chat/completions", req);
    ASSERT_EQ(r.status, 200) << r.body;
    const json& c = r.j["choices"][0];
    EXPECT_EQ(c["finish_reason"], "tool_calls");
    EXPECT_EQ(c["message"]["content"], "Checking.");
    ASSERT_EQ(c["message"]["tool_calls"].size(), 1u);
    const json& call = c["message"]["tool_calls"][0];
    EXPECT_EQ(call["type"], "function");
    EXPECT_EQ(call["id"].get<std::string>().rfind("call_", 0), 0u);
    EXPECT_EQ(call["function"]["name"], "get_weather");
    EXPECT_EQ(json::parse(call["function"]["arguments"].get<std::string>()), kArgs);

    req["stream"] = true;
    std::vector<SseEvent> ev = parse_sse(s.post("/v1/chat/completions", req).body);
    std::string text, finish;
    json calls = json::array();
    for (const SseEvent& e : ev) {
        if (!e.j.is_object()) continue;
        const json& d = e.j["choices"][0]["delta"];
        if (d.contains("content")) text += d["content"].get<std::string>();
        if (d.contains("tool_calls")) calls.push_back(d["tool_calls"][0]);
        if (!e.j["choices"][0]["finish_reason"].is_null()) finish = e.j["choices"][0]["finish_reason"];
    }
    EXPECT_EQ(text, "Checking.");
    EXPECT_EQ(finish, "tool_calls");
    ASSERT_EQ(calls.size(), 1u);
    EXPECT_EQ(calls[0]["index"], 0);
    EXPECT_EQ(calls[0]["function"]["name"], "get_weather");
    EXPECT_EQ(json::parse(calls[0]["function"]["arguments"].get<std::string>()), kArgs);
}

TEST(ServerTools, AnthropicWholeAndStreamed) {
    TestServer s([](server::ServerOptions& o) { o.scheduler.generate = scripted(kToolScript); });
    json req{{"model", kModelName},
             {"max_tokens", 50},
             {"tools", json::array({{{"name", "get_weather"}, {"input_schema", {{"type", "object"}}}}})},
             {"messages", json::array({{{"role", "user"}, {"content", "weather?"}}})}};
    Reply r = s.post("/v1/messages", req);
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.j["stop_reason"], "tool_use");
    ASSERT_EQ(r.j["content"].size(), 2u);
    EXPECT_EQ(r.j["content"][0], json({{"type", "text"}, {"text", "Checking."}}));
    EXPECT_EQ(r.j["content"][1]["type"], "tool_use");
    EXPECT_EQ(r.j["content"][1]["name"], "get_weather");
    EXPECT_EQ(r.j["content"][1]["input"], kArgs);
    EXPECT_EQ(r.j["content"][1]["id"].get<std::string>().rfind("toolu_", 0), 0u);

    req["stream"] = true;
    std::vector<SseEvent> ev = parse_sse(s.post("/v1/messages", req).body);
    json started = json::array();
    std::string partial;
    int open = 0;
    for (const SseEvent& e : ev) {
        if (e.event == "content_block_start") {
            EXPECT_EQ(e.j["index"], int(started.size()));
            started.push_back(e.j["content_block"]);
            ++open;
        }
        if (e.event == "content_block_stop") --open;
        if (e.event == "content_block_delta" && e.j["delta"]["type"] == "input_json_delta")
            partial += e.j["delta"]["partial_json"].get<std::string>();
        if (e.event == "message_delta") {
            EXPECT_EQ(e.j["delta"]["stop_reason"], "tool_use");
        }
    }
    EXPECT_EQ(open, 0);
    ASSERT_EQ(started.size(), 2u);
    EXPECT_EQ(started[1]["type"], "tool_use");
    EXPECT_EQ(started[1]["name"], "get_weather");
    EXPECT_EQ(json::parse(partial), kArgs);
}

TEST(ServerTools, ResponsesWholeAndStreamed) {
    TestServer s([](server::ServerOptions& o) { o.scheduler.generate = scripted(kToolScript); });
    json req{{"model", kModelName},
             {"input", "weather?"},
             {"tools", json::array({{{"type", "function"}, {"name", "get_weather"}, {"parameters", {{"type", "object"}}}}})}};
    Reply r = s.post("/v1/responses", req);
    ASSERT_EQ(r.status, 200) << r.body;
    ASSERT_EQ(r.j["output"].size(), 2u);
    EXPECT_EQ(r.j["output"][0]["content"][0]["text"], "Checking.");
    const json& fc = r.j["output"][1];
    EXPECT_EQ(fc["type"], "function_call");
    EXPECT_EQ(fc["name"], "get_weather");
    EXPECT_EQ(json::parse(fc["arguments"].get<std::string>()), kArgs);
    EXPECT_EQ(fc["call_id"].get<std::string>().rfind("call_", 0), 0u);

    req["stream"] = true;
    std::vector<SseEvent> ev = parse_sse(s.post("/v1/responses", req).body);
    ASSERT_FALSE(ev.empty());
    EXPECT_EQ(ev.back().event, "response.completed");
    bool args_done = false;
    for (const SseEvent& e : ev)
        if (e.event == "response.function_call_arguments.done") {
            args_done = true;
            EXPECT_EQ(json::parse(e.j["arguments"].get<std::string>()), kArgs);
        }
    EXPECT_TRUE(args_done);
    EXPECT_EQ(ev.back().j["response"]["output"][1]["name"], "get_weather");
}

TEST(ServerThinking, ReasoningIsSeparatedInEveryDialect) {
    TestServer s([](server::ServerOptions& o) { o.scheduler.generate = scripted("plan it</think>\n\nDone."); });
    json chat = user_chat("x");
    chat["reasoning_effort"] = "high";
    Reply c = s.post("/v1/chat/completions", chat);
    ASSERT_EQ(c.status, 200) << c.body;
    EXPECT_EQ(c.j["choices"][0]["message"]["reasoning_content"], "plan it");
    EXPECT_EQ(c.j["choices"][0]["message"]["content"], "Done.");
    chat["stream"] = true;
    std::string reasoning;
    for (const SseEvent& e : parse_sse(s.post("/v1/chat/completions", chat).body))
        if (e.j.is_object() && e.j["choices"][0]["delta"].contains("reasoning_content"))
            reasoning += e.j["choices"][0]["delta"]["reasoning_content"].get<std::string>();
    EXPECT_EQ(reasoning, "plan it");

    json msg{{"model", kModelName}, {"max_tokens", 20}, {"thinking", {{"type", "enabled"}, {"budget_tokens", 10}}},
             {"messages", json::array({{{"role", "user"}, {"content", "x"}}})}};
    Reply m = s.post("/v1/messages", msg);
    ASSERT_EQ(m.status, 200) << m.body;
    EXPECT_EQ(m.j["content"][0]["type"], "thinking");
    EXPECT_EQ(m.j["content"][0]["thinking"], "plan it");
    EXPECT_EQ(m.j["content"][1]["text"], "Done.");

    json resp{{"model", kModelName}, {"input", "x"}, {"reasoning", {{"effort", "medium"}}}};
    Reply r = s.post("/v1/responses", resp);
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.j["output"][0]["type"], "reasoning");
    EXPECT_EQ(r.j["output"][0]["content"][0]["text"], "plan it");
    EXPECT_EQ(r.j["output"][1]["content"][0]["text"], "Done.");

    // Without thinking the prompt closes the think block: the same text is all answer.
    Reply off = s.post("/v1/chat/completions", user_chat("x"));
    EXPECT_FALSE(off.j["choices"][0]["message"].contains("reasoning_content"));
}

TEST(ServerCancel, AStreamedClientThatLeavesStopsItsGeneration) {
    TestServer s;
    stream_and_drop(s.port(), "/v1/chat/completions", [] { json r = long_chat(); r["stream"] = true; return r; }(), 200ms);
    ASSERT_TRUE(eventually(s, "dsv4_cancelled_total{reason=\"disconnect\"}", 1));
    ASSERT_TRUE(eventually(s, "dsv4_active_sessions", 0));
    EXPECT_LT(s.metric("dsv4_generated_tokens_total"), 100000);
    // The slot is free again.
    EXPECT_EQ(s.post("/v1/chat/completions", user_chat("next", 3)).status, 200);
}

TEST(ServerCancel, AWaitingClientThatLeavesStopsItsGeneration) {
    TestServer s;
    {
        httplib::Client c("127.0.0.1", s.port());
        c.set_read_timeout(1, 0);  // gives up after a second and closes the connection
        auto r = c.Post("/v1/completions", json{{"model", kModelName}, {"prompt", "a"}, {"max_tokens", 100000}, {"ignore_eos", true}}.dump(),
                        "application/json");
        EXPECT_FALSE(r);
    }
    ASSERT_TRUE(eventually(s, "dsv4_cancelled_total{reason=\"disconnect\"}", 1));
    ASSERT_TRUE(eventually(s, "dsv4_active_sessions", 0));
    EXPECT_LT(s.metric("dsv4_generated_tokens_total"), 100000);
}

TEST(ServerCancel, AQueuedClientThatLeavesIsNeverRun) {
    TestServer s([](server::ServerOptions& o) { o.scheduler.parallel = 1; });
    std::thread busy([&] {
        json r = long_chat();
        r["stream"] = true;
        stream_and_drop(s.port(), "/v1/chat/completions", r, 2000ms);
    });
    ASSERT_TRUE(eventually(s, "dsv4_active_sessions", 1));
    {
        httplib::Client c("127.0.0.1", s.port());
        c.set_read_timeout(0, 300000);
        EXPECT_FALSE(c.Post("/v1/chat/completions", long_chat().dump(), "application/json"));
    }
    busy.join();
    ASSERT_TRUE(eventually(s, "dsv4_cancelled_total{reason=\"disconnect\"}", 2));
    ASSERT_TRUE(eventually(s, "dsv4_active_sessions", 0));
    // Only the first request generated anything.
    EXPECT_TRUE(eventually(s, "dsv4_generations_total", 1));
}

TEST(ServerConcurrency, ConcurrentClientsGetTheAnswersTheyWouldGetAlone) {
    const std::vector<std::string> prompts{"alpha beta", "the quick brown fox", "zz", "lorem ipsum dolor", "1 2 3 4"};
    std::vector<std::string> alone;
    {
        TestServer seq([](server::ServerOptions& o) { o.scheduler.parallel = 1; o.scheduler.cache_entries = 0; });
        for (const std::string& p : prompts) {
            json r = user_chat(p, 12);
            r["ignore_eos"] = true;
            alone.push_back(seq.post("/v1/chat/completions", r).j["choices"][0]["message"]["content"]);
        }
    }
    TestServer s([](server::ServerOptions& o) { o.scheduler.parallel = 3; });
    std::vector<std::thread> clients;
    std::atomic<int> ok{0}, mismatched{0};
    for (int c = 0; c < 5; ++c)
        clients.emplace_back([&, c] {
            for (int k = 0; k < 3; ++k) {
                size_t i = size_t(c + k) % prompts.size();
                json r = user_chat(prompts[i], 12);
                r["ignore_eos"] = true;
                r["stream"] = k % 2 == 1;
                Reply rep = s.post("/v1/chat/completions", r);
                std::string text;
                if (r["stream"]) {
                    for (const SseEvent& e : parse_sse(rep.body))
                        if (e.j.is_object() && !e.j["choices"].empty() && e.j["choices"][0]["delta"].contains("content"))
                            text += e.j["choices"][0]["delta"]["content"].get<std::string>();
                } else {
                    text = rep.j["choices"][0]["message"]["content"];
                }
                (rep.status == 200 ? ok : mismatched)++;
                if (text != alone[i]) mismatched++;
            }
        });
    for (auto& t : clients) t.join();
    EXPECT_EQ(ok.load(), 15);
    EXPECT_EQ(mismatched.load(), 0);
    EXPECT_EQ(s.metric("dsv4_queue_depth"), 0);
}

TEST(ServerOverload, AFullQueueAnswers503) {
    TestServer s([](server::ServerOptions& o) {
        o.scheduler.parallel = 1;
        o.scheduler.max_queue = 0;
    });
    std::thread busy([&] {
        json r = long_chat();
        r["stream"] = true;
        stream_and_drop(s.port(), "/v1/chat/completions", r, 2000ms);
    });
    ASSERT_TRUE(eventually(s, "dsv4_active_sessions", 1));
    Reply o = s.post("/v1/chat/completions", user_chat("x", 2));
    EXPECT_EQ(o.status, 503);
    EXPECT_EQ(o.j["error"]["code"], "queue_full");
    Reply a = s.post("/v1/messages", json{{"model", kModelName}, {"max_tokens", 2}, {"messages", {{{"role", "user"}, {"content", "x"}}}}});
    EXPECT_EQ(a.status, 503);
    EXPECT_EQ(a.j["error"]["type"], "overloaded_error");
    busy.join();
    EXPECT_EQ(s.metric("dsv4_refused_total{reason=\"queue_full\"}"), 2);
}

TEST(ServerOverload, MemoryAdmissionAnswers503WithTheNumbers) {
    TestServer s([](server::ServerOptions& o) {
        o.scheduler.prefill.admission.headroom_bytes = uint64_t(64) << 20;
        o.scheduler.prefill.admission.available = [] { return uint64_t(1) << 20; };
    });
    Reply r = s.post("/v1/chat/completions", user_chat("x", 2));
    EXPECT_EQ(r.status, 503);
    EXPECT_EQ(r.j["error"]["code"], "insufficient_memory");
    EXPECT_NE(r.j["error"]["message"].get<std::string>().find("MiB"), std::string::npos);
    EXPECT_EQ(s.metric("dsv4_refused_total{reason=\"memory\"}"), 1);
    EXPECT_EQ(s.get("/health").status, 200);
}

TEST(ServerTimeout, ALongRequestIsStoppedAndSaysSo) {
    TestServer s([](server::ServerOptions& o) { o.timeout_s = 0.5; });
    Reply r = s.post("/v1/chat/completions", long_chat());
    EXPECT_EQ(r.status, 504);
    EXPECT_NE(r.j["error"]["message"].get<std::string>().find("timeout"), std::string::npos);
    json st = long_chat();
    st["stream"] = true;
    std::vector<SseEvent> ev = parse_sse(s.post("/v1/chat/completions", st).body);
    ASSERT_GE(ev.size(), 2u);
    EXPECT_EQ(ev.back().data, "[DONE]");
    EXPECT_TRUE(ev[ev.size() - 2].j.contains("error")) << ev[ev.size() - 2].data;
    ASSERT_TRUE(eventually(s, "dsv4_cancelled_total{reason=\"timeout\"}", 2));
    ASSERT_TRUE(eventually(s, "dsv4_active_sessions", 0));
}
