#include "model/config.h"

#include "core/error.h"

namespace dsv4 {

const char* attn_type_name(AttnType t) {
    switch (t) {
        case AttnType::Sliding: return "sliding";
        case AttnType::CSA: return "csa";
        case AttnType::HCA: return "hca";
    }
    return "?";
}

int ModelConfig::csa_ratio() const {
    for (int l = 0; l < n_layers; ++l)
        if (attn[l] == AttnType::CSA) return ratio[l];
    return 0;
}

void ModelConfig::validate(const std::string& source) const {
    auto positive = [&](const char* field, long long v) {
        if (v <= 0) fail(source, ": ", field, " must be positive, got ", v);
    };
    positive("vocab_size", vocab);
    positive("hidden_size", hidden);
    positive("num_hidden_layers", n_layers);
    positive("num_attention_heads", n_heads);
    positive("head_dim", head_dim);
    positive("q_lora_rank", q_lora);
    positive("o_groups", o_groups);
    positive("o_lora_rank", o_lora);
    positive("sliding_window", window);
    positive("n_routed_experts", n_experts);
    positive("num_experts_per_tok", top_k);
    positive("moe_intermediate_size", moe_inter);
    positive("hc_mult", hc_mult);
    positive("hc_sinkhorn_iters", hc_iters);
    if (rope_dim <= 0 || rope_dim > head_dim || rope_dim % 2)
        fail(source, ": rope dimension ", rope_dim, " must be even and within head_dim ", head_dim);
    if (n_heads % o_groups) fail(source, ": num_attention_heads ", n_heads, " is not a multiple of o_groups ", o_groups);
    if (top_k > n_experts) fail(source, ": num_experts_per_tok ", top_k, " exceeds n_routed_experts ", n_experts);
    if (n_shared != 1) fail(source, ": n_shared_experts must be 1, got ", n_shared);
    if (int(attn.size()) != n_layers || int(ratio.size()) != n_layers || int(mlp.size()) != n_layers)
        fail(source, ": the layer schedule has ", attn.size(), " entries for ", n_layers, " layers");
    bool any_csa = false;
    for (int l = 0; l < n_layers; ++l) {
        if ((attn[l] == AttnType::Sliding) != (ratio[l] == 0))
            fail(source, ": layer ", l, " is ", attn_type_name(attn[l]), " with compress ratio ", ratio[l]);
        if (ratio[l] < 0) fail(source, ": layer ", l, " has a negative compress ratio");
        if (attn[l] == AttnType::CSA) {
            if (any_csa && ratio[l] != csa_ratio()) fail(source, ": CSA layers use different compress ratios");
            any_csa = true;
        }
    }
    if (any_csa) {
        positive("index_n_heads", index_heads);
        positive("index_topk", index_topk);
        if (index_head_dim < rope_dim || index_head_dim % 2)
            fail(source, ": index_head_dim ", index_head_dim, " must be even and at least the rope dimension ", rope_dim);
    }
    if (bos < 0 || bos >= vocab || eos < 0 || eos >= vocab)
        fail(source, ": bos/eos token ids ", bos, "/", eos, " outside the vocabulary of ", vocab);
}

}  // namespace dsv4
