// Request fields that several dialects share (sampling, stop strings, text content, thinking),
// parsed once with the same checks and the same error messages.
#pragma once
#include <string>
#include <vector>

#include "server/gen_request.h"
#include "server/json_fields.h"

namespace dsv4::server {

// A chat request with the server's defaults (sampling, thinking) and the required "model".
GenRequest chat_request(const Obj& o, const RequestLimits& lim);

// temperature (in [0, temp_max]), top_p, top_k, min_p, seed, and the llama.cpp-style extensions
// repeat_penalty / repeat_last_n / ignore_eos, over the server defaults already in g.sampling. OpenAI's
// presence/frequency penalties are additive, which this sampler does not do: a non-zero one is
// refused (naming repeat_penalty) instead of being silently ignored.
void parse_sampling(const Obj& o, GenRequest& g, double temp_max);

// A stop field: one string or an array of at most 16 non-empty strings.
std::vector<std::string> parse_stop(const Obj& o, std::string_view key);

// max_tokens-like field in [lo, limit.max_tokens_limit]; nullopt when absent.
std::optional<int64_t> parse_max_tokens(const Obj& o, std::string_view key, const RequestLimits& lim, int64_t lo = 1);

// Message content as text: a string, or an array of text parts ({"type": "text" | "input_text" |
// "output_text", "text": ...}) joined; null is "". Other part types (images, audio, files) are a
// 400 naming the part: this engine reads text only.
std::string content_text(const json& content, const std::string& path);

// A reasoning-effort word to (thinking, effort): "none"/"minimal" turn thinking off, "low",
// "medium", "high" on, "max"/"xhigh" on with the template's maximum-effort preamble.
void apply_reasoning_effort(const std::string& effort, const std::string& path, GenRequest& g);

// A function call of an earlier assistant turn: name (required) and its arguments string (absent
// or empty: "{}"), which must hold a JSON object. `o` is the object holding both fields (OpenAI
// chat's "function", a Responses "function_call" item).
ToolCall parse_function_call(const Obj& o);

// {"type": "function", "function": {"name", "description", "parameters"}} tools as the template
// wants them; `tools` is already that shape (OpenAI chat) and is checked here.
std::string check_function_tools(const json& tools, const std::string& path);

}  // namespace dsv4::server
