// The server's parts that need no model: the DSML output parser (against the chat template's
// own rendering of tool calls), the prefix cache's reuse rule and eviction, SSE framing, field
// checks, and how each dialect's request maps to template messages.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "server/api_error.h"
#include "server/dsml_parser.h"
#include "server/endpoint.h"
#include "server/json_fields.h"
#include "server/prefix_cache.h"
#include "server/sse.h"
#include "tokenizer/chat_template.h"

using namespace dsv4;
using namespace dsv4::server;
using nlohmann::json;

namespace {

const std::string D(kDsml);

std::string dsml_call(const std::string& name, const std::vector<std::pair<std::string, std::string>>& str_params,
                      const std::vector<std::pair<std::string, std::string>>& json_params) {
    std::string s = "<" + D + "invoke name=\"" + name + "\">\n";
    for (auto& [k, v] : str_params) s += "<" + D + "parameter name=\"" + k + "\" string=\"true\">" + v + "</" + D + "parameter>\n";
    for (auto& [k, v] : json_params) s += "<" + D + "parameter name=\"" + k + "\" string=\"false\">" + v + "</" + D + "parameter>\n";
    return s + "</" + D + "invoke>\n";
}

// Feeds text in pieces of n bytes; returns every event.
std::vector<OutputEvent> feed(OutputParser& p, const std::string& text, size_t n) {
    std::vector<OutputEvent> all;
    for (size_t i = 0; i < text.size(); i += n) {
        auto ev = p.push(text.substr(i, n));
        all.insert(all.end(), ev.begin(), ev.end());
    }
    auto ev = p.finish();
    all.insert(all.end(), ev.begin(), ev.end());
    return all;
}

std::string joined(const std::vector<OutputEvent>& ev, OutputEvent::Kind k) {
    std::string s;
    for (const OutputEvent& e : ev)
        if (e.kind == k) s += e.text;
    return s;
}

}  // namespace

TEST(OutputParser, ReasoningThenTextWithTheMarkerSplitAcrossPieces) {
    for (size_t n : {1, 2, 3, 7, 100}) {
        OutputParser p(true);
        auto ev = feed(p, "let me think</think>\n\nThe answer.", n);
        EXPECT_EQ(joined(ev, OutputEvent::Kind::Reasoning), "let me think") << n;
        EXPECT_EQ(joined(ev, OutputEvent::Kind::Text), "The answer.") << n;
        EXPECT_EQ(p.output().reasoning, "let me think");
        EXPECT_EQ(p.output().text, "The answer.");
    }
}

TEST(OutputParser, ToolCallsBecomeCallsWithJsonArguments) {
    const std::string out = "Checking.\n\n<" + D + "tool_calls>\n" +
                            dsml_call("get_weather", {{"city", "Paris"}}, {{"days", "3"}, {"units", "{\"t\": \"C\"}"}}) +
                            dsml_call("get_time", {}, {}) + "</" + D + "tool_calls>";
    for (size_t n : {1, 5, 1000}) {
        OutputParser p(false);
        auto ev = feed(p, out, n);
        EXPECT_EQ(joined(ev, OutputEvent::Kind::Text), "Checking.") << n;  // the blank lines before the block go
        std::vector<ToolCall> calls;
        for (const OutputEvent& e : ev)
            if (e.kind == OutputEvent::Kind::ToolCall) {
                EXPECT_EQ(e.call_index, calls.size());
                calls.push_back(e.call);
            }
        ASSERT_EQ(calls.size(), 2u) << n;
        EXPECT_EQ(calls[0].name, "get_weather");
        EXPECT_EQ(json::parse(calls[0].arguments), json::parse(R"({"city": "Paris", "days": 3, "units": {"t": "C"}})"));
        EXPECT_EQ(calls[1].name, "get_time");
        EXPECT_EQ(json::parse(calls[1].arguments), json::object());
    }
}

