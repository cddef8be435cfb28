// dsv4 bench's engine: timed runs of prefill + greedy decode on one or two arms, and the
// statistics over them. A run is: a fresh session, prefill of the prompt through the arm's
// schedule (timed up to the first token's logits: the full stage, not a kernel), then
// gen_tokens - 1 greedy decode steps (timed with their sampling). The first run of each arm is
// "cold" (first touch of its weights and buffers in this process); the repeats after it are
// "warm", and with two arms they are interleaved A B A B so drift hits both alike.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "model/model.h"
#include "runtime/session.h"
#include "runtime/spec_controller.h"
#include "runtime/spec_factory.h"
#include "runtime/spec_stats.h"
#include "tokenizer/tokenizer.h"

namespace dsv4 {

struct BenchRun {
    int arm = 0;            // 0 = A, 1 = B
    int repeat = 0;         // 0 = the cold run, then 1..repeats
    bool cold = false;
    int64_t prompt_tokens = 0;
    int64_t gen_tokens = 0;     // tokens sampled (the first comes from the prefill's logits)
    int64_t decode_steps = 0;   // gen_tokens - 1
    double prefill_s = 0, decode_s = 0;
    double prefill_tok_s = 0, decode_tok_s = 0;
    int64_t peak_host_bytes = 0;  // peak RSS during this run (0 when unreadable)
    std::vector<int32_t> tokens;  // the greedy tokens (same for every run of one arm)
    spec::SpecStats spec;         // speculative decoding's figures ("off" without a drafter)
};

// How an arm decodes: plainly, or speculatively with a drafter the factory makes per run
// (then through generate(), which needs the model's tokenizer).
struct BenchDecode {
    const spec::DrafterFactory* drafters = nullptr;
    spec::ControllerOptions spec;
    const Tokenizer* tokenizer = nullptr;
};

// One run of prompt + gen greedy tokens on a fresh session of the model.
BenchRun bench_once(const Model& model, const PrefillOptions& prefill, const std::vector<int32_t>& prompt,
                    int64_t gen_tokens, const BenchDecode& decode = {});

// A prompt of exactly n tokens: the filler text tokenised (BOS first when the tokenizer wants
// it), repeated as needed, when tok and filler are given; else ids drawn from [0, vocab) by a
// portable RNG with the given seed.
std::vector<int32_t> bench_prompt(int64_t vocab, const Tokenizer* tok, const std::string& filler, int64_t n,
                                  uint64_t seed);

struct Spread {
    double median = 0, min = 0, max = 0;
    int64_t n = 0;
};
Spread spread(std::vector<double> v);  // median of an even count: the mean of the middle two

struct BenchArm {
    const Model* model = nullptr;
    PrefillOptions prefill;
    BenchDecode decode;
};

// Runs every arm cold once, then `repeats` warm rounds, each round every arm in order.
// on_run is called after each run (for progress and tracing).
std::vector<BenchRun> bench_interleaved(const std::vector<BenchArm>& arms, const std::vector<int32_t>& prompt,
                                        int64_t gen_tokens, int repeats,
                                        const std::function<void(const BenchRun&)>& on_run = {});

}  // namespace dsv4
