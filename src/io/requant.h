// GGUF -> GGUF with the routed-expert tensors (blk.N.ffn_{gate,up,down}_exps.weight) re-encoded
// in another weight type; every other tensor and every metadata key is copied unchanged. This
// makes a Q2_K-expert file from a converted one without going back to the checkpoint.
#pragma once
#include <string>

#include "io/gguf.h"

namespace dsv4 {

struct RequantOptions {
    std::string in_path;
    std::string out_path;
    gguf::TensorType experts = gguf::TensorType::Q2_K;
    bool quiet = false;
};

struct RequantReport {
    size_t tensors = 0;      // tensors written
    size_t requantised = 0;  // expert tensors re-encoded
    std::string notes;       // expert tensors kept as they were, one line each, with the reason
};

// True for blk.N.ffn_gate_exps.weight, blk.N.ffn_up_exps.weight and blk.N.ffn_down_exps.weight.
bool is_routed_expert_tensor(const std::string& name);

RequantReport requant_experts(const RequantOptions& opt);

}  // namespace dsv4
