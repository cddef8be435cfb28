#include "server/timings.h"

#include <cmath>

namespace dsv4::server {

namespace {
// Seconds to the microsecond and rates to 0.01 tok/s: enough for receipts, short on the wire.
double round_to(double x, double unit) {
    const double scale = std::round(1.0 / unit);  // dividing by an exact integer keeps the decimal short
    return std::round(x * scale) / scale;
}
}  // namespace

nlohmann::json to_json(const ServerTimings& t) {
    nlohmann::json j{
        {"prompt_tokens", t.prompt_tokens},
        {"cached_tokens", t.cached_tokens},
        {"prefix_cache", t.cache_hit ? "hit" : "miss"},
        {"prefill_tokens", t.prefilled_tokens()},
        {"queue_s", round_to(t.queue_s, 1e-6)},
        {"prefill_s", round_to(t.prefill_s, 1e-6)},
        {"prefill_tok_s", round_to(t.prefill_tok_s(), 0.01)},
        {"generated_tokens", t.generated_tokens},
        {"decode_s", round_to(t.decode_s, 1e-6)},
        {"decode_tok_s", round_to(t.decode_tok_s(), 0.01)},
        {"total_s", round_to(t.total_s, 1e-6)},
        {"stop", t.stop},
    };
    if (t.speculative) {
        const SpeculativeTimings& s = *t.speculative;
        j["speculative"] = {{"method", s.method},
                            {"rounds", s.rounds},
                            {"drafted_tokens", s.drafted_tokens},
                            {"accepted_tokens", s.accepted_tokens},
                            {"acceptance", round_to(s.acceptance(), 1e-4)}};
    }
    return j;
}

}  // namespace dsv4::server
