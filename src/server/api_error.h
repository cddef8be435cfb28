// Errors a request can end with, and how each API dialect writes them: OpenAI as
// {"error": {"message", "type", "param", "code"}}, Anthropic as
// {"type": "error", "error": {"type", "message"}}. Handlers throw ApiError; the router turns it
// into the status and body of the request's own dialect.
#pragma once
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

namespace dsv4::server {

enum class Dialect { OpenAI, Anthropic };

// What went wrong, independent of dialect; each maps to one HTTP status.
enum class ErrorKind {
    InvalidRequest,  // 400: malformed JSON, missing or mistyped field, value out of range
    Authentication,  // 401: missing or wrong API key
    NotFound,        // 404: unknown model or route
    MethodNotAllowed,// 405
    TooLarge,        // 413: body over the payload limit
    Overloaded,      // 503: queue full, memory admission refused
    Timeout,         // 504: the request ran past its timeout
    Internal,        // 500: a failure inside the engine
};

int http_status(ErrorKind kind);

struct ApiError : std::runtime_error {
    ErrorKind kind;
    std::string param;  // the offending field ("messages[2].content"), "" when none
    std::string code;   // OpenAI's machine-readable code ("model_not_found"), "" when none

    ApiError(ErrorKind k, const std::string& message, std::string param_ = {}, std::string code_ = {})
        : std::runtime_error(message), kind(k), param(std::move(param_)), code(std::move(code_)) {}
    int status() const { return http_status(kind); }
};

// 400 naming the field.
[[noreturn]] void bad_request(const std::string& message, const std::string& param = {},
                              const std::string& code = {});

// The error body in the dialect's shape.
nlohmann::json error_body(const ApiError& e, Dialect d);
// The "type" string the dialect uses for this kind (for SSE error events too).
std::string error_type(ErrorKind kind, Dialect d);

}  // namespace dsv4::server
