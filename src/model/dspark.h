// The DSpark-style block drafter (docs/SPECULATIVE.md): a small network on the target model's
// last pre-head streams that proposes a block of tokens in one pass. From the anchor's streams
// X (mean over streams -> main_proj -> main_norm = c) and W slots z_0 = embed[x_{t+1}] + c +
// pos[0], z_j = embed[noise] + c + pos[j], it runs a few pre-norm transformer layers (causal
// inside the block, no RoPE, SwiGLU); slot j's logits are head(final_norm(h_j)) plus a
// low-rank Markov term markov_a[prev] . markov_b^T that depends on the token before it, and
// its confidence is sigmoid(conf . final_norm(h_j) + bias). The embedding and the LM head are
// the target's. Slot j proposes the token at t + 2 + j.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "io/gguf.h"
#include "model/model.h"
#include "model/weights.h"

namespace dsv4 {

struct DsparkConfig {
    int block = 0, n_layers = 0, n_heads = 0, head_dim = 0, ffn = 0, rank = 0, noise_token = 0, vocab = 0,
        hidden = 0;
    double eps = 1e-6;
};

class Dspark {
public:
    // Loads the companion GGUF and checks it fits the target (vocabulary, hidden size).
    Dspark(const std::string& path, const Model& target);

    const DsparkConfig& config() const { return cfg_; }
    size_t file_bytes() const;  // bytes of its tensors (the drafting cost model reads it)

    // One pass for the anchor: streams [hc_mult * hidden] = the target's pre-head streams at
    // the anchor t, first = the token at t + 1. Writes base_logits [slots, vocab] (without the
    // Markov term) and conf [slots] (probabilities) for the first `slots` (<= block) slots;
    // attention inside the block is causal, so fewer slots cost less and change nothing.
    void propose(const float* streams, int32_t first, int slots, float* base_logits, float* conf) const;
    // logits[v] += markov_a[prev] . markov_b[v]: the slot's dependence on the token before it.
    void add_markov(int32_t prev, float* logits) const;

private:
    struct Layer {
        std::vector<float> attn_norm, ffn_norm;
        Mat q, k, v, o, gate, up, down;
    };
    std::unique_ptr<gguf::Reader> file_;
    const Model& target_;
    DsparkConfig cfg_;
    Mat main_proj, markov_a, markov_b;
    std::vector<float> main_norm, pos, final_norm, conf_w, conf_b;
    std::vector<Layer> layers_;
};

}  // namespace dsv4
