// POST /v1/chat/completions: OpenAI's Chat Completions shape, with DeepSeek's reasoning_content
// for thinking output (what DeepSeek's own API and most chat UIs read).
#include "core/error.h"
#include "server/endpoint.h"
#include "server/json_fields.h"
#include "server/request_common.h"
#include "server/sse.h"

namespace dsv4::server {

namespace {

ChatMessage parse_message(const json& v, const std::string& path) {
    Obj m(v, path);
    const std::string role = m.req_str("role");
    ChatMessage cm;
    // OpenAI's "developer" messages are its newer name for system messages.
    if (role == "developer" || role == "system") cm.role = ChatMessage::Role::System;
    else if (role == "user") cm.role = ChatMessage::Role::User;
    else if (role == "assistant") cm.role = ChatMessage::Role::Assistant;
    else if (role == "tool") cm.role = ChatMessage::Role::Tool;
    else bad_request(cat(m.path("role"), ": unknown role '", role, "' (system, developer, user, assistant or tool)"), m.path("role"));

    const json* content = m.get("content");
    if (!content && cm.role != ChatMessage::Role::Assistant)
        bad_request(cat("missing required field '", m.path("content"), "'"), m.path("content"));
    if (content) cm.content = content_text(*content, m.path("content"));
    if (cm.role != ChatMessage::Role::Assistant) return cm;

    if (auto r = m.opt_str("reasoning_content")) cm.reasoning = *r;
    if (const json* calls = m.opt_array("tool_calls")) {
        for (size_t i = 0; i < calls->size(); ++i) {
            Obj c((*calls)[i], index_path(m.path("tool_calls"), i));
            if (auto type = c.opt_str("type"); type && *type != "function")
                bad_request(cat(c.path("type"), ": '", *type, "' is not a tool call type (only 'function')"), c.path("type"));
            cm.tool_calls.push_back(parse_function_call(c.req_obj("function")));
        }
    }
    return cm;
}

void parse_thinking(const Obj& o, GenRequest& g) {
    if (auto e = o.opt_str("reasoning_effort")) apply_reasoning_effort(*e, o.path("reasoning_effort"), g);
    // DeepSeek's API: "thinking": {"type": "enabled" | "disabled"}.
    if (auto t = o.opt_obj("thinking")) {
        const std::string type = t->req_str("type");
        if (type != "enabled" && type != "disabled")
            bad_request(cat(t->path("type"), ": expected 'enabled' or 'disabled', got '", type, "'"), t->path("type"));
        g.thinking = type == "enabled";
    }
    // vLLM / SGLang style: "chat_template_kwargs": {"thinking": true} (or enable_thinking).
    if (auto k = o.opt_obj("chat_template_kwargs")) {
        if (auto b = k->opt_bool("thinking")) g.thinking = *b;
        if (auto b = k->opt_bool("enable_thinking")) g.thinking = *b;
    }
}

void parse_tools(const Obj& o, GenRequest& g) {
    if (const json* tools = o.get("tools")) g.tools = check_function_tools(*tools, o.path("tools"));
    const json* choice = o.get("tool_choice");
    if (!choice) return;
    if (choice->is_string()) {
        const std::string c = choice->get<std::string>();
        if (c == "none") g.tools.clear();  // the model is not told about them at all
        else if (c == "required")
            bad_request("tool_choice: 'required' is not supported (the model cannot be forced to call a tool); use 'auto'",
                        "tool_choice", "unsupported_parameter");
        else if (c != "auto")
            bad_request(cat("tool_choice: expected 'auto', 'none' or 'required', got '", c, "'"), "tool_choice");
    } else if (choice->is_object()) {
        bad_request("tool_choice: naming a function is not supported (the model cannot be forced to call it); use 'auto'",
                    "tool_choice", "unsupported_parameter");
    } else {
        bad_request(cat("tool_choice: expected a string or an object, got ", json_kind(*choice)), "tool_choice");
    }
}

void parse_response_format(const Obj& o, GenRequest& g) {
    auto rf = o.opt_obj("response_format");
    if (!rf) return;
    const std::string type = rf->req_str("type");
    if (type == "text") return;
    if (type == "json_object") {
        g.response_format = json{{"type", "json_object"}}.dump();
    } else if (type == "json_schema") {
        Obj js = rf->req_obj("json_schema");
        const json* schema = js.get("schema");
        g.response_format = schema ? schema->dump() : js.value().dump();
    } else {
        bad_request(cat(rf->path("type"), ": expected 'text', 'json_object' or 'json_schema', got '", type, "'"),
                    rf->path("type"));
    }
}

json usage_json(const GenResult& r) {
    return {{"prompt_tokens", r.prompt_tokens},
            {"completion_tokens", r.completion_tokens},
            {"total_tokens", r.prompt_tokens + r.completion_tokens},
            {"prompt_tokens_details", {{"cached_tokens", r.cached_tokens}}}};
}

json tool_call_json(const ToolCall& c, const std::string& id) {
    return {{"id", id}, {"type", "function"}, {"function", {{"name", c.name}, {"arguments", c.arguments}}}};
}

class ChatStream : public StreamEncoder {
public:
    ChatStream(const GenRequest& g, const ResponseMeta& m) : meta_(m), include_usage_(g.include_usage) {}

