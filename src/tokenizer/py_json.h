// JSON text as Python's json.dumps(x, ensure_ascii=False) writes it, which is what the Jinja
// `tojson` filter of Hugging Face chat templates produces: ", " and ": " separators, keys in
// their given order, non-ASCII characters as they are.
#pragma once
#include <nlohmann/json.hpp>
#include <string>

namespace dsv4 {

std::string python_json(const nlohmann::ordered_json& value);

}  // namespace dsv4
