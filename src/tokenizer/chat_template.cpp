// render_chat follows deepseek-ai-DeepSeek-V4.jinja statement by statement; the comments name
// the template's variables so the two can be read side by side.
#include "tokenizer/chat_template.h"

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "tokenizer/py_json.h"

namespace dsv4 {
namespace {

using Role = ChatMessage::Role;
using nlohmann::ordered_json;

const std::string kDsmlS(kDsml);
const std::string kThinkStartS(kThinkStart);
const std::string kThinkEndS(kThinkEnd);

const std::string kReasoningEffortMax =
    "Reasoning Effort: Absolute maximum with no shortcuts permitted.\n"
    "You MUST be very thorough in your thinking and comprehensively decompose the problem to resolve the root "
    "cause, rigorously stress-testing your logic against all potential paths, edge cases, and adversarial "
    "scenarios.\n"
    "Explicitly write out your entire deliberation process, documenting every intermediate step, considered "
    "alternative, and rejected hypothesis to ensure absolutely no assumption is left unchecked.\n\n";

const std::string kResponseFormatHeader =
    "## Response Format:\n\nYou MUST strictly adhere to the following schema to reply:\n";

const std::string kToolsHeader =
    "## Tools\n\nYou have access to a set of tools to help answer the user's question. You can invoke tools by "
    "writing a \"<" + kDsmlS + "tool_calls>\" block like the following:\n\n"
    "<" + kDsmlS + "tool_calls>\n"
    "<" + kDsmlS + "invoke name=\"$TOOL_NAME\">\n"
    "<" + kDsmlS + "parameter name=\"$PARAMETER_NAME\" string=\"true|false\">$PARAMETER_VALUE</" + kDsmlS + "parameter>\n"
    "...\n"
    "</" + kDsmlS + "invoke>\n"
    "<" + kDsmlS + "invoke name=\"$TOOL_NAME2\">\n"
    "...\n"
    "</" + kDsmlS + "invoke>\n"
    "</" + kDsmlS + "tool_calls>\n\n"
    "String parameters should be specified as is and set `string=\"true\"`. For all other types (numbers, "
    "booleans, arrays, objects), pass the value in JSON format and set `string=\"false\"`.\n\n"
    "If thinking_mode is enabled (triggered by " + kThinkStartS + "), you MUST output your complete reasoning "
    "inside " + kThinkStartS + "..." + kThinkEndS + " BEFORE any tool calls or final response.\n\n"
    "Otherwise, output directly after " + kThinkEndS + " with tool calls or final response.\n\n"
    "### Available Tool Schemas\n\n";

const std::string kToolsFooter =
    "\nYou MUST strictly follow the above defined tool name and parameter schemas to invoke tool calls.\n";

ordered_json parse_json(const std::string& text, const std::string& what) {
    try {
        return ordered_json::parse(text);
    } catch (const ordered_json::exception& e) {
        fail("chat template: ", what, " is not valid JSON: ", e.what());
    }
}

// ns.system_prompt: the system turns joined by "\n\n", then tool schemas and response format.
std::string system_prompt(const std::vector<ChatMessage>& messages, const ChatOptions& o, bool& has_tools) {
    std::string sp;
    bool first = true;
    for (const ChatMessage& m : messages) {
        if (m.role != Role::System) continue;
        sp += first ? m.content : "\n\n" + m.content;
        first = false;
    }
    has_tools = false;
    if (!o.tools.empty()) {
        const ordered_json tools = parse_json(o.tools, "tools");
        if (!tools.is_array()) fail("chat template: tools must be a JSON array");
        if (!tools.empty()) {
            has_tools = true;
            std::string schemas;
            for (const ordered_json& t : tools) {
                if (!t.is_object() || t.value("type", "") != "function") continue;
                if (!t.contains("function")) fail("chat template: a function tool has no \"function\" member");
                schemas += python_json(t["function"]) + "\n";
            }
            sp = (sp.empty() ? "" : sp + "\n\n") + kToolsHeader + schemas + kToolsFooter;
        }
    }
    if (!o.response_format.empty()) {
        if (!sp.empty()) sp += "\n\n";
        sp += kResponseFormatHeader + python_json(parse_json(o.response_format, "response_format"));
    }
    return sp;
}

void render_tool_calls(const std::vector<ToolCall>& calls, std::string& out) {
    out += "\n\n<" + kDsmlS + "tool_calls>\n";
    for (const ToolCall& call : calls) {
        out += "<" + kDsmlS + "invoke name=\"" + call.name + "\">\n";
        const ordered_json args = parse_json(call.arguments, "the arguments of tool call '" + call.name + "'");
        if (!args.is_object()) fail("chat template: the arguments of tool call '", call.name, "' are not a JSON object");
        for (const auto& [key, val] : args.items()) {
            const bool is_string = val.is_string();
            out += "<" + kDsmlS + "parameter name=\"" + key + "\" string=\"" + (is_string ? "true" : "false") + "\">";
            out += is_string ? val.get<std::string>() : python_json(val);
            out += "</" + kDsmlS + "parameter>\n";
        }
        if (args.empty()) out += "\n";
        out += "</" + kDsmlS + "invoke>\n";
    }
    out += "</" + kDsmlS + "tool_calls>";
}

}  // namespace

ChatMessage::Role parse_role(std::string_view role) {
    if (role == "system") return Role::System;
    if (role == "developer") return Role::Developer;
    if (role == "user") return Role::User;
    if (role == "assistant") return Role::Assistant;
    if (role == "tool") return Role::Tool;
    fail("chat template: unknown role '", role, "' (system, developer, user, assistant or tool)");
}

std::string render_chat(const std::vector<ChatMessage>& messages, const ChatOptions& o) {
    bool has_tools = false;
    const std::string sp = system_prompt(messages, o, has_tools);

    std::string out = o.bos;
    if (!messages.empty() && o.thinking && o.reasoning_effort == "max") out += kReasoningEffortMax;
    out += sp;

    // last_user_idx, and ns.has_tool_calls (any tool result at all).
    long last_user = -1;
    bool has_tool_results = false;
    for (size_t i = 0; i < messages.size(); ++i) {
        const Role r = messages[i].role;
        if (r == Role::User || r == Role::Developer || r == Role::Tool) last_user = long(i);
        if (r == Role::Tool) has_tool_results = true;
    }

    bool in_user = false;  // state.in_user: system turns do not interrupt a user turn
    for (size_t i = 0; i < messages.size(); ++i) {
        const ChatMessage& m = messages[i];
        switch (m.role) {
            case Role::System:
                break;
            case Role::User:
            case Role::Developer:
            case Role::Tool:
                out += in_user ? std::string("\n\n") : std::string(kUserText);
                in_user = true;
                out += m.role == Role::Tool ? "<tool_result>" + m.content + "</tool_result>" : m.content;
                break;
            case Role::Assistant: {
                in_user = false;
                out += kAssistantText;
                const bool after_last_user = long(i) > last_user;
                const bool keep_reasoning =
                    o.thinking && (!o.drop_thinking || has_tools || after_last_user || has_tool_results);
                out += keep_reasoning ? kThinkStartS + m.reasoning + kThinkEndS : kThinkEndS;
                out += m.content;
                if (!m.tool_calls.empty()) render_tool_calls(m.tool_calls, out);
                out += kEosText;
                break;
            }
        }
    }
    if (o.add_generation_prompt) {
        out += kAssistantText;
        out += o.thinking ? kThinkStart : kThinkEnd;
    }
    return out;
}

}  // namespace dsv4
