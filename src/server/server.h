// dsv4 serve's HTTP server: OpenAI- and Anthropic-compatible endpoints over one loaded model.
//
//   GET  /health, /metrics (Prometheus text), /v1/models, /v1/models/{id}
//   POST /v1/chat/completions, /v1/completions, /v1/responses      (OpenAI shapes)
//   POST /v1/messages, /v1/messages/count_tokens                    (Anthropic shapes)
//
// Requests are parsed and tokenized on the HTTP threads, then queued to the scheduler, which
// runs up to `parallel` sessions at once with a prefix cache between requests. docs/SERVER.md
// documents the behaviour clients see.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "model/model.h"
#include "server/gen_request.h"
#include "server/scheduler.h"
#include "tokenizer/tokenizer.h"

namespace dsv4::server {

struct ServerOptions {
    std::string host = "127.0.0.1";
    int port = 8080;                   // 0: any free port (start() returns it)
    std::string model_name;            // the id clients name in "model" (required)
    std::vector<std::string> aliases;  // other names accepted as this model
    std::string api_key;               // "": no authentication
    int64_t ctx = 0;                   // context length; 0: the model's (1 Mi tokens when it has none)
    RequestLimits limits;              // max_tokens_limit is set to the context length
    double timeout_s = 600;            // per request, from arrival to the last token
    size_t max_body_bytes = size_t(32) << 20;
    int http_threads = 0;              // 0: enough for every running and queued request, plus some
    SchedulerOptions scheduler;
    // One line per request answered; empty: no request log.
    std::function<void(const std::string&)> log;
};

class Server {
public:
    // Validates the options (UsageError naming the option) and starts the scheduler's workers.
    Server(const Model& model, const Tokenizer& tok, ServerOptions options);
    ~Server();  // stop()
    Server(const Server&) = delete;
    Server& operator=(const Server&) = delete;

    // Binds and serves on a background thread; returns the port. Throws Error when the address
    // cannot be bound.
    int start();
    // Cancels running generations, refuses queued ones, stops listening and joins. Idempotent.
    void stop();
    // Blocks until the listener has stopped (after stop(), from another thread or a signal).
    void wait();

    int port() const;
    int64_t ctx() const;

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace dsv4::server
