// A generation request after parsing, the same for every API dialect: what to render into the
// prompt, how to sample, and how to answer (stream or not). The dialect files fill it from their
// JSON; prompt.h turns it into tokens; the scheduler runs it; the dialect answers from GenResult.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/generator.h"
#include "runtime/sampler.h"
#include "server/dsml_parser.h"
#include "server/timings.h"
#include "tokenizer/chat_template.h"

namespace dsv4::server {

struct GenRequest {
    enum class Kind { Chat, Text };
    Kind kind = Kind::Chat;
    std::string model;

    // Kind::Chat: rendered by the V4 chat template.
    std::vector<ChatMessage> messages;
    std::string tools;            // JSON array of {"type": "function", "function": {...}}; "" for none
    std::string response_format;  // any JSON value; "" for none
    bool thinking = false;        // open a <think> block (reasoning is parsed out of the output)
    std::string reasoning_effort; // "max" adds the template's maximum-effort preamble
    std::string assistant_prefix; // Anthropic: a final assistant turn the reply continues

    // Kind::Text: a raw prompt (OpenAI /v1/completions).
    std::string prompt_text;
    std::optional<std::vector<int32_t>> prompt_tokens;  // the prompt given as token ids
    bool echo = false;                                   // prepend the prompt to the text

    std::optional<int64_t> max_tokens;  // absent: the server's default
    SamplingParams sampling;
    bool seed_given = false;            // else the server draws a seed
    std::vector<std::string> stop;
    bool ignore_eos = false;            // llama.cpp's extension: generate past end-of-sequence
    bool stream = false;
    bool include_usage = false;  // OpenAI stream_options.include_usage

    // Request fields a dialect echoes in its response object (the Responses API does).
    nlohmann::json echo_fields = nlohmann::json::object();
};

// What a finished generation hands to the dialect that answers.
struct GenResult {
    std::string text;       // the generated text as streamed (completions answer with it)
    ParsedOutput output;    // chat: reasoning, visible text and tool calls parsed out of text
    StopReason stop = StopReason::Length;
    std::string stop_string;  // which stop string ended it
    int64_t prompt_tokens = 0;
    int64_t cached_tokens = 0;
    int64_t completion_tokens = 0;
    ServerTimings timings;
};

// Identity of one response.
struct ResponseMeta {
    std::string id;       // "chatcmpl-...", "msg_...", "resp_..."
    int64_t created = 0;  // unix seconds
    std::string model;    // the model name the client asked for
};

// Server-wide defaults and bounds the parsers apply.
struct RequestLimits {
    int64_t default_max_tokens = 4096;   // when a request names none (and the API allows that)
    int64_t max_tokens_limit = 1 << 20;  // the context length
    SamplingParams sampling;             // defaults for what a request leaves out
    bool thinking = false;               // default of chat requests that do not say
};

}  // namespace dsv4::server
