// The CUDA backend's entry points for front ends (plain C++, no CUDA headers): registering
// "cuda" so that Model(path, "cuda") and --backend cuda work, and synthetic models whose random
// weights are generated on the device (dsv4 bench --synthetic flash).
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "io/gguf.h"
#include "model/model.h"

namespace dsv4::cuda {

// Makes the backend available under the name "cuda" (idempotent).
void register_cuda_backend();

struct SyntheticOptions {
    std::string shape = "flash";  // "flash": DeepSeek-V4-Flash (REFERENCE.md §1)
    int layers = 0;               // 0: all of the shape's layers; else the first N of its schedule
    gguf::TensorType dense = gguf::TensorType::Q8_0;    // attention, shared expert, embedding, head
    gguf::TensorType experts = gguf::TensorType::Q2_K;  // routed experts
    uint64_t seed = 1;
    bool mtp = true;              // with one MTP block of the real shape
};

// The config of a named shape (throws UsageError naming the shape when unknown).
ModelConfig synthetic_config(const SyntheticOptions& o);

// A model of that shape with random weights made on the device (no file; runs only on CUDA).
std::unique_ptr<Model> make_synthetic_model(const SyntheticOptions& o);

}  // namespace dsv4::cuda
