// Every GGUF tensor name and metadata key dsv4 reads or writes, in one place. They follow
// llama.cpp's `deepseek4` architecture so files load in both; our additions live under dsv4.*.
// docs/FORMAT.md documents each one.
#pragma once
#include <string>

namespace dsv4::names {

inline const std::string kArch = "deepseek4";

// Metadata keys.
inline std::string key(const std::string& suffix) { return kArch + "." + suffix; }
inline const std::string kArchitecture = "general.architecture";
inline const std::string kName = "general.name";
inline const std::string kBlockCount = key("block_count");
inline const std::string kContextLength = key("context_length");
inline const std::string kEmbeddingLength = key("embedding_length");
inline const std::string kEmbeddingLengthOut = key("embedding_length_out");
inline const std::string kVocabSize = key("vocab_size");
inline const std::string kFeedForwardLength = key("feed_forward_length");
inline const std::string kHeadCount = key("attention.head_count");
inline const std::string kHeadCountKv = key("attention.head_count_kv");
inline const std::string kKeyLength = key("attention.key_length");
inline const std::string kValueLength = key("attention.value_length");
inline const std::string kQLoraRank = key("attention.q_lora_rank");
inline const std::string kOutputLoraRank = key("attention.output_lora_rank");
inline const std::string kOutputGroupCount = key("attention.output_group_count");
inline const std::string kSlidingWindow = key("attention.sliding_window");
inline const std::string kCompressRatios = key("attention.compress_ratios");
inline const std::string kCompressRopeFreqBase = key("attention.compress_rope_freq_base");
inline const std::string kRmsEps = key("attention.layer_norm_rms_epsilon");
inline const std::string kIndexerHeadCount = key("attention.indexer.head_count");
inline const std::string kIndexerKeyLength = key("attention.indexer.key_length");
inline const std::string kIndexerTopK = key("attention.indexer.top_k");
inline const std::string kRopeDimensionCount = key("rope.dimension_count");
inline const std::string kRopeFreqBase = key("rope.freq_base");
inline const std::string kRopeScalingType = key("rope.scaling.type");
inline const std::string kRopeScalingFactor = key("rope.scaling.factor");
inline const std::string kRopeScalingOrigCtx = key("rope.scaling.original_context_length");
inline const std::string kRopeYarnBetaFast = key("rope.scaling.yarn_beta_fast");
inline const std::string kRopeYarnBetaSlow = key("rope.scaling.yarn_beta_slow");
inline const std::string kExpertCount = key("expert_count");
inline const std::string kExpertUsedCount = key("expert_used_count");
inline const std::string kExpertSharedCount = key("expert_shared_count");
inline const std::string kExpertFeedForwardLength = key("expert_feed_forward_length");
inline const std::string kExpertWeightsScale = key("expert_weights_scale");
inline const std::string kExpertWeightsNorm = key("expert_weights_norm");
inline const std::string kExpertGatingFunc = key("expert_gating_func");
inline const std::string kExpertGroupCount = key("expert_group_count");
inline const std::string kExpertGroupUsedCount = key("expert_group_used_count");
inline const std::string kHashLayerCount = key("hash_layer_count");
inline const std::string kHcCount = key("hyper_connection.count");
inline const std::string kHcSinkhornIters = key("hyper_connection.sinkhorn_iterations");
inline const std::string kHcEpsilon = key("hyper_connection.epsilon");
inline const std::string kSwigluClampExp = key("swiglu_clamp_exp");
inline const std::string kSwigluClampShexp = key("swiglu_clamp_shexp");
inline const std::string kNextnPredictLayers = key("nextn_predict_layers");
inline const std::string kBosTokenId = "tokenizer.ggml.bos_token_id";
inline const std::string kEosTokenId = "tokenizer.ggml.eos_token_id";
// dsv4 additions.
inline const std::string kDsv4CsaRatio = "dsv4.attention.csa_ratio";    // which nonzero ratio is CSA (default 4)
inline const std::string kDsv4HashLayers = "dsv4.hash_layers";          // per-layer 0/1 (default: leading hash_layer_count)
inline const std::string kDsv4HfConfig = "dsv4.hf_config_json";        // the config.json converted from, verbatim

constexpr int kGatingSqrtSoftplus = 4;  // llama.cpp's LLAMA_EXPERT_GATING_FUNC_TYPE_SQRT_SOFTPLUS

// Tensor names.
inline const std::string kTokenEmbd = "token_embd.weight";
inline const std::string kOutputNorm = "output_norm.weight";
inline const std::string kOutput = "output.weight";
inline const std::string kOutputHcFn = "output_hc_fn.weight";
inline const std::string kOutputHcBase = "output_hc_base.weight";
inline const std::string kOutputHcScale = "output_hc_scale.weight";

inline std::string blk(int layer, const std::string& suffix) {
    return "blk." + std::to_string(layer) + "." + suffix;
}
// Per-layer suffixes (append to blk(layer, ...)).
inline const std::string kAttnNorm = "attn_norm.weight";
inline const std::string kAttnSinks = "attn_sinks.weight";
inline const std::string kAttnQA = "attn_q_a.weight";
inline const std::string kAttnQANorm = "attn_q_a_norm.weight";
inline const std::string kAttnQB = "attn_q_b.weight";
inline const std::string kAttnKv = "attn_kv.weight";
inline const std::string kAttnKvNorm = "attn_kv_a_norm.weight";
inline const std::string kAttnOutA = "attn_output_a.weight";
inline const std::string kAttnOutB = "attn_output_b.weight";
inline const std::string kHcAttnFn = "hc_attn_fn.weight";
inline const std::string kHcAttnBase = "hc_attn_base.weight";
inline const std::string kHcAttnScale = "hc_attn_scale.weight";
inline const std::string kHcFfnFn = "hc_ffn_fn.weight";
inline const std::string kHcFfnBase = "hc_ffn_base.weight";
inline const std::string kHcFfnScale = "hc_ffn_scale.weight";
inline const std::string kCompKv = "attn_compressor_kv.weight";
inline const std::string kCompGate = "attn_compressor_gate.weight";
inline const std::string kCompApe = "attn_compressor_ape.weight";
inline const std::string kCompNorm = "attn_compressor_norm.weight";
inline const std::string kIdxQB = "indexer.attn_q_b.weight";
inline const std::string kIdxProj = "indexer.proj.weight";
inline const std::string kIdxCompKv = "indexer_compressor_kv.weight";
inline const std::string kIdxCompGate = "indexer_compressor_gate.weight";
inline const std::string kIdxCompApe = "indexer_compressor_ape.weight";
inline const std::string kIdxCompNorm = "indexer_compressor_norm.weight";
inline const std::string kFfnNorm = "ffn_norm.weight";
inline const std::string kFfnGateInp = "ffn_gate_inp.weight";
inline const std::string kFfnExpProbsB = "exp_probs_b.bias";
inline const std::string kFfnTid2eid = "ffn_gate_tid2eid.weight";
inline const std::string kFfnGateExps = "ffn_gate_exps.weight";
inline const std::string kFfnUpExps = "ffn_up_exps.weight";
inline const std::string kFfnDownExps = "ffn_down_exps.weight";
inline const std::string kFfnGateShexp = "ffn_gate_shexp.weight";
inline const std::string kFfnUpShexp = "ffn_up_shexp.weight";
inline const std::string kFfnDownShexp = "ffn_down_shexp.weight";
// MTP (next-n) block extras, on blk.{n_layers + i} (llama.cpp's deepseek4 names).
inline const std::string kNextnEProj = "nextn.e_proj.weight";
inline const std::string kNextnHProj = "nextn.h_proj.weight";
inline const std::string kNextnENorm = "nextn.enorm.weight";
inline const std::string kNextnHNorm = "nextn.hnorm.weight";
inline const std::string kNextnHeadNorm = "nextn.shared_head_norm.weight";
inline const std::string kNextnHcHeadFn = "nextn.hc_head_fn.weight";
inline const std::string kNextnHcHeadBase = "nextn.hc_head_base.weight";
inline const std::string kNextnHcHeadScale = "nextn.hc_head_scale.weight";

// The DSpark block drafter's companion GGUF (dsv4's own format; docs/FORMAT.md).
inline const std::string kDsparkArch = "dsv4-dspark";
inline const std::string kDsparkBlockSize = "dsv4.dspark.block_size";
inline const std::string kDsparkLayerCount = "dsv4.dspark.layer_count";
inline const std::string kDsparkHeadCount = "dsv4.dspark.head_count";
inline const std::string kDsparkHeadDim = "dsv4.dspark.head_dim";
inline const std::string kDsparkFfnLength = "dsv4.dspark.feed_forward_length";
inline const std::string kDsparkMarkovRank = "dsv4.dspark.markov_rank";
inline const std::string kDsparkNoiseToken = "dsv4.dspark.noise_token_id";
inline const std::string kDsparkVocab = "dsv4.dspark.vocab_size";
inline const std::string kDsparkHidden = "dsv4.dspark.embedding_length";
inline const std::string kDsparkRmsEps = "dsv4.dspark.layer_norm_rms_epsilon";
// Its tensors keep the names of the training code's state dict under "dspark.".
inline std::string dspark(const std::string& suffix) { return "dspark." + suffix; }
inline std::string dspark_blk(int i, const std::string& suffix) {
    return "dspark.blk." + std::to_string(i) + "." + suffix;
}

}  // namespace dsv4::names
