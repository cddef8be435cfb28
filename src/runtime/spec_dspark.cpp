#include "runtime/spec_dspark.h"

#include <algorithm>

#include "core/error.h"
#include "runtime/spec_draft_model.h"

namespace dsv4::spec {

DsparkDrafter::DsparkDrafter(const Dspark& dspark, const Model& target, std::string name)
    : dspark_(dspark), name_(std::move(name)) {
    // One pass reads the drafter's own weights once and the LM head once per slot.
    const gguf::TensorInfo* out = target.file().find_tensor("output.weight");
    const double head = out ? double(out->nbytes) : 0.0, own = double(dspark.file_bytes());
    const double t = decode_step_bytes(target);
    const int W = dspark.config().block;
    cost_ = t > 0 ? (own / W + head) / t : 1.0;
}

void DsparkDrafter::start(const StartContext& ctx) {
    if (ctx.tokens.empty() || ctx.hidden.rows < 1) fail(name_, ": start() needs the streams before the last token");
    anchor_.assign(ctx.hidden.row(ctx.hidden.rows - 1), ctx.hidden.row(ctx.hidden.rows - 1) + ctx.hidden.width);
    last_ = ctx.tokens.back();
}

void DsparkDrafter::propose(const DraftRequest& req, Draft& draft) {
    draft.clear();
    if (last_ < 0) fail(name_, ": propose() before start()");
    const DsparkConfig& c = dspark_.config();
    const int W = std::min(req.max_tokens, c.block);
    if (W <= 0) return;
    base_.resize(size_t(W) * size_t(c.vocab));
    conf_.resize(size_t(W));
    dspark_.propose(anchor_.data(), last_, W, base_.data(), conf_.data());
    int32_t prev = last_;
    for (int j = 0; j < W; ++j) {
        logits_.assign(base_.begin() + ptrdiff_t(j) * c.vocab, base_.begin() + ptrdiff_t(j + 1) * c.vocab);
        dspark_.add_markov(prev, logits_.data());
        const int32_t d = int32_t(std::max_element(logits_.begin(), logits_.end()) - logits_.begin());
        draft.tokens.push_back(d);
        draft.confidence.push_back(conf_[size_t(j)]);
        if (req.keep && !req.keep(draft.confidence)) {
            draft.tokens.pop_back();
            draft.confidence.pop_back();
            break;
        }
        prev = d;
    }
}

void DsparkDrafter::extend(std::span<const int32_t> tokens, const HiddenRows& hidden) {
    if (tokens.empty() || hidden.rows != int64_t(tokens.size()))
        fail(name_, ": extend() needs one row of target streams per committed token");
    anchor_.assign(hidden.row(hidden.rows - 1), hidden.row(hidden.rows - 1) + hidden.width);
    last_ = tokens.back();
}

}  // namespace dsv4::spec
