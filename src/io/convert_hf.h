// Hugging Face checkpoint folder (config.json + *.safetensors) -> dsv4/llama.cpp GGUF.
#pragma once
#include <string>

#include "io/gguf.h"

namespace dsv4 {

struct ConvertOptions {
    std::string hf_dir;
    std::string out_path;
    gguf::TensorType dtype = gguf::TensorType::F32;  // large matrices
    bool experts_same = true;                         // routed experts in `dtype`...
    gguf::TensorType experts = gguf::TensorType::F32; // ...or in this type
    std::string tokenizer_json;  // default: hf_dir/tokenizer.json when it exists
    bool quiet = false;
};

struct ConvertReport {
    size_t tensors = 0;
    size_t skipped = 0;   // tensors in the checkpoint that dsv4 does not convert (mtp.*)
    std::string notes;    // fallbacks taken (e.g. Q8_0 rows that were not whole blocks)
    std::string tokenizer;  // the tokenizer.json embedded, empty when none was
};

ConvertReport convert_hf(const ConvertOptions& opt);

}  // namespace dsv4
