// A loaded DeepSeek-V4 model: config, bound weights, and the forward pass over a chunk of
// tokens that continues a State (a whole prompt is one chunk from an empty State).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/cpu/rope.h"
#include "io/gguf.h"
#include "model/backend.h"
#include "model/config.h"
#include "model/shard.h"
#include "model/state.h"
#include "model/weights.h"

namespace dsv4 {

// Which logits a forward computes: the LM head is a [vocab, hidden] matmul per row, so a
// prefill asks only for the last row.
enum class Logits { None, Last, All };

struct ForwardOptions {
    Logits logits = Logits::All;
    int64_t band = 2048;  // queries processed together inside the attention (bounds its scratch)
    // When set, receives the pre-head residual streams [T - hidden_from, hc_mult * hidden] of
    // rows hidden_from..T-1 (what the MTP and DSpark drafters read).
    float* hidden = nullptr;
    int64_t hidden_from = 0;
    // When set, this call is one rank of a model split over shard->plan.ranks ranks: every rank
    // calls forward with the same tokens on its own State, computes its part (model/shard.h)
    // and sums the parts through shard->comm, so every rank gets the whole logits and hidden
    // streams. CPU ops only.
    const Shard* shard = nullptr;
};

// The one-layer config of the MTP block of a model of config c: a sliding-window, top-k routed layer.
ModelConfig mtp_block_config(const ModelConfig& c);

class Model {
public:
    // backend "cpu" (the reference ops) or another registered one ("cuda"), which then runs
    // every forward with its own copy of the weights; gpus > 1 splits it over that many devices.
    explicit Model(const std::string& gguf_path, const std::string& backend = "cpu", int gpus = 1);
    // A model without a file (synthetic shapes): the backend made its own weights and runs
    // every forward; the CPU path and file() are not available.
    Model(const ModelConfig& cfg, std::unique_ptr<ForwardBackend> backend, std::string name);
    ~Model();

    const ModelConfig& config() const { return cfg_; }
    const ModelWeights& weights() const { return w_; }
    bool has_file() const { return file_ != nullptr; }
    const gguf::Reader& file() const;  // throws for a model without a file
    // The file's path, or the synthetic model's name.
    const std::string& name() const { return name_; }
    // "cpu" or the device backend's name; the backend itself (null on the CPU).
    std::string backend_name() const { return backend_ ? backend_->name() : "cpu"; }
    const ForwardBackend* backend() const { return backend_.get(); }

    // Runs tokens[0..T) at positions state.pos ... layer by layer (every token through layer 0,
    // then layer 1, ...: each weight is read once per call); advances state. `logits` receives
    // [T, vocab] (Logits::All) or [vocab] of the last token (Logits::Last) float32.
    void forward(const int32_t* tokens, int64_t T, State& state, float* logits, const ForwardOptions& opt = {}) const;

    // The part of this model that rank `rank` of `ranks` computes in a sharded forward
    // (model/shard.h), checked against the stored formats: throws an Error naming the layer and
    // tensor whose columns cannot be split on its blocks.
    ShardPlan shard_plan(int rank, int ranks) const;

    // The MTP (next-n) block, when the file has one (REFERENCE.md §8). Its state is a
    // State(mtp_config()): one sliding-window layer at the main model's positions.
    bool has_mtp() const { return !w_.mtp.empty() || (!file_ && cfg_.n_nextn > 0); }
    const ModelConfig& mtp_config() const { return mtp_cfg_; }
    // hidden[T, hc_mult * hidden]: the main model's pre-head streams at positions state.pos ...,
    // next[T]: the token after each of them. logits receives what the block predicts for the
    // token after next: [T, vocab] (Logits::All) or [vocab] of the last row (Logits::Last).
    // opt.hidden receives the block's output streams (a chained draft feeds them back as the
    // streams of the position it has not seen from the main model yet).
    void mtp_forward(const float* hidden, const int32_t* next, int64_t T, State& state, float* logits,
                     const ForwardOptions& opt = {}) const;
    // The MTP block's head alone: its output streams out[rows, hc_mult * hidden] -> logits
    // [rows, vocab] (what mtp_forward computes last; a drafter defers it to when it proposes).
    // With a shard, one rank's part of it (as in ForwardOptions::shard).
    void mtp_head(const float* out, int64_t rows, float* logits, const Shard* shard = nullptr) const;

private:
    // The layer loop body shared by the main layers and the MTP block: X[T, hc, D] in place.
    void run_layer(const ModelConfig& c, int l, const LayerWeights& L, MlpType mlp, const int32_t* tokens, int64_t T,
                   State& st, int64_t band, const Shard* shard, float* X) const;
    // The LM head over y[rows, hidden] (final-normed): logits[rows, vocab], or this rank's
    // vocabulary rows of them summed over the shard's group.
    void lm_head(const float* y, int64_t rows, float* logits, const Shard* shard) const;

    std::unique_ptr<gguf::Reader> file_;
    std::string name_;
    ModelConfig cfg_;
    ModelWeights w_;
    ModelConfig mtp_cfg_;  // one sliding, top-k-routed layer (valid when has_mtp())
    cpu::Rope rope_main_, rope_compress_;
    std::unique_ptr<ForwardBackend> backend_;  // null: the CPU ops
};

}  // namespace dsv4
