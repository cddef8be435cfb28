// The DeepSeek-V4 prompt format. Each expected string is worked out by hand from llama.cpp's
// models/templates/deepseek-ai-DeepSeek-V4.jinja (and was checked against that template
// rendered by Jinja2 when written).
#include <gtest/gtest.h>

#include "core/error.h"
#include "tokenizer/chat_template.h"

using namespace dsv4;
using Role = ChatMessage::Role;

namespace {

ChatMessage msg(Role role, std::string content, std::string reasoning = "") {
    ChatMessage m;
    m.role = role;
    m.content = std::move(content);
    m.reasoning = std::move(reasoning);
    return m;
}

ChatOptions opts(bool thinking, bool generation_prompt = true) {
    ChatOptions o;
    o.thinking = thinking;
    o.add_generation_prompt = generation_prompt;
    return o;
}

}  // namespace

TEST(TokenizerChatTemplate, SingleUserTurnThinkingOffAndOn) {
    const std::vector<ChatMessage> m = {msg(Role::User, "Hello")};
    EXPECT_EQ(render_chat(m, opts(false)), "<｜begin▁of▁sentence｜><｜User｜>Hello<｜Assistant｜></think>");
    EXPECT_EQ(render_chat(m, opts(true)), "<｜begin▁of▁sentence｜><｜User｜>Hello<｜Assistant｜><think>");
    EXPECT_EQ(render_chat(m, opts(true, false)), "<｜begin▁of▁sentence｜><｜User｜>Hello");
}

TEST(TokenizerChatTemplate, EarlierAssistantTurnsDropTheirReasoning) {
    const std::vector<ChatMessage> m = {msg(Role::System, "You are terse."), msg(Role::User, "Hi"),
                                        msg(Role::Assistant, "Hello.", "greet"), msg(Role::User, "Bye")};
    EXPECT_EQ(render_chat(m, opts(true)),
              "<｜begin▁of▁sentence｜>You are terse.<｜User｜>Hi<｜Assistant｜></think>Hello.<｜end▁of▁sentence｜>"
              "<｜User｜>Bye<｜Assistant｜><think>");
    ChatOptions keep = opts(true);
    keep.drop_thinking = false;
    EXPECT_EQ(render_chat(m, keep),
              "<｜begin▁of▁sentence｜>You are terse.<｜User｜>Hi<｜Assistant｜><think>greet</think>Hello."
              "<｜end▁of▁sentence｜><｜User｜>Bye<｜Assistant｜><think>");
    EXPECT_EQ(render_chat(m, opts(false)),
              "<｜begin▁of▁sentence｜>You are terse.<｜User｜>Hi<｜Assistant｜></think>Hello.<｜end▁of▁sentence｜>"
              "<｜User｜>Bye<｜Assistant｜></think>");
}

TEST(TokenizerChatTemplate, SystemTurnsJoinAndTheLastAnswerKeepsReasoning) {
    const std::vector<ChatMessage> m = {msg(Role::System, "S1"), msg(Role::System, "S2"), msg(Role::User, "Q1"),
                                        msg(Role::Assistant, "A1", "R1"), msg(Role::User, "Q2"),
                                        msg(Role::Assistant, "A2", "R2")};
    EXPECT_EQ(render_chat(m, opts(true, false)),
              "<｜begin▁of▁sentence｜>S1\n\nS2<｜User｜>Q1<｜Assistant｜></think>A1<｜end▁of▁sentence｜><｜User｜>Q2"
              "<｜Assistant｜><think>R2</think>A2<｜end▁of▁sentence｜>");
    // An empty first system turn still counts as the first.
    EXPECT_EQ(render_chat({msg(Role::System, ""), msg(Role::System, "second"), msg(Role::User, "")}, opts(false)),
              "<｜begin▁of▁sentence｜>\n\nsecond<｜User｜><｜Assistant｜></think>");
}

