// Hugging Face config.json (model_type deepseek_v4) -> ModelConfig, with transformers' defaults
// and both config styles: layer_types / mlp_layer_types / compress_rates / nested
// rope_parameters {main, compress}, and the legacy compress_ratios / num_hash_layers /
// qk_rope_head_dim / flat rope_scaling.
#pragma once
#include <string>

#include "model/config.h"

namespace dsv4 {

ModelConfig config_from_hf_json(const std::string& json_text, const std::string& source);

}  // namespace dsv4
