#include "runtime/spec_synthetic.h"

#include "core/error.h"

namespace dsv4::spec {

namespace {
// splitmix64: a good 64-bit mix, so per-position values are independent-looking.
uint64_t mix(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}
double unit(uint64_t h) { return double(h >> 11) * 0x1.0p-53; }
uint64_t hash(uint64_t seed, int64_t pos, uint64_t salt) { return mix(mix(seed ^ salt) ^ uint64_t(pos)); }
}  // namespace

ScriptedDrafter::ScriptedDrafter(std::vector<int32_t> script, int vocab, ScriptOptions o)
    : script_(std::move(script)), vocab_(vocab), o_(std::move(o)) {
    if (vocab_ < 2) fail("scripted drafter: the vocabulary needs two tokens at least");
    if (!(o_.right >= 0 && o_.right <= 1)) fail("scripted drafter: right must be in [0, 1] (got ", o_.right, ")");
}

void ScriptedDrafter::start(const StartContext& ctx) {
    n_ = int64_t(ctx.tokens.size());
    on_script_ = ctx.tokens.size() <= script_.size() && std::equal(ctx.tokens.begin(), ctx.tokens.end(), script_.begin());
}

void ScriptedDrafter::propose(const DraftRequest& req, Draft& d) {
    d.clear();
    ++proposals_;
    for (int i = 0; i < req.max_tokens; ++i) {
        const int64_t t = n_ + i;
        int32_t tok;
        if (on_script_ && t < int64_t(script_.size())) {
            tok = script_[size_t(t)];
            if (unit(hash(o_.seed, t, 1)) >= o_.right)  // a different token, never the script's
                tok = int32_t((uint64_t(tok) + 1 + hash(o_.seed, t, 2) % uint64_t(vocab_ - 1)) % uint64_t(vocab_));
        } else {
            tok = int32_t(hash(o_.seed, t, 3) % uint64_t(vocab_));
        }
        d.tokens.push_back(tok);
        if (o_.random_confidence) {
            d.confidence.push_back(float(unit(hash(o_.seed, t, 4))));
            if (req.keep && !req.keep(d.confidence)) {
                d.tokens.pop_back();
                d.confidence.pop_back();
                break;
            }
        }
    }
}

void ScriptedDrafter::extend(std::span<const int32_t> tokens, const HiddenRows&) {
    for (int32_t t : tokens) {
        if (on_script_ && (n_ >= int64_t(script_.size()) || script_[size_t(n_)] != t)) on_script_ = false;
        ++n_;
    }
}

RandomDrafter::RandomDrafter(int vocab, int support, uint64_t seed, std::string name)
    : vocab_(vocab), support_(support), seed_(seed), name_(std::move(name)), rng_(seed) {
    if (support < 1 || support > vocab) fail("random drafter: support ", support, " must be in 1..", vocab);
}

void RandomDrafter::start(const StartContext& ctx) {
    n_ = int64_t(ctx.tokens.size());
    rng_.seed(seed_);
}

void RandomDrafter::distribution(int64_t t, std::vector<float>& q) const {
    q.assign(size_t(vocab_), 0.0f);
    double total = 0;
    std::vector<double> w(static_cast<size_t>(support_));
    for (int j = 0; j < support_; ++j) total += w[size_t(j)] = 0.05 + unit(hash(seed_, t, 10 + uint64_t(j)));
    // support_ distinct tokens: consecutive ids from a hashed start.
    const uint64_t first = hash(seed_, t, 5) % uint64_t(vocab_);
    for (int j = 0; j < support_; ++j) q[size_t((first + uint64_t(j)) % uint64_t(vocab_))] = float(w[size_t(j)] / total);
}

void RandomDrafter::propose(const DraftRequest& req, Draft& d) {
    d.clear();
    std::vector<float> q;
    for (int i = 0; i < req.max_tokens; ++i) {
        distribution(n_ + i, q);
        const double u = double(rng_() >> 11) * 0x1.0p-53;
        double cum = 0;
        int32_t tok = -1;
        for (int v = 0; v < vocab_ && tok < 0; ++v)
            if (q[size_t(v)] > 0 && u < (cum += q[size_t(v)])) tok = v;
        if (tok < 0)  // u beyond the rounded total: the last token of the support
            for (int v = vocab_ - 1; v >= 0 && tok < 0; --v)
                if (q[size_t(v)] > 0) tok = v;
        d.tokens.push_back(tok);
        d.q.insert(d.q.end(), q.begin(), q.end());
    }
}

void RandomDrafter::extend(std::span<const int32_t> tokens, const HiddenRows&) { n_ += int64_t(tokens.size()); }

}  // namespace dsv4::spec
