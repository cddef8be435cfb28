// Typed reads of request fields. Every failure is a 400 ApiError that names the field by its
// path ("messages[2].content") and says what was expected and what came, so a client sees
// exactly which part of its request is wrong.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace dsv4::server {

using nlohmann::json;

// "string", "number", "object", ... of a JSON value, for error messages.
const char* json_kind(const json& v);

// Parses a request body; malformed JSON or a non-object is a 400.
json parse_body(const std::string& body);

// A view of one JSON object of the request and its path. A member that is JSON null counts as
// absent (clients often send "stop": null).
class Obj {
public:
    Obj(const json& j, std::string path);  // 400 unless j is an object

    const json& value() const { return j_; }
    const std::string& path() const { return path_; }
    std::string path(std::string_view key) const;

    const json* get(std::string_view key) const;
    bool has(std::string_view key) const { return get(key) != nullptr; }

    std::string req_str(std::string_view key) const;
    std::optional<std::string> opt_str(std::string_view key) const;
    std::optional<int64_t> opt_int(std::string_view key, int64_t lo, int64_t hi) const;
    std::optional<double> opt_num(std::string_view key, double lo, double hi) const;
    std::optional<bool> opt_bool(std::string_view key) const;
    const json& req_array(std::string_view key) const;
    const json* opt_array(std::string_view key) const;
    Obj req_obj(std::string_view key) const;
    std::optional<Obj> opt_obj(std::string_view key) const;

private:
    const json& j_;
    std::string path_;
};

// Element path helper: "messages" + 3 -> "messages[3]".
std::string index_path(const std::string& path, size_t i);

// A value that must be an integer in [lo, hi] (integral floats such as 100.0 pass).
int64_t as_int(const json& v, const std::string& path, int64_t lo, int64_t hi);
double as_num(const json& v, const std::string& path, double lo, double hi);
const std::string& as_str(const json& v, const std::string& path);

}  // namespace dsv4::server
