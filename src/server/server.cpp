#include "server/server.h"

#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>

#include "core/error.h"
#include "runtime/admission.h"
#include "server/json_fields.h"
#include "server/server_impl.h"

namespace dsv4::server {

namespace {

// httplib runs pre-routing, the handler, the response writing and the logger of one request on
// one thread, so the arrival time can wait here for the logger.
thread_local Clock::time_point t_arrival;
thread_local std::string t_note;  // the generation's figures, for the log line

// Known routes keep their own label in the metrics; anything else is "other" (a scanner hitting
// random paths must not grow the label set).
std::string endpoint_label(const std::string& path) {
    for (const char* p : {"/v1/chat/completions", "/v1/completions", "/v1/messages", "/v1/messages/count_tokens",
                          "/v1/responses", "/v1/models", "/health", "/metrics"})
        if (path == p) return p;
    if (path.rfind("/v1/models/", 0) == 0) return "/v1/models/{id}";
    return "other";
}

int64_t context_of(const Model& m, int64_t asked) {
    const int64_t model_ctx = m.config().max_positions > 0 ? m.config().max_positions : int64_t(1) << 20;
    if (asked < 0) throw UsageError(cat("--ctx ", asked, " is negative"));
    if (asked > model_ctx) throw UsageError(cat("--ctx ", asked, " is more than the model's context length ", model_ctx));
    return asked > 0 ? asked : model_ctx;
}

ServerOptions checked(ServerOptions o) {
    if (o.model_name.empty()) throw UsageError("the server needs a model name");
    if (o.timeout_s <= 0) throw UsageError(cat("--timeout ", o.timeout_s, " must be positive"));
    if (o.port < 0 || o.port > 65535) throw UsageError(cat("--port ", o.port, " is not a TCP port"));
    if (o.max_body_bytes < 1024) throw UsageError("the body limit must be at least 1 KiB");
    o.limits.sampling.validate();
    return o;
}

}  // namespace

Clock::time_point request_arrival() { return t_arrival; }

void note_generation(const ServerTimings& t) {
    char buf[256];
    std::snprintf(buf, sizeof buf, " | prompt %lld (cached %lld), prefill %.1f tok/s | %lld tokens, decode %.1f tok/s | stop %s",
                  (long long)t.prompt_tokens, (long long)t.cached_tokens, t.prefill_tok_s(),
                  (long long)t.generated_tokens, t.decode_tok_s(), t.stop.c_str());
    t_note = buf;
}

Dialect dialect_of(const std::string& path) {
    return path.rfind("/v1/messages", 0) == 0 ? Dialect::Anthropic : Dialect::OpenAI;
}

Server::Impl::Impl(const Model& m, const Tokenizer& t, ServerOptions o)
    : model(m),
      tok(t),
      opt(checked(std::move(o))),
      ctx(context_of(m, opt.ctx)),
      scheduler(m, t, opt.scheduler, metrics),
      chat(openai_chat_endpoint()),
      completions(openai_completions_endpoint()),
      messages(anthropic_messages_endpoint()),
      responses(openai_responses_endpoint()) {
    opt.limits.max_tokens_limit = ctx;
    opt.limits.default_max_tokens = std::min(opt.limits.default_max_tokens, ctx);
    routes();
}

void Server::Impl::send_error(httplib::Response& res, const ApiError& e, Dialect d) const {
    res.status = e.status();
    res.set_content(error_body(e, d).dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
}

void Server::Impl::check_model(const std::string& name) const {
    if (name == opt.model_name) return;
    for (const std::string& a : opt.aliases)
        if (name == a) return;
    throw ApiError(ErrorKind::NotFound,
                   cat("model '", name, "' is not served here; this server serves '", opt.model_name,
                       "' (GET /v1/models lists it)"),
                   "model", "model_not_found");
}

void Server::Impl::routes() {
    const int threads = opt.http_threads > 0 ? opt.http_threads : opt.scheduler.parallel + opt.scheduler.max_queue + 16;
    http.new_task_queue = [threads] { return new httplib::ThreadPool(size_t(threads)); };
    http.set_payload_max_length(opt.max_body_bytes);
    http.set_keep_alive_max_count(1000);
    // Streams write as tokens come; a client that stops reading for this long is gone.
    http.set_write_timeout(30, 0);
    http.set_default_headers({{"Access-Control-Allow-Origin", "*"}});

    http.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
        t_arrival = Clock::now();
        if (req.method == "OPTIONS") {  // CORS preflight of browser-based clients
            res.set_header("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
            res.set_header("Access-Control-Allow-Headers", "*");
            res.status = 204;
            return httplib::Server::HandlerResponse::Handled;
        }
        if (opt.api_key.empty() || req.path == "/health") return httplib::Server::HandlerResponse::Unhandled;
        const std::string bearer = req.get_header_value("Authorization");
        const std::string key = req.get_header_value("x-api-key");
        if (bearer == "Bearer " + opt.api_key || key == opt.api_key) return httplib::Server::HandlerResponse::Unhandled;
        send_error(res,
                   ApiError(ErrorKind::Authentication,
                            bearer.empty() && key.empty()
                                ? "no API key: send 'Authorization: Bearer KEY' or 'x-api-key: KEY'"
                                : "the API key is not the one this server was started with",
                            "", "invalid_api_key"),
                   dialect_of(req.path));
        return httplib::Server::HandlerResponse::Handled;
    });

    // Errors httplib decides itself (no route, body too large, unreadable request) get the
    // API's JSON shape too; responses that already have a body are left alone.
    http.set_error_handler(httplib::Server::HandlerWithResponse([this](const httplib::Request& req, httplib::Response& res) {
        if (!res.body.empty() || res.content_provider_) return httplib::Server::HandlerResponse::Unhandled;
        ErrorKind k = res.status == 404   ? ErrorKind::NotFound
                      : res.status == 413 ? ErrorKind::TooLarge
                      : res.status == 405 ? ErrorKind::MethodNotAllowed
                      : res.status >= 500 ? ErrorKind::Internal
                                          : ErrorKind::InvalidRequest;
        std::string msg = res.status == 404 ? cat("no route for ", req.method, " ", req.path)
                          : res.status == 413 ? cat("the request body is larger than the server's limit of ",
                                                    opt.max_body_bytes, " bytes")
                                              : cat("HTTP ", res.status, " for ", req.method, " ", req.path);
        const int status = res.status;
        send_error(res, ApiError(k, msg), dialect_of(req.path));
        res.status = status;
        return httplib::Server::HandlerResponse::Handled;
    }));

    http.set_exception_handler([this](const httplib::Request& req, httplib::Response& res, std::exception_ptr ep) {
        std::string what = "unknown exception";
        try {
            std::rethrow_exception(ep);
        } catch (const std::exception& e) {
            what = e.what();
        } catch (...) {
        }
        send_error(res, ApiError(ErrorKind::Internal, "internal error: " + what), dialect_of(req.path));
    });

    // Runs after the error handler and before the response's first byte: the status is final.
    http.set_post_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
        metrics.answered(endpoint_label(req.path), res.status);
    });

    // Runs after the response's last byte (a stream's too).
    http.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
        const double s = std::chrono::duration<double>(Clock::now() - t_arrival).count();
        metrics.duration(s);
        if (opt.log) opt.log(cat(req.method, " ", req.path, " ", res.status, " ", int64_t(s * 1000), " ms", t_note));
        t_note.clear();
    });

    auto gen = [this](const Endpoint* ep) {
        return [this, ep](const httplib::Request& req, httplib::Response& res) { generation(*ep, req, res); };
    };
    http.Post("/v1/chat/completions", gen(chat.get()));
    http.Post("/v1/completions", gen(completions.get()));
    http.Post("/v1/messages", gen(messages.get()));
    http.Post("/v1/responses", gen(responses.get()));
    http.Post("/v1/messages/count_tokens",
              [this](const httplib::Request& req, httplib::Response& res) { count_tokens(req, res); });

    http.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
        json h{{"status", "ok"},
               {"model", opt.model_name},
               {"context_length", ctx},
               {"parallel", opt.scheduler.parallel},
               {"active", scheduler.active()},
               {"queue_depth", scheduler.queue_depth()}};
        res.set_content(h.dump(), "application/json");
    });
    http.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
        MetricsGauges g;
        g.queue_depth = scheduler.queue_depth();
        g.active_sessions = scheduler.active();
        g.parallel = opt.scheduler.parallel;
        g.cache_entries = int64_t(scheduler.cache_entries());
        g.cache_bytes = int64_t(scheduler.cache_bytes());
        g.cache_budget_bytes = int64_t(opt.scheduler.cache_bytes);
        g.cache_evictions = int64_t(scheduler.cache_evictions());
        g.resident_bytes = Metrics::resident_bytes();
        g.available_bytes = int64_t(available_host_memory());
        res.set_content(metrics.render(g), "text/plain; version=0.0.4; charset=utf-8");
    });
    // One entry with both APIs' fields: OpenAI's (object, owned_by, created) and Anthropic's
    // (type, display_name, created_at), so both SDKs' models.list() read it.
    auto model_entry = [this](const std::string& id) {
        return json{{"id", id},
                    {"object", "model"},
                    {"created", 0},
                    {"owned_by", "dsv4"},
                    {"type", "model"},
                    {"display_name", id},
                    {"created_at", "1970-01-01T00:00:00Z"},
                    {"context_length", ctx}};
    };
    http.Get("/v1/models", [this, model_entry](const httplib::Request&, httplib::Response& res) {
        json data = json::array({model_entry(opt.model_name)});
        for (const std::string& a : opt.aliases) data.push_back(model_entry(a));
        json list{{"object", "list"}, {"data", data}, {"has_more", false},
                  {"first_id", opt.model_name}, {"last_id", data.back()["id"]}};
        res.set_content(list.dump(), "application/json");
    });
    http.Get(R"(/v1/models/(.+))", [this, model_entry](const httplib::Request& req, httplib::Response& res) {
        try {
            check_model(req.matches[1]);
            res.set_content(model_entry(req.matches[1]).dump(), "application/json");
        } catch (const ApiError& e) {
            send_error(res, e, Dialect::OpenAI);
        }
    });
    // The wrong method on a known path says so, instead of a bare 404.
    auto wrong_method = [this](const char* allowed) {
        return [this, allowed](const httplib::Request& req, httplib::Response& res) {
            res.set_header("Allow", allowed);
            send_error(res, ApiError(ErrorKind::MethodNotAllowed, cat(req.method, " ", req.path, " is not allowed; use ", allowed)),
                       dialect_of(req.path));
        };
    };
    for (const char* p : {"/v1/chat/completions", "/v1/completions", "/v1/messages", "/v1/messages/count_tokens",
                          "/v1/responses"})
        http.Get(p, wrong_method("POST"));
    for (const char* p : {"/health", "/metrics", "/v1/models"}) http.Post(p, wrong_method("GET"));
}

