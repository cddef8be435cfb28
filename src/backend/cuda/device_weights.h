// The model's weights in device memory: the mirror of model/weights.h that the CUDA forward
// reads. Matrices keep their stored format (DeviceWeight); small vectors are float32 arrays.
// Made by uploading a loaded Model's tensors (upload_weights) or by generating random weights
// of a shape directly on the device (synthetic.h).
#pragma once
#include <cstdint>
#include <vector>

#include "backend/cuda/device_memory.h"
#include "model/config.h"
#include "model/shard.h"
#include "model/weights.h"

namespace dsv4::cuda {

// float32 (or int32) values on the device.
struct DeviceVec {
    DeviceBuffer buf;
    int64_t n = 0;
    const float* f() const { return buf.as<const float>(); }
    const int32_t* i() const { return buf.as<const int32_t>(); }
    explicit operator bool() const { return n > 0; }
};
DeviceVec upload_vec(const std::vector<float>& v);
DeviceVec upload_vec(const std::vector<int32_t>& v);

struct DeviceCompressor {
    DeviceWeight kv, gate;
    DeviceVec ape, norm;
};

struct DeviceLayer {
    DeviceVec attn_norm, ffn_norm;
    DeviceWeight hc_attn_fn, hc_ffn_fn;
    DeviceVec hc_attn_base, hc_attn_scale, hc_ffn_base, hc_ffn_scale;
    DeviceWeight q_a, q_b, kv, o_a, o_b;
    DeviceVec q_a_norm, kv_norm, sinks;
    DeviceCompressor comp, idx_comp;
    DeviceWeight idx_q_b, idx_proj;
    DeviceWeight gate_inp;
    DeviceVec exp_probs_b, tid2eid;
    DeviceWeight gate_exps, up_exps, down_exps;
    DeviceWeight gate_sh, up_sh, down_sh;
};

struct DeviceMtp {
    DeviceLayer block;
    DeviceWeight e_proj, h_proj;
    DeviceVec enorm, hnorm, norm, hc_head_base, hc_head_scale;
    DeviceWeight hc_head_fn;
};

struct DeviceModelWeights {
    DeviceWeight embed, output;
    DeviceVec output_norm, hc_head_base, hc_head_scale;
    DeviceWeight hc_head_fn;
    std::vector<DeviceLayer> layers;
    std::vector<DeviceMtp> mtp;
    DeviceVec rope_main, rope_compress;  // inv_freq tables [rope_dim / 2]
    size_t bytes = 0;                    // device bytes of all of the above
};

// Copies every tensor of a loaded model to the device, byte for byte; with a plan, only what
// that rank computes (model/shard.h): its rows of q_b, o_a, the shared gate/up and the LM head,
// its sinks, its columns of o_b and the shared down projection (repacked into contiguous rows),
// its block of each expert stack. Everything else is copied whole to every rank.
DeviceModelWeights upload_weights(const ModelConfig& c, const ModelWeights& w, const ShardPlan* plan = nullptr);

// Device bytes of the weights (sums each buffer).
size_t weight_bytes(const DeviceModelWeights& w);

}  // namespace dsv4::cuda
