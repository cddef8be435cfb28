#include "runtime/session.h"

#include <algorithm>

#include "core/error.h"

namespace dsv4 {

Session::Session(const Model& model, PrefillOptions options)
    : model_(model), opt_(std::move(options)), state_(model.config()) {
    if (opt_.band <= 0 || opt_.frontier_bands <= 0) throw UsageError("band and frontier must be positive");
}

void Session::prefill(const int32_t* tokens, int64_t n, float* last_logits, float* hidden, int64_t hidden_rows) {
    if (n <= 0) fail("prefill of no tokens");
    const ModelConfig& c = model_.config();
    if (c.max_positions > 0 && state_.pos + n > c.max_positions)
        fail("prompt of ", n, " tokens at position ", state_.pos, " exceeds the context length ", c.max_positions);
    const int64_t step = opt_.band * opt_.frontier_bands;
    admit(estimate_prefill(c, n, step, false), opt_.admission, cat("prefill of ", n, " tokens"));
    ForwardOptions fo;
    fo.band = opt_.band;
    const int64_t nD = int64_t(c.hc_mult) * c.hidden;
    const int64_t tail = hidden ? n - std::min(n, std::max<int64_t>(hidden_rows, 0)) : n;  // first row kept
    for (int64_t done = 0; done < n;) {
        int64_t k = std::min(step, n - done);
        bool last = done + k == n;
        const int64_t from = std::max(tail, done);  // rows of this step that are in the tail
        fo.hidden = from < done + k ? hidden + (from - tail) * nD : nullptr;
        fo.hidden_from = from - done;
        fo.logits = last ? Logits::Last : Logits::None;
        if (last) last_logits_.resize(size_t(c.vocab));
        model_.forward(tokens + done, k, state_, last ? last_logits_.data() : nullptr, fo);
        tokens_.insert(tokens_.end(), tokens + done, tokens + done + k);
        done += k;
        if (opt_.progress) opt_.progress(done, n);
    }
    if (last_logits) std::copy(last_logits_.begin(), last_logits_.end(), last_logits);
}

void Session::decode(const int32_t* tokens, int64_t K, float* logits, float* hidden) {
    ForwardOptions fo;
    fo.band = opt_.band;
    fo.logits = Logits::All;
    fo.hidden = hidden;
    const ModelConfig& c = model_.config();
    if (K <= 0) fail("decode of no tokens");
    if (c.max_positions > 0 && state_.pos + K > c.max_positions)
        fail("decoding at position ", state_.pos, " would exceed the context length ", c.max_positions);
    model_.forward(tokens, K, state_, logits, fo);
    tokens_.insert(tokens_.end(), tokens, tokens + K);
    last_logits_.assign(logits + (K - 1) * c.vocab, logits + K * c.vocab);
}

void Session::rewind(const SessionMark& m) {
    state_.rewind(m.state);
    tokens_.resize(m.n_tokens);
    last_logits_.clear();
}

void Session::reset() {
    state_ = State(model_.config());
    tokens_.clear();
    last_logits_.clear();
}

}  // namespace dsv4
