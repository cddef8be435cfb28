// The model's hyper-parameters, as read from GGUF metadata or a Hugging Face config.json.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace dsv4 {

enum class AttnType { Sliding, CSA, HCA };  // sliding window only; + compressed sparse; + heavily compressed
enum class MlpType { TopK, Hash };          // learned top-k routing; fixed tid2eid routing

const char* attn_type_name(AttnType t);

// One RoPE table: plain (theta) or YaRN-scaled (theta + factor/original length/betas).
struct RopeParams {
    double theta = 10000.0;
    bool yarn = false;
    double factor = 1.0;
    double original_context = 0;
    double beta_fast = 32.0;
    double beta_slow = 1.0;
};

struct ModelConfig {
    int vocab = 0;
    int hidden = 0;          // D
    int n_layers = 0;        // main layers (the MTP block is not counted)
    int n_heads = 0;         // H query heads
    int head_dim = 0;        // d, also the width of the shared K=V latent row
    int rope_dim = 0;        // trailing channels of each head that rotate
    int q_lora = 0;
    int o_groups = 0;
    int o_lora = 0;
    int window = 0;          // sliding window, the query itself included
    int index_heads = 0;
    int index_head_dim = 0;
    int index_topk = 0;
    int n_experts = 0;
    int top_k = 0;
    int n_shared = 1;
    int moe_inter = 0;
    int hc_mult = 0;
    int hc_iters = 0;
    double hc_eps = 1e-6;
    double norm_eps = 1e-6;
    double routed_scale = 1.0;
    double swiglu_limit = 0;  // 0 = no clamp
    bool norm_topk = true;
    int64_t max_positions = 0;
    int bos = 0;
    int eos = 1;
    int n_nextn = 0;          // MTP blocks present in the file
    RopeParams rope_main;     // sliding-window layers
    RopeParams rope_compress; // CSA/HCA layers, their compressors and indexers
    std::vector<AttnType> attn;   // per main layer
    std::vector<int> ratio;       // per main layer: 0 (sliding), CSA rate, HCA rate
    std::vector<MlpType> mlp;     // per main layer

    int mix_dim() const { return (2 + hc_mult) * hc_mult; }
    int nope_dim() const { return head_dim - rope_dim; }
    int csa_ratio() const;  // 0 if the model has no CSA layer
    const RopeParams& rope_for(int layer) const {
        return attn[layer] == AttnType::Sliding ? rope_main : rope_compress;
    }

    // Throws an Error naming the field when the values cannot describe a working model.
    void validate(const std::string& source) const;
};

}  // namespace dsv4
