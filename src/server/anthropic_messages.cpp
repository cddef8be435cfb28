// POST /v1/messages: Anthropic's Messages shape (what Claude Code and the @anthropic-ai/sdk
// speak): content blocks in and out, tool_use / tool_result blocks, thinking blocks, and the
// message_start / content_block_* / message_delta / message_stop stream.
#include "core/error.h"
#include "server/endpoint.h"
#include "server/json_fields.h"
#include "server/request_common.h"
#include "server/sse.h"

namespace dsv4::server {

namespace {

using Role = ChatMessage::Role;

std::string tool_result_text(const json& content, const std::string& path) {
    if (content.is_null()) return "";
    return content_text(content, path);
}

// One Anthropic message to template messages: a user message may hold tool results between its
// texts (each becomes a tool turn, in order); an assistant message's blocks become one turn.
void parse_message(const json& v, const std::string& path, std::vector<ChatMessage>& out) {
    Obj m(v, path);
    const std::string role = m.req_str("role");
    if (role != "user" && role != "assistant")
        bad_request(cat(m.path("role"), ": expected 'user' or 'assistant', got '", role, "'"), m.path("role"));
    const json* content = m.get("content");
    if (!content) bad_request(cat("missing required field '", m.path("content"), "'"), m.path("content"));
    const Role r = role == "user" ? Role::User : Role::Assistant;
    if (content->is_string()) {
        out.push_back({r, content->get<std::string>(), "", {}});
        return;
    }
    if (!content->is_array())
        bad_request(cat(m.path("content"), ": expected a string or an array of content blocks, got ", json_kind(*content)),
                    m.path("content"));
    ChatMessage cur{r, "", "", {}};
    bool has_cur = false;
    for (size_t i = 0; i < content->size(); ++i) {
        const std::string p = index_path(m.path("content"), i);
        Obj b((*content)[i], p);
        const std::string type = b.req_str("type");
        if (type == "text") {
            cur.content += b.req_str("text");
            has_cur = true;
        } else if (type == "tool_result" && r == Role::User) {
            if (has_cur) out.push_back(cur);
            cur = {r, "", "", {}};
            has_cur = false;
            b.req_str("tool_use_id");
            std::string text = b.get("content") ? tool_result_text(*b.get("content"), b.path("content")) : "";
            if (b.opt_bool("is_error").value_or(false)) text = "Error: " + text;
            out.push_back({Role::Tool, text, "", {}});
        } else if (type == "tool_use" && r == Role::Assistant) {
            ToolCall tc;
            tc.name = b.req_str("name");
            Obj input = b.req_obj("input");
            tc.arguments = input.value().dump();
            cur.tool_calls.push_back(std::move(tc));
            has_cur = true;
        } else if (type == "thinking" && r == Role::Assistant) {
            cur.reasoning += b.req_str("thinking");
            has_cur = true;
        } else if (type == "redacted_thinking" && r == Role::Assistant) {
            // Encrypted reasoning of another model: nothing this one can read.
        } else {
            bad_request(cat(p, ".type: a '", type, "' block is not supported in a ", role,
                            " message (text, tool_use, tool_result and thinking are)"),
                        p + ".type", "unsupported_content");
        }
    }
    if (has_cur || content->empty()) out.push_back(cur);
}

std::string parse_tools(const Obj& o) {
    const json* tools = o.opt_array("tools");
    if (!tools || tools->empty()) return "";
    json fn = json::array();
    for (size_t i = 0; i < tools->size(); ++i) {
        Obj t((*tools)[i], index_path("tools", i));
        if (auto type = t.opt_str("type"); type && *type != "custom")
            bad_request(cat(t.path("type"), ": Anthropic-defined tools ('", *type,
                            "') are not supported; define the tool with name, description and input_schema"),
                        t.path("type"));
        const std::string name = t.req_str("name");
        if (name.empty()) bad_request(cat(t.path("name"), ": a tool needs a name"), t.path("name"));
        json f{{"name", name}};
        if (auto d = t.opt_str("description")) f["description"] = *d;
        f["parameters"] = t.req_obj("input_schema").value();
        fn.push_back({{"type", "function"}, {"function", f}});
    }
    return fn.dump();
}

const char* stop_reason(const GenResult& r) {
    if (!r.output.tool_calls.empty()) return "tool_use";
    switch (r.stop) {
        case StopReason::Length:
        case StopReason::ContextFull: return "max_tokens";
        case StopReason::StopString: return "stop_sequence";
        default: return "end_turn";
    }
}

json usage_json(const GenResult& r) {
    // Anthropic counts cache reads apart from input_tokens.
    return {{"input_tokens", r.prompt_tokens - r.cached_tokens},
            {"output_tokens", r.completion_tokens},
            {"cache_read_input_tokens", r.cached_tokens},
            {"cache_creation_input_tokens", 0}};
}

json tool_input(const ToolCall& c) {
    try {
        return json::parse(c.arguments);
    } catch (const json::exception&) {
        return json::object();
    }
}

class MessagesStream : public StreamEncoder {
public:
    explicit MessagesStream(const ResponseMeta& m) : meta_(m) {}

