#include "runtime/spec_factory.h"

#include "core/error.h"
#include "runtime/spec_draft_model.h"
#include "runtime/spec_dspark.h"
#include "runtime/spec_mtp.h"

namespace dsv4::spec {

SpecChoice parse_spec(const std::string& spec) {
    auto with_file = [&](SpecChoice::Kind kind, size_t prefix) {
        if (spec.size() == prefix) throw UsageError(cat("--spec ", spec, "FILE needs a file name"));
        return SpecChoice{kind, spec.substr(prefix), spec};
    };
    if (spec == "off") return {SpecChoice::Kind::Off, "", spec};
    if (spec == "mtp") return {SpecChoice::Kind::Mtp, "", spec};
    if (spec.rfind("draft:", 0) == 0) return with_file(SpecChoice::Kind::Draft, 6);
    if (spec.rfind("dspark:", 0) == 0) return with_file(SpecChoice::Kind::Dspark, 7);
    throw UsageError(cat("--spec ", spec, ": expected off, mtp, draft:FILE or dspark:FILE"));
}

DrafterFactory::DrafterFactory(const SpecChoice& choice, const Model& target, PrefillOptions draft_prefill)
    : choice_(choice), target_(target), draft_prefill_(std::move(draft_prefill)) {
    draft_prefill_.progress = nullptr;  // the draft model's prompt is its own business
    switch (choice_.kind) {
        case SpecChoice::Kind::Off: break;
        case SpecChoice::Kind::Mtp: {
            MtpDrafter check(target);  // refuses a model without the block
            break;
        }
        // On the target's backend: a draft model left on the CPU beside a GPU target costs
        // more per proposal than the target's verification (measured on the H200).
        case SpecChoice::Kind::Draft: draft_model_ = std::make_unique<Model>(choice_.file, target.backend_name()); break;
        case SpecChoice::Kind::Dspark: dspark_ = std::make_unique<Dspark>(choice_.file, target); break;
    }
    if (draft_model_) DraftModelDrafter(*draft_model_, target, choice_.text, draft_prefill_);  // refuses another vocabulary
}

DrafterFactory::~DrafterFactory() = default;

std::unique_ptr<Drafter> DrafterFactory::make() const {
    switch (choice_.kind) {
        case SpecChoice::Kind::Off: return nullptr;
        case SpecChoice::Kind::Mtp: return std::make_unique<MtpDrafter>(target_);
        case SpecChoice::Kind::Draft:
            return std::make_unique<DraftModelDrafter>(*draft_model_, target_, choice_.text, draft_prefill_);
        case SpecChoice::Kind::Dspark: return std::make_unique<DsparkDrafter>(*dspark_, target_, choice_.text);
    }
    return nullptr;
}

}  // namespace dsv4::spec
