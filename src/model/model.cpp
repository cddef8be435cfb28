#include "model/model.h"

#include <algorithm>

#include "backend/cpu/attention.h"
#include "backend/cpu/ops.h"
#include "core/error.h"
#include "model/config_gguf.h"

namespace dsv4 {

Model::Model(const std::string& path)
    : file_(std::make_unique<gguf::Reader>(path)),
      cfg_(config_from_gguf(*file_)),
      w_(bind_weights(*file_, cfg_)),
      rope_main_(cfg_.rope_main, cfg_.rope_dim),
      rope_compress_(cfg_.rope_compress, cfg_.rope_dim) {}

void Model::forward(const int32_t* tokens, int64_t T, State& st, float* logits, const ForwardOptions& opt) const {
    const ModelConfig& c = cfg_;
    if (int(st.layers.size()) != c.n_layers) fail("state was made for another model");
    const int64_t D = c.hidden, nD = int64_t(c.hc_mult) * D;
    std::vector<float> X(static_cast<size_t>(T * nD)), y(static_cast<size_t>(T * D)), f(static_cast<size_t>(T * D));
    std::vector<float> post(static_cast<size_t>(T * c.hc_mult)), comb(static_cast<size_t>(T * c.hc_mult * c.hc_mult));
    cpu::embed_streams(w_.embed, tokens, T, c.hc_mult, X.data());
    for (int l = 0; l < c.n_layers; ++l) {
        const LayerWeights& L = w_.layers[size_t(l)];
        const cpu::Rope& rope = c.attn[size_t(l)] == AttnType::Sliding ? rope_main_ : rope_compress_;
        cpu::hc_pre(c, L.hc_attn_fn, L.hc_attn_base.data(), L.hc_attn_scale.data(), X.data(), T, y.data(),
                    post.data(), comb.data());
        cpu::rmsnorm(y.data(), T, D, L.attn_norm.data(), float(c.norm_eps));
        cpu::attention_block(c, l, L, rope, y.data(), T, st.pos, opt.band, st.layers[size_t(l)], f.data());
        cpu::hc_post(c, X.data(), f.data(), post.data(), comb.data(), T);

        cpu::hc_pre(c, L.hc_ffn_fn, L.hc_ffn_base.data(), L.hc_ffn_scale.data(), X.data(), T, y.data(), post.data(),
                    comb.data());
        cpu::rmsnorm(y.data(), T, D, L.ffn_norm.data(), float(c.norm_eps));
        cpu::moe(c, L, c.mlp[size_t(l)], y.data(), tokens, T, f.data());
        cpu::hc_post(c, X.data(), f.data(), post.data(), comb.data(), T);
    }
    st.pos += T;
    if (opt.hidden && opt.hidden_from < T)
        std::copy(X.begin() + opt.hidden_from * nD, X.end(), opt.hidden);
    if (!logits || opt.logits == Logits::None) return;
    const int64_t first = opt.logits == Logits::Last ? T - 1 : 0, rows = T - first;
    cpu::hc_head(c, w_, X.data() + first * nD, rows, y.data());
    cpu::rmsnorm(y.data(), rows, D, w_.output_norm.data(), float(c.norm_eps));
    cpu::matmul(y.data(), rows, w_.output, logits);
}

}  // namespace dsv4
