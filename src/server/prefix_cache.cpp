#include "server/prefix_cache.h"

#include <algorithm>

namespace dsv4::server {

Reuse reusable(std::span<const int32_t> held, std::optional<size_t> mark, std::span<const int32_t> prompt) {
    if (held.empty()) return {};
    if (held.size() <= prompt.size() && std::equal(held.begin(), held.end(), prompt.begin())) return {held.size(), false};
    if (mark && *mark > 0 && *mark <= held.size() && *mark < prompt.size() &&
        std::equal(held.begin(), held.begin() + std::ptrdiff_t(*mark), prompt.begin()))
        return {*mark, true};
    return {};
}

}  // namespace dsv4::server
