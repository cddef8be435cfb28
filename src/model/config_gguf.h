// ModelConfig <-> GGUF metadata (llama.cpp's deepseek4 keys, plus dsv4.* where they fall short).
#pragma once
#include "io/gguf.h"
#include "model/config.h"

namespace dsv4 {

ModelConfig config_from_gguf(const gguf::Reader& file);
void config_to_gguf(const ModelConfig& cfg, gguf::Writer& out);

}  // namespace dsv4
