// Server-sent events framing (the WHATWG EventSource format both SDKs parse): an optional
// "event:" line, the payload as "data:" lines (one per line of the payload, so a newline in it
// cannot end the event early), and a blank line.
#pragma once
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace dsv4::server {

// One event; event = "" writes no event line (OpenAI chat/completions chunks).
std::string sse_event(std::string_view event, std::string_view data);
std::string sse_json(std::string_view event, const nlohmann::json& data);
// The end-of-stream marker of OpenAI's chat and completions streams.
inline constexpr std::string_view kSseDone = "data: [DONE]\n\n";

}  // namespace dsv4::server
