// The server's parts, shared by server.cpp (routes, errors, info endpoints) and
// generation_route.cpp (the generation endpoints). Not for use outside src/server/.
#pragma once
#include <httplib.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <memory>
#include <thread>

#include "server/endpoint.h"
#include "server/metrics.h"
#include "server/scheduler.h"
#include "server/server.h"

namespace dsv4::server {

struct Server::Impl {
    Impl(const Model& m, const Tokenizer& t, ServerOptions o);

    const Model& model;
    const Tokenizer& tok;
    ServerOptions opt;
    int64_t ctx = 0;
    Metrics metrics;
    Scheduler scheduler;
    httplib::Server http;
    std::thread listener;
    std::atomic<bool> listening{false};
    std::mutex done_m;
    std::condition_variable done_cv;
    bool listener_done = false;  // listen_after_bind returned
    int bound_port = -1;
    std::unique_ptr<Endpoint> chat, completions, messages, responses;

    void routes();
    // The shared path of every generation endpoint: parse, tokenize, queue, answer.
    void generation(const Endpoint& ep, const httplib::Request& req, httplib::Response& res);
    void count_tokens(const httplib::Request& req, httplib::Response& res);
    // 404 with the served names unless name is the model or an alias.
    void check_model(const std::string& name) const;
    void send_error(httplib::Response& res, const ApiError& e, Dialect d) const;
};

// Which error shape a path answers in.
Dialect dialect_of(const std::string& path);
// When the request being handled on this thread arrived (set before routing).
Clock::time_point request_arrival();
// Figures of the generation answered on this thread, for its request log line.
void note_generation(const ServerTimings& t);

}  // namespace dsv4::server