    std::string start(const GenResult&) override { return chunk(json{{"role", "assistant"}, {"content", ""}}, nullptr); }

    std::string event(const OutputEvent& e) override {
        switch (e.kind) {
            case OutputEvent::Kind::Reasoning: return chunk(json{{"reasoning_content", e.text}}, nullptr);
            case OutputEvent::Kind::Text: return chunk(json{{"content", e.text}}, nullptr);
            case OutputEvent::Kind::ToolCall: {
                json call = tool_call_json(e.call, random_id("call_"));
                call["index"] = e.call_index;
                return chunk(json{{"tool_calls", json::array({call})}}, nullptr);
            }
        }
        return {};
    }

    std::string finish(const GenResult& r) override {
        json last = base(json::object(), openai_finish_reason(r));
        last["timings"] = to_json(r.timings);
        std::string out = sse_json("", last);
        if (include_usage_) {
            json u = base(json::object(), nullptr);
            u["choices"] = json::array();
            u["usage"] = usage_json(r);
            out += sse_json("", u);
        }
        out += kSseDone;
        return out;
    }

    std::string error(const ApiError& e) override { return sse_json("", error_body(e, Dialect::OpenAI)) + std::string(kSseDone); }

private:
    json base(json delta, json finish_reason) const {
        return {{"id", meta_.id},
                {"object", "chat.completion.chunk"},
                {"created", meta_.created},
                {"model", meta_.model},
                {"choices",
                 json::array({{{"index", 0}, {"delta", std::move(delta)}, {"logprobs", nullptr},
                               {"finish_reason", std::move(finish_reason)}}})}};
    }
    std::string chunk(json delta, json finish_reason) const { return sse_json("", base(std::move(delta), std::move(finish_reason))); }

    ResponseMeta meta_;
    bool include_usage_;
};

class OpenAIChat : public Endpoint {
public:
    Dialect dialect() const override { return Dialect::OpenAI; }
    const char* id_prefix() const override { return "chatcmpl-"; }

    GenRequest parse(const json& body, const RequestLimits& lim) const override {
        Obj o(body, "");
        GenRequest g = chat_request(o, lim);
        const json& msgs = o.req_array("messages");
        if (msgs.empty()) bad_request("messages: must contain at least one message", "messages");
        for (size_t i = 0; i < msgs.size(); ++i) g.messages.push_back(parse_message(msgs[i], index_path("messages", i)));
        g.max_tokens = parse_max_tokens(o, "max_completion_tokens", lim);
        if (!g.max_tokens) g.max_tokens = parse_max_tokens(o, "max_tokens", lim);
        if (auto n = o.opt_int("n", 1, 128); n && *n != 1)
            bad_request(cat("n: ", *n, " choices are not supported (only n = 1)"), "n", "unsupported_parameter");
        g.stream = o.opt_bool("stream").value_or(false);
        if (auto so = o.opt_obj("stream_options")) g.include_usage = so->opt_bool("include_usage").value_or(false);
        g.stop = parse_stop(o, "stop");
        parse_sampling(o, g, 2.0);
        if (o.opt_bool("logprobs").value_or(false))
            bad_request("logprobs: log probabilities are not supported", "logprobs", "unsupported_parameter");
        if (auto tl = o.opt_int("top_logprobs", 0, 20); tl && *tl > 0)
            bad_request("top_logprobs: log probabilities are not supported", "top_logprobs", "unsupported_parameter");
        if (auto lb = o.opt_obj("logit_bias"); lb && !lb->value().empty())
            bad_request("logit_bias: not supported", "logit_bias", "unsupported_parameter");
        parse_tools(o, g);
        parse_response_format(o, g);
        parse_thinking(o, g);
        return g;
    }

    json body(const GenRequest&, const GenResult& r, const ResponseMeta& m) const override {
        json msg{{"role", "assistant"}};
        const ParsedOutput& out = r.output;
        msg["content"] = out.text.empty() && !out.tool_calls.empty() ? json(nullptr) : json(out.text);
        if (!out.reasoning.empty()) msg["reasoning_content"] = out.reasoning;
        if (!out.tool_calls.empty()) {
            json calls = json::array();
            for (const ToolCall& c : out.tool_calls) calls.push_back(tool_call_json(c, random_id("call_")));
            msg["tool_calls"] = calls;
        }
        return {{"id", m.id},
                {"object", "chat.completion"},
                {"created", m.created},
                {"model", m.model},
                {"choices", json::array({{{"index", 0}, {"message", msg}, {"logprobs", nullptr},
                                          {"finish_reason", openai_finish_reason(r)}}})},
                {"usage", usage_json(r)},
                {"timings", to_json(r.timings)}};
    }

    std::unique_ptr<StreamEncoder> stream(const GenRequest& g, const ResponseMeta& m) const override {
        return std::make_unique<ChatStream>(g, m);
    }
};

}  // namespace

std::unique_ptr<Endpoint> openai_chat_endpoint() { return std::make_unique<OpenAIChat>(); }

}  // namespace dsv4::server
