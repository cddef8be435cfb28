// POST /v1/completions: OpenAI's legacy text completions (raw prompt in, text out; no template).
#include "core/error.h"
#include "server/endpoint.h"
#include "server/json_fields.h"
#include "server/request_common.h"
#include "server/sse.h"

namespace dsv4::server {

namespace {

// OpenAI's documented default for this endpoint.
constexpr int64_t kCompletionsDefaultMaxTokens = 16;

std::vector<int32_t> token_array(const json& a, const std::string& path) {
    std::vector<int32_t> out;
    for (size_t i = 0; i < a.size(); ++i) out.push_back(int32_t(as_int(a[i], index_path(path, i), 0, INT32_MAX)));
    return out;
}

// prompt: a string, an array of one string, an array of token ids, or an array of one such array.
void parse_prompt(const Obj& o, GenRequest& g) {
    const json* p = o.get("prompt");
    if (!p) bad_request("missing required field 'prompt'", "prompt");
    if (p->is_string()) {
        g.prompt_text = p->get<std::string>();
        return;
    }
    if (!p->is_array()) bad_request(cat("prompt: expected a string or an array, got ", json_kind(*p)), "prompt");
    if (p->empty()) bad_request("prompt: the prompt is empty", "prompt");
    const json& first = (*p)[0];
    if (first.is_number()) {
        g.prompt_tokens = token_array(*p, "prompt");
        return;
    }
    if (p->size() != 1)
        bad_request(cat("prompt: ", p->size(), " prompts in one request are not supported (send one per request)"),
                    "prompt", "unsupported_parameter");
    if (first.is_string()) g.prompt_text = first.get<std::string>();
    else if (first.is_array()) g.prompt_tokens = token_array(first, "prompt[0]");
    else bad_request(cat("prompt[0]: expected a string or an array of token ids, got ", json_kind(first)), "prompt[0]");
}

json usage_json(const GenResult& r) {
    return {{"prompt_tokens", r.prompt_tokens},
            {"completion_tokens", r.completion_tokens},
            {"total_tokens", r.prompt_tokens + r.completion_tokens},
            {"prompt_tokens_details", {{"cached_tokens", r.cached_tokens}}}};
}

json choice(std::string text, json finish_reason) {
    return {{"text", std::move(text)}, {"index", 0}, {"logprobs", nullptr}, {"finish_reason", std::move(finish_reason)}};
}

class CompletionStream : public StreamEncoder {
public:
    CompletionStream(const GenRequest& g, const ResponseMeta& m) : meta_(m), include_usage_(g.include_usage) {}
    void set_echo(std::string text) { echo_ = std::move(text); }

    std::string start(const GenResult&) override { return echo_.empty() ? std::string() : chunk(choice(echo_, nullptr)); }
    std::string event(const OutputEvent& e) override {
        return e.kind == OutputEvent::Kind::ToolCall ? std::string() : chunk(choice(e.text, nullptr));
    }
    std::string finish(const GenResult& r) override {
        json last = base(choice("", r.stop == StopReason::Length || r.stop == StopReason::ContextFull ? "length" : "stop"));
        last["timings"] = to_json(r.timings);
        std::string out = sse_json("", last);
        if (include_usage_) {
            json u = base(nullptr);
            u["choices"] = json::array();
            u["usage"] = usage_json(r);
            out += sse_json("", u);
        }
        return out + std::string(kSseDone);
    }
    std::string error(const ApiError& e) override { return sse_json("", error_body(e, Dialect::OpenAI)) + std::string(kSseDone); }

private:
    json base(json c) const {
        json j{{"id", meta_.id}, {"object", "text_completion"}, {"created", meta_.created}, {"model", meta_.model}};
        j["choices"] = c.is_null() ? json::array() : json::array({std::move(c)});
        return j;
    }
    std::string chunk(json c) const { return sse_json("", base(std::move(c))); }

    ResponseMeta meta_;
    bool include_usage_;
    std::string echo_;
};

class OpenAICompletions : public Endpoint {
public:
    Dialect dialect() const override { return Dialect::OpenAI; }
    const char* id_prefix() const override { return "cmpl-"; }

    GenRequest parse(const json& body, const RequestLimits& lim) const override {
        Obj o(body, "");
        GenRequest g;
        g.kind = GenRequest::Kind::Text;
        g.sampling = lim.sampling;
        g.model = o.req_str("model");
        parse_prompt(o, g);
        g.max_tokens = parse_max_tokens(o, "max_tokens", lim, 0).value_or(std::min(kCompletionsDefaultMaxTokens, lim.max_tokens_limit));
        g.echo = o.opt_bool("echo").value_or(false);
        if (auto s = o.opt_str("suffix"); s && !s->empty())
            bad_request("suffix: fill-in-the-middle is not supported", "suffix", "unsupported_parameter");
        if (auto n = o.opt_int("n", 1, 128); n && *n != 1)
            bad_request(cat("n: ", *n, " choices are not supported (only n = 1)"), "n", "unsupported_parameter");
        if (auto b = o.opt_int("best_of", 1, 128); b && *b != 1)
            bad_request("best_of: only 1 is supported", "best_of", "unsupported_parameter");
        if (auto lp = o.opt_int("logprobs", 0, 5); lp && *lp > 0)
            bad_request("logprobs: log probabilities are not supported", "logprobs", "unsupported_parameter");
        if (auto lb = o.opt_obj("logit_bias"); lb && !lb->value().empty())
            bad_request("logit_bias: not supported", "logit_bias", "unsupported_parameter");
        g.stream = o.opt_bool("stream").value_or(false);
        if (auto so = o.opt_obj("stream_options")) g.include_usage = so->opt_bool("include_usage").value_or(false);
        g.stop = parse_stop(o, "stop");
        parse_sampling(o, g, 2.0);
        return g;
    }

    json body(const GenRequest& g, const GenResult& r, const ResponseMeta& m) const override {
        std::string text = g.echo ? g.echo_fields.value("echo_text", "") + r.text : r.text;
        return {{"id", m.id},
                {"object", "text_completion"},
                {"created", m.created},
                {"model", m.model},
                {"choices", json::array({choice(std::move(text), r.stop == StopReason::Length ||
                                                                          r.stop == StopReason::ContextFull
                                                                      ? "length"
                                                                      : "stop")})},
                {"usage", usage_json(r)},
                {"timings", to_json(r.timings)}};
    }

    std::unique_ptr<StreamEncoder> stream(const GenRequest& g, const ResponseMeta& m) const override {
        auto s = std::make_unique<CompletionStream>(g, m);
        if (g.echo) s->set_echo(g.echo_fields.value("echo_text", ""));
        return s;
    }
};

}  // namespace

std::unique_ptr<Endpoint> openai_completions_endpoint() { return std::make_unique<OpenAICompletions>(); }

}  // namespace dsv4::server
