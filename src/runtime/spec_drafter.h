// The drafter interface of speculative decoding (docs/SPECULATIVE.md). A drafter proposes a
// few tokens that continue the committed sequence; the target model verifies them in one
// forward and accepts a prefix. Three kinds fit behind it:
//   - the model's MTP block (reads the target's pre-head streams at t and token t+1, keeps its
//     own sliding-window cache, proposes autoregressively);
//   - a DSpark block drafter (reads the target's last streams, proposes up to W tokens in one
//     pass, with a per-token confidence);
//   - a separate draft model of the same vocabulary (spec_draft_model.h).
//
// Vocabulary of the protocol. The *committed* sequence x_0 .. x_{N-1} is the prompt plus every
// generated token so far. The target has run every committed token but the last through a
// forward (the last one, x_{N-1}, is the input of the next verification), so its pre-head
// streams h_t are known for t <= N-2. The generator calls, per generate():
//   start(ctx)              once, after the prompt is prefilled and the first token sampled;
//   then per round:
//   propose(req, draft)     zero or one time (not called on a plain-decoding round);
//   extend(tokens, hidden)  always, with the tokens committed in that round.
// A drafter that keeps state (an MTP window cache, a draft model's KV) rolls back what it
// proposed beyond the committed tokens inside extend(): it knows what it proposed.
#pragma once
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "runtime/sampler.h"

namespace dsv4::spec {

// Rows of the target's pre-head residual streams, [rows, width] float32 (width = hc_mult *
// hidden). Row i is the streams at the position whose *next* token is the i-th token of the
// span it comes with (so row i and token i form the (h_t, x_{t+1}) pair the MTP block reads).
struct HiddenRows {
    const float* data = nullptr;  // null when the drafter asked for none (hidden_rows() == 0)
    int64_t rows = 0;
    int64_t width = 0;
    const float* row(int64_t i) const { return data + i * width; }
};

struct StartContext {
    // The committed sequence: the prompt and the first generated token (tokens.back()).
    std::span<const int32_t> tokens;
    // The streams of the last hidden.rows prompt positions, ending at position N-2 (the
    // prompt's last token, whose next token is tokens.back()). Fewer rows than hidden_rows()
    // asked for when the session already held part of the prompt (prefix reuse): a drafter
    // must cope (an MTP cache then starts shorter; exactness does not depend on it).
    HiddenRows hidden;
    // The target's sampling parameters: a drafter that samples shapes its q with them (a
    // drafter may also stay greedy; see Draft::q).
    const SamplingParams* sampling = nullptr;
};

struct DraftRequest {
    int max_tokens = 1;  // propose at most this many (>= 1); fewer (even none) is allowed
    // For drafters with a confidence: called after each proposed token with the confidences
    // so far (confidence[0..i]); false means drop token i and stop (the controller's
    // cumulative-confidence rule, docs/SPECULATIVE.md). Null: keep everything up to max_tokens.
    std::function<bool(std::span<const float> confidence)> keep;
};

struct Draft {
    std::vector<int32_t> tokens;  // d_1 .. d_W, continuing the committed sequence
    // The distribution each token was drawn from, q_i = q[i * vocab .. (i + 1) * vocab), what
    // rejection sampling needs (accept d_i with probability min(1, p_i(d_i) / q_i(d_i)), else
    // draw from norm(max(0, p_i - q_i))). Empty means the drafter is deterministic: each token
    // is a function of the context (argmax, a script), i.e. q_i is one-hot on d_i. The rule
    // with a one-hot q is still exact: accept with probability p_i(d_i), else draw from p_i
    // with d_i removed. Under a greedy target both reduce to "accept iff d_i is the argmax".
    std::vector<float> q;
    // Per token, the drafter's estimate of P(d_i accepted | d_1..d_{i-1} accepted), in [0, 1].
    // Empty when the drafter has no confidence head; then the controller uses the measured
    // acceptance alone.
    std::vector<float> confidence;

    void clear() {
        tokens.clear();
        q.clear();
        confidence.clear();
    }
};

class Drafter {
public:
    virtual ~Drafter() = default;

    // For statistics and errors: "draft:FILE", "mtp", "dspark:FILE", "script", ...
    virtual std::string name() const = 0;
    // The vocabulary its tokens and q rows range over; must equal the target's.
    virtual int vocab() const = 0;
    // Whether Draft::confidence is filled (selects the controller's rule).
    virtual bool has_confidence() const { return false; }
    // Cost of proposing one token, in units of one target decode step (the controller's cost
    // model; 0 for a free drafter). A hint, not a measurement: the controller must not depend
    // on timings, so that seeded sampling is reproducible.
    virtual double cost_per_token() const = 0;
    // How many trailing prompt rows of the target's streams start() wants (the MTP window, a
    // DSpark context); 0 means the drafter reads no target streams at all (then HiddenRows
    // are always empty and the generator skips copying them).
    virtual int64_t hidden_rows() const { return 0; }

    virtual void start(const StartContext& ctx) = 0;
    // Proposes a continuation of the committed sequence into draft (cleared first).
    virtual void propose(const DraftRequest& req, Draft& draft) = 0;
    // The committed sequence grew by tokens (the accepted drafts, then the corrected or bonus
    // token; never empty). hidden.rows == tokens.size() (when the drafter reads streams): row
    // i is the target's streams at the position before tokens[i]; the data is valid during
    // the call only. Called after every round, plain ones included, so its cost is paid even
    // while the controller decodes plainly: a drafter should keep it cheap (queue the tokens
    // and rows, run them in one batch at the next propose(), as the draft-model drafter does).
    virtual void extend(std::span<const int32_t> tokens, const HiddenRows& hidden) = 0;
};

}  // namespace dsv4::spec