TEST(OutputParser, ParsesWhatTheChatTemplateRenders) {
    // The template's rendering of an assistant turn with calls, read back by the parser.
    ChatMessage a{ChatMessage::Role::Assistant, "On it.", "", {{"search", R"({"q": "a \"b\"", "n": 2, "deep": true})"}}};
    const std::string rendered = render_chat({{ChatMessage::Role::User, "hi", "", {}}, a}, ChatOptions{});
    const std::string marker = std::string(kAssistantText) + std::string(kThinkEnd);
    size_t from = rendered.find(marker) + marker.size();
    size_t to = rendered.rfind(kEosText);
    OutputParser p(false);
    feed(p, rendered.substr(from, to - from), 4);
    EXPECT_EQ(p.output().text, "On it.");
    ASSERT_EQ(p.output().tool_calls.size(), 1u);
    EXPECT_EQ(p.output().tool_calls[0].name, "search");
    EXPECT_EQ(json::parse(p.output().tool_calls[0].arguments), json::parse(a.tool_calls[0].arguments));
}

TEST(OutputParser, ACutOffBlockComesOutAsText) {
    const std::string out = "Sure <" + D + "tool_calls>\n<" + D + "invoke name=\"f\">\n<" + D + "parameter name=\"x\" str";
    OutputParser p(false);
    auto ev = feed(p, out, 3);
    EXPECT_TRUE(p.output().tool_calls.empty());
    // Nothing the model wrote is lost.
    EXPECT_NE(p.output().text.find("Sure"), std::string::npos);
    EXPECT_NE(p.output().text.find("parameter name=\"x\" str"), std::string::npos);
}

TEST(OutputParser, TextThatOnlyLooksLikeAMarkerIsKept) {
    OutputParser p(false);
    auto ev = feed(p, "a < b and <｜ but not DSML", 2);
    EXPECT_EQ(p.output().text, "a < b and <｜ but not DSML");
}

TEST(PrefixCache, ReuseRule) {
    const std::vector<int32_t> held{1, 2, 3, 4, 5};
    EXPECT_EQ(reusable(held, std::nullopt, std::vector<int32_t>{1, 2, 3, 4, 5, 6}).tokens, 5u);
    EXPECT_FALSE(reusable(held, std::nullopt, std::vector<int32_t>{1, 2, 3, 4, 5, 6}).rewind);
    // Diverges after the mark: rewind to it.
    Reuse r = reusable(held, 3, std::vector<int32_t>{1, 2, 3, 9, 9});
    EXPECT_EQ(r.tokens, 3u);
    EXPECT_TRUE(r.rewind);
    // The mark must leave a token to prefill (a rewound state has no logits).
    EXPECT_EQ(reusable(held, 3, std::vector<int32_t>{1, 2, 3}).tokens, 0u);
    EXPECT_EQ(reusable(held, 3, std::vector<int32_t>{1, 9, 3, 4}).tokens, 0u);
    EXPECT_EQ(reusable(held, std::nullopt, std::vector<int32_t>{1, 2}).tokens, 0u);
}

TEST(PrefixCache, TakeHandsOutTheBestEntryAndEvictionKeepsTheBounds) {
    PrefixCache<int> c(1000, 2);
    c.put({1, 2}, std::nullopt, 100, 12);
    c.put({1, 2, 3, 4}, std::nullopt, 100, 1234);
    c.put({7, 8}, std::nullopt, 100, 78);  // the entry limit drops the least recent ({1, 2})
    EXPECT_EQ(c.size(), 2u);
    EXPECT_EQ(c.evictions(), 1u);
    auto t = c.take(std::vector<int32_t>{1, 2, 3, 4, 5});
    ASSERT_TRUE(t);
    EXPECT_EQ(t->value, 1234);
    EXPECT_EQ(t->reuse.tokens, 4u);
    EXPECT_EQ(c.size(), 1u);  // taken out: one request per session at a time
    EXPECT_FALSE(c.take(std::vector<int32_t>{1, 2, 3}));
    c.put({5}, std::nullopt, 950, 5);  // over the byte budget with {7, 8}: that one goes
    EXPECT_EQ(c.size(), 1u);
    EXPECT_EQ(c.bytes(), 950u);
    c.put({6}, std::nullopt, 2000, 6);  // larger than the whole budget: not kept
    EXPECT_EQ(c.bytes(), 950u);
}

TEST(Sse, PayloadLinesBecomeDataLines) {
    EXPECT_EQ(sse_event("", "x"), "data: x\n\n");
    EXPECT_EQ(sse_event("ping", "a\nb\r\nc"), "event: ping\ndata: a\ndata: b\ndata: c\n\n");
    // JSON with a newline inside a string stays on one line (escaped).
    EXPECT_EQ(sse_json("", json{{"t", "a\nb"}}), "data: {\"t\":\"a\\nb\"}\n\n");
    // Invalid UTF-8 (a token cut inside a character) is replaced, not thrown on.
    EXPECT_NO_THROW(sse_json("", json{{"t", std::string("\xE2\x82")}}));
}

TEST(JsonFields, IntegersRangesAndKinds) {
    json j = json::parse(R"({"a": 100.0, "b": 1.5, "c": "7", "d": null, "e": 9999999999})");
    Obj o(j, "");
    EXPECT_EQ(o.opt_int("a", 0, 1000), 100);
    EXPECT_THROW(o.opt_int("b", 0, 10), ApiError);
    EXPECT_THROW(o.opt_int("c", 0, 10), ApiError);
    EXPECT_FALSE(o.opt_int("d", 0, 10));  // null counts as absent
    try {
        o.opt_int("e", 0, 100);
        FAIL();
    } catch (const ApiError& e) {
        EXPECT_EQ(e.param, "e");
        EXPECT_EQ(e.status(), 400);
        EXPECT_NE(std::string(e.what()).find("out of range"), std::string::npos);
    }
}

TEST(ErrorShapes, EachDialectWritesItsOwn) {
    ApiError e(ErrorKind::Overloaded, "busy", "", "queue_full");
    json o = error_body(e, Dialect::OpenAI), a = error_body(e, Dialect::Anthropic);
    EXPECT_EQ(o["error"]["message"], "busy");
    EXPECT_EQ(o["error"]["code"], "queue_full");
    EXPECT_EQ(a["type"], "error");
    EXPECT_EQ(a["error"]["type"], "overloaded_error");
    EXPECT_EQ(e.status(), 503);
}

TEST(RequestMapping, AnthropicToolUseAndResultsBecomeTemplateTurns) {
    auto ep = anthropic_messages_endpoint();
    json body = json::parse(R"({
      "model": "m", "max_tokens": 5, "system": [{"type": "text", "text": "sys"}],
      "tools": [{"name": "get_weather", "description": "d", "input_schema": {"type": "object"}}],
      "messages": [
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": [{"type": "text", "text": "checking"},
                                          {"type": "tool_use", "id": "t1", "name": "get_weather", "input": {"city": "Paris"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "sunny"},
                                     {"type": "text", "text": "thanks"}]}]})");
    GenRequest g = ep->parse(body, RequestLimits{});
    using R = ChatMessage::Role;
    ASSERT_EQ(g.messages.size(), 5u);
    EXPECT_EQ(g.messages[0].role, R::System);
    EXPECT_EQ(g.messages[2].role, R::Assistant);
    EXPECT_EQ(g.messages[2].content, "checking");
    ASSERT_EQ(g.messages[2].tool_calls.size(), 1u);
    EXPECT_EQ(json::parse(g.messages[2].tool_calls[0].arguments), json::parse(R"({"city": "Paris"})"));
    EXPECT_EQ(g.messages[3].role, R::Tool);
    EXPECT_EQ(g.messages[3].content, "sunny");
    EXPECT_EQ(g.messages[4].content, "thanks");
    // The tools reach the template in its function shape.
    ChatOptions co;
    co.tools = g.tools;
    const std::string prompt = render_chat(g.messages, co);
    EXPECT_NE(prompt.find("\"name\": \"get_weather\""), std::string::npos);
    EXPECT_NE(prompt.find("<tool_result>sunny</tool_result>"), std::string::npos);
}

