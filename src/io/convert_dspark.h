// The DSpark block drafter (scripts/gpu/train_heads.py: dspark.safetensors +
// dspark_config.json) -> its companion GGUF, read by model/dspark.h.
#pragma once
#include <string>

#include "io/gguf.h"

namespace dsv4 {

struct DsparkConvertOptions {
    std::string dir;       // holds dspark.safetensors and dspark_config.json
    std::string out_path;
    gguf::TensorType dtype = gguf::TensorType::F32;  // the matrices; vectors stay F32
};

// Returns the number of tensors written.
size_t convert_dspark(const DsparkConvertOptions& o);

}  // namespace dsv4
