// One sequence being processed: the model's State plus the tokens it has consumed. Prompts
// are prefilled in bands; decoding appends one token (or K, for speculative verification).
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "model/model.h"
#include "model/state.h"
#include "runtime/admission.h"

namespace dsv4 {

struct PrefillOptions {
    int64_t band = 2048;     // queries attended together
    int frontier_bands = 5;  // bands per physical step: weights are read once per step
    AdmissionPolicy admission;
    std::function<void(int64_t done, int64_t total)> progress;  // after each step
};

struct SessionMark {
    StateMark state;
    size_t n_tokens = 0;
};

class Session {
public:
    Session(const Model& model, PrefillOptions options = {});

    const Model& model() const { return model_; }
    const State& state() const { return state_; }
    const std::vector<int32_t>& tokens() const { return tokens_; }
    int64_t position() const { return state_.pos; }
    const PrefillOptions& options() const { return opt_; }

    // Appends n tokens in steps of band x frontier_bands tokens (layer-major inside a step,
    // committed in order); writes the last token's logits [vocab] to last_logits unless it is
    // null (they are kept in last_logits() either way). Refused up front, with the state
    // untouched, when memory admission says no or the context would overflow. When hidden is
    // given it receives the pre-head streams [min(n, hidden_rows), hc_mult * hidden] of the
    // last hidden_rows tokens (a drafter's window).
    void prefill(const int32_t* tokens, int64_t n, float* last_logits, float* hidden = nullptr,
                 int64_t hidden_rows = 0);
    // Appends K tokens in one forward; logits [K, vocab]; hidden (optional) [K, hc_mult * hidden].
    void decode(const int32_t* tokens, int64_t K, float* logits, float* hidden = nullptr);

    SessionMark mark() const { return {state_.mark(), tokens_.size()}; }
    // Back to a mark of this session; last_logits() is empty until the next prefill/decode.
    void rewind(const SessionMark& m);
    // Back to no tokens at all.
    void reset();

    // The logits after the last token consumed ([vocab]); empty after a rewind or reset.
    const std::vector<float>& last_logits() const { return last_logits_; }

private:
    const Model& model_;
    PrefillOptions opt_;
    State state_;
    std::vector<int32_t> tokens_;
    std::vector<float> last_logits_;
};

}  // namespace dsv4
