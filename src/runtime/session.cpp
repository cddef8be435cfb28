#include "runtime/session.h"

#include <algorithm>

#include "core/error.h"

namespace dsv4 {

Session::Session(const Model& model, PrefillOptions options)
    : model_(model), opt_(std::move(options)), state_(model.config()) {
    if (opt_.band <= 0 || opt_.frontier_bands <= 0) throw UsageError("band and frontier must be positive");
}

void Session::prefill(const int32_t* tokens, int64_t n, float* last_logits) {
    if (n <= 0) fail("prefill of no tokens");
    const ModelConfig& c = model_.config();
    if (c.max_positions > 0 && state_.pos + n > c.max_positions)
        fail("prompt of ", n, " tokens at position ", state_.pos, " exceeds the context length ", c.max_positions);
    const int64_t step = opt_.band * opt_.frontier_bands;
    admit(estimate_prefill(c, n, step, false), opt_.admission, cat("prefill of ", n, " tokens"));
    ForwardOptions fo;
    fo.band = opt_.band;
    for (int64_t done = 0; done < n;) {
        int64_t k = std::min(step, n - done);
        bool last = done + k == n;
        fo.logits = last ? Logits::Last : Logits::None;
        model_.forward(tokens + done, k, state_, last ? last_logits : nullptr, fo);
        tokens_.insert(tokens_.end(), tokens + done, tokens + done + k);
        done += k;
        if (opt_.progress) opt_.progress(done, n);
    }
}

void Session::decode(const int32_t* tokens, int64_t K, float* logits) {
    ForwardOptions fo;
    fo.band = opt_.band;
    fo.logits = Logits::All;
    model_.forward(tokens, K, state_, logits, fo);
    tokens_.insert(tokens_.end(), tokens, tokens + K);
}

void Session::rewind(const SessionMark& m) {
    state_.rewind(m.state);
    tokens_.resize(m.n_tokens);
}

}  // namespace dsv4
