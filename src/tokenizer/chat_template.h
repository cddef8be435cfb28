// The DeepSeek-V4 chat template, in one place: a conversation to the prompt string the model
// was trained on. It follows llama.cpp's models/templates/deepseek-ai-DeepSeek-V4.jinja:
//
//   BOS + [reasoning-effort prefix] + system text (+ tool schemas, response format)
//   + "<｜User｜>" + user text                      consecutive user/tool turns join with "\n\n";
//                                                   a tool result is "<tool_result>...</tool_result>"
//   + "<｜Assistant｜>" + "</think>" + content [+ DSML tool calls] + "<｜end▁of▁sentence｜>"
//                                                   (earlier turns: reasoning dropped)
//   + "<｜Assistant｜>" + ("<think>" if thinking else "</think>")     the generation prompt
//
// The string carries BOS as text, so encode it with add_bos = false and special tokens parsed.
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace dsv4 {

inline constexpr std::string_view kBosText = "<｜begin▁of▁sentence｜>";
inline constexpr std::string_view kEosText = "<｜end▁of▁sentence｜>";
inline constexpr std::string_view kUserText = "<｜User｜>";
inline constexpr std::string_view kAssistantText = "<｜Assistant｜>";
inline constexpr std::string_view kThinkStart = "<think>";
inline constexpr std::string_view kThinkEnd = "</think>";
inline constexpr std::string_view kDsml = "｜DSML｜";

struct ToolCall {
    std::string name;
    std::string arguments;  // a JSON object, as text (OpenAI's "arguments" string)
};

struct ChatMessage {
    enum class Role { System, Developer, User, Assistant, Tool };
    Role role = Role::User;
    std::string content;
    std::string reasoning;             // an assistant turn's reasoning_content
    std::vector<ToolCall> tool_calls;  // an assistant turn's calls
};

// "system", "developer", "user", "assistant", "tool"; throws dsv4::Error on anything else.
ChatMessage::Role parse_role(std::string_view role);

struct ChatOptions {
    bool thinking = false;
    bool add_generation_prompt = true;
    bool drop_thinking = true;     // drop the reasoning of turns before the last user turn
    std::string reasoning_effort;  // "max" prepends the fixed maximum-effort text (with thinking)
    std::string tools;             // a JSON array of {"type": "function", "function": {...}}; "" for none
    std::string response_format;   // any JSON value; "" for none
    std::string bos = std::string(kBosText);
};

// Throws dsv4::Error when tools, response_format or a tool call's arguments are not valid JSON
// of the expected shape.
std::string render_chat(const std::vector<ChatMessage>& messages, const ChatOptions& options = {});

}  // namespace dsv4
