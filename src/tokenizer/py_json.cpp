#include "tokenizer/py_json.h"

#include <cstdio>

namespace dsv4 {
namespace {

void put_string(const std::string& s, std::string& out) {
    out += '"';
    for (char ch : s) {
        const unsigned char c = static_cast<unsigned char>(ch);
        switch (c) {
            case '"': out += "\\\""; break;
            case '\\': out += "\\\\"; break;
            case '\n': out += "\\n"; break;
            case '\r': out += "\\r"; break;
            case '\t': out += "\\t"; break;
            case '\b': out += "\\b"; break;
            case '\f': out += "\\f"; break;
            default:
                if (c < 0x20) {
                    char buf[8];
                    std::snprintf(buf, sizeof buf, "\\u%04x", c);
                    out += buf;
                } else {
                    out += ch;
                }
        }
    }
    out += '"';
}

void put(const nlohmann::ordered_json& v, std::string& out) {
    if (v.is_object()) {
        out += '{';
        bool first = true;
        for (const auto& [key, item] : v.items()) {
            if (!first) out += ", ";
            first = false;
            put_string(key, out);
            out += ": ";
            put(item, out);
        }
        out += '}';
    } else if (v.is_array()) {
        out += '[';
        for (size_t i = 0; i < v.size(); ++i) {
            if (i) out += ", ";
            put(v[i], out);
        }
        out += ']';
    } else if (v.is_string()) {
        put_string(v.get_ref<const std::string&>(), out);
    } else {
        out += v.dump();  // numbers, booleans, null: the same spelling as Python's
    }
}

}  // namespace

std::string python_json(const nlohmann::ordered_json& value) {
    std::string out;
    put(value, out);
    return out;
}

}  // namespace dsv4