    std::string start(const GenResult& a) override {
        GenResult u = a;
        u.completion_tokens = 0;
        json msg{{"id", meta_.id},           {"type", "message"},        {"role", "assistant"},
                 {"content", json::array()}, {"model", meta_.model},     {"stop_reason", nullptr},
                 {"stop_sequence", nullptr}, {"usage", usage_json(u)}};
        return sse_json("message_start", {{"type", "message_start"}, {"message", msg}});
    }

    std::string event(const OutputEvent& e) override {
        std::string out;
        switch (e.kind) {
            case OutputEvent::Kind::Reasoning:
                out += open("thinking", {{"type", "thinking"}, {"thinking", ""}, {"signature", ""}});
                out += delta({{"type", "thinking_delta"}, {"thinking", e.text}});
                break;
            case OutputEvent::Kind::Text:
                out += open("text", {{"type", "text"}, {"text", ""}});
                out += delta({{"type", "text_delta"}, {"text", e.text}});
                break;
            case OutputEvent::Kind::ToolCall:
                out += close();
                out += open("tool_use", {{"type", "tool_use"}, {"id", random_id("toolu_")}, {"name", e.call.name},
                                         {"input", json::object()}});
                out += delta({{"type", "input_json_delta"}, {"partial_json", e.call.arguments}});
                out += close();
                break;
        }
        return out;
    }

    std::string finish(const GenResult& r) override {
        std::string out = close();
        json d{{"type", "message_delta"},
               {"delta", {{"stop_reason", stop_reason(r)},
                          {"stop_sequence", r.stop == StopReason::StopString ? json(r.stop_string) : json(nullptr)}}},
               {"usage", usage_json(r)},
               {"timings", to_json(r.timings)}};
        out += sse_json("message_delta", d);
        out += sse_json("message_stop", {{"type", "message_stop"}});
        return out;
    }

    std::string error(const ApiError& e) override { return sse_json("error", error_body(e, Dialect::Anthropic)); }
    std::string keepalive() override { return sse_json("ping", {{"type", "ping"}}); }

private:
    // Opens a block of this kind unless one is open already.
    std::string open(const std::string& kind, json block) {
        if (open_ == kind && kind != "tool_use") return {};
        std::string out = close();
        open_ = kind;
        out += sse_json("content_block_start", {{"type", "content_block_start"}, {"index", index_}, {"content_block", block}});
        return out;
    }
    std::string delta(json d) {
        return sse_json("content_block_delta", {{"type", "content_block_delta"}, {"index", index_}, {"delta", d}});
    }
    std::string close() {
        if (open_.empty()) return {};
        std::string out = sse_json("content_block_stop", {{"type", "content_block_stop"}, {"index", index_}});
        open_.clear();
        ++index_;
        return out;
    }

