#include "io/hf_config.h"

#include <cmath>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace dsv4 {

using nlohmann::json;

namespace {

class Fields {
public:
    Fields(const json& j, const std::string& source) : j_(j), src_(source) {}

    const json* find(std::initializer_list<const char*> names) const {
        for (const char* n : names)
            if (j_.contains(n) && !j_[n].is_null()) return &j_[n];
        return nullptr;
    }
    // allow_list: a list stands for its first element (eos_token_id may list several ids).
    long long integer(std::initializer_list<const char*> names, long long fallback, bool allow_list = false) const {
        const json* v = find(names);
        if (!v) return fallback;
        if (allow_list && v->is_array() && !v->empty() && (*v)[0].is_number_integer()) return (*v)[0].get<long long>();
        if (!v->is_number_integer()) bad(*names.begin(), *v, "an integer");
        return v->get<long long>();
    }
    double number(std::initializer_list<const char*> names, double fallback) const {
        const json* v = find(names);
        if (!v) return fallback;
        if (!v->is_number()) bad(*names.begin(), *v, "a number");
        return v->get<double>();
    }
    bool boolean(std::initializer_list<const char*> names, bool fallback) const {
        const json* v = find(names);
        if (!v) return fallback;
        if (!v->is_boolean()) bad(*names.begin(), *v, "true or false");
        return v->get<bool>();
    }
    std::string string(std::initializer_list<const char*> names, const std::string& fallback) const {
        const json* v = find(names);
        if (!v) return fallback;
        if (!v->is_string()) bad(*names.begin(), *v, "a string");
        return v->get<std::string>();
    }
    [[noreturn]] void bad(const std::string& field, const json& v, const char* want) const {
        fail(src_, ": field '", field, "' is ", v.dump(), ", expected ", want);
    }
    const std::string& source() const { return src_; }

private:
    const json& j_;
    const std::string& src_;
};

int checked_int(const Fields& f, std::initializer_list<const char*> names, long long fallback, bool allow_list = false) {
    long long v = f.integer(names, fallback, allow_list);
    if (v < 0 || v > (1ll << 31) - 1) fail(f.source(), ": field '", *names.begin(), "' value ", v, " is out of range");
    return int(v);
}

AttnType attn_from_name(const std::string& s, const std::string& source) {
    if (s == "sliding_attention") return AttnType::Sliding;
    if (s == "compressed_sparse_attention") return AttnType::CSA;
    if (s == "heavily_compressed_attention") return AttnType::HCA;
    fail(source, ": layer_types entry '", s, "' is not sliding_attention, compressed_sparse_attention or ",
         "heavily_compressed_attention");
}

// A rope entry: plain or YaRN. attention_factor must be 1 (V4 applies no YaRN magnitude scale).
RopeParams rope_from(const json& r, double theta, const std::string& source, const char* which) {
    RopeParams p;
    p.theta = theta;
    std::string type = "default";
    if (r.contains("rope_type") && r["rope_type"].is_string()) type = r["rope_type"].get<std::string>();
    else if (r.contains("type") && r["type"].is_string()) type = r["type"].get<std::string>();
    if (r.contains("rope_theta") && r["rope_theta"].is_number()) p.theta = r["rope_theta"].get<double>();
    if (type == "default") return p;
    if (type != "yarn") fail(source, ": ", which, " rope type '", type, "' is not supported (default or yarn)");
    p.yarn = true;
    auto num = [&](const char* k, double fallback) {
        if (!r.contains(k) || r[k].is_null()) return fallback;
        if (!r[k].is_number()) fail(source, ": ", which, " rope field '", k, "' is not a number");
        return r[k].get<double>();
    };
    p.original_context = num("original_max_position_embeddings", 0);
    if (p.original_context <= 0) fail(source, ": ", which, " yarn rope needs original_max_position_embeddings");
    p.factor = num("factor", 0);
    p.beta_fast = num("beta_fast", 0);
    p.beta_slow = num("beta_slow", 0);
    if (p.beta_fast == 0) p.beta_fast = 32;  // transformers: `beta_fast or 32`
    if (p.beta_slow == 0) p.beta_slow = 1;
    double af = num("attention_factor", 1.0);
    if (af != 1.0) fail(source, ": ", which, " rope attention_factor ", af, " is not supported (must be 1)");
    if (r.contains("truncate") && r["truncate"].is_boolean() && !r["truncate"].get<bool>())
        fail(source, ": ", which, " rope truncate=false is not supported");
    return p;
}

}  // namespace

