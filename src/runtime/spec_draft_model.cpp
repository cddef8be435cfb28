#include "runtime/spec_draft_model.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "core/error.h"

namespace dsv4::spec {

namespace {
// Keeps the draft's draws independent of the target's, which use the seed itself.
constexpr uint64_t kSeedMix = 0xD1B54A32D192ED03ull;

}  // namespace

double decode_step_bytes(const Model& m) {
    if (!m.has_file()) return m.backend()->decode_bytes_per_token();
    const ModelConfig& c = m.config();
    const double routed = c.n_experts > 0 ? double(c.top_k) / double(c.n_experts) : 1.0;
    double b = 0;
    for (const gguf::TensorInfo& t : m.file().tensors()) {
        if (t.name.rfind("token_embd", 0) == 0) continue;
        // The MTP blocks (blk.{n_layers + i}) are not part of a decode step.
        if (t.name.rfind("blk.", 0) == 0 && std::atoi(t.name.c_str() + 4) >= c.n_layers) continue;
        b += double(t.nbytes) * (t.name.find("_exps") != std::string::npos ? routed : 1.0);
    }
    return b;
}

DraftModelDrafter::DraftModelDrafter(const Model& draft, const Model& target, std::string name, PrefillOptions options,
                                     float temperature)
    : model_(draft), name_(std::move(name)), temperature_(temperature), session_(draft, std::move(options)) {
    if (std::isnan(temperature)) throw UsageError(cat(name_, ": the draft temperature is NaN"));
    if (draft.config().vocab != target.config().vocab)
        throw UsageError(cat(name_, ": the draft model has a vocabulary of ", draft.config().vocab,
                             " tokens, the model's is ", target.config().vocab, " (they must be the same)"));
    const double t = decode_step_bytes(target);
    cost_ = t > 0 ? decode_step_bytes(draft) / t : 1.0;
}

bool DraftModelDrafter::fits(size_t n) const {
    const int64_t max = model_.config().max_positions;
    return max <= 0 || session_.position() + int64_t(n) <= max;
}

void DraftModelDrafter::start(const StartContext& ctx) {
    if (ctx.tokens.empty()) fail(name_, ": start() without tokens");
    SamplingParams p = ctx.sampling ? *ctx.sampling : SamplingParams{};
    p.seed ^= kSeedMix;
    if (temperature_ >= 0) p.temperature = temperature_;
    sampler_.emplace(p);  // validates
    history_.assign(ctx.tokens.begin(), ctx.tokens.end());
    proposed_.clear();
    marks_.clear();
    // Reuse what the session holds when it is a prefix of the new context (a conversation
    // going on); anything else starts over.
    const std::vector<int32_t>& have = session_.tokens();
    size_t keep = have.size() < history_.size() && std::equal(have.begin(), have.end(), history_.begin()) ? have.size() : 0;
    if (keep == 0 && !have.empty()) session_.reset();
    unfed_.assign(history_.begin() + std::ptrdiff_t(keep), history_.end());
    // The prompt now (its cost belongs to the start, not to the first round); the last token
    // stays unfed, as the first proposal's input.
    if (unfed_.size() > 1 && fits(unfed_.size() - 1)) {
        session_.prefill(unfed_.data(), int64_t(unfed_.size() - 1), nullptr);
        unfed_.erase(unfed_.begin(), unfed_.end() - 1);
    }
}

void DraftModelDrafter::propose(const DraftRequest& req, Draft& out) {
    out.clear();
    proposed_.clear();
    marks_.clear();
    if (!sampler_) fail(name_, ": propose() before start()");
    // Token i needs the session to have run unfed + proposed[0..i).
    if (req.max_tokens <= 0 || !fits(unfed_.size())) return;
    const int max_pos = model_.config().max_positions;
    int W = req.max_tokens;
    if (max_pos > 0) W = int(std::min<int64_t>(W, max_pos - session_.position() - int64_t(unfed_.size()) + 1));
    const int V = model_.config().vocab;
    logits_.resize(size_t(V));
    if (unfed_.size() > 1) session_.prefill(unfed_.data(), int64_t(unfed_.size()), logits_.data());
    else session_.decode(unfed_.data(), 1, logits_.data());
    unfed_.clear();
    hist_ = history_;
    const bool greedy = sampler_->params().temperature == 0.0f;
    for (int i = 0; i < W; ++i) {
        if (i > 0) {
            marks_.push_back(session_.mark());
            session_.decode(&proposed_[size_t(i - 1)], 1, logits_.data());
        }
        int32_t d;
        if (greedy) {
            d = sampler_->sample(logits_.data(), V, hist_);  // the penalised argmax, no draw
        } else {
            sampler_->distribution(logits_.data(), V, hist_, probs_);
            d = sampler_->draw(probs_);
            out.q.insert(out.q.end(), probs_.begin(), probs_.end());
        }
        proposed_.push_back(d);
        out.tokens.push_back(d);
        hist_.push_back(d);
    }
    // proposed_ keeps every token drawn: the session ran proposed_[0 .. marks_.size()).
}

void DraftModelDrafter::extend(std::span<const int32_t> tokens, const HiddenRows&) {
    if (tokens.empty()) fail(name_, ": extend() with no tokens");
    history_.insert(history_.end(), tokens.begin(), tokens.end());
    // The session ran proposed_[0 .. ran); keep the longest run of them that the target
    // committed, short of the last new token (which stays unfed, the next input).
    const size_t ran = marks_.size();
    size_t m = 0;
    while (m < ran && m + 1 < tokens.size() && proposed_[m] == tokens[m]) ++m;
    if (m < ran) session_.rewind(marks_[m]);
    unfed_.insert(unfed_.end(), tokens.begin() + std::ptrdiff_t(m), tokens.end());
    proposed_.clear();
    marks_.clear();
}

}  // namespace dsv4::spec
