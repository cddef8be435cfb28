// What speculative decoding did in one generate() call: rounds, acceptance, time. Filled by the
// generator; printed by dsv4 run; the same field names go into bench receipts and server
// timings through to_json().
#pragma once
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

namespace dsv4::spec {

struct SpecStats {
    std::string method = "off";  // the drafter's name(), "off" without one
    // Why no round verified any draft tokens; empty when some did. "not requested" without a
    // drafter; otherwise the generator names the cause (controller fallback, length, context).
    std::string off_reason = "not requested";
    int64_t rounds = 0;          // verification forwards that carried drafts
    int64_t plain_rounds = 0;    // forwards without drafts while a drafter was set
    int64_t probe_rounds = 0;    // of the rounds, width-1 probes of the controller in fallback
    int64_t drafted_tokens = 0;  // draft tokens verified
    int64_t accepted_tokens = 0; // of which the target accepted
    int64_t full_rounds = 0;     // rounds whose drafts were all accepted (a bonus token followed)
    int64_t rollbacks = 0;       // rounds that rewound the target's state (some draft rejected)
    int64_t refed_tokens = 0;    // committed tokens run through the target again after a rollback
    double draft_s = 0;          // in the drafter (start, propose, extend)
    double verify_s = 0;         // target forwards that carried drafts, verification and rollback

    double acceptance() const { return drafted_tokens > 0 ? double(accepted_tokens) / double(drafted_tokens) : 0.0; }
    // Accepted drafts per verification round (the "accepted length"; a round yields one more).
    double mean_accepted() const { return rounds > 0 ? double(accepted_tokens) / double(rounds) : 0.0; }
    double mean_width() const { return rounds > 0 ? double(drafted_tokens) / double(rounds) : 0.0; }
    // Sums another call's counts and times into this one (bench adds up its runs); the method
    // is taken from the other when this one has none, the off reason kept only while no round ran.
    void add(const SpecStats& o);
};

// {"spec_method", "spec_off_reason", "spec_rounds", "spec_plain_rounds", "spec_probe_rounds",
//  "spec_drafted_tokens", "spec_accepted_tokens", "spec_full_rounds", "spec_rollbacks",
//  "spec_refed_tokens", "spec_acceptance", "spec_mean_accepted", "spec_mean_width",
//  "spec_draft_s", "spec_verify_s"}: flat keys, so a receipt can merge them into its object.
nlohmann::json to_json(const SpecStats& s);

}  // namespace dsv4::spec