ModelConfig config_from_hf_json(const std::string& text, const std::string& source) {
    json j;
    try {
        j = json::parse(text);
    } catch (const std::exception& e) {
        fail(source, ": not valid JSON: ", e.what());
    }
    if (!j.is_object()) fail(source, ": config is not a JSON object");
    Fields f(j, source);
    std::string model_type = f.string({"model_type"}, "");
    if (model_type != "deepseek_v4")
        fail(source, ": model_type is '", model_type, "', expected 'deepseek_v4'");
    std::string act = f.string({"hidden_act"}, "silu");
    if (act != "silu") fail(source, ": hidden_act '", act, "' is not supported (silu)");
    std::string scoring = f.string({"scoring_func", "score_func"}, "sqrtsoftplus");
    if (scoring != "sqrtsoftplus") fail(source, ": scoring_func '", scoring, "' is not supported (sqrtsoftplus)");
    if (f.integer({"n_group"}, 1) > 1 || f.integer({"topk_group"}, 1) > 1)
        fail(source, ": expert groups (n_group/topk_group) are not supported");

    ModelConfig c;
    c.vocab = checked_int(f, {"vocab_size"}, 129280);
    c.hidden = checked_int(f, {"hidden_size", "dim"}, 4096);
    c.n_layers = checked_int(f, {"num_hidden_layers", "n_layers"}, 43);
    c.n_heads = checked_int(f, {"num_attention_heads", "n_heads"}, 64);
    c.head_dim = checked_int(f, {"head_dim"}, 512);
    c.q_lora = checked_int(f, {"q_lora_rank"}, 1024);
    c.o_groups = checked_int(f, {"o_groups"}, 8);
    c.o_lora = checked_int(f, {"o_lora_rank"}, 1024);
    c.window = checked_int(f, {"sliding_window", "window_size"}, 128);
    c.index_heads = checked_int(f, {"index_n_heads"}, 64);
    c.index_head_dim = checked_int(f, {"index_head_dim"}, 128);
    c.index_topk = checked_int(f, {"index_topk"}, 512);
    c.n_experts = checked_int(f, {"n_routed_experts"}, 256);
    c.top_k = checked_int(f, {"num_experts_per_tok", "n_activated_experts"}, 6);
    c.n_shared = checked_int(f, {"n_shared_experts"}, 1);
    c.moe_inter = checked_int(f, {"moe_intermediate_size", "moe_inter_dim"}, 2048);
    c.hc_mult = checked_int(f, {"hc_mult"}, 4);
    c.hc_iters = checked_int(f, {"hc_sinkhorn_iters"}, 20);
    c.hc_eps = f.number({"hc_eps"}, 1e-6);
    c.norm_eps = f.number({"rms_norm_eps", "norm_eps"}, 1e-6);
    c.routed_scale = f.number({"routed_scaling_factor", "route_scale"}, 1.5);
    c.swiglu_limit = f.number({"swiglu_limit"}, 10.0);
    c.norm_topk = f.boolean({"norm_topk_prob"}, true);
    c.max_positions = f.integer({"max_position_embeddings"}, 1048576);
    c.bos = checked_int(f, {"bos_token_id"}, 0);
    c.eos = checked_int(f, {"eos_token_id"}, 1, /*allow_list=*/true);
    c.n_nextn = 0;  // MTP blocks are counted by the converter from the tensors it writes

    // Rope dimension: partial_rotary_factor, else legacy qk_rope_head_dim, else 64/512.
    if (const json* prf = f.find({"partial_rotary_factor"})) {
        if (!prf->is_number()) f.bad("partial_rotary_factor", *prf, "a number");
        c.rope_dim = int(c.head_dim * prf->get<double>());
    } else {
        c.rope_dim = checked_int(f, {"qk_rope_head_dim", "rope_head_dim"}, c.head_dim / 8);
    }

    // Compress rates per attention type.
    int csa_rate = 4, hca_rate = 128;
    if (const json* cr = f.find({"compress_rates"})) {
        if (!cr->is_object()) f.bad("compress_rates", *cr, "an object");
        for (auto& [k, v] : cr->items()) {
            if (!v.is_number_integer() || v.get<int>() <= 0) f.bad("compress_rates." + k, v, "a positive integer");
            if (k == "compressed_sparse_attention") csa_rate = v.get<int>();
            else if (k == "heavily_compressed_attention") hca_rate = v.get<int>();
            else fail(source, ": compress_rates key '", k, "' is not an attention type");
        }
    }
    csa_rate = checked_int(f, {"compress_rate_csa"}, csa_rate);
    hca_rate = checked_int(f, {"compress_rate_hca"}, hca_rate);

    // Layer schedule: layer_types > legacy compress_ratios > transformers' default (V4-Pro pattern).
    const char* schedule_field = "layer_types";
    if (const json* lt = f.find({"layer_types"})) {
        if (!lt->is_array()) f.bad("layer_types", *lt, "an array");
        for (const auto& e : *lt) {
            if (!e.is_string()) f.bad("layer_types", e, "strings");
            c.attn.push_back(attn_from_name(e.get<std::string>(), source));
        }
    } else if (const json* ratios = f.find({"compress_ratios"})) {
        schedule_field = "compress_ratios";
        if (!ratios->is_array()) f.bad("compress_ratios", *ratios, "an array");
        for (const auto& e : *ratios) {
            if (!e.is_number_integer()) f.bad("compress_ratios", e, "integers");
            int r = e.get<int>();
            if (r == 0) c.attn.push_back(AttnType::Sliding);
            else if (r == 4) c.attn.push_back(AttnType::CSA);
            else if (r == 128) c.attn.push_back(AttnType::HCA);
            else fail(source, ": compress_ratios entry ", r, " is not 0, 4 or 128");
        }
    } else {
        for (int l = 0; l < c.n_layers; ++l)
            c.attn.push_back(l < 2 ? AttnType::HCA : ((l - 2) % 2 ? AttnType::CSA : AttnType::HCA));
    }
    if (int(c.attn.size()) < c.n_layers)
        fail(source, ": ", schedule_field, " has ", c.attn.size(), " entries for ", c.n_layers, " layers");
    c.attn.resize(static_cast<size_t>(c.n_layers));  // legacy lists carry trailing MTP entries
    for (AttnType t : c.attn) c.ratio.push_back(t == AttnType::Sliding ? 0 : t == AttnType::CSA ? csa_rate : hca_rate);

    if (const json* mt = f.find({"mlp_layer_types"})) {
        if (!mt->is_array()) f.bad("mlp_layer_types", *mt, "an array");
        for (const auto& e : *mt) {
            std::string s = e.is_string() ? e.get<std::string>() : "";
            if (s == "hash_moe") c.mlp.push_back(MlpType::Hash);
            else if (s == "moe") c.mlp.push_back(MlpType::TopK);
            else f.bad("mlp_layer_types", e, "\"hash_moe\" or \"moe\"");
        }
        if (int(c.mlp.size()) < c.n_layers) fail(source, ": mlp_layer_types is shorter than num_hidden_layers");
        c.mlp.resize(static_cast<size_t>(c.n_layers));
    } else {
        int n_hash = checked_int(f, {"num_hash_layers", "n_hash_layers"}, 3);
        for (int l = 0; l < c.n_layers; ++l) c.mlp.push_back(l < n_hash ? MlpType::Hash : MlpType::TopK);
    }

    // Rope tables. Nested {main, compress} is taken as is; otherwise main = rope_theta plain and
    // compress = compress_rope_theta with the flat rope_parameters / legacy rope_scaling.
    double rope_theta = f.number({"rope_theta"}, 10000.0);
    double compress_theta = f.number({"compress_rope_theta"}, 160000.0);
    const json* rp = f.find({"rope_parameters"});
    if (rp && !rp->is_object()) f.bad("rope_parameters", *rp, "an object");
    if (rp && rp->contains("main") && rp->contains("compress") && (*rp)["main"].is_object() &&
        (*rp)["compress"].is_object()) {
        c.rope_main = rope_from((*rp)["main"], rope_theta, source, "main");
        c.rope_compress = rope_from((*rp)["compress"], compress_theta, source, "compress");
    } else {
        const json* flat = rp ? rp : f.find({"rope_scaling"});
        json copy = flat ? *flat : json::object();
        if (!copy.is_object()) f.bad("rope_scaling", copy, "an object");
        copy.erase("rope_theta");  // transformers overrides it with compress_rope_theta
        c.rope_main.theta = rope_theta;
        c.rope_compress = rope_from(copy, compress_theta, source, "compress");
    }
    if (c.rope_main.yarn) fail(source, ": yarn on the main (sliding-window) rope is not supported");
    if (c.rope_compress.yarn && c.rope_compress.factor <= 0)
        c.rope_compress.factor = double(c.max_positions) / c.rope_compress.original_context;

    c.validate(source);
    return c;
}

}  // namespace dsv4
