// The stage timings every response carries in its "timings" object (and the stream's last
// event), in the spirit of lucebox-hub's DeepSeek-V4 receipts: how much of the prompt came from
// the prefix cache, how long prefill and decode took, and at what rate.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace dsv4::server {

// Speculative decoding's figures, set when the server runs with --spec ("timings.speculative"
// then appears in every dialect's response; absent otherwise).
struct SpeculativeTimings {
    std::string method;           // "mtp", "draft:FILE", ...
    int64_t rounds = 0;           // verification forwards
    int64_t drafted_tokens = 0;   // tokens proposed
    int64_t accepted_tokens = 0;  // of which the target model accepted
    double acceptance() const { return drafted_tokens > 0 ? double(accepted_tokens) / double(drafted_tokens) : 0.0; }
};

struct ServerTimings {
    int64_t prompt_tokens = 0;
    int64_t cached_tokens = 0;     // prompt tokens the prefix cache already held (not prefilled)
    bool cache_hit = false;        // a cached session was reused
    double queue_s = 0;            // waiting for a free session slot
    double prefill_s = 0;          // prefilling prompt_tokens - cached_tokens, up to the first token's logits
    int64_t generated_tokens = 0;  // tokens sampled (the end-of-sequence token included)
    int64_t decode_steps = 0;      // decode forwards
    double decode_s = 0;
    double total_s = 0;            // from arrival to the last token
    std::string stop;              // "eos", "length", "stop", "cancelled", "context"
    std::optional<SpeculativeTimings> speculative;

    int64_t prefilled_tokens() const { return prompt_tokens - cached_tokens; }
    double prefill_tok_s() const { return prefill_s > 0 ? double(prefilled_tokens()) / prefill_s : 0.0; }
    // Tokens out of decode forwards (all but the first, sampled after the prefill) per second:
    // a speculative round yields several, so decode_steps would understate the rate.
    int64_t decoded_tokens() const { return generated_tokens > 0 ? generated_tokens - 1 : 0; }
    double decode_tok_s() const { return decode_s > 0 ? double(decoded_tokens()) / decode_s : 0.0; }
};

nlohmann::json to_json(const ServerTimings& t);

}  // namespace dsv4::server
