// Speculative drafting as the front ends name it (`--spec off | mtp | draft:FILE |
// dspark:FILE`): parsing, and a factory that loads what drafters share once (a draft model,
// a DSpark file) and makes one drafter per sequence (each keeps state for its session).
#pragma once
#include <memory>
#include <string>

#include "model/dspark.h"
#include "model/model.h"
#include "runtime/session.h"
#include "runtime/spec_drafter.h"

namespace dsv4::spec {

struct SpecChoice {
    enum class Kind { Off, Mtp, Draft, Dspark } kind = Kind::Off;
    std::string file;  // draft:FILE, dspark:FILE
    std::string text;  // as given ("off", "mtp", "draft:...", "dspark:...")
};

// UsageError naming the value when it is none of the forms above.
SpecChoice parse_spec(const std::string& spec);

class DrafterFactory {
public:
    // Loads the draft model or DSpark file (errors name the file and why it does not fit the
    // target). draft_prefill: the draft model's prefill options (its progress is dropped).
    DrafterFactory(const SpecChoice& choice, const Model& target, PrefillOptions draft_prefill = {});
    ~DrafterFactory();

    bool enabled() const { return choice_.kind != SpecChoice::Kind::Off; }
    const SpecChoice& choice() const { return choice_; }
    // A fresh drafter for one sequence; null when speculation is off.
    std::unique_ptr<Drafter> make() const;

private:
    SpecChoice choice_;
    const Model& target_;
    PrefillOptions draft_prefill_;
    std::unique_ptr<Model> draft_model_;
    std::unique_ptr<Dspark> dspark_;
};

}  // namespace dsv4::spec
