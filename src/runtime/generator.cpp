#include "runtime/generator.h"

#include <chrono>

#include "core/error.h"
#include "runtime/text_stream.h"

namespace dsv4 {

namespace {
double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// How many leading tokens of the prompt the session already holds; 0 means start over. The
// logits after them are needed only when the prompt has nothing more to prefill, so a session
// rewound to a mark (whose logits are gone) is still reused for a longer prompt.
size_t reusable_prefix(const Session& s, std::span<const int32_t> prompt) {
    const std::vector<int32_t>& have = s.tokens();
    if (have.empty() || have.size() > prompt.size()) return 0;
    if (have.size() == prompt.size() && s.last_logits().empty()) return 0;
    for (size_t i = 0; i < have.size(); ++i)
        if (have[i] != prompt[i]) return 0;
    return have.size();
}
}  // namespace

const char* to_string(StopReason r) {
    switch (r) {
        case StopReason::Length: return "length";
        case StopReason::Eos: return "eos";
        case StopReason::StopString: return "stop";
        case StopReason::Cancelled: return "cancelled";
        case StopReason::ContextFull: return "context";
    }
    return "?";
}

double GenerateStats::prefill_tok_s() const {
    return prefill_s > 0 ? double(prompt_tokens - cached_tokens) / prefill_s : 0.0;
}
double GenerateStats::decode_tok_s() const { return decode_s > 0 ? double(decode_steps) / decode_s : 0.0; }

GenerateStats generate(Session& s, const Tokenizer& tok, std::span<const int32_t> prompt, const GenerateOptions& o,
                       const GenerateEvents& ev) {
    const ModelConfig& c = s.model().config();
    if (prompt.empty()) throw UsageError("the prompt has no tokens");
    if (o.max_tokens < 0) throw UsageError(cat("max_tokens ", o.max_tokens, " is negative"));
    for (int32_t t : prompt)
        if (t < 0 || t >= c.vocab) throw UsageError(cat("prompt token ", t, " is outside the vocabulary of ", c.vocab));
    if (c.max_positions > 0 && int64_t(prompt.size()) > c.max_positions)
        throw UsageError(cat("the prompt has ", prompt.size(), " tokens; the context length is ", c.max_positions));
    Sampler sampler(o.sampling);

    GenerateStats st;
    st.prompt_tokens = int64_t(prompt.size());
    auto t0 = std::chrono::steady_clock::now();
    size_t cached = reusable_prefix(s, prompt);
    if (cached == 0 && !s.tokens().empty()) s.reset();
    st.cached_tokens = int64_t(cached);
    if (cached < prompt.size()) {
        s.prefill(prompt.data() + cached, int64_t(prompt.size() - cached), nullptr);
    }
    std::vector<float> logits = s.last_logits();
    st.prefill_s = seconds_since(t0);

    TextStream text(o.stop);
    auto emit = [&](std::string piece) {
        if (piece.empty()) return;
        st.text += piece;
        if (ev.on_text) ev.on_text(piece);
    };
    std::vector<int32_t> history(s.tokens());
    auto t1 = std::chrono::steady_clock::now();
    st.stop = StopReason::Length;
    while (st.gen_tokens < o.max_tokens) {
        if (ev.cancel && ev.cancel->load()) {
            st.stop = StopReason::Cancelled;
            break;
        }
        int32_t id = sampler.sample(logits.data(), c.vocab, history);
        st.tokens.push_back(id);
        ++st.gen_tokens;
        if (id == tok.eos_id() && !o.ignore_eos) {
            st.stop = StopReason::Eos;
            break;
        }
        emit(text.push(tok.token_bytes(id)));
        if (text.stopped()) {
            st.stop = StopReason::StopString;
            st.stop_string = text.stop_found();
            break;
        }
        if (st.gen_tokens == o.max_tokens) break;
        if (c.max_positions > 0 && s.position() >= c.max_positions) {
            st.stop = StopReason::ContextFull;
            break;
        }
        s.decode(&id, 1, logits.data());
        ++st.decode_steps;
        history.push_back(id);
    }
    emit(text.finish());
    st.decode_s = seconds_since(t1);
    return st;
}

}  // namespace dsv4
