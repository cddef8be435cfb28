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
    gguf::TensorType experts = gguf::TensorType::F32; // ...or in this type (e.g. Q8_0, MXFP4, Q2_K);
                                                      // rows that are not whole blocks fall back to F16 (notes)
    std::string tokenizer_json;  // default: hf_dir/tokenizer.json when it exists
    bool quiet = false;
};

struct ConvertReport {
    size_t tensors = 0;
    size_t skipped = 0;   // mtp.* tensors of a block without e_proj (not an MTP block we know)
    int mtp_blocks = 0;   // MTP blocks converted (blk.{n_layers + i}, nextn_predict_layers)
    std::string notes;    // fallbacks taken (e.g. Q8_0 rows that were not whole blocks)
    std::string tokenizer;  // the tokenizer.json embedded, empty when none was
};

ConvertReport convert_hf(const ConvertOptions& opt);

}  // namespace dsv4
