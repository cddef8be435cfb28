#include "server/api_error.h"

namespace dsv4::server {

int http_status(ErrorKind kind) {
    switch (kind) {
        case ErrorKind::InvalidRequest: return 400;
        case ErrorKind::Authentication: return 401;
        case ErrorKind::NotFound: return 404;
        case ErrorKind::MethodNotAllowed: return 405;
        case ErrorKind::TooLarge: return 413;
        case ErrorKind::Overloaded: return 503;
        case ErrorKind::Timeout: return 504;
        case ErrorKind::Internal: return 500;
    }
    return 500;
}

void bad_request(const std::string& message, const std::string& param, const std::string& code) {
    throw ApiError(ErrorKind::InvalidRequest, message, param, code);
}

std::string error_type(ErrorKind kind, Dialect d) {
    // Anthropic documents one type per status; OpenAI puts most client errors under
    // invalid_request_error and tells them apart by "code".
    if (d == Dialect::Anthropic) {
        switch (kind) {
            case ErrorKind::InvalidRequest: return "invalid_request_error";
            case ErrorKind::Authentication: return "authentication_error";
            case ErrorKind::NotFound: return "not_found_error";
            case ErrorKind::MethodNotAllowed: return "invalid_request_error";
            case ErrorKind::TooLarge: return "request_too_large";
            case ErrorKind::Overloaded: return "overloaded_error";
            case ErrorKind::Timeout: return "timeout_error";
            case ErrorKind::Internal: return "api_error";
        }
        return "api_error";
    }
    switch (kind) {
        case ErrorKind::InvalidRequest:
        case ErrorKind::NotFound:
        case ErrorKind::MethodNotAllowed:
        case ErrorKind::TooLarge: return "invalid_request_error";
        case ErrorKind::Authentication: return "authentication_error";
        case ErrorKind::Overloaded: return "server_overloaded";
        case ErrorKind::Timeout: return "timeout";
        case ErrorKind::Internal: return "server_error";
    }
    return "server_error";
}

nlohmann::json error_body(const ApiError& e, Dialect d) {
    using nlohmann::json;
    if (d == Dialect::Anthropic)
        return json{{"type", "error"}, {"error", {{"type", error_type(e.kind, d)}, {"message", e.what()}}}};
    json err{{"message", e.what()},
             {"type", error_type(e.kind, d)},
             {"param", e.param.empty() ? json(nullptr) : json(e.param)},
             {"code", e.code.empty() ? json(nullptr) : json(e.code)}};
    return json{{"error", err}};
}

}  // namespace dsv4::server
