// POST /v1/responses: OpenAI's Responses shape (what Codex CLI speaks): input items in (messages,
// function_call, function_call_output, reasoning), output items out (reasoning, message,
// function_call), and the response.* event stream with sequence numbers. Nothing is stored, so
// previous_response_id is refused: clients resend the conversation, and the prefix cache makes
// that cheap.
#include "core/error.h"
#include "server/endpoint.h"
#include "server/json_fields.h"
#include "server/request_common.h"
#include "server/sse.h"

namespace dsv4::server {

namespace {

using Role = ChatMessage::Role;

struct InputState {
    std::vector<ChatMessage>& out;
    std::string pending_reasoning;  // a reasoning item belongs to the assistant turn after it

    ChatMessage& assistant_turn() {
        if (out.empty() || out.back().role != Role::Assistant) {
            out.push_back({Role::Assistant, "", std::move(pending_reasoning), {}});
            pending_reasoning.clear();
        }
        return out.back();
    }
};

void parse_item(const json& v, const std::string& path, InputState& st) {
    Obj it(v, path);
    const std::string type = it.opt_str("type").value_or("message");
    if (type == "message") {
        const std::string role = it.req_str("role");
        const json* content = it.get("content");
        if (!content) bad_request(cat("missing required field '", it.path("content"), "'"), it.path("content"));
        std::string text = content_text(*content, it.path("content"));
        if (role == "assistant") {
            ChatMessage& a = st.assistant_turn();
            // Text after tool calls of the same turn would be out of order in the template: a
            // new turn then.
            if (!a.tool_calls.empty()) st.out.push_back({Role::Assistant, text, "", {}});
            else a.content += text;
        } else if (role == "user") {
            st.out.push_back({Role::User, text, "", {}});
        } else if (role == "system" || role == "developer") {
            st.out.push_back({Role::System, text, "", {}});
        } else {
            bad_request(cat(it.path("role"), ": unknown role '", role, "' (user, assistant, system or developer)"),
                        it.path("role"));
        }
    } else if (type == "function_call") {
        st.assistant_turn().tool_calls.push_back(parse_function_call(it));
    } else if (type == "function_call_output") {
        it.req_str("call_id");
        const json* output = it.get("output");
        if (!output) bad_request(cat("missing required field '", it.path("output"), "'"), it.path("output"));
        st.out.push_back({Role::Tool, content_text(*output, it.path("output")), "", {}});
    } else if (type == "reasoning") {
        if (const json* c = it.opt_array("content"))
            for (size_t i = 0; i < c->size(); ++i) {
                Obj part((*c)[i], index_path(it.path("content"), i));
                if (auto t = part.opt_str("text")) st.pending_reasoning += *t;
            }
    } else {
        bad_request(cat(it.path("type"), ": input items of type '", type,
                        "' are not supported (message, function_call, function_call_output, reasoning)"),
                    it.path("type"));
    }
}

// Function tools to the template's shape. Tools of other types (web_search, the hosted
// tools, custom freeform tools) are left out: the model could not call them anyway.
std::string parse_tools(const Obj& o) {
    const json* tools = o.opt_array("tools");
    if (!tools) return "";
    json fn = json::array();
    for (size_t i = 0; i < tools->size(); ++i) {
        Obj t((*tools)[i], index_path("tools", i));
        if (t.req_str("type") != "function") continue;
        const std::string name = t.req_str("name");
        if (name.empty()) bad_request(cat(t.path("name"), ": a tool needs a name"), t.path("name"));
        json f{{"name", name}};
        if (auto d = t.opt_str("description")) f["description"] = *d;
        if (auto p = t.opt_obj("parameters")) f["parameters"] = p->value();
        fn.push_back({{"type", "function"}, {"function", f}});
    }
    return fn.empty() ? std::string() : fn.dump();
}

json usage_json(const GenResult& r) {
    return {{"input_tokens", r.prompt_tokens},
            {"input_tokens_details", {{"cached_tokens", r.cached_tokens}}},
            {"output_tokens", r.completion_tokens},
            {"output_tokens_details", {{"reasoning_tokens", 0}}},
            {"total_tokens", r.prompt_tokens + r.completion_tokens}};
}

bool incomplete(const GenResult& r) { return r.stop == StopReason::Length || r.stop == StopReason::ContextFull; }

json response_object(const GenRequest& g, const ResponseMeta& m, const std::string& status, json output) {
    json o{{"id", m.id},
           {"object", "response"},
           {"created_at", m.created},
           {"status", status},
           {"error", nullptr},
           {"incomplete_details", nullptr},
           {"model", m.model},
           {"output", std::move(output)},
           {"parallel_tool_calls", false},
           {"usage", nullptr}};
    for (const auto& [k, v] : g.echo_fields.items()) o[k] = v;
    return o;
}

void complete(json& o, const GenResult& r) {
    o["status"] = incomplete(r) ? "incomplete" : "completed";
    if (incomplete(r)) o["incomplete_details"] = {{"reason", "max_output_tokens"}};
    o["usage"] = usage_json(r);
    o["timings"] = to_json(r.timings);
}

json reasoning_item(const std::string& id, const std::string& text) {
    return {{"type", "reasoning"},
            {"id", id},
            {"summary", json::array()},
            {"content", json::array({{{"type", "reasoning_text"}, {"text", text}}})}};
}
json text_part(const std::string& text) {
    return {{"type", "output_text"}, {"text", text}, {"annotations", json::array()}};
}
json message_item(const std::string& id, const std::string& status, json content) {
    return {{"type", "message"}, {"id", id}, {"status", status}, {"role", "assistant"}, {"content", std::move(content)}};
}
json call_item(const std::string& id, const ToolCall& c, const std::string& status) {
    return {{"type", "function_call"}, {"id", id},           {"call_id", random_id("call_")},
            {"name", c.name},          {"arguments", c.arguments}, {"status", status}};
}

class ResponsesStream : public StreamEncoder {
public:
    ResponsesStream(const GenRequest& g, const ResponseMeta& m) : g_(g), meta_(m) {}

