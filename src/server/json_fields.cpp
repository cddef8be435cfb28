#include "server/json_fields.h"

#include <cmath>

#include "core/error.h"
#include "server/api_error.h"

namespace dsv4::server {

const char* json_kind(const json& v) {
    switch (v.type()) {
        case json::value_t::null: return "null";
        case json::value_t::object: return "an object";
        case json::value_t::array: return "an array";
        case json::value_t::string: return "a string";
        case json::value_t::boolean: return "a boolean";
        case json::value_t::number_integer:
        case json::value_t::number_unsigned:
        case json::value_t::number_float: return "a number";
        default: return "an unsupported value";
    }
}

json parse_body(const std::string& body) {
    if (body.empty()) bad_request("the request body is empty; send a JSON object");
    json j;
    try {
        j = json::parse(body);
    } catch (const json::parse_error& e) {
        // nlohmann's message carries the byte offset; that is what a client needs to find it.
        bad_request(cat("the request body is not valid JSON: ", e.what()));
    }
    if (!j.is_object()) bad_request(cat("the request body must be a JSON object, got ", json_kind(j)));
    return j;
}

std::string index_path(const std::string& path, size_t i) { return cat(path, "[", i, "]"); }

Obj::Obj(const json& j, std::string path) : j_(j), path_(std::move(path)) {
    if (!j.is_object()) bad_request(cat(path_.empty() ? "the body" : path_, ": expected an object, got ", json_kind(j)), path_);
}

std::string Obj::path(std::string_view key) const {
    return path_.empty() ? std::string(key) : cat(path_, ".", key);
}

const json* Obj::get(std::string_view key) const {
    auto it = j_.find(key);
    if (it == j_.end() || it->is_null()) return nullptr;
    return &*it;
}

const std::string& as_str(const json& v, const std::string& path) {
    if (!v.is_string()) bad_request(cat(path, ": expected a string, got ", json_kind(v)), path);
    return v.get_ref<const std::string&>();
}

int64_t as_int(const json& v, const std::string& path, int64_t lo, int64_t hi) {
    int64_t x = 0;
    if (v.is_number_integer()) {
        x = v.get<int64_t>();
    } else if (v.is_number_unsigned()) {
        uint64_t u = v.get<uint64_t>();
        if (u > uint64_t(hi)) bad_request(cat(path, ": ", u, " is out of range [", lo, ", ", hi, "]"), path);
        x = int64_t(u);
    } else if (v.is_number_float()) {
        double d = v.get<double>();
        if (!std::isfinite(d) || d != std::floor(d) || d < double(lo) || d > double(hi))
            bad_request(cat(path, ": expected an integer in [", lo, ", ", hi, "], got ", v.dump()), path);
        x = int64_t(d);
    } else {
        bad_request(cat(path, ": expected an integer, got ", json_kind(v)), path);
    }
    if (x < lo || x > hi) bad_request(cat(path, ": ", x, " is out of range [", lo, ", ", hi, "]"), path);
    return x;
}

double as_num(const json& v, const std::string& path, double lo, double hi) {
    if (!v.is_number()) bad_request(cat(path, ": expected a number, got ", json_kind(v)), path);
    double d = v.get<double>();
    if (!std::isfinite(d) || d < lo || d > hi) bad_request(cat(path, ": ", v.dump(), " is out of range [", lo, ", ", hi, "]"), path);
    return d;
}

std::string Obj::req_str(std::string_view key) const {
    const json* v = get(key);
    if (!v) bad_request(cat("missing required field '", path(key), "'"), path(key));
    return as_str(*v, path(key));
}

std::optional<std::string> Obj::opt_str(std::string_view key) const {
    const json* v = get(key);
    if (!v) return std::nullopt;
    return as_str(*v, path(key));
}

std::optional<int64_t> Obj::opt_int(std::string_view key, int64_t lo, int64_t hi) const {
    const json* v = get(key);
    if (!v) return std::nullopt;
    return as_int(*v, path(key), lo, hi);
}

std::optional<double> Obj::opt_num(std::string_view key, double lo, double hi) const {
    const json* v = get(key);
    if (!v) return std::nullopt;
    return as_num(*v, path(key), lo, hi);
}

std::optional<bool> Obj::opt_bool(std::string_view key) const {
    const json* v = get(key);
    if (!v) return std::nullopt;
    if (!v->is_boolean()) bad_request(cat(path(key), ": expected a boolean, got ", json_kind(*v)), path(key));
    return v->get<bool>();
}

const json& Obj::req_array(std::string_view key) const {
    const json* v = get(key);
    if (!v) bad_request(cat("missing required field '", path(key), "'"), path(key));
    if (!v->is_array()) bad_request(cat(path(key), ": expected an array, got ", json_kind(*v)), path(key));
    return *v;
}

const json* Obj::opt_array(std::string_view key) const {
    const json* v = get(key);
    if (v && !v->is_array()) bad_request(cat(path(key), ": expected an array, got ", json_kind(*v)), path(key));
    return v;
}

Obj Obj::req_obj(std::string_view key) const {
    const json* v = get(key);
    if (!v) bad_request(cat("missing required field '", path(key), "'"), path(key));
    return Obj(*v, path(key));
}

std::optional<Obj> Obj::opt_obj(std::string_view key) const {
    const json* v = get(key);
    if (!v) return std::nullopt;
    return Obj(*v, path(key));
}

}  // namespace dsv4::server
