// The attention block of one layer on CPU: Q path, latent K=V, compressor and indexer state
// updates, sparse attention with sinks, inverse RoPE, grouped output projection.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "backend/cpu/rope.h"
#include "model/config.h"
#include "model/shard.h"
#include "model/state.h"
#include "model/weights.h"

namespace dsv4::cpu {

// Feeds T new tokens' projections k[T, coff*width], g[T, coff*width] (positions start at
// s.n_rows * ratio + s.n_buf) into the compressor; appends a row for every window closed.
void compressor_update(CompressorState& s, const CompressorWeights& w, const Rope& rope, float norm_eps,
                       const float* k, const float* g, int64_t T);

// Indexer selection for one query at absolute position `pos`: the visible rows w < (pos+1)/ratio,
// all of them when at most top_k, else the top_k by score (ties: lower index), ascending.
void indexer_select(const float* scores, int64_t n_visible, int top_k, std::vector<int32_t>& out);

// Test instrumentation of the indexer's discrete choice: while an observer is set, every CSA
// selection that drops rows reports the query's absolute position and the relative gap between
// its k-th and (k+1)-th scores, (s_k - s_k+1) / |s_k|. Where that gap is at the rounding level,
// another correct rounding of the scores may pick the other row (tests comparing backends need
// to know). Set it only while no forward runs; it may be called from several threads at once.
using TopkGapObserver = std::function<void(int64_t pos, float relative_gap)>;
void set_topk_gap_observer(TopkGapObserver observer);

// Keys visible to one query: window rows then compressed rows, all [width]-wide.
struct KeySet {
    std::vector<const float*> rows;
};

// Softmax attention with a sink for one query vector q[width] over `keys` (K = V):
// out = sum_j softmax_j({q·k_j · scale} ∪ {sink}) k_j (the sink has no value).
// The compact form: scores first, then the weighted sum. The oracle for attend_heads.
void attend_one(const float* q, const KeySet& keys, int width, float scale, float sink, float* out);

// The streaming form used by the engine: one pass over the keys, each key row loaded once and
// used by all H heads of the query (online softmax per head), as fast GPU kernels do it.
// q and out are [H, width]; sinks is [H].
void attend_heads(const float* q, int H, const KeySet& keys, int width, float scale, const float* sinks, float* out);

// Where the latent rows of one layer live during a forward: the state's window (rows of the
// positions cache_from ..) and the chunk being processed (rows of positions pos0 ..).
struct LatentRows {
    const float* cache = nullptr;
    int64_t cache_from = 0;
    const float* chunk = nullptr;
    int64_t pos0 = 0;
    int width = 0;
    int window = 0;
};

// The sliding-window keys of the query at position p: positions max(0, p - window + 1) .. p.
void window_keys(const LatentRows& rows, int64_t p, KeySet& keys);

// The whole attention block for T tokens a[T, hidden] at positions pos0 ...; queries are
// processed in bands of `band` (each sees everything before it; nothing is [queries x keys]).
// With a shard, only its heads and output groups: `out` is then this rank's partial sum.
void attention_block(const ModelConfig& c, int layer, const LayerWeights& w, const Rope& rope, const float* a,
                     int64_t T, int64_t pos0, int64_t band, LayerState& state, float* out,
                     const ShardPlan* shard = nullptr);

}  // namespace dsv4::cpu
