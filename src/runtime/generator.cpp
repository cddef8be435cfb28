#include "runtime/generator.h"

#include <algorithm>
#include <chrono>
#include <optional>

#include "core/error.h"
#include "core/thread_pool.h"
#include "runtime/spec_target.h"
#include "runtime/text_stream.h"

namespace dsv4 {

namespace {
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// How many leading tokens of the prompt the session already holds; 0 means start over. The
// logits after them are needed only when the prompt has nothing more to prefill, so a session
// rewound to a mark (whose logits are gone) is still reused for a longer prompt.
size_t reusable_prefix(const Session& s, std::span<const int32_t> prompt) {
    const std::vector<int32_t>& have = s.tokens();
    if (have.empty() || have.size() > prompt.size()) return 0;
    if (have.size() == prompt.size() && s.last_logits().empty()) return 0;
    for (size_t i = 0; i < have.size(); ++i)
        if (have[i] != prompt[i]) return 0;
    return have.size();
}

// Takes the generated tokens in order and turns them into text; says when generation ends.
class Sink {
public:
    Sink(GenerateStats& st, const Tokenizer& tok, const GenerateOptions& o, const GenerateEvents& ev)
        : st_(st), tok_(tok), o_(o), ev_(ev), text_(o.stop) {}

    bool cancelled() {
        if (!ev_.cancel || !ev_.cancel->load()) return false;
        st_.stop = StopReason::Cancelled;
        return true;
    }
    // False once generation must end (st.stop says why).
    bool push(int32_t id) {
        st_.tokens.push_back(id);
        ++st_.gen_tokens;
        if (id == tok_.eos_id() && !o_.ignore_eos) {
            st_.stop = StopReason::Eos;
            return false;
        }
        emit(text_.push(tok_.token_bytes(id)));
        if (text_.stopped()) {
            st_.stop = StopReason::StopString;
            st_.stop_string = text_.stop_found();
            return false;
        }
        return st_.gen_tokens < o_.max_tokens;  // at the limit: StopReason::Length
    }
    void finish() { emit(text_.finish()); }

private:
    void emit(const std::string& piece) {
        if (piece.empty()) return;
        st_.text += piece;
        if (ev_.on_text) ev_.on_text(piece);
    }
    GenerateStats& st_;
    const Tokenizer& tok_;
    const GenerateOptions& o_;
    const GenerateEvents& ev_;
    TextStream text_;
};

// Asks the drafter for at most w tokens and checks what comes back; cuts it where the
// controller's confidence rule fails (again, for a drafter that ignored DraftRequest::keep).
void propose(spec::Drafter& d, const spec::WidthController& ctl, int w, int vocab, spec::Draft& draft) {
    spec::DraftRequest req;
    req.max_tokens = w;
    const bool conf = d.has_confidence();
    if (conf) req.keep = [&ctl](std::span<const float> cf) { return ctl.keep(cf); };
    d.propose(req, draft);
    const size_t n = draft.tokens.size();
    if (n > size_t(w)) fail("drafter ", d.name(), " proposed ", n, " tokens; at most ", w, " were asked for");
    if (!conf) {
        draft.confidence.clear();  // not a head the controller was told about
        return;
    }
    if (draft.confidence.size() != n)
        fail("drafter ", d.name(), " gave ", draft.confidence.size(), " confidences for ", n, " tokens");
    size_t keep = 0;
    while (keep < n && ctl.keep(std::span<const float>(draft.confidence.data(), keep + 1))) ++keep;
    draft.tokens.resize(keep);
    draft.confidence.resize(keep);
    if (!draft.q.empty()) draft.q.resize(keep * size_t(vocab));
}

// Why no round carried drafts, from what the loop saw.
std::string off_reason(const spec::SpecStats& s, int64_t limited, int64_t fallback, int64_t empty,
                       const spec::WidthController& ctl) {
    if (s.rounds > 0) return "";
    const spec::ControllerOptions& o = ctl.options();
    if (ctl.never_pays())
        return cat("verification too dear: a draft costs ", ctl.cost_per_draft(),
                   " decode steps (verify_cost + draft_cost), more than an accepted token returns");
    if (fallback > 0 && fallback >= limited && fallback >= empty)
        return cat("acceptance too low: the controller decoded plainly (a width-1 probe every ", o.probe_every,
                   " rounds)");
    if (empty > 0 && empty >= limited) return "the drafter proposed no tokens";
    if (limited > 0) return "no room for drafts (the token limit or the context length is reached)";
    return "generation ended before the first round";
}
}  // namespace

const char* to_string(StopReason r) {
    switch (r) {
        case StopReason::Length: return "length";
        case StopReason::Eos: return "eos";
        case StopReason::StopString: return "stop";
        case StopReason::Cancelled: return "cancelled";
        case StopReason::ContextFull: return "context";
    }
    return "?";
}

double GenerateStats::prefill_tok_s() const {
    return prefill_s > 0 ? double(prompt_tokens - cached_tokens) / prefill_s : 0.0;
}
double GenerateStats::decode_tok_s() const { return decode_s > 0 ? double(decoded_tokens()) / decode_s : 0.0; }

GenerateStats generate(Session& s, const Tokenizer& tok, std::span<const int32_t> prompt, const GenerateOptions& o,
                       const GenerateEvents& ev) {
    const ModelConfig& c = s.model().config();
    if (prompt.empty()) throw UsageError("the prompt has no tokens");
    if (o.max_tokens < 0) throw UsageError(cat("max_tokens ", o.max_tokens, " is negative"));
    for (int32_t t : prompt)
        if (t < 0 || t >= c.vocab) throw UsageError(cat("prompt token ", t, " is outside the vocabulary of ", c.vocab));
    if (c.max_positions > 0 && int64_t(prompt.size()) > c.max_positions)
        throw UsageError(cat("the prompt has ", prompt.size(), " tokens; the context length is ", c.max_positions));
    spec::Drafter* drafter = o.drafter;
    std::optional<spec::WidthController> ctl;
    if (drafter) {
        if (drafter->vocab() != c.vocab)
            throw UsageError(cat("drafter ", drafter->name(), " has a vocabulary of ", drafter->vocab(),
                                 " tokens; the model's is ", c.vocab));
        spec::ControllerOptions co = o.spec;
        if (co.verify_cost == 0) co.verify_cost = spec::default_verify_cost(s.model().backend_name(), thread_count());
        ctl.emplace(co, drafter->cost_per_token(), drafter->has_confidence());
    }
    // A drafter whose drafts cannot pay is not fed at all (a draft model or an MTP block would
    // otherwise run on every committed token for nothing): plain decoding, with the reason.
    const bool drafting = drafter && !ctl->never_pays();
    Sampler sampler(o.sampling);

    GenerateStats st;
    st.prompt_tokens = int64_t(prompt.size());
    if (drafter) st.spec.method = drafter->name();
    auto t0 = Clock::now();
    size_t cached = reusable_prefix(s, prompt);
    if (cached == 0 && !s.tokens().empty()) s.reset();
    st.cached_tokens = int64_t(cached);
    // A drafter that reads the target's streams gets those of the prompt's tail.
    const int64_t nD = int64_t(c.hc_mult) * c.hidden;
    const bool want_hidden = drafting && drafter->hidden_rows() > 0;
    std::vector<float> prompt_hidden;
    int64_t hidden_rows = 0;
    if (cached < prompt.size()) {
        const int64_t n = int64_t(prompt.size() - cached);
        if (want_hidden) {
            hidden_rows = std::min(n, drafter->hidden_rows());
            prompt_hidden.resize(size_t(hidden_rows * nD));
        }
        s.prefill(prompt.data() + cached, n, nullptr, want_hidden ? prompt_hidden.data() : nullptr, hidden_rows);
    }
    std::vector<float> logits = s.last_logits();
    st.prefill_s = seconds_since(t0);

    Sink sink(st, tok, o, ev);
    std::vector<int32_t> history(s.tokens());  // the committed tokens: prompt, then generated
    auto t1 = Clock::now();
    st.stop = StopReason::Length;
    if (o.max_tokens == 0 || sink.cancelled()) {
        sink.finish();
        st.decode_s = seconds_since(t1);
        return st;
    }
    const int32_t first = sampler.sample(logits.data(), c.vocab, history);
    history.push_back(first);
    bool more = sink.push(first);

    spec::TargetRounds target(s, sampler, want_hidden);
    target.start(first);
    if (drafting && more) {
        auto td = Clock::now();
        drafter->start({history, {prompt_hidden.data(), hidden_rows, nD}, &o.sampling});
        st.spec.draft_s += seconds_since(td);
    }
    spec::Draft draft;
    int64_t limited = 0, fallback = 0, empty = 0;  // plain rounds by cause (for off_reason)
    while (more) {
        if (sink.cancelled()) break;
        // Pending tokens must fit the context; drafts only where they still can.
        const int64_t room = c.max_positions > 0 ? c.max_positions - s.position() - int64_t(target.pending())
                                                 : int64_t(1) << 40;
        if (room < 0) {
            st.stop = StopReason::ContextFull;
            break;
        }
        draft.clear();
        bool consulted = false;  // the controller chose this round's width
        if (drafting) {
            // A round yields up to width + 1 tokens: more drafts than the tokens still wanted
            // would only be thrown away.
            const int64_t limit = std::min(room, o.max_tokens - st.gen_tokens - 1);
            const int w = limit > 0 ? int(std::min<int64_t>(ctl->next_width(), limit)) : 0;
            if (limit <= 0) ++limited;
            else if (w == 0) ++fallback;
            consulted = limit > 0;
            if (w > 0) {
                auto td = Clock::now();
                propose(*drafter, *ctl, w, c.vocab, draft);
                st.spec.draft_s += seconds_since(td);
                if (draft.tokens.empty()) ++empty;
                else if (ctl->probing()) ++st.spec.probe_rounds;
            }
        }
        const bool speculative = !draft.tokens.empty();
        auto tv = Clock::now();
        spec::TargetRounds::Outcome r = target.round(draft, history, st.spec);
        if (speculative) {
            st.spec.verify_s += seconds_since(tv);
            ++st.spec.rounds;
            st.spec.drafted_tokens += int64_t(draft.tokens.size());
            st.spec.accepted_tokens += r.verdict.accepted;
            st.spec.full_rounds += r.verdict.accepted == int(draft.tokens.size());
        } else if (drafter) {
            ++st.spec.plain_rounds;
        }
        if (consulted) ctl->observe(draft.confidence, int(draft.tokens.size()), r.verdict.accepted);
        for (int32_t t : r.committed)
            if (!(more = sink.push(t))) break;
        if (more && drafting) {
            auto td = Clock::now();
            drafter->extend(r.committed, r.hidden);
            st.spec.draft_s += seconds_since(td);
        }
    }
    st.decode_steps = target.forwards();
    target.settle(size_t(st.prompt_tokens + st.gen_tokens - 1));
    sink.finish();
    st.decode_s = seconds_since(t1);
    if (drafter) st.spec.off_reason = off_reason(st.spec, limited, fallback, empty, *ctl);
    return st;
}

}  // namespace dsv4