    ResponseMeta meta_;
    std::string open_;  // kind of the open block, "" when none
    int index_ = 0;
};

class AnthropicMessages : public Endpoint {
public:
    Dialect dialect() const override { return Dialect::Anthropic; }
    const char* id_prefix() const override { return "msg_"; }

    GenRequest parse(const json& body, const RequestLimits& lim) const override {
        Obj o(body, "");
        GenRequest g = chat_request(o, lim);
        g.max_tokens = parse_max_tokens(o, "max_tokens", lim);
        if (!g.max_tokens) bad_request("missing required field 'max_tokens'", "max_tokens");
        if (const json* sys = o.get("system")) {
            std::string text = content_text(*sys, "system");
            if (!text.empty()) g.messages.push_back({Role::System, text, "", {}});
        }
        const json& msgs = o.req_array("messages");
        if (msgs.empty()) bad_request("messages: must contain at least one message", "messages");
        for (size_t i = 0; i < msgs.size(); ++i) parse_message(msgs[i], index_path("messages", i), g.messages);
        g.stop = parse_stop(o, "stop_sequences");
        parse_sampling(o, g, 1.0);
        g.stream = o.opt_bool("stream").value_or(false);
        g.tools = parse_tools(o);
        if (auto tc = o.opt_obj("tool_choice")) {
            const std::string type = tc->req_str("type");
            if (type == "none") g.tools.clear();
            else if (type == "any" || type == "tool")
                bad_request(cat(tc->path("type"), ": '", type,
                                "' is not supported (the model cannot be forced to call a tool); use 'auto'"),
                            tc->path("type"));
            else if (type != "auto")
                bad_request(cat(tc->path("type"), ": expected auto, any, tool or none, got '", type, "'"), tc->path("type"));
        }
        if (auto th = o.opt_obj("thinking")) {
            const std::string type = th->req_str("type");
            if (type == "enabled") {
                th->opt_int("budget_tokens", 0, lim.max_tokens_limit);
                g.thinking = true;
            } else if (type == "disabled") {
                g.thinking = false;
            } else {
                bad_request(cat(th->path("type"), ": expected 'enabled' or 'disabled', got '", type, "'"), th->path("type"));
            }
        }
        // A final assistant turn is a prefix the reply continues (Anthropic's "prefill").
        if (g.messages.back().role == Role::Assistant) {
            const ChatMessage& last = g.messages.back();
            if (!last.tool_calls.empty())
                bad_request("messages: the last assistant message has tool_use blocks; send their tool_result in a user message",
                            "messages");
            if (g.thinking)
                bad_request("messages: a final assistant message (prefill) cannot be combined with thinking", "messages");
            g.assistant_prefix = last.content;
            g.messages.pop_back();
        }
        return g;
    }

    json body(const GenRequest&, const GenResult& r, const ResponseMeta& m) const override {
        json content = json::array();
        if (!r.output.reasoning.empty())
            content.push_back({{"type", "thinking"}, {"thinking", r.output.reasoning}, {"signature", ""}});
        if (!r.output.text.empty() || r.output.tool_calls.empty())
            content.push_back({{"type", "text"}, {"text", r.output.text}});
        for (const ToolCall& c : r.output.tool_calls)
            content.push_back({{"type", "tool_use"}, {"id", random_id("toolu_")}, {"name", c.name}, {"input", tool_input(c)}});
        return {{"id", m.id},
                {"type", "message"},
                {"role", "assistant"},
                {"model", m.model},
                {"content", content},
                {"stop_reason", stop_reason(r)},
                {"stop_sequence", r.stop == StopReason::StopString ? json(r.stop_string) : json(nullptr)},
                {"usage", usage_json(r)},
                {"timings", to_json(r.timings)}};
    }

    std::unique_ptr<StreamEncoder> stream(const GenRequest&, const ResponseMeta& m) const override {
        return std::make_unique<MessagesStream>(m);
    }
};

}  // namespace

std::unique_ptr<Endpoint> anthropic_messages_endpoint() { return std::make_unique<AnthropicMessages>(); }

}  // namespace dsv4::server