TEST(TokenizerChatTemplate, ToolCallsAndResults) {
    ChatMessage call = msg(Role::Assistant, "", "need tool");
    call.tool_calls = {{"get_weather", R"({"city": "Paris", "days": 3, "units": {"t": "C"}, "ok": true, "list": [1, "two"]})"}};
    const std::vector<ChatMessage> m = {msg(Role::User, "Weather in Paris?"), call, msg(Role::Tool, R"({"temp": 21})"),
                                        msg(Role::Tool, "second")};
    ChatOptions o = opts(true);
    o.tools = R"([{"type": "function", "function": {"name": "get_weather", "description": "Get the weather \"now\"\nfor a city – café",
                   "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                   "required": ["city"]}}}, {"type": "retrieval"}])";
    const std::string expected =
        "<｜begin▁of▁sentence｜>## Tools\n\nYou have access to a set of tools to help answer the user's question. You "
        "can invoke tools by writing a \"<｜DSML｜tool_calls>\" block like the following:\n\n<｜DSML｜tool_calls>\n"
        "<｜DSML｜invoke name=\"$TOOL_NAME\">\n<｜DSML｜parameter name=\"$PARAMETER_NAME\" string=\"true|false\">"
        "$PARAMETER_VALUE</｜DSML｜parameter>\n...\n</｜DSML｜invoke>\n<｜DSML｜invoke name=\"$TOOL_NAME2\">\n...\n"
        "</｜DSML｜invoke>\n</｜DSML｜tool_calls>\n\nString parameters should be specified as is and set "
        "`string=\"true\"`. For all other types (numbers, booleans, arrays, objects), pass the value in JSON format "
        "and set `string=\"false\"`.\n\nIf thinking_mode is enabled (triggered by <think>), you MUST output your "
        "complete reasoning inside <think>...</think> BEFORE any tool calls or final response.\n\nOtherwise, output "
        "directly after </think> with tool calls or final response.\n\n### Available Tool Schemas\n\n"
        "{\"name\": \"get_weather\", \"description\": \"Get the weather \\\"now\\\"\\nfor a city – café\", "
        "\"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}, \"days\": "
        "{\"type\": \"integer\"}}, \"required\": [\"city\"]}}\n\nYou MUST strictly follow the above defined tool "
        "name and parameter schemas to invoke tool calls.\n"
        "<｜User｜>Weather in Paris?<｜Assistant｜><think>need tool</think>\n\n<｜DSML｜tool_calls>\n"
        "<｜DSML｜invoke name=\"get_weather\">\n"
        "<｜DSML｜parameter name=\"city\" string=\"true\">Paris</｜DSML｜parameter>\n"
        "<｜DSML｜parameter name=\"days\" string=\"false\">3</｜DSML｜parameter>\n"
        "<｜DSML｜parameter name=\"units\" string=\"false\">{\"t\": \"C\"}</｜DSML｜parameter>\n"
        "<｜DSML｜parameter name=\"ok\" string=\"false\">true</｜DSML｜parameter>\n"
        "<｜DSML｜parameter name=\"list\" string=\"false\">[1, \"two\"]</｜DSML｜parameter>\n"
        "</｜DSML｜invoke>\n</｜DSML｜tool_calls><｜end▁of▁sentence｜>"
        "<｜User｜><tool_result>{\"temp\": 21}</tool_result>\n\n<tool_result>second</tool_result><｜Assistant｜><think>";
    EXPECT_EQ(render_chat(m, o), expected);
}

