#include "model/shard.h"

#include "core/error.h"

namespace dsv4 {

Range split_range(int64_t n, int parts, int i) {
    return {n * i / parts, n * (i + 1) / parts};
}

ShardPlan plan_shard(const ModelConfig& c, int rank, int ranks, int64_t shared_unit) {
    if (ranks < 1) fail("cannot split the model over ", ranks, " ranks");
    if (rank < 0 || rank >= ranks) fail("rank ", rank, " is not one of ", ranks);
    if (c.o_groups < 1 || c.n_heads % c.o_groups != 0)
        fail("cannot split attention: ", c.n_heads, " heads do not form ", c.o_groups, " output groups");
    if (ranks > c.n_experts) fail("cannot split ", c.n_experts, " routed experts over ", ranks, " ranks");
    if (shared_unit < 1 || c.moe_inter % shared_unit != 0)
        fail("cannot split the shared expert: ", c.moe_inter, " columns are not blocks of ", shared_unit);
    ShardPlan p;
    p.rank = rank;
    p.ranks = ranks;
    p.groups = split_range(c.o_groups, ranks, rank);
    const int64_t per_group = c.n_heads / c.o_groups;
    p.heads = {p.groups.begin * per_group, p.groups.end * per_group};
    p.experts = split_range(c.n_experts, ranks, rank);
    const Range units = split_range(c.moe_inter / shared_unit, ranks, rank);
    p.shared_cols = {units.begin * shared_unit, units.end * shared_unit};
    p.vocab = split_range(c.vocab, ranks, rank);
    return p;
}

}  // namespace dsv4
