#include "server/dsml_parser.h"

#include <map>

#include <nlohmann/json.hpp>

namespace dsv4::server {

namespace {
const std::string kD(kDsml);
const std::string kThinkEndS(kThinkEnd);
const std::string kCallsBegin = "<" + kD + "tool_calls>";
const std::string kCallsEnd = "</" + kD + "tool_calls>";
const std::string kInvokeOpen = "<" + kD + "invoke";
const std::string kInvokeClose = "</" + kD + "invoke>";
const std::string kParamOpen = "<" + kD + "parameter";
const std::string kParamClose = "</" + kD + "parameter>";

bool is_ws(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

// Length of the longest suffix of s that is a proper prefix of marker: those bytes may yet
// become the marker, so they are not reported.
size_t held_suffix(std::string_view s, std::string_view marker) {
    size_t n = std::min(s.size(), marker.size() - 1);
    for (; n > 0; --n)
        if (s.substr(s.size() - n) == marker.substr(0, n)) return n;
    return 0;
}

bool is_prefix_of(std::string_view s, std::string_view full) { return s.size() <= full.size() && full.substr(0, s.size()) == s; }

enum class TagParse { Ok, Incomplete, Malformed };

// Attributes key="value" from s[pos..] up to the closing '>' (outside quotes); end is the index
// just past '>'.
TagParse parse_attrs(std::string_view s, size_t pos, size_t& end, std::map<std::string, std::string>& attrs) {
    for (;;) {
        while (pos < s.size() && is_ws(s[pos])) ++pos;
        if (pos >= s.size()) return TagParse::Incomplete;
        if (s[pos] == '>') {
            end = pos + 1;
            return TagParse::Ok;
        }
        size_t eq = pos;
        while (eq < s.size() && s[eq] != '=' && s[eq] != '>' && !is_ws(s[eq])) ++eq;
        if (eq >= s.size()) return TagParse::Incomplete;
        if (s[eq] != '=' || eq == pos) return TagParse::Malformed;
        if (eq + 1 >= s.size()) return TagParse::Incomplete;
        if (s[eq + 1] != '"') return TagParse::Malformed;
        size_t close = s.find('"', eq + 2);
        if (close == std::string_view::npos) return TagParse::Incomplete;
        attrs[std::string(s.substr(pos, eq - pos))] = std::string(s.substr(eq + 2, close - eq - 2));
        pos = close + 1;
    }
}
}  // namespace

bool parse_invoke(std::string_view name, std::string_view body, ToolCall& call) {
    nlohmann::ordered_json args = nlohmann::ordered_json::object();
    size_t pos = 0;
    for (;;) {
        while (pos < body.size() && is_ws(body[pos])) ++pos;
        if (pos >= body.size()) break;
        if (body.compare(pos, kParamOpen.size(), kParamOpen) != 0) return false;
        std::map<std::string, std::string> attrs;
        size_t value_start = 0;
        if (parse_attrs(body, pos + kParamOpen.size(), value_start, attrs) != TagParse::Ok) return false;
        size_t close = body.find(kParamClose, value_start);
        if (close == std::string_view::npos || !attrs.count("name")) return false;
        std::string value(body.substr(value_start, close - value_start));
        auto s = attrs.find("string");
        if (s != attrs.end() && s->second == "false") {
            // Declared JSON; a model that writes a bare word anyway still gets its text through.
            try {
                args[attrs["name"]] = nlohmann::ordered_json::parse(value);
            } catch (const nlohmann::json::exception&) {
                args[attrs["name"]] = value;
            }
        } else {
            args[attrs["name"]] = value;
        }
        pos = close + kParamClose.size();
    }
    call.name = std::string(name);
    call.arguments = args.dump();
    return !call.name.empty();
}

OutputParser::OutputParser(bool thinking) : mode_(thinking ? Mode::Reasoning : Mode::Text) {}

void OutputParser::emit(OutputEvent::Kind kind, std::string text, std::vector<OutputEvent>& ev) {
    if (text.empty()) return;
    if (kind == OutputEvent::Kind::Reasoning) out_.reasoning += text;
    else out_.text += text;
    OutputEvent e;
    e.kind = kind;
    e.text = std::move(text);
    ev.push_back(std::move(e));
}

std::vector<OutputEvent> OutputParser::push(std::string_view piece) {
    buf_.append(piece);
    std::vector<OutputEvent> ev;
    run(ev, false);
    return ev;
}

std::vector<OutputEvent> OutputParser::finish() {
    std::vector<OutputEvent> ev;
    run(ev, true);
    return ev;
}

void OutputParser::run(std::vector<OutputEvent>& ev, bool final) {
    // Text whose end is decided: trailing whitespace waits in ws_held_ (the template puts "\n\n"
    // before a tool block; that belongs to no one).
    auto emit_text = [&](std::string_view s) {
        size_t body = s.size();
        while (body > 0 && is_ws(s[body - 1])) --body;
        if (body > 0) {
            emit(OutputEvent::Kind::Text, ws_held_ + std::string(s.substr(0, body)), ev);
            ws_held_.clear();
        }
        ws_held_.append(s.substr(body));
    };
    for (;;) {
        switch (mode_) {
            case Mode::Reasoning: {
                size_t pos = buf_.find(kThinkEndS);
                if (pos != std::string::npos) {
                    emit(OutputEvent::Kind::Reasoning, buf_.substr(0, pos), ev);
                    buf_.erase(0, pos + kThinkEndS.size());
                    mode_ = Mode::Text;
                    continue;
                }
                size_t keep = final ? 0 : held_suffix(buf_, kThinkEndS);
                emit(OutputEvent::Kind::Reasoning, buf_.substr(0, buf_.size() - keep), ev);
                buf_.erase(0, buf_.size() - keep);
                return;
            }
            case Mode::Text: {
                if (!text_started_) {
                    size_t ws = 0;
                    while (ws < buf_.size() && is_ws(buf_[ws])) ++ws;
                    buf_.erase(0, ws);
                    if (buf_.empty()) return;
                    text_started_ = true;
                }
                size_t pos = buf_.find(kCallsBegin);
                if (pos != std::string::npos) {
                    emit_text(std::string_view(buf_).substr(0, pos));
                    ws_held_.clear();
                    buf_.erase(0, pos + kCallsBegin.size());
                    mode_ = Mode::Tools;
                    continue;
                }
                size_t keep = final ? 0 : held_suffix(buf_, kCallsBegin);
                emit_text(std::string_view(buf_).substr(0, buf_.size() - keep));
                buf_.erase(0, buf_.size() - keep);
                if (final) {
                    emit(OutputEvent::Kind::Text, ws_held_, ev);
                    ws_held_.clear();
                }
                return;
            }
            case Mode::Tools: {
                size_t ws = 0;
                while (ws < buf_.size() && is_ws(buf_[ws])) ++ws;
                buf_.erase(0, ws);
                if (buf_.empty()) return;
                if (buf_.compare(0, kCallsEnd.size(), kCallsEnd) == 0) {
                    buf_.erase(0, kCallsEnd.size());
                    mode_ = Mode::Text;
                    text_started_ = false;
                    continue;
                }
                if (buf_.compare(0, kInvokeOpen.size(), kInvokeOpen) == 0) {
                    std::map<std::string, std::string> attrs;
                    size_t body_start = 0;
                    TagParse tp = parse_attrs(buf_, kInvokeOpen.size(), body_start, attrs);
                    size_t close = tp == TagParse::Ok ? buf_.find(kInvokeClose, body_start) : std::string::npos;
                    if (tp == TagParse::Ok && close != std::string::npos) {
                        ToolCall call;
                        size_t end = close + kInvokeClose.size();
                        if (parse_invoke(attrs["name"], std::string_view(buf_).substr(body_start, close - body_start), call)) {
                            out_.tool_calls.push_back(call);
                            OutputEvent e;
                            e.kind = OutputEvent::Kind::ToolCall;
                            e.call = std::move(call);
                            e.call_index = out_.tool_calls.size() - 1;
                            ev.push_back(std::move(e));
                        } else {
                            emit(OutputEvent::Kind::Text, buf_.substr(0, end), ev);
                        }
                        buf_.erase(0, end);
                        continue;
                    }
                    if (tp != TagParse::Malformed && !final) return;  // the invoke is still being written
                } else if (!final && (is_prefix_of(buf_, kCallsEnd) || is_prefix_of(buf_, kInvokeOpen))) {
                    return;  // a tag still being written
                }
                // Not DSML: up to the next tag (or all of it at the end) is reported as text.
                size_t next = final ? std::string::npos : buf_.find("<" + kD, 1);
                size_t slash = final ? std::string::npos : buf_.find("</" + kD, 1);
                next = std::min(next, slash);
                if (next == std::string::npos) {
                    if (!final) return;
                    emit(OutputEvent::Kind::Text, buf_, ev);
                    buf_.clear();
                    return;
                }
                emit(OutputEvent::Kind::Text, buf_.substr(0, next), ev);
                buf_.erase(0, next);
                continue;
            }
        }
    }
}

}  // namespace dsv4::server