TEST(TokenizerChatTemplate, ToolResultsJoinUserTurnsAndSystemTurnsDoNotSplitThem) {
    ChatMessage call = msg(Role::Assistant, "");
    call.tool_calls = {{"noargs", "{}"}, {"two", R"({"a": 1.5, "b": null})"}};
    const std::vector<ChatMessage> m = {msg(Role::User, "Q"), call, msg(Role::Tool, "r1"), msg(Role::User, "thanks"),
                                        msg(Role::System, "late system"), msg(Role::Developer, "dev note")};
    EXPECT_EQ(render_chat(m, opts(false)),
              "<｜begin▁of▁sentence｜>late system<｜User｜>Q<｜Assistant｜></think>\n\n<｜DSML｜tool_calls>\n"
              "<｜DSML｜invoke name=\"noargs\">\n\n</｜DSML｜invoke>\n<｜DSML｜invoke name=\"two\">\n"
              "<｜DSML｜parameter name=\"a\" string=\"false\">1.5</｜DSML｜parameter>\n"
              "<｜DSML｜parameter name=\"b\" string=\"false\">null</｜DSML｜parameter>\n</｜DSML｜invoke>\n"
              "</｜DSML｜tool_calls><｜end▁of▁sentence｜><｜User｜><tool_result>r1</tool_result>\n\nthanks\n\ndev note"
              "<｜Assistant｜></think>");
}

TEST(TokenizerChatTemplate, ReasoningEffortMaxAndResponseFormat) {
    ChatOptions o = opts(true);
    o.reasoning_effort = "max";
    EXPECT_EQ(render_chat({msg(Role::System, "Sys"), msg(Role::User, "Solve")}, o),
              "<｜begin▁of▁sentence｜>Reasoning Effort: Absolute maximum with no shortcuts permitted.\nYou MUST be very "
              "thorough in your thinking and comprehensively decompose the problem to resolve the root cause, rigorously "
              "stress-testing your logic against all potential paths, edge cases, and adversarial scenarios.\nExplicitly "
              "write out your entire deliberation process, documenting every intermediate step, considered alternative, "
              "and rejected hypothesis to ensure absolutely no assumption is left unchecked.\n\nSys<｜User｜>Solve"
              "<｜Assistant｜><think>");
    o.thinking = false;  // the prefix needs thinking
    EXPECT_EQ(render_chat({msg(Role::User, "Solve")}, o), "<｜begin▁of▁sentence｜><｜User｜>Solve<｜Assistant｜></think>");
    o.thinking = true;  // and at least one message
    EXPECT_EQ(render_chat({}, o), "<｜begin▁of▁sentence｜><｜Assistant｜><think>");

    ChatOptions f = opts(false);
    f.response_format = R"({"type": "json_object"})";
    f.tools = "[]";  // an empty tool list is no tools
    EXPECT_EQ(render_chat({msg(Role::System, "Sys"), msg(Role::User, "JSON please")}, f),
              "<｜begin▁of▁sentence｜>Sys\n\n## Response Format:\n\nYou MUST strictly adhere to the following schema to "
              "reply:\n{\"type\": \"json_object\"}<｜User｜>JSON please<｜Assistant｜></think>");
}

TEST(TokenizerChatTemplate, AssistantPrefillAndCustomBos) {
    ChatOptions o = opts(true);
    o.bos = "";
    EXPECT_EQ(render_chat({msg(Role::Assistant, "prefill")}, o),
              "<｜Assistant｜><think></think>prefill<｜end▁of▁sentence｜><｜Assistant｜><think>");
}

TEST(TokenizerChatTemplate, RolesAndBadJsonAreErrors) {
    EXPECT_EQ(parse_role("system"), Role::System);
    EXPECT_EQ(parse_role("developer"), Role::Developer);
    EXPECT_EQ(parse_role("user"), Role::User);
    EXPECT_EQ(parse_role("assistant"), Role::Assistant);
    EXPECT_EQ(parse_role("tool"), Role::Tool);
    EXPECT_THROW(parse_role("narrator"), Error);
    ChatOptions o;
    o.tools = "[{";
    EXPECT_THROW(render_chat({msg(Role::User, "x")}, o), Error);
    o.tools = R"({"type": "function"})";
    EXPECT_THROW(render_chat({msg(Role::User, "x")}, o), Error);
    ChatMessage call = msg(Role::Assistant, "");
    call.tool_calls = {{"f", "[1, 2]"}};
    EXPECT_THROW(render_chat({msg(Role::User, "x"), call}), Error);
    call.tool_calls = {{"f", "not json"}};
    EXPECT_THROW(render_chat({msg(Role::User, "x"), call}), Error);
}
