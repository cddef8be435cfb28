// Memory admission: before a prefill, estimate the anonymous memory it will take (state growth
// and scratch; mmapped weights are page cache the kernel can reclaim, so they do not count)
// and refuse, with the numbers, when less than a headroom would be left.
#pragma once
#include <cstdint>
#include <functional>
#include <string>

#include "model/config.h"

namespace dsv4 {

struct MemoryEstimate {
    uint64_t state_bytes = 0;    // compressed/indexer rows the new tokens add
    uint64_t scratch_bytes = 0;  // activations of one prefill step
    uint64_t total() const { return state_bytes + scratch_bytes; }
};

// new_tokens appended in steps of at most step_tokens; all_logits = a [step, vocab] output.
MemoryEstimate estimate_prefill(const ModelConfig& c, int64_t new_tokens, int64_t step_tokens, bool all_logits);

struct AdmissionPolicy {
    uint64_t headroom_bytes = uint64_t(4) << 30;  // keep at least this much available
    std::function<uint64_t()> available;          // default: available_host_memory()
};

// MemAvailable from /proc/meminfo, lowered to the cgroup's remaining limit when there is one.
uint64_t available_host_memory();

// Throws dsv4::Error naming the need, the available memory and the headroom when refused.
void admit(const MemoryEstimate& need, const AdmissionPolicy& policy, const std::string& what);

}  // namespace dsv4
