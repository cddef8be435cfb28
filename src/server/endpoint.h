// One API shape (OpenAI chat completions, OpenAI completions, Anthropic messages, OpenAI
// responses): how its request JSON becomes a GenRequest, and how a generation is answered,
// whole or streamed. The HTTP side (generation_route.cpp) is the same for all of them.
#pragma once
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "server/api_error.h"
#include "server/dsml_parser.h"
#include "server/gen_request.h"

namespace dsv4::server {

using nlohmann::json;

// The events of one streamed response, as SSE text ready to write.
class StreamEncoder {
public:
    virtual ~StreamEncoder() = default;
    // Sent as soon as the request is admitted (the role chunk, message_start, response.created);
    // `admitted` has the prompt's token counts (prompt_tokens, cached_tokens) and nothing else yet.
    virtual std::string start(const GenResult& admitted) = 0;
    // One piece of parsed output (reasoning, text, a complete tool call).
    virtual std::string event(const OutputEvent& e) = 0;
    // The closing events: finish reason, usage, timings, the end marker.
    virtual std::string finish(const GenResult& r) = 0;
    // An error after the stream has started (the status line is long gone).
    virtual std::string error(const ApiError& e) = 0;
    // Sent while nothing else is (a long prefill): keeps proxies from timing out.
    virtual std::string keepalive() { return ": keep-alive\n\n"; }
};

class Endpoint {
public:
    virtual ~Endpoint() = default;
    virtual Dialect dialect() const = 0;
    virtual const char* id_prefix() const = 0;  // "chatcmpl-", "cmpl-", "msg_", "resp_"
    // Throws ApiError (400) naming the first field that is wrong.
    virtual GenRequest parse(const json& body, const RequestLimits& limits) const = 0;
    virtual json body(const GenRequest& g, const GenResult& r, const ResponseMeta& m) const = 0;
    virtual std::unique_ptr<StreamEncoder> stream(const GenRequest& g, const ResponseMeta& m) const = 0;
};

std::unique_ptr<Endpoint> openai_chat_endpoint();
std::unique_ptr<Endpoint> openai_completions_endpoint();
std::unique_ptr<Endpoint> anthropic_messages_endpoint();
std::unique_ptr<Endpoint> openai_responses_endpoint();

// OpenAI's finish_reason for a result: "tool_calls" when the output has calls, "length" for a
// max_tokens or context stop, else "stop".
std::string openai_finish_reason(const GenResult& r);

// A random id with the prefix ("call_...", "toolu_...") for responses and tool calls.
std::string random_id(const std::string& prefix);

}  // namespace dsv4::server
