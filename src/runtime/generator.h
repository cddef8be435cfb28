// The generation loop every front end uses (dsv4 run, the server, bench, eval): prefill the
// part of the prompt the session does not hold yet, then sample and decode token by token,
// streaming text as it becomes final, until a stop condition.
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
#include "tokenizer/tokenizer.h"

namespace dsv4 {

struct GenerateOptions {
    int64_t max_tokens = 256;        // generated tokens at most (>= 0)
    SamplingParams sampling;
    std::vector<std::string> stop;   // stop strings: the text ends before the first one
    bool ignore_eos = false;         // keep going past the end-of-sequence token
};

enum class StopReason { Length, Eos, StopString, Cancelled, ContextFull };
const char* to_string(StopReason r);  // "length", "eos", "stop", "cancelled", "context"

struct GenerateStats {
    int64_t prompt_tokens = 0;   // tokens of the prompt
    int64_t cached_tokens = 0;   // of which the session already held (not prefilled again)
    double prefill_s = 0;        // prefilling the rest, up to the first token's logits
    int64_t gen_tokens = 0;      // tokens sampled (an end-of-sequence token counts)
    int64_t decode_steps = 0;    // decode forwards run
    double decode_s = 0;         // time in decode forwards and sampling after the first token
    StopReason stop = StopReason::Length;
    std::vector<int32_t> tokens; // the generated ids (the end-of-sequence token included)
    std::string text;            // the generated text, as streamed
    std::string stop_string;     // which stop string ended it (StopReason::StopString)

    double prefill_tok_s() const;  // (prompt - cached) / prefill_s
    double decode_tok_s() const;   // decode_steps / decode_s
};

struct GenerateEvents {
    std::function<void(std::string_view text)> on_text;  // final text pieces, in order
    const std::atomic<bool>* cancel = nullptr;           // checked before every token
    // (prefill progress is the session's PrefillOptions::progress)
};

// Runs prompt through session and generates. When the session's tokens are a prefix of the
// prompt (a cached conversation), only the rest is prefilled; otherwise the session is reset
// first. On return the session holds the prompt and every generated token but the last one.
GenerateStats generate(Session& session, const Tokenizer& tokenizer, std::span<const int32_t> prompt,
                       const GenerateOptions& options, const GenerateEvents& events = {});

}  // namespace dsv4
