// One rank's part of a model split over several ranks (GPUs; threads in the CPU tests):
//   attention: whole output groups of heads (tensor parallel): the rank's query heads, their
//              sinks, its rows of o_a and its columns of o_b; the shared latent K=V, the
//              compressors and the indexer are computed on every rank (each keeps a full
//              State), so attention needs no exchange until its output;
//   MoE:       a contiguous block of routed experts (expert parallel) and a slice of the
//              shared expert's intermediate columns; the router runs on every rank;
//   LM head:   a contiguous block of vocabulary rows.
// Each sublayer's output is then a partial sum: one all-reduce after the attention and one
// after the MoE make every rank's residual streams whole again (the hyper-connection's
// Sinkhorn mix between them is not linear, so the two cannot be merged), and the head's
// slices are summed into zero-filled rows. Ranges are contiguous and as even as integer
// division makes them; a rank may own no heads (more ranks than groups), which is legal.
#pragma once
#include <cstdint>

#include "core/communicator.h"
#include "model/config.h"

namespace dsv4 {

struct Range {
    int64_t begin = 0, end = 0;
    int64_t size() const { return end - begin; }
    bool empty() const { return end <= begin; }
};

// Block i of n items split into `parts` contiguous blocks.
Range split_range(int64_t n, int parts, int i);

struct ShardPlan {
    int rank = 0, ranks = 1;
    Range groups;        // output groups; heads are groups * (n_heads / o_groups)
    Range heads;
    Range experts;       // routed experts
    Range shared_cols;   // the shared expert's intermediate columns
    Range vocab;         // LM head rows
};

// The plan for `rank` of `ranks`. shared_unit: the block width of the shared expert's down
// projection format (1 for float, 32 for Q8_0/MXFP4, 256 for Q2_K), so that column slices
// start on a block. Throws an Error naming the value that cannot be split.
ShardPlan plan_shard(const ModelConfig& c, int rank, int ranks, int64_t shared_unit);

// What a sharded forward is given: this rank's plan and the collective of its group.
struct Shard {
    ShardPlan plan;
    Communicator* comm = nullptr;
};

}  // namespace dsv4
