// The model's tensors, bound to the memory-mapped GGUF with their shapes checked.
// Large matrices stay in their stored format (F32/F16/BF16/Q8_0/MXFP4) and are read row by
// row; small vectors (norms, biases, sinks) are expanded to float32 once at load.
#pragma once
#include <cstdint>
#include <vector>

#include "io/gguf.h"
#include "model/config.h"

namespace dsv4 {

// A [rows, cols] matrix (PyTorch order: y = x · Wᵀ maps cols -> rows).
struct Mat {
    gguf::TensorType type = gguf::TensorType::F32;
    int64_t rows = 0, cols = 0;
    size_t row_bytes = 0;
    const uint8_t* data = nullptr;
    explicit operator bool() const { return data != nullptr; }
    const uint8_t* row(int64_t r) const { return data + size_t(r) * row_bytes; }
};

// n matrices of [rows, cols] stored back to back (routed experts).
struct MatStack {
    Mat first;  // expert 0; expert e starts e * rows rows further
    int64_t n = 0;
    Mat at(int64_t e) const {
        Mat m = first;
        m.data = first.data + size_t(e) * size_t(first.rows) * first.row_bytes;
        return m;
    }
};

// Columns [c0, c1) of m as a matrix of the same rows (the row stride stays m's: a view, no
// copy). c0 and c1 must fall on block boundaries of m's format; throws otherwise.
Mat column_slice(const Mat& m, int64_t c0, int64_t c1);

struct CompressorWeights {
    Mat kv, gate;            // [coff * width, hidden]
    std::vector<float> ape;  // [ratio, coff * width]
    std::vector<float> norm; // [width]
};

struct LayerWeights {
    std::vector<float> attn_norm, ffn_norm;
    Mat hc_attn_fn, hc_ffn_fn;  // [mix, hc * hidden]
    std::vector<float> hc_attn_base, hc_attn_scale, hc_ffn_base, hc_ffn_scale;
    Mat q_a, q_b, kv, o_a, o_b;  // o_a: [groups * o_lora, heads * head_dim / groups]
    std::vector<float> q_a_norm, kv_norm, sinks;
    CompressorWeights comp;     // CSA/HCA layers
    CompressorWeights idx_comp; // CSA layers: the indexer's own compressor
    Mat idx_q_b, idx_proj;      // [index_heads * index_head_dim, q_lora], [index_heads, hidden]
    Mat gate_inp;               // [experts, hidden]
    std::vector<float> exp_probs_b;   // top-k layers: selection bias
    std::vector<int32_t> tid2eid;     // hash layers: [vocab, top_k]
    MatStack gate_exps, up_exps, down_exps;
    Mat gate_sh, up_sh, down_sh;
};

// The MTP (next-n) block: a sliding-window, top-k-routed layer plus the projections that feed
// it the main model's final streams and the next token's embedding (REFERENCE.md §8). The
// embedding and the LM head are the main model's.
struct MtpWeights {
    LayerWeights block;
    Mat e_proj, h_proj;  // [hidden, hidden]
    std::vector<float> enorm, hnorm, norm, hc_head_base, hc_head_scale;
    Mat hc_head_fn;      // [hc, hc * hidden]
};

struct ModelWeights {
    Mat embed, output;  // [vocab, hidden]
    std::vector<float> output_norm, hc_head_base, hc_head_scale;
    Mat hc_head_fn;     // [hc, hc * hidden]
    std::vector<LayerWeights> layers;
    std::vector<MtpWeights> mtp;  // n_nextn blocks (empty when the file has none)
};

// Binds every tensor the config needs; throws an Error naming the tensor that is missing,
// has the wrong shape or type, or is unknown to the model.
ModelWeights bind_weights(const gguf::Reader& file, const ModelConfig& cfg);

}  // namespace dsv4