TEST(RequestMapping, OpenAIChatThinkingSwitches) {
    auto ep = openai_chat_endpoint();
    auto parse = [&](const std::string& extra) {
        return ep->parse(json::parse(R"({"model": "m", "messages": [{"role": "user", "content": "x"}])" + extra + "}"),
                         RequestLimits{});
    };
    EXPECT_FALSE(parse("").thinking);
    EXPECT_TRUE(parse(R"(, "reasoning_effort": "high")").thinking);
    EXPECT_EQ(parse(R"(, "reasoning_effort": "max")").reasoning_effort, "max");
    EXPECT_TRUE(parse(R"(, "thinking": {"type": "enabled"})").thinking);
    EXPECT_TRUE(parse(R"(, "chat_template_kwargs": {"thinking": true})").thinking);
    EXPECT_THROW(parse(R"(, "reasoning_effort": "extreme")"), ApiError);
    EXPECT_THROW(parse(R"(, "tool_choice": "required")"), ApiError);
    EXPECT_TRUE(parse(R"(, "tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": "none")").tools.empty());
    EXPECT_EQ(parse(R"(, "messages": [{"role": "developer", "content": "d"}, {"role": "user", "content": "u"}])")
                  .messages[0].role,
              ChatMessage::Role::System);
}

TEST(RequestMapping, ResponsesItemsBecomeTemplateTurns) {
    auto ep = openai_responses_endpoint();
    json body = json::parse(R"({"model": "m", "instructions": "be good", "input": [
        {"role": "user", "content": [{"type": "input_text", "text": "q"}]},
        {"type": "reasoning", "content": [{"type": "reasoning_text", "text": "hmm"}]},
        {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{\"a\": 1}"},
        {"type": "function_call_output", "call_id": "c", "output": "42"}]})");
    GenRequest g = ep->parse(body, RequestLimits{});
    ASSERT_EQ(g.messages.size(), 4u);
    EXPECT_EQ(g.messages[0].content, "be good");
    EXPECT_EQ(g.messages[2].role, ChatMessage::Role::Assistant);
    EXPECT_EQ(g.messages[2].reasoning, "hmm");
    EXPECT_EQ(g.messages[2].tool_calls.at(0).name, "f");
    EXPECT_EQ(g.messages[3].role, ChatMessage::Role::Tool);
    EXPECT_EQ(g.messages[3].content, "42");
    body["input"][2]["arguments"] = "not json";
    try {
        ep->parse(body, RequestLimits{});
        FAIL();
    } catch (const ApiError& e) {
        EXPECT_EQ(e.param, "input[2].arguments");
    }
}
