#include "server/request_common.h"

#include <limits>

#include "core/error.h"
#include "server/api_error.h"

namespace dsv4::server {

void parse_sampling(const Obj& o, GenRequest& g, double temp_max) {
    if (auto t = o.opt_num("temperature", 0.0, temp_max)) g.sampling.temperature = float(*t);
    if (auto p = o.opt_num("top_p", 0.0, 1.0)) {
        if (*p <= 0.0) bad_request(cat(o.path("top_p"), ": must be greater than 0 (1 turns it off)"), o.path("top_p"));
        g.sampling.top_p = float(*p);
    }
    if (auto k = o.opt_int("top_k", 0, std::numeric_limits<int>::max())) g.sampling.top_k = int(*k);
    if (auto m = o.opt_num("min_p", 0.0, 0.999999)) g.sampling.min_p = float(*m);
    if (auto r = o.opt_num("repeat_penalty", 1e-3, 100.0)) g.sampling.repeat_penalty = float(*r);
    if (auto n = o.opt_int("repeat_last_n", -1, std::numeric_limits<int>::max())) g.sampling.repeat_last_n = int(*n);
    if (const json* s = o.get("seed")) {
        // OpenAI documents a signed 64-bit seed; any integer is fine for the RNG.
        if (s->is_number_unsigned()) g.sampling.seed = s->get<uint64_t>();
        else g.sampling.seed = uint64_t(as_int(*s, o.path("seed"), std::numeric_limits<int64_t>::min(),
                                                std::numeric_limits<int64_t>::max()));
        g.seed_given = true;
    }
    g.ignore_eos = o.opt_bool("ignore_eos").value_or(false);
    for (const char* key : {"presence_penalty", "frequency_penalty"}) {
        auto v = o.opt_num(key, -2.0, 2.0);
        if (v && *v != 0.0)
            bad_request(cat(o.path(key), ": ", *v, " is not supported (only 0); use repeat_penalty (> 1 discourages "
                            "repeats, e.g. 1.1) instead"),
                        o.path(key), "unsupported_parameter");
    }
}

std::vector<std::string> parse_stop(const Obj& o, std::string_view key) {
    const json* v = o.get(key);
    if (!v) return {};
    const std::string path = o.path(key);
    std::vector<std::string> out;
    if (v->is_string()) {
        out.push_back(v->get<std::string>());
    } else if (v->is_array()) {
        if (v->size() > 16) bad_request(cat(path, ": at most 16 stop strings, got ", v->size()), path);
        for (size_t i = 0; i < v->size(); ++i) out.push_back(as_str((*v)[i], index_path(path, i)));
    } else {
        bad_request(cat(path, ": expected a string or an array of strings, got ", json_kind(*v)), path);
    }
    for (size_t i = 0; i < out.size(); ++i)
        if (out[i].empty()) bad_request(cat(path, ": a stop string must not be empty"), path);
    return out;
}

std::optional<int64_t> parse_max_tokens(const Obj& o, std::string_view key, const RequestLimits& lim, int64_t lo) {
    const json* v = o.get(key);
    if (!v) return std::nullopt;
    const std::string path = o.path(key);
    if (!v->is_number()) bad_request(cat(path, ": expected an integer, got ", json_kind(*v)), path);
    // A value past the context is a client error of its own kind: say what the context is.
    if (v->is_number_integer() || v->is_number_unsigned() || v->is_number_float()) {
        double d = v->get<double>();
        if (d > double(lim.max_tokens_limit))
            bad_request(cat(path, ": ", v->dump(), " is more than the context length of ", lim.max_tokens_limit,
                            " tokens"),
                        path, "max_tokens_out_of_range");
    }
    return as_int(*v, path, lo, lim.max_tokens_limit);
}

std::string content_text(const json& content, const std::string& path) {
    if (content.is_null()) return "";
    if (content.is_string()) return content.get<std::string>();
    if (!content.is_array())
        bad_request(cat(path, ": expected a string or an array of content parts, got ", json_kind(content)), path);
    std::string out;
    for (size_t i = 0; i < content.size(); ++i) {
        const std::string p = index_path(path, i);
        Obj part(content[i], p);
        const std::string type = part.req_str("type");
        if (type != "text" && type != "input_text" && type != "output_text")
            bad_request(cat(p, ".type: content of type '", type, "' is not supported (this server reads text only)"),
                        p + ".type", "unsupported_content");
        out += part.req_str("text");
    }
    return out;
}

void apply_reasoning_effort(const std::string& effort, const std::string& path, GenRequest& g) {
    if (effort == "none" || effort == "minimal") {
        g.thinking = false;
    } else if (effort == "low" || effort == "medium" || effort == "high") {
        g.thinking = true;
        g.reasoning_effort.clear();
    } else if (effort == "max" || effort == "xhigh") {
        g.thinking = true;
        g.reasoning_effort = "max";
    } else {
        bad_request(cat(path, ": '", effort, "' is not a reasoning effort (none, minimal, low, medium, high, xhigh or max)"),
                    path);
    }
}

GenRequest chat_request(const Obj& o, const RequestLimits& lim) {
    GenRequest g;
    g.kind = GenRequest::Kind::Chat;
    g.sampling = lim.sampling;
    g.thinking = lim.thinking;
    g.model = o.req_str("model");
    return g;
}

ToolCall parse_function_call(const Obj& o) {
    ToolCall tc;
    tc.name = o.req_str("name");
    tc.arguments = o.opt_str("arguments").value_or("{}");
    if (tc.arguments.empty()) tc.arguments = "{}";
    json args;
    try {
        args = json::parse(tc.arguments);
    } catch (const json::exception&) {
        bad_request(cat(o.path("arguments"), ": not valid JSON: ", tc.arguments.substr(0, 200)), o.path("arguments"));
    }
    if (!args.is_object())
        bad_request(cat(o.path("arguments"), ": must be a JSON object, got ", json_kind(args)), o.path("arguments"));
    return tc;
}

std::string check_function_tools(const json& tools, const std::string& path) {
    if (!tools.is_array()) bad_request(cat(path, ": expected an array, got ", json_kind(tools)), path);
    for (size_t i = 0; i < tools.size(); ++i) {
        const std::string p = index_path(path, i);
        Obj t(tools[i], p);
        const std::string type = t.req_str("type");
        if (type != "function")
            bad_request(cat(p, ".type: tools of type '", type, "' are not supported (only 'function')"), p + ".type");
        Obj f = t.req_obj("function");
        if (f.req_str("name").empty()) bad_request(cat(f.path("name"), ": a tool needs a name"), f.path("name"));
        f.opt_str("description");
        if (const json* params = f.get("parameters"); params && !params->is_object())
            bad_request(cat(f.path("parameters"), ": expected a JSON schema object, got ", json_kind(*params)),
                        f.path("parameters"));
    }
    return tools.empty() ? std::string() : tools.dump();
}

}  // namespace dsv4::server