    std::string start(const GenResult&) override {
        json r = response_object(g_, meta_, "in_progress", json::array());
        std::string out = ev("response.created", {{"response", r}});  // two statements: numbered in order
        return out + ev("response.in_progress", {{"response", r}});
    }

    std::string event(const OutputEvent& e) override {
        std::string out;
        switch (e.kind) {
            case OutputEvent::Kind::Reasoning:
                if (open_ != Open::Reasoning) {
                    out += close();
                    open_ = Open::Reasoning;
                    item_id_ = random_id("rs_");
                    text_.clear();
                    out += ev("response.output_item.added",
                              {{"output_index", items_.size()},
                               {"item", {{"type", "reasoning"}, {"id", item_id_}, {"summary", json::array()}}}});
                }
                text_ += e.text;
                out += ev("response.reasoning_text.delta",
                          {{"item_id", item_id_}, {"output_index", items_.size()}, {"content_index", 0}, {"delta", e.text}});
                break;
            case OutputEvent::Kind::Text:
                if (open_ != Open::Message) {
                    out += close();
                    open_ = Open::Message;
                    item_id_ = random_id("msg_");
                    text_.clear();
                    out += ev("response.output_item.added",
                              {{"output_index", items_.size()}, {"item", message_item(item_id_, "in_progress", json::array())}});
                    out += ev("response.content_part.added", {{"item_id", item_id_},
                                                              {"output_index", items_.size()},
                                                              {"content_index", 0},
                                                              {"part", text_part("")}});
                }
                text_ += e.text;
                out += ev("response.output_text.delta", {{"item_id", item_id_},
                                                         {"output_index", items_.size()},
                                                         {"content_index", 0},
                                                         {"delta", e.text},
                                                         {"logprobs", json::array()}});
                break;
            case OutputEvent::Kind::ToolCall: {
                out += close();
                const std::string id = random_id("fc_");
                json item = call_item(id, e.call, "in_progress");
                json added = item;
                added["arguments"] = "";
                const size_t idx = items_.size();
                out += ev("response.output_item.added", {{"output_index", idx}, {"item", added}});
                out += ev("response.function_call_arguments.delta",
                          {{"item_id", id}, {"output_index", idx}, {"delta", e.call.arguments}});
                out += ev("response.function_call_arguments.done",
                          {{"item_id", id}, {"output_index", idx}, {"arguments", e.call.arguments}});
                item["status"] = "completed";
                out += ev("response.output_item.done", {{"output_index", idx}, {"item", item}});
                items_.push_back(item);
                break;
            }
        }
        return out;
    }

    std::string finish(const GenResult& r) override {
        std::string out = close();
        json resp = response_object(g_, meta_, "completed", items_);
        complete(resp, r);
        return out + ev(incomplete(r) ? "response.incomplete" : "response.completed", {{"response", resp}});
    }

    std::string error(const ApiError& e) override {
        return ev("error", {{"code", e.code.empty() ? error_type(e.kind, Dialect::OpenAI) : e.code},
                            {"message", e.what()},
                            {"param", e.param.empty() ? json(nullptr) : json(e.param)}});
    }

private:
    enum class Open { None, Reasoning, Message };

    std::string ev(const std::string& type, json body) {
        body["type"] = type;
        body["sequence_number"] = seq_++;
        return sse_json(type, body);
    }

