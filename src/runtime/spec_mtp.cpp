#include "runtime/spec_mtp.h"

#include <algorithm>

#include "core/error.h"
#include "runtime/spec_draft_model.h"

namespace dsv4::spec {

namespace {

// Bytes one MTP step reads: its block (routed experts at top_k / n_experts) and the LM head.
double mtp_step_bytes(const Model& m) {
    if (!m.has_file()) return m.backend()->mtp_bytes_per_token();
    const ModelConfig& c = m.config();
    const std::string prefix = "blk." + std::to_string(c.n_layers) + ".";
    const double routed = c.n_experts > 0 ? double(c.top_k) / double(c.n_experts) : 1.0;
    double b = 0;
    for (const gguf::TensorInfo& t : m.file().tensors()) {
        if (t.name == "output.weight") b += double(t.nbytes);
        if (t.name.rfind(prefix, 0) == 0)
            b += double(t.nbytes) * (t.name.find("_exps") != std::string::npos ? routed : 1.0);
    }
    return b;
}

int32_t argmax(const std::vector<float>& x) {
    return int32_t(std::max_element(x.begin(), x.end()) - x.begin());
}

}  // namespace

MtpDrafter::MtpDrafter(const Model& model) : model_(model), state_(model.mtp_config()) {
    if (!model.has_mtp())
        throw UsageError(cat(model.name(), ": --spec mtp needs an MTP block (nextn_predict_layers), "
                                                  "and this model has none"));
    const double t = decode_step_bytes(model);
    cost_ = t > 0 ? mtp_step_bytes(model) / t : 1.0;
}

void MtpDrafter::queue(const float* hidden, const int32_t* next, int64_t n) {
    const ModelConfig& c = model_.config();
    const int64_t nD = int64_t(c.hc_mult) * c.hidden, keep = c.window;
    if (q_next_.empty()) q_pos_ = state_.pos;
    q_hidden_.insert(q_hidden_.end(), hidden, hidden + n * nD);
    q_next_.insert(q_next_.end(), next, next + n);
    const int64_t excess = int64_t(q_next_.size()) - keep;
    if (excess > 0) {  // the block never reads them again: its window is `keep` rows
        q_hidden_.erase(q_hidden_.begin(), q_hidden_.begin() + excess * nD);
        q_next_.erase(q_next_.begin(), q_next_.begin() + excess);
        q_pos_ += excess;
        q_dropped_ = true;
    }
}

void MtpDrafter::flush() {
    if (q_next_.empty()) return;
    if (q_dropped_) {  // start the block's State again at the first queued position
        state_ = State(model_.mtp_config());
        state_.pos = q_pos_;
        q_dropped_ = false;
    }
    const ModelConfig& c = model_.config();
    const int64_t n = int64_t(q_next_.size());
    out_.resize(size_t(c.hc_mult) * size_t(c.hidden));
    ForwardOptions fo{Logits::None};
    fo.hidden = out_.data();
    fo.hidden_from = n - 1;
    model_.mtp_forward(q_hidden_.data(), q_next_.data(), n, state_, nullptr, fo);
    q_hidden_.clear();
    q_next_.clear();
    ready_ = true;
}

void MtpDrafter::start(const StartContext& ctx) {
    const int64_t N = int64_t(ctx.tokens.size()), K = std::min<int64_t>(ctx.hidden.rows, N - 1);
    if (N < 1) fail("mtp: start() without tokens");
    // Rows are the positions N-1-K .. N-2, paired with the tokens after them. None (the
    // session held the whole prompt already): the block starts empty and drafts from the
    // first round's streams on.
    state_ = State(model_.mtp_config());
    state_.pos = N - 1 - K;
    proposed_ = false;
    ready_ = false;
    q_hidden_.clear();
    q_next_.clear();
    q_dropped_ = false;
    if (K > 0) queue(ctx.hidden.data + (ctx.hidden.rows - K) * ctx.hidden.width, ctx.tokens.data() + (N - K), K);
}

void MtpDrafter::propose(const DraftRequest& req, Draft& draft) {
    draft.clear();
    if (req.max_tokens <= 0) return;
    flush();
    if (!ready_) return;
    const ModelConfig& c = model_.config();
    const int64_t nD = int64_t(c.hc_mult) * c.hidden;
    logits_.resize(size_t(c.vocab));
    model_.mtp_head(out_.data(), 1, logits_.data());
    mark_ = state_.mark();
    proposed_ = true;
    draft.tokens.push_back(argmax(logits_));
    chain_logits_.resize(size_t(c.vocab));
    chain_out_ = out_;
    std::vector<float> next_out(static_cast<size_t>(nD));
    for (int i = 1; i < req.max_tokens; ++i) {
        if (c.max_positions > 0 && state_.pos + 1 >= c.max_positions) break;
        ForwardOptions fo{Logits::Last};
        fo.hidden = next_out.data();
        model_.mtp_forward(chain_out_.data(), &draft.tokens.back(), 1, state_, chain_logits_.data(), fo);
        chain_out_.swap(next_out);
        draft.tokens.push_back(argmax(chain_logits_));
    }
}

void MtpDrafter::extend(std::span<const int32_t> tokens, const HiddenRows& hidden) {
    if (tokens.empty() || hidden.rows != int64_t(tokens.size()))
        fail("mtp: extend() needs one row of target streams per committed token");
    if (proposed_) state_.rewind(mark_);  // drop the chained steps: the true streams replace them
    proposed_ = false;
    queue(hidden.data, tokens.data(), int64_t(tokens.size()));
}

}  // namespace dsv4::spec
