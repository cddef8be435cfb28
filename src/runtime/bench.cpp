#include "runtime/bench.h"

#include <algorithm>
#include <chrono>

#include "core/error.h"
#include "core/trace.h"
#include "runtime/bench_memory.h"
#include "runtime/generator.h"
#include "runtime/retrieval.h"
#include "runtime/sampler.h"

namespace dsv4 {

namespace {
double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

BenchRun bench_once(const Model& model, const PrefillOptions& prefill, const std::vector<int32_t>& prompt,
                    int64_t gen_tokens, const BenchDecode& decode) {
    DSV4_TRACE("bench.run");
    const ModelConfig& c = model.config();
    if (prompt.empty()) throw UsageError("bench: the prompt has no tokens");
    if (gen_tokens < 1) throw UsageError(cat("bench: --gen ", gen_tokens, ": at least one token"));
    if (c.max_positions > 0 && int64_t(prompt.size()) + gen_tokens > c.max_positions)
        throw UsageError(cat("bench: prompt ", prompt.size(), " + gen ", gen_tokens, " tokens exceed the context length ",
                             c.max_positions));
    BenchRun r;
    r.prompt_tokens = int64_t(prompt.size());
    reset_peak_host_bytes();
    Session s(model, prefill);
    if (decode.drafters && decode.drafters->enabled()) {
        // Speculative: the generation loop itself, greedy, past any end-of-sequence token.
        if (!decode.tokenizer) throw UsageError("bench: speculative arms need the model's tokenizer");
        std::unique_ptr<spec::Drafter> drafter = decode.drafters->make();
        GenerateOptions go;
        go.max_tokens = gen_tokens;
        go.ignore_eos = true;
        go.drafter = drafter.get();
        go.spec = decode.spec;
        GenerateStats st = generate(s, *decode.tokenizer, prompt, go);
        r.prefill_s = st.prefill_s;
        r.decode_s = st.decode_s;
        r.tokens = st.tokens;
        r.gen_tokens = st.gen_tokens;
        r.decode_steps = st.decode_steps;
        r.prefill_tok_s = st.prefill_tok_s();
        r.decode_tok_s = st.decode_tok_s();
        r.spec = st.spec;
        r.peak_host_bytes = peak_host_bytes();
        return r;
    }
    Sampler greedy(SamplingParams{});
    std::vector<int32_t> history(prompt);
    std::vector<float> logits(size_t(c.vocab));
    auto t0 = std::chrono::steady_clock::now();
    {
        DSV4_TRACE_ARG("bench.prefill", prompt.size());
        s.prefill(prompt.data(), int64_t(prompt.size()), logits.data());
    }
    r.prefill_s = seconds_since(t0);
    auto t1 = std::chrono::steady_clock::now();
    {
        DSV4_TRACE_ARG("bench.decode", gen_tokens - 1);
        for (int64_t i = 0; i < gen_tokens; ++i) {
            int32_t id;
            {
                DSV4_TRACE("sample");
                id = greedy.sample(logits.data(), c.vocab, history);
            }
            r.tokens.push_back(id);
            if (i + 1 == gen_tokens) break;
            s.decode(&id, 1, logits.data());
            history.push_back(id);
            ++r.decode_steps;
        }
    }
    r.decode_s = seconds_since(t1);
    r.gen_tokens = int64_t(r.tokens.size());
    r.prefill_tok_s = r.prefill_s > 0 ? double(r.prompt_tokens) / r.prefill_s : 0;
    r.decode_tok_s = r.decode_s > 0 ? double(r.decode_steps) / r.decode_s : 0;
    r.peak_host_bytes = peak_host_bytes();
    return r;
}

std::vector<int32_t> bench_prompt(int64_t vocab, const Tokenizer* tok, const std::string& filler, int64_t n,
                                  uint64_t seed) {
    if (n < 1) throw UsageError(cat("bench: --prompt ", n, ": at least one token"));
    std::vector<int32_t> out;
    if (tok && !filler.empty()) {
        if (tok->add_bos() && tok->bos_id() >= 0) out.push_back(tok->bos_id());
        std::vector<int32_t> text = tok->encode(filler, false);
        if (text.empty()) fail("bench: the filler text has no tokens");
        while (int64_t(out.size()) < n) out.insert(out.end(), text.begin(), text.end());
        out.resize(size_t(n));
        for (int32_t id : out)
            if (id >= vocab) fail("bench: the tokenizer gives id ", id, " outside the model's vocabulary of ", vocab);
        return out;
    }
    PortableRng rng(seed);
    for (int64_t i = 0; i < n; ++i) out.push_back(int32_t(rng.below(uint64_t(vocab))));
    return out;
}

Spread spread(std::vector<double> v) {
    Spread s;
    s.n = int64_t(v.size());
    if (v.empty()) return s;
    std::sort(v.begin(), v.end());
    s.min = v.front();
    s.max = v.back();
    const size_t m = v.size() / 2;
    s.median = v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
    return s;
}

std::vector<BenchRun> bench_interleaved(const std::vector<BenchArm>& arms, const std::vector<int32_t>& prompt,
                                        int64_t gen_tokens, int repeats,
                                        const std::function<void(const BenchRun&)>& on_run) {
    if (repeats < 1) throw UsageError(cat("bench: --repeats ", repeats, ": at least one"));
    std::vector<BenchRun> runs;
    for (int rep = 0; rep <= repeats; ++rep)
        for (size_t a = 0; a < arms.size(); ++a) {
            BenchRun r = bench_once(*arms[a].model, arms[a].prefill, prompt, gen_tokens, arms[a].decode);
            r.arm = int(a);
            r.repeat = rep;
            r.cold = rep == 0;
            runs.push_back(std::move(r));
            if (on_run) on_run(runs.back());
        }
    return runs;
}

}  // namespace dsv4