    std::string close() {
        std::string out;
        const size_t idx = items_.size();
        if (open_ == Open::Reasoning) {
            out += ev("response.reasoning_text.done",
                      {{"item_id", item_id_}, {"output_index", idx}, {"content_index", 0}, {"text", text_}});
            json item = reasoning_item(item_id_, text_);
            out += ev("response.output_item.done", {{"output_index", idx}, {"item", item}});
            items_.push_back(item);
        } else if (open_ == Open::Message) {
            out += ev("response.output_text.done",
                      {{"item_id", item_id_}, {"output_index", idx}, {"content_index", 0}, {"text", text_},
                       {"logprobs", json::array()}});
            out += ev("response.content_part.done",
                      {{"item_id", item_id_}, {"output_index", idx}, {"content_index", 0}, {"part", text_part(text_)}});
            json item = message_item(item_id_, "completed", json::array({text_part(text_)}));
            out += ev("response.output_item.done", {{"output_index", idx}, {"item", item}});
            items_.push_back(item);
        }
        open_ = Open::None;
        return out;
    }

    const GenRequest& g_;
    ResponseMeta meta_;
    Open open_ = Open::None;
    std::string item_id_, text_;
    json items_ = json::array();
    int64_t seq_ = 0;
};

class OpenAIResponses : public Endpoint {
public:
    Dialect dialect() const override { return Dialect::OpenAI; }
    const char* id_prefix() const override { return "resp_"; }

    GenRequest parse(const json& body, const RequestLimits& lim) const override {
        Obj o(body, "");
        GenRequest g = chat_request(o, lim);
        if (o.has("previous_response_id"))
            bad_request("previous_response_id: responses are not stored by this server; send the whole conversation "
                        "in 'input' (its prefix is cached, so that is cheap)",
                        "previous_response_id", "unsupported_parameter");
        if (auto ins = o.opt_str("instructions"); ins && !ins->empty()) g.messages.push_back({Role::System, *ins, "", {}});
        const json* input = o.get("input");
        if (!input) bad_request("missing required field 'input'", "input");
        if (input->is_string()) {
            g.messages.push_back({Role::User, input->get<std::string>(), "", {}});
        } else if (input->is_array()) {
            InputState st{g.messages, {}};
            for (size_t i = 0; i < input->size(); ++i) parse_item((*input)[i], index_path("input", i), st);
        } else {
            bad_request(cat("input: expected a string or an array of items, got ", json_kind(*input)), "input");
        }
        if (g.messages.empty()) bad_request("input: the conversation is empty", "input");
        g.max_tokens = parse_max_tokens(o, "max_output_tokens", lim);
        g.stream = o.opt_bool("stream").value_or(false);
        parse_sampling(o, g, 2.0);
        g.tools = parse_tools(o);
        if (const json* choice = o.get("tool_choice")) {
            if (choice->is_string() && choice->get<std::string>() == "none") g.tools.clear();
            else if (!(choice->is_string() && choice->get<std::string>() == "auto"))
                bad_request("tool_choice: only 'auto' and 'none' are supported (the model cannot be forced to call a tool)",
                            "tool_choice", "unsupported_parameter");
        }
        if (auto r = o.opt_obj("reasoning"))
            if (auto e = r->opt_str("effort")) apply_reasoning_effort(*e, r->path("effort"), g);
        if (auto t = o.opt_obj("text"))
            if (auto f = t->opt_obj("format")) {
                const std::string type = f->req_str("type");
                if (type == "json_schema") g.response_format = f->get("schema") ? f->get("schema")->dump() : f->value().dump();
                else if (type == "json_object") g.response_format = json{{"type", "json_object"}}.dump();
                else if (type != "text")
                    bad_request(cat(f->path("type"), ": expected text, json_object or json_schema, got '", type, "'"),
                                f->path("type"));
            }
        for (const char* key : {"instructions", "max_output_tokens", "temperature", "top_p", "tools", "tool_choice",
                                "reasoning", "text", "metadata"})
            if (const json* v = o.get(key)) g.echo_fields[key] = *v;
        return g;
    }

    json body(const GenRequest& g, const GenResult& r, const ResponseMeta& m) const override {
        json output = json::array();
        if (!r.output.reasoning.empty()) output.push_back(reasoning_item(random_id("rs_"), r.output.reasoning));
        if (!r.output.text.empty() || r.output.tool_calls.empty())
            output.push_back(message_item(random_id("msg_"), "completed", json::array({text_part(r.output.text)})));
        for (const ToolCall& c : r.output.tool_calls) output.push_back(call_item(random_id("fc_"), c, "completed"));
        json resp = response_object(g, m, "completed", output);
        complete(resp, r);
        return resp;
    }

    std::unique_ptr<StreamEncoder> stream(const GenRequest& g, const ResponseMeta& m) const override {
        return std::make_unique<ResponsesStream>(g, m);
    }
};

}  // namespace

std::unique_ptr<Endpoint> openai_responses_endpoint() { return std::make_unique<OpenAIResponses>(); }

}  // namespace dsv4::server
