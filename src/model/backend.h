// A device that runs the forward pass instead of the CPU reference ops (DESIGN.md: one
// implementation of the ops per device). The CPU path is Model's own; another backend (the
// CUDA one, src/backend/cuda/) implements this interface, holds its copy of the weights in
// device memory and keeps each State's per-layer tensors there (a DeviceState inside State).
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "model/config.h"
#include "model/state.h"

namespace dsv4 {

struct ForwardOptions;

class ForwardBackend {
public:
    virtual ~ForwardBackend() = default;
    virtual std::string name() const = 0;     // "cuda"
    virtual std::string device() const = 0;   // e.g. "NVIDIA H200"
    // Runs tokens[0..T) at positions st.pos ... exactly as Model::forward does on the CPU
    // (same arguments, same outputs in host memory); creates st.device on first use.
    virtual void forward(const int32_t* tokens, int64_t T, State& st, float* logits,
                         const ForwardOptions& opt) const = 0;
    // Model::mtp_forward / mtp_head on this device (throw when the backend's model has no MTP).
    virtual void mtp_forward(const float* hidden, const int32_t* next, int64_t T, State& st, float* logits,
                             const ForwardOptions& opt) const = 0;
    virtual void mtp_head(const float* out, int64_t rows, float* logits) const = 0;
    // Device memory held for the weights, and the most this process has had allocated.
    virtual size_t weight_bytes() const = 0;
    virtual size_t peak_device_bytes() const = 0;
    // What one token asks of the device (bench's roofline): weight bytes a decode token reads
    // (routed experts: top_k of n), and 2 x the active matmul weights (prefill FLOPs per token,
    // the LM head left out).
    virtual double decode_bytes_per_token() const = 0;
    virtual double prefill_flop_per_token() const = 0;
    // Weight bytes one MTP step reads (its block, experts at top_k of n, and the LM head).
    virtual double mtp_bytes_per_token() const = 0;
    // The device's ceilings, measured now: HBM read bandwidth (a streaming read kernel) and the
    // dense tensor-core rate (cuBLAS bf16 GEMM), with how they were measured.
    struct Peak {
        double read_bytes_s = 0, flop_s = 0;
        std::string method;
    };
    virtual Peak measure_peak() const = 0;
};

// Opens a backend for the model by name ("cuda") on `gpus` devices (more than one: the model
// split over them, docs/PARALLEL.md); throws (naming the backend and why) when this build or
// this machine has none. Backends register themselves (register_backend) from the front end,
// which links them.
class Model;
using BackendFactory = std::unique_ptr<ForwardBackend> (*)(const Model& model, int gpus);
void register_backend(const std::string& name, BackendFactory factory);
std::unique_ptr<ForwardBackend> open_backend(const std::string& name, const Model& model, int gpus = 1);

}  // namespace dsv4
