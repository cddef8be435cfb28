#include "server/sse.h"

namespace dsv4::server {

std::string sse_event(std::string_view event, std::string_view data) {
    std::string out;
    out.reserve(data.size() + event.size() + 16);
    if (!event.empty()) {
        out += "event: ";
        out += event;
        out += '\n';
    }
    // A lone "\r" also ends a line for EventSource parsers: split on \r\n, \n and \r alike.
    size_t start = 0;
    for (;;) {
        size_t eol = data.find_first_of("\r\n", start);
        out += "data: ";
        out += data.substr(start, eol == std::string_view::npos ? std::string_view::npos : eol - start);
        out += '\n';
        if (eol == std::string_view::npos) break;
        // (a break at the very end still gets its empty data line, so the payload round-trips)
        start = eol + (data[eol] == '\r' && eol + 1 < data.size() && data[eol + 1] == '\n' ? 2 : 1);
    }
    out += '\n';
    return out;
}

std::string sse_json(std::string_view event, const nlohmann::json& data) {
    // dump() escapes control characters, so JSON text is always one line; invalid UTF-8 from a
    // cut-off token is replaced rather than thrown on.
    return sse_event(event, data.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

}  // namespace dsv4::server
