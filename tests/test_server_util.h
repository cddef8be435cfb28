// Shared by the in-process server tests: the fixture model (mini_flash with the byte-level test
// tokenizer, random weights: tests check shapes and invariants, never its words), a server on an
// ephemeral loopback port, JSON posts and an SSE parser.
#pragma once
#include <httplib.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fixture_util.h"
#include "io/convert_hf.h"
#include "model/model.h"
#include "server/server.h"
#include "tokenizer/tokenizer.h"

namespace dsv4::test {

using nlohmann::json;

using TestModel = TextModel;
inline const TestModel& test_model() { return text_fixture("mini_flash"); }

inline constexpr const char* kModelName = "test-model";

// Defaults for tests: greedy unless a request says otherwise, no memory headroom (the fixture is
// tiny), no request log.
inline server::ServerOptions test_options() {
    server::ServerOptions o;
    o.host = "127.0.0.1";
    o.port = 0;
    o.model_name = kModelName;
    o.limits.sampling.temperature = 0.0f;
    o.limits.default_max_tokens = 64;
    o.scheduler.parallel = 2;
    o.scheduler.prefill.admission.headroom_bytes = 0;
    return o;
}

struct Reply {
    int status = 0;
    std::string body;
    json j;  // body parsed (null when it is not JSON)
    std::string header(const std::string& k) const {
        auto it = headers.find(k);
        return it == headers.end() ? "" : it->second;
    }
    httplib::Headers headers;
};

class TestServer {
public:
    explicit TestServer(const std::function<void(server::ServerOptions&)>& tweak = {}) {
        server::ServerOptions o = test_options();
        if (tweak) tweak(o);
        srv_ = std::make_unique<server::Server>(*test_model().model, *test_model().tok, o);
        port_ = srv_->start();
    }
    ~TestServer() { srv_->stop(); }

    int port() const { return port_; }
    server::Server& server() { return *srv_; }

    httplib::Client client() const {
        httplib::Client c("127.0.0.1", port_);
        c.set_read_timeout(120, 0);
        return c;
    }

    Reply post(const std::string& path, const std::string& body, const httplib::Headers& h = {}) const {
        httplib::Client c = client();
        httplib::Result r = c.Post(path.c_str(), h, body, "application/json");
        return to_reply(r);
    }
    Reply post(const std::string& path, const json& body, const httplib::Headers& h = {}) const {
        return post(path, body.dump(), h);
    }
    Reply get(const std::string& path, const httplib::Headers& h = {}) const {
        httplib::Client c = client();
        return to_reply(c.Get(path.c_str(), h));
    }

    // A metric's value from /metrics ("name" or "name{labels}"); -1 when absent.
    double metric(const std::string& name) const {
        const std::string text = get("/metrics").body;
        size_t pos = 0;
        while ((pos = text.find(name + " ", pos)) != std::string::npos) {
            if (pos == 0 || text[pos - 1] == '\n') return std::stod(text.substr(pos + name.size() + 1));
            pos += name.size();
        }
        return -1;
    }

private:
    static Reply to_reply(const httplib::Result& r) {
        Reply out;
        if (!r) {
            out.status = -1;
            out.body = httplib::to_string(r.error());
            return out;
        }
        out.status = r->status;
        out.body = r->body;
        out.headers = r->headers;
        out.j = json::parse(r->body, nullptr, false);
        if (out.j.is_discarded()) out.j = nullptr;
        return out;
    }

    std::unique_ptr<server::Server> srv_;
    int port_ = 0;
};

struct SseEvent {
    std::string event;  // "" when the event had no event: line
    std::string data;
    json j;  // data parsed, null for [DONE] or non-JSON
};

// The EventSource format: fields until a blank line; data lines joined with "\n".
inline std::vector<SseEvent> parse_sse(const std::string& body) {
    std::vector<SseEvent> out;
    SseEvent cur;
    bool has = false, has_data = false;
    size_t pos = 0;
    while (pos <= body.size()) {
        size_t eol = body.find('\n', pos);
        std::string line = body.substr(pos, eol == std::string::npos ? std::string::npos : eol - pos);
        pos = eol == std::string::npos ? body.size() + 1 : eol + 1;
        if (line.empty()) {
            if (has) {
                cur.j = json::parse(cur.data, nullptr, false);
                if (cur.j.is_discarded()) cur.j = nullptr;
                out.push_back(cur);
            }
            cur = {};
            has = has_data = false;
            continue;
        }
        if (line[0] == ':') continue;  // comment (keep-alive)
        if (line.rfind("event: ", 0) == 0) cur.event = line.substr(7);
        else if (line.rfind("data: ", 0) == 0) {
            if (has_data) cur.data += "\n";
            cur.data += line.substr(6);
            has_data = true;
        }
        has = true;
    }
    return out;
}

inline json user_chat(const std::string& text, int max_tokens = 12) {
    return {{"model", kModelName}, {"max_tokens", max_tokens}, {"messages", json::array({{{"role", "user"}, {"content", text}}})}};
}

}  // namespace dsv4::test
