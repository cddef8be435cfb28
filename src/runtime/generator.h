// The generation loop every front end uses (dsv4 run, the server, bench, eval): prefill the
// part of the prompt the session does not hold yet, then sample and decode token by token, or
// several tokens per forward with speculative decoding (docs/SPECULATIVE.md) when a drafter is
// given, streaming text as it becomes final, until a stop condition.
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/sampler.h"
#include "runtime/session.h"
#include "runtime/spec_controller.h"
#include "runtime/spec_drafter.h"
#include "runtime/spec_stats.h"
#include "tokenizer/tokenizer.h"

namespace dsv4 {

struct GenerateOptions {
    int64_t max_tokens = 256;        // generated tokens at most (>= 0)
    SamplingParams sampling;
    std::vector<std::string> stop;   // stop strings: the text ends before the first one
    bool ignore_eos = false;         // keep going past the end-of-sequence token
    // Speculative decoding when set: proposes tokens that the model verifies several per
    // forward. Not owned; one per sequence (it keeps state for the session it drafts for).
    // Greedy output is token for token that of plain decoding; sampled output has the same
    // distribution (not the same draws).
    spec::Drafter* drafter = nullptr;
    spec::ControllerOptions spec;    // the adaptive width (cap, costs)
};

enum class StopReason { Length, Eos, StopString, Cancelled, ContextFull };
const char* to_string(StopReason r);  // "length", "eos", "stop", "cancelled", "context"

struct GenerateStats {
    int64_t prompt_tokens = 0;   // tokens of the prompt
    int64_t cached_tokens = 0;   // of which the session already held (not prefilled again)
    double prefill_s = 0;        // prefilling the rest, up to the first token's logits
    int64_t gen_tokens = 0;      // tokens sampled (an end-of-sequence token counts)
    int64_t decode_steps = 0;    // decode forwards run (one per speculative round)
    double decode_s = 0;         // time in decode forwards, drafting and sampling after the first token
    StopReason stop = StopReason::Length;
    std::vector<int32_t> tokens; // the generated ids (the end-of-sequence token included)
    std::string text;            // the generated text, as streamed
    std::string stop_string;     // which stop string ended it (StopReason::StopString)
    spec::SpecStats spec;        // speculative decoding's figures ("off" and why without it)

    // Tokens that came out of decode forwards: all but the first (sampled after the prefill).
    int64_t decoded_tokens() const { return gen_tokens > 0 ? gen_tokens - 1 : 0; }
    double prefill_tok_s() const;  // (prompt - cached) / prefill_s
    // decoded_tokens() / decode_s: equal to decode_steps / decode_s for plain decoding, and
    // the real rate with speculation (a round yields several tokens).
    double decode_tok_s() const;
};

struct GenerateEvents {
    std::function<void(std::string_view text)> on_text;  // final text pieces, in order
    const std::atomic<bool>* cancel = nullptr;           // checked before every token
    // (prefill progress is the session's PrefillOptions::progress)
};

// Runs prompt through session and generates. When the session's tokens are a prefix of the
// prompt (a cached conversation), only the rest is prefilled; otherwise the session is reset
// first. On return the session holds the prompt and a prefix of the generated tokens: every
// one but the last with plain decoding; with speculation it can lack the last round's
// tokens too (re-running them would cost a forward; a next turn prefills them if it comes).
// UsageError for a bad prompt, options or a drafter of another vocabulary.
GenerateStats generate(Session& session, const Tokenizer& tokenizer, std::span<const int32_t> prompt,
                       const GenerateOptions& options, const GenerateEvents& events = {});

}  // namespace dsv4
