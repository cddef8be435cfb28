#include <random>

#include "server/endpoint.h"

namespace dsv4::server {

std::string openai_finish_reason(const GenResult& r) {
    if (!r.output.tool_calls.empty()) return "tool_calls";
    if (r.stop == StopReason::Length || r.stop == StopReason::ContextFull) return "length";
    return "stop";
}

std::string random_id(const std::string& prefix) {
    // Ids only have to be unique, not secret; one generator per thread avoids a lock.
    thread_local std::mt19937_64 rng{std::random_device{}()};
    static const char digits[] = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
    std::string id = prefix;
    for (int i = 0; i < 24; ++i) id += digits[rng() % 62];
    return id;
}

}  // namespace dsv4::server
