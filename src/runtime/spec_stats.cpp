#include "runtime/spec_stats.h"

namespace dsv4::spec {

nlohmann::json to_json(const SpecStats& s) {
    return {
        {"spec_method", s.method},
        {"spec_off_reason", s.off_reason},
        {"spec_rounds", s.rounds},
        {"spec_plain_rounds", s.plain_rounds},
        {"spec_probe_rounds", s.probe_rounds},
        {"spec_drafted_tokens", s.drafted_tokens},
        {"spec_accepted_tokens", s.accepted_tokens},
        {"spec_full_rounds", s.full_rounds},
        {"spec_rollbacks", s.rollbacks},
        {"spec_refed_tokens", s.refed_tokens},
        {"spec_acceptance", s.acceptance()},
        {"spec_mean_accepted", s.mean_accepted()},
        {"spec_mean_width", s.mean_width()},
        {"spec_draft_s", s.draft_s},
        {"spec_verify_s", s.verify_s},
    };
}

void SpecStats::add(const SpecStats& o) {
    if (method == "off") method = o.method;
    rounds += o.rounds;
    plain_rounds += o.plain_rounds;
    probe_rounds += o.probe_rounds;
    drafted_tokens += o.drafted_tokens;
    accepted_tokens += o.accepted_tokens;
    full_rounds += o.full_rounds;
    rollbacks += o.rollbacks;
    refed_tokens += o.refed_tokens;
    draft_s += o.draft_s;
    verify_s += o.verify_s;
    off_reason = rounds > 0 ? "" : o.off_reason;
}

}  // namespace dsv4::spec