void Server::Impl::count_tokens(const httplib::Request& req, httplib::Response& res) {
    try {
        json body = parse_body(req.body);
        // count_tokens takes a Messages body without max_tokens.
        if (!body.contains("max_tokens")) body["max_tokens"] = 1;
        GenRequest g = messages->parse(body, opt.limits);
        check_model(g.model);
        std::vector<ChatMessage> msgs = g.messages;
        ChatOptions co;
        co.thinking = g.thinking;
        co.tools = g.tools;
        co.bos = tok.bos_id() >= 0 ? tok.token_text(tok.bos_id()) : "";
        std::string text;
        try {
            text = render_chat(msgs, co) + g.assistant_prefix;
        } catch (const Error& e) {
            bad_request(e.what(), "messages");
        }
        res.set_content(json{{"input_tokens", tok.encode(text, false, true).size()}}.dump(), "application/json");
    } catch (const ApiError& e) {
        send_error(res, e, Dialect::Anthropic);
    }
}

Server::Server(const Model& model, const Tokenizer& tok, ServerOptions options)
    : impl_(std::make_unique<Impl>(model, tok, std::move(options))) {}

Server::~Server() { stop(); }

int Server::start() {
    Impl& s = *impl_;
    if (s.listening.load()) return s.bound_port;
    if (s.opt.port == 0) {
        s.bound_port = s.http.bind_to_any_port(s.opt.host);
        if (s.bound_port < 0) fail("cannot listen on ", s.opt.host, ": ", std::strerror(errno));
    } else {
        if (!s.http.bind_to_port(s.opt.host, s.opt.port))
            fail("cannot listen on ", s.opt.host, ":", s.opt.port, ": ", std::strerror(errno),
                 " (is another server on that port? use --port)");
        s.bound_port = s.opt.port;
    }
    s.listening = true;
    s.listener = std::thread([&s] {
        s.http.listen_after_bind();
        std::lock_guard<std::mutex> lk(s.done_m);
        s.listener_done = true;
        s.done_cv.notify_all();
    });
    return s.bound_port;
}

void Server::stop() {
    Impl& s = *impl_;
    // Generations first: their handlers then return at once, so the HTTP threads can be joined.
    s.scheduler.shutdown();
    if (s.listening.exchange(false)) {
        s.http.stop();
        if (s.listener.joinable()) s.listener.join();
    }
}

void Server::wait() {
    Impl& s = *impl_;
    std::unique_lock<std::mutex> lk(s.done_m);
    s.done_cv.wait(lk, [&] { return s.listener_done || !s.listener.joinable(); });
}

int Server::port() const { return impl_->bound_port; }
int64_t Server::ctx() const { return impl_->ctx; }

}  // namespace dsv4::server
