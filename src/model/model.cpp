#include "model/model.h"

#include <algorithm>

#include "backend/cpu/attention.h"
#include "backend/cpu/ops.h"
#include "core/error.h"
#include "core/trace.h"
#include "model/config_gguf.h"

namespace dsv4 {

ModelConfig mtp_block_config(const ModelConfig& c) {
    ModelConfig m = c;
    m.n_layers = 1;
    m.n_nextn = 0;
    m.attn = {AttnType::Sliding};
    m.ratio = {0};
    m.mlp = {MlpType::TopK};
    return m;
}

Model::Model(const std::string& path, const std::string& backend, int gpus)
    : file_(std::make_unique<gguf::Reader>(path)),
      name_(path),
      cfg_(config_from_gguf(*file_)),
      w_(bind_weights(*file_, cfg_)),
      mtp_cfg_(mtp_block_config(cfg_)),
      rope_main_(cfg_.rope_main, cfg_.rope_dim),
      rope_compress_(cfg_.rope_compress, cfg_.rope_dim) {
    if (backend != "cpu") backend_ = open_backend(backend, *this, gpus);
    else if (gpus != 1) throw UsageError(cat("--gpus ", gpus, ": the CPU backend runs on no GPU (use --backend cuda)"));
}

Model::Model(const ModelConfig& cfg, std::unique_ptr<ForwardBackend> backend, std::string name)
    : name_(std::move(name)),
      cfg_(cfg),
      mtp_cfg_(mtp_block_config(cfg_)),
      rope_main_(cfg_.rope_main, cfg_.rope_dim),
      rope_compress_(cfg_.rope_compress, cfg_.rope_dim),
      backend_(std::move(backend)) {
    if (!backend_) fail(name_, ": a model without a file needs a device backend");
}

Model::~Model() = default;

const gguf::Reader& Model::file() const {
    if (!file_) fail(name_, ": a synthetic model has no file (no tokenizer, no tensors to read)");
    return *file_;
}

namespace {
// A sublayer's output f[T, D] is a partial sum on each rank of a shard; this makes it whole.
void sum_over_ranks(const Shard* shard, float* f, int64_t n) {
    if (!shard || shard->plan.ranks == 1) return;
    DSV4_TRACE("all_reduce");
    shard->comm->all_reduce_sum(f, size_t(n));
}

void check_shard(const Shard* shard, const ForwardBackend* backend, const std::string& name) {
    if (!shard) return;
    if (backend) fail(name, ": a sharded forward runs on the CPU ops only, not on ", backend->name());
    if (!shard->comm || shard->comm->size() != shard->plan.ranks || shard->comm->rank() != shard->plan.rank)
        fail(name, ": the shard's plan (rank ", shard->plan.rank, " of ", shard->plan.ranks,
             ") does not match its communicator");
}
}  // namespace

ShardPlan Model::shard_plan(int rank, int ranks) const {
    if (!file_) fail(name_, ": a sharded forward needs the model's file (CPU ops)");
    std::vector<const LayerWeights*> layers;
    for (const LayerWeights& L : w_.layers) layers.push_back(&L);
    for (const MtpWeights& M : w_.mtp) layers.push_back(&M.block);
    int64_t unit = 1;  // the shared expert's columns split on the widest block of any layer
    for (const LayerWeights* L : layers) unit = std::max(unit, gguf::type_block_elems(L->down_sh.type));
    ShardPlan p = dsv4::plan_shard(cfg_, rank, ranks, unit);
    for (size_t l = 0; l < layers.size(); ++l)
        for (int r = 0; r < ranks; ++r) {  // every rank's slice, so all ranks agree to run
            const Range g = split_range(cfg_.o_groups, ranks, r);
            const int64_t block = gguf::type_block_elems(layers[l]->o_b.type);
            if ((g.begin * cfg_.o_lora) % block != 0)
                fail(name_, ": cannot split layer ", l, "'s attention output over ", ranks, " ranks: its o_b is ",
                     gguf::type_name(layers[l]->o_b.type), " (blocks of ", block, ") and a group boundary falls at column ",
                     g.begin * cfg_.o_lora);
        }
    return p;
}

void Model::run_layer(const ModelConfig& c, int l, const LayerWeights& L, MlpType mlp, const int32_t* tokens,
                      int64_t T, State& st, int64_t band, const Shard* shard, float* X) const {
    DSV4_TRACE_ARG("layer", l);
    const int64_t D = c.hidden;
    std::vector<float> y(static_cast<size_t>(T * D)), f(static_cast<size_t>(T * D));
    std::vector<float> post(static_cast<size_t>(T * c.hc_mult)), comb(static_cast<size_t>(T * c.hc_mult * c.hc_mult));
    const cpu::Rope& rope = c.attn[size_t(l)] == AttnType::Sliding ? rope_main_ : rope_compress_;
    cpu::hc_pre(c, L.hc_attn_fn, L.hc_attn_base.data(), L.hc_attn_scale.data(), X, T, y.data(), post.data(),
                comb.data());
    cpu::rmsnorm(y.data(), T, D, L.attn_norm.data(), float(c.norm_eps));
    const ShardPlan* plan = shard ? &shard->plan : nullptr;
    cpu::attention_block(c, l, L, rope, y.data(), T, st.pos, band, st.layers[size_t(l)], f.data(), plan);
    sum_over_ranks(shard, f.data(), T * D);
    cpu::hc_post(c, X, f.data(), post.data(), comb.data(), T);

    cpu::hc_pre(c, L.hc_ffn_fn, L.hc_ffn_base.data(), L.hc_ffn_scale.data(), X, T, y.data(), post.data(), comb.data());
    cpu::rmsnorm(y.data(), T, D, L.ffn_norm.data(), float(c.norm_eps));
    cpu::moe(c, L, mlp, y.data(), tokens, T, f.data(), plan);
    sum_over_ranks(shard, f.data(), T * D);
    cpu::hc_post(c, X, f.data(), post.data(), comb.data(), T);
}

void Model::forward(const int32_t* tokens, int64_t T, State& st, float* logits, const ForwardOptions& opt) const {
    if (backend_ && !opt.shard) return backend_->forward(tokens, T, st, logits, opt);
    DSV4_TRACE_ARG("forward", T);
    check_shard(opt.shard, backend_.get(), name_);
    const ModelConfig& c = cfg_;
    if (int(st.layers.size()) != c.n_layers) fail("state was made for another model");
    const int64_t D = c.hidden, nD = int64_t(c.hc_mult) * D;
    std::vector<float> X(static_cast<size_t>(T * nD)), y(static_cast<size_t>(T * D));
    cpu::embed_streams(w_.embed, tokens, T, c.hc_mult, X.data());
    for (int l = 0; l < c.n_layers; ++l)
        run_layer(c, l, w_.layers[size_t(l)], c.mlp[size_t(l)], tokens, T, st, opt.band, opt.shard, X.data());
    st.pos += T;
    if (opt.hidden && opt.hidden_from < T)
        std::copy(X.begin() + opt.hidden_from * nD, X.end(), opt.hidden);
    if (!logits || opt.logits == Logits::None) return;
    DSV4_TRACE("head");
    const int64_t first = opt.logits == Logits::Last ? T - 1 : 0, rows = T - first;
    cpu::hc_head(c, w_.hc_head_fn, w_.hc_head_base.data(), w_.hc_head_scale.data(), X.data() + first * nD, rows,
                 y.data());
    cpu::rmsnorm(y.data(), rows, D, w_.output_norm.data(), float(c.norm_eps));
    lm_head(y.data(), rows, logits, opt.shard);
}

void Model::lm_head(const float* y, int64_t rows, float* logits, const Shard* shard) const {
    if (!shard || shard->plan.ranks == 1) return cpu::matmul(y, rows, w_.output, logits);
    // Each rank writes its vocabulary rows into zero-filled logits; the sum is then exact.
    const int64_t V = cfg_.vocab;
    std::fill(logits, logits + rows * V, 0.0f);
    const Range v = shard->plan.vocab;
    if (!v.empty()) cpu::matmul(y, cfg_.hidden, rows, w_.output, v.begin, v.end, logits + v.begin, V);
    sum_over_ranks(shard, logits, rows * V);
}

void Model::mtp_forward(const float* hidden, const int32_t* next, int64_t T, State& st, float* logits,
                        const ForwardOptions& opt) const {
    if (backend_ && !opt.shard) return backend_->mtp_forward(hidden, next, T, st, logits, opt);
    DSV4_TRACE_ARG("mtp_forward", T);
    if (!has_mtp()) fail(name_, ": the model has no MTP block");
    check_shard(opt.shard, backend_.get(), name_);
    const ModelConfig& c = mtp_cfg_;
    if (st.layers.size() != 1) fail("state was not made for the MTP block");
    const MtpWeights& M = w_.mtp[0];
    const int n = c.hc_mult;
    const int64_t D = c.hidden, nD = int64_t(n) * D;
    const float eps = float(c.norm_eps);
    // X0 = e_proj(enorm(embed[next])) on every stream + h_proj(hnorm(stream)) per stream.
    std::vector<float> e(static_cast<size_t>(T * D)), ep(static_cast<size_t>(T * D));
    cpu::embed_streams(w_.embed, next, T, 1, e.data());
    cpu::rmsnorm(e.data(), T, D, M.enorm.data(), eps);
    cpu::matmul(e.data(), T, M.e_proj, ep.data());
    std::vector<float> hs(hidden, hidden + T * nD), X(static_cast<size_t>(T * nD));
    cpu::rmsnorm(hs.data(), T * n, D, M.hnorm.data(), eps);
    cpu::matmul(hs.data(), T * n, M.h_proj, X.data());
    for (int64_t t = 0; t < T; ++t)
        for (int j = 0; j < n; ++j)
            for (int64_t i = 0; i < D; ++i) X[size_t(t * nD + j * D + i)] += ep[size_t(t * D + i)];
    run_layer(c, 0, M.block, MlpType::TopK, next, T, st, opt.band, opt.shard, X.data());
    st.pos += T;
    if (opt.hidden && opt.hidden_from < T)
        std::copy(X.begin() + opt.hidden_from * nD, X.end(), opt.hidden);
    if (!logits || opt.logits == Logits::None) return;
    const int64_t first = opt.logits == Logits::Last ? T - 1 : 0;
    mtp_head(X.data() + first * nD, T - first, logits, opt.shard);
}

void Model::mtp_head(const float* out, int64_t rows, float* logits, const Shard* shard) const {
    if (backend_ && !shard) return backend_->mtp_head(out, rows, logits);
    if (!has_mtp()) fail(name_, ": the model has no MTP block");
    check_shard(shard, backend_.get(), name_);
    DSV4_TRACE("head");
    const MtpWeights& M = w_.mtp[0];
    const int64_t D = mtp_cfg_.hidden;
    std::vector<float> y(static_cast<size_t>(rows * D));
    cpu::hc_head(mtp_cfg_, M.hc_head_fn, M.hc_head_base.data(), M.hc_head_scale.data(), out, rows, y.data());
    cpu::rmsnorm(y.data(), rows, D, M.norm.data(), float(mtp_cfg_.norm_eps));
    lm_head(y.data(), rows, logits, shard);
}

}  // namespace dsv4
