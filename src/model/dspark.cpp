#include "model/dspark.h"

#include <cmath>

#include "backend/cpu/ops.h"
#include "backend/cpu/quant.h"
#include "core/error.h"
#include "io/names.h"

namespace dsv4 {

namespace n = names;

namespace {

int meta_int(const gguf::Reader& f, const std::string& key) {
    if (!f.find(key)) fail(f.path(), ": missing metadata key '", key, "'");
    int64_t v = f.get_int(key);
    if (v < 0 || v > (int64_t(1) << 30)) fail(f.path(), ": metadata '", key, "' = ", v, " is out of range");
    return int(v);
}

const gguf::TensorInfo& tensor(const gguf::Reader& f, const std::string& name, const std::vector<int64_t>& ne) {
    const gguf::TensorInfo* t = f.find_tensor(name);
    if (!t) fail(f.path(), ": missing tensor '", name, "'");
    if (t->ne != ne) fail(f.path(), ": tensor '", name, "' has the wrong shape");
    if (!cpu::is_float_weight_type(t->type))
        fail(f.path(), ": tensor '", name, "' has type ", gguf::type_name(t->type), ", which is not a weight type");
    return *t;
}

Mat mat(const gguf::Reader& f, const std::string& name, int64_t rows, int64_t cols) {
    const gguf::TensorInfo& t = tensor(f, name, {cols, rows});
    return Mat{t.type, rows, cols, cpu::row_bytes(t.type, cols), t.data};
}

std::vector<float> vec(const gguf::Reader& f, const std::string& name, const std::vector<int64_t>& ne) {
    const gguf::TensorInfo& t = tensor(f, name, ne);
    std::vector<float> out(static_cast<size_t>(t.elements()));
    cpu::dequant_row(t.type, t.data, t.elements(), out.data());
    return out;
}

}  // namespace

Dspark::Dspark(const std::string& path, const Model& target)
    : file_(std::make_unique<gguf::Reader>(path)), target_(target) {
    const gguf::Reader& f = *file_;
    std::string arch = f.get_string(n::kArchitecture);
    if (arch != n::kDsparkArch) fail(path, ": architecture is '", arch, "', expected '", n::kDsparkArch, "'");
    cfg_.block = meta_int(f, n::kDsparkBlockSize);
    cfg_.n_layers = meta_int(f, n::kDsparkLayerCount);
    cfg_.n_heads = meta_int(f, n::kDsparkHeadCount);
    cfg_.head_dim = meta_int(f, n::kDsparkHeadDim);
    cfg_.ffn = meta_int(f, n::kDsparkFfnLength);
    cfg_.rank = meta_int(f, n::kDsparkMarkovRank);
    cfg_.noise_token = meta_int(f, n::kDsparkNoiseToken);
    cfg_.vocab = meta_int(f, n::kDsparkVocab);
    cfg_.hidden = meta_int(f, n::kDsparkHidden);
    cfg_.eps = f.get_number(n::kDsparkRmsEps);
    const ModelConfig& tc = target.config();
    if (cfg_.vocab != tc.vocab || cfg_.hidden != tc.hidden)
        fail(path, ": the drafter is for vocabulary ", cfg_.vocab, " and hidden size ", cfg_.hidden,
             ", the model has ", tc.vocab, " and ", tc.hidden);
    if (cfg_.block < 1 || cfg_.block > 64 || cfg_.noise_token >= cfg_.vocab)
        fail(path, ": block size ", cfg_.block, " or noise token ", cfg_.noise_token, " is out of range");
    const int64_t D = cfg_.hidden, HD = int64_t(cfg_.n_heads) * cfg_.head_dim;
    main_proj = mat(f, n::dspark("main_proj.weight"), D, D);
    main_norm = vec(f, n::dspark("main_norm.weight"), {D});
    pos = vec(f, n::dspark("pos"), {D, cfg_.block});
    for (int i = 0; i < cfg_.n_layers; ++i) {
        Layer L;
        L.attn_norm = vec(f, n::dspark_blk(i, "attn_norm.weight"), {D});
        L.q = mat(f, n::dspark_blk(i, "q.weight"), HD, D);
        L.k = mat(f, n::dspark_blk(i, "k.weight"), HD, D);
        L.v = mat(f, n::dspark_blk(i, "v.weight"), HD, D);
        L.o = mat(f, n::dspark_blk(i, "o.weight"), D, HD);
        L.ffn_norm = vec(f, n::dspark_blk(i, "ffn_norm.weight"), {D});
        L.gate = mat(f, n::dspark_blk(i, "gate.weight"), cfg_.ffn, D);
        L.up = mat(f, n::dspark_blk(i, "up.weight"), cfg_.ffn, D);
        L.down = mat(f, n::dspark_blk(i, "down.weight"), D, cfg_.ffn);
        layers_.push_back(std::move(L));
    }
    final_norm = vec(f, n::dspark("final_norm.weight"), {D});
    markov_a = mat(f, n::dspark("markov_a"), cfg_.vocab, cfg_.rank);
    markov_b = mat(f, n::dspark("markov_b"), cfg_.vocab, cfg_.rank);
    conf_w = vec(f, n::dspark("conf.weight"), {D, 1});
    conf_b = vec(f, n::dspark("conf.bias"), {1});
    size_t expected = 3 + 9 * size_t(cfg_.n_layers) + 5;
    if (f.tensors().size() != expected)
        fail(path, ": holds ", f.tensors().size(), " tensors, a DSpark drafter of ", cfg_.n_layers, " layers has ",
             expected);
}

void Dspark::propose(const float* streams, int32_t first, int slots, float* base_logits, float* conf) const {
    if (slots < 1 || slots > cfg_.block) fail("DSpark: ", slots, " slots asked of a block of ", cfg_.block);
    const int W = slots, H = cfg_.n_heads, hd = cfg_.head_dim, hc = target_.config().hc_mult;
    const int64_t D = cfg_.hidden, HD = int64_t(H) * hd;
    const float eps = float(cfg_.eps);
    // c = main_norm(main_proj(mean of the streams)).
    std::vector<float> mean(static_cast<size_t>(D), 0.0f), c(static_cast<size_t>(D));
    for (int j = 0; j < hc; ++j)
        for (int64_t i = 0; i < D; ++i) mean[size_t(i)] += streams[j * D + i];
    for (float& x : mean) x /= float(hc);
    cpu::matmul(mean.data(), 1, main_proj, c.data());
    cpu::rmsnorm(c.data(), 1, D, main_norm.data(), eps);
    // Slots: the first holds the token after the anchor, the rest the noise token.
    std::vector<int32_t> slot_tokens(static_cast<size_t>(W), cfg_.noise_token);
    slot_tokens[0] = first;
    std::vector<float> z(static_cast<size_t>(W * D));
    cpu::embed_streams(target_.weights().embed, slot_tokens.data(), W, 1, z.data());
    for (int s = 0; s < W; ++s)
        for (int64_t i = 0; i < D; ++i) z[size_t(s * D + i)] += c[size_t(i)] + pos[size_t(s * D + i)];

    std::vector<float> h(static_cast<size_t>(W * D)), q(static_cast<size_t>(W * HD)), k(q.size()), v(q.size()),
        a(q.size()), o(static_cast<size_t>(W * D));
    std::vector<float> g(static_cast<size_t>(W * cfg_.ffn)), u(g.size());
    const float scale = 1.0f / std::sqrt(float(hd));
    for (const Layer& L : layers_) {
        h = z;
        cpu::rmsnorm(h.data(), W, D, L.attn_norm.data(), eps);
        cpu::matmul(h.data(), W, L.q, q.data());
        cpu::matmul(h.data(), W, L.k, k.data());
        cpu::matmul(h.data(), W, L.v, v.data());
        for (int hh = 0; hh < H; ++hh)
            for (int s = 0; s < W; ++s) {  // causal inside the block: slot s sees slots 0..s
                const float* qs = &q[size_t(s * HD + hh * hd)];
                std::vector<float> p(static_cast<size_t>(s + 1));
                float mx = -INFINITY;
                for (int r = 0; r <= s; ++r) {
                    p[size_t(r)] = cpu::dot(qs, &k[size_t(r * HD + hh * hd)], hd) * scale;
                    mx = std::fmax(mx, p[size_t(r)]);
                }
                float sum = 0;
                for (float& x : p) sum += (x = std::exp(x - mx));
                float* as = &a[size_t(s * HD + hh * hd)];
                for (int i = 0; i < hd; ++i) as[i] = 0;
                for (int r = 0; r <= s; ++r) {
                    const float wgt = p[size_t(r)] / sum;
                    const float* vr = &v[size_t(r * HD + hh * hd)];
                    for (int i = 0; i < hd; ++i) as[i] += wgt * vr[i];
                }
            }
        cpu::matmul(a.data(), W, L.o, o.data());
        for (size_t i = 0; i < z.size(); ++i) z[i] += o[i];
        h = z;
        cpu::rmsnorm(h.data(), W, D, L.ffn_norm.data(), eps);
        cpu::matmul(h.data(), W, L.gate, g.data());
        cpu::matmul(h.data(), W, L.up, u.data());
        for (size_t i = 0; i < g.size(); ++i) g[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
        cpu::matmul(g.data(), W, L.down, o.data());
        for (size_t i = 0; i < z.size(); ++i) z[i] += o[i];
    }
    cpu::rmsnorm(z.data(), W, D, final_norm.data(), eps);
    cpu::matmul(z.data(), W, target_.weights().output, base_logits);
    for (int s = 0; s < W; ++s)
        conf[s] = 1.0f / (1.0f + std::exp(-(cpu::dot(&z[size_t(s * D)], conf_w.data(), D) + conf_b[0])));
}

size_t Dspark::file_bytes() const {
    size_t b = 0;
    for (const gguf::TensorInfo& t : file_->tensors()) b += t.nbytes;
    return b;
}

void Dspark::add_markov(int32_t prev, float* logits) const {
    if (prev < 0 || prev >= cfg_.vocab) fail("DSpark: token ", prev, " is outside the vocabulary");
    std::vector<float> a(static_cast<size_t>(cfg_.rank)), bias(static_cast<size_t>(cfg_.vocab));
    cpu::dequant_row(markov_a.type, markov_a.row(prev), cfg_.rank, a.data());
    cpu::matmul(a.data(), 1, markov_b, bias.data());
    for (int v = 0; v < cfg_.vocab; ++v) logits[v] += bias[size_t(v)];
}

}  // namespace dsv4
