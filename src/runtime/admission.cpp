#include "runtime/admission.h"

#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>

#include "core/error.h"
#include "model/state.h"

namespace dsv4 {

MemoryEstimate estimate_prefill(const ModelConfig& c, int64_t new_tokens, int64_t step_tokens, bool all_logits) {
    MemoryEstimate e;
    const StateGrowth g = state_growth(c);
    e.state_bytes = uint64_t(g.all_layers_per_token * double(new_tokens)) + uint64_t(c.n_layers) * g.fixed_per_layer;
    const uint64_t T = uint64_t(std::max<int64_t>(1, std::min(step_tokens, new_tokens)));
    const uint64_t D = uint64_t(c.hidden), nD = uint64_t(c.hc_mult) * D, Hd = uint64_t(c.n_heads) * uint64_t(c.head_dim);
    // Floats alive per token during one layer (see Model::forward and attention_block): the
    // streams and their flattened copy, sublayer input/output, Q path, latent row, attention
    // output, grouped projection, compressor and indexer projections, expert buffers.
    uint64_t per_token = 2 * nD + 2 * D + uint64_t(c.mix_dim()) + uint64_t(c.q_lora) + 2 * Hd + uint64_t(c.head_dim) +
                         uint64_t(c.o_groups) * uint64_t(c.o_lora) + 4 * uint64_t(c.head_dim) +
                         4 * uint64_t(c.index_head_dim) + uint64_t(c.index_heads) * (uint64_t(c.index_head_dim) + 1) +
                         uint64_t(c.n_experts) + uint64_t(c.top_k) * (2 * D + 2 * uint64_t(c.moe_inter)) +
                         2 * uint64_t(c.moe_inter) + D;
    uint64_t logits = (all_logits ? T : 1) * uint64_t(c.vocab);
    e.scratch_bytes = (per_token * T + logits) * sizeof(float);
    return e;
}

uint64_t available_host_memory() {
    uint64_t avail = 0;
    std::ifstream mi("/proc/meminfo");
    std::string key;
    uint64_t kb;
    std::string unit;
    while (mi >> key >> kb) {
        std::getline(mi, unit);
        if (key == "MemAvailable:") {
            avail = kb * 1024;
            break;
        }
    }
    // cgroup v2: the limit minus what the group already uses.
    std::ifstream max_f("/sys/fs/cgroup/memory.max"), cur_f("/sys/fs/cgroup/memory.current");
    std::string max_s;
    uint64_t cur = 0;
    if (max_f >> max_s && max_s != "max" && cur_f >> cur) {
        uint64_t limit = std::stoull(max_s);
        uint64_t left = limit > cur ? limit - cur : 0;
        avail = avail ? std::min(avail, left) : left;
    }
    return avail;
}

void admit(const MemoryEstimate& need, const AdmissionPolicy& p, const std::string& what) {
    uint64_t avail = p.available ? p.available() : available_host_memory();
    auto mib = [](uint64_t b) { return (b + (1 << 20) - 1) >> 20; };
    if (need.total() + p.headroom_bytes > avail)
        fail(what, " refused: it needs about ", mib(need.total()), " MiB (state ", mib(need.state_bytes), " MiB, scratch ",
             mib(need.scratch_bytes), " MiB) but only ", mib(avail), " MiB are available and ", mib(p.headroom_bytes),
             " MiB must stay free (lower --headroom-gib or the prompt)");
}

}  // namespace dsv4
