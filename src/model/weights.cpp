#include "model/weights.h"

#include <cstdlib>
#include <cstring>
#include <set>

#include "backend/cpu/quant.h"
#include "core/error.h"
#include "io/names.h"

namespace dsv4 {

namespace n = names;
using gguf::TensorType;

namespace {

std::string dims_str(const std::vector<int64_t>& ne) {
    std::string s = "[";
    for (size_t i = 0; i < ne.size(); ++i) s += (i ? ", " : "") + std::to_string(ne[i]);
    return s + "]";
}

class Binder {
public:
    Binder(const gguf::Reader& f) : f_(f) {}

    // ggml dims (fastest first) must equal `ne`.
    const gguf::TensorInfo& get(const std::string& name, const std::vector<int64_t>& ne) {
        const gguf::TensorInfo* t = f_.find_tensor(name);
        if (!t) fail(f_.path(), ": missing tensor '", name, "' (expected ggml dims ", dims_str(ne), ")");
        std::vector<int64_t> have = t->ne;
        // Trailing unit dims are insignificant; wo_a may be stored 3-D as [in, o_lora, groups].
        while (have.size() > ne.size() && have.back() == 1) have.pop_back();
        if (have != ne) {
            int64_t want_n = 1, have_n = 1;
            for (int64_t d : ne) want_n *= d;
            for (int64_t d : have) have_n *= d;
            bool reshape_ok = allow_reshape_ && want_n == have_n && !have.empty() && have[0] == ne[0];
            if (!reshape_ok)
                fail(f_.path(), ": tensor '", name, "' has ggml dims ", dims_str(t->ne), ", expected ", dims_str(ne));
        }
        used_.insert(name);
        return *t;
    }

    Mat mat(const std::string& name, int64_t rows, int64_t cols) {
        const gguf::TensorInfo& t = get(name, {cols, rows});
        if (!cpu::is_float_weight_type(t.type))
            fail(f_.path(), ": tensor '", name, "' has type ", gguf::type_name(t.type), ", which is not a weight type");
        return Mat{t.type, rows, cols, cpu::row_bytes(t.type, cols), t.data};
    }

    Mat mat_reshaped(const std::string& name, int64_t rows, int64_t cols) {
        allow_reshape_ = true;
        Mat m = mat(name, rows, cols);
        allow_reshape_ = false;
        return m;
    }

    MatStack stack(const std::string& name, int64_t n_mats, int64_t rows, int64_t cols) {
        const gguf::TensorInfo& t = get(name, {cols, rows, n_mats});
        if (!cpu::is_float_weight_type(t.type))
            fail(f_.path(), ": tensor '", name, "' has type ", gguf::type_name(t.type), ", which is not a weight type");
        return MatStack{Mat{t.type, rows, cols, cpu::row_bytes(t.type, cols), t.data}, n_mats};
    }

    std::vector<float> vec(const std::string& name, const std::vector<int64_t>& ne) {
        const gguf::TensorInfo& t = get(name, ne);
        if (!cpu::is_float_weight_type(t.type))
            fail(f_.path(), ": tensor '", name, "' has type ", gguf::type_name(t.type), ", expected a float type");
        std::vector<float> out(static_cast<size_t>(t.elements()));
        cpu::dequant_row(t.type, t.data, t.elements(), out.data());
        return out;
    }

    std::vector<int32_t> ints(const std::string& name, const std::vector<int64_t>& ne) {
        const gguf::TensorInfo& t = get(name, ne);
        std::vector<int32_t> out(static_cast<size_t>(t.elements()));
        if (t.type == TensorType::I32) {
            std::memcpy(out.data(), t.data, out.size() * 4);
        } else if (t.type == TensorType::I64) {
            for (size_t i = 0; i < out.size(); ++i) {
                int64_t v;
                std::memcpy(&v, t.data + 8 * i, 8);
                out[i] = int32_t(v);
            }
        } else {
            fail(f_.path(), ": tensor '", name, "' has type ", gguf::type_name(t.type), ", expected I32");
        }
        return out;
    }

    void check_all_used() const {
        for (const auto& t : f_.tensors())
            if (!used_.count(t.name))
                fail(f_.path(), ": unknown tensor '", t.name, "' (not part of this model's configuration)");
    }

private:
    const gguf::Reader& f_;
    std::set<std::string> used_;
    bool allow_reshape_ = false;
};

void bind_compressor(Binder& b, const ModelConfig& c, int l, int ratio, CompressorWeights& w, const std::string& kv,
                     const std::string& gate, const std::string& ape, const std::string& norm, int width,
                     int coff) {
    int64_t out = int64_t(coff) * width;
    w.kv = b.mat(n::blk(l, kv), out, c.hidden);
    w.gate = b.mat(n::blk(l, gate), out, c.hidden);
    w.ape = b.vec(n::blk(l, ape), {out, ratio});
    w.norm = b.vec(n::blk(l, norm), {width});
}

// One block's tensors (blk.l.*) for the given attention and MLP kinds.
LayerWeights bind_layer(Binder& b, const gguf::Reader& f, const ModelConfig& c, int l, AttnType at, int ratio,
                        MlpType mlp) {
    const int64_t D = c.hidden, hcD = int64_t(c.hc_mult) * D, mix = c.mix_dim();
    const int64_t qdim = int64_t(c.n_heads) * c.head_dim;
    LayerWeights L;
    L.attn_norm = b.vec(n::blk(l, n::kAttnNorm), {D});
    L.ffn_norm = b.vec(n::blk(l, n::kFfnNorm), {D});
    L.hc_attn_fn = b.mat(n::blk(l, n::kHcAttnFn), mix, hcD);
    L.hc_attn_base = b.vec(n::blk(l, n::kHcAttnBase), {mix});
    L.hc_attn_scale = b.vec(n::blk(l, n::kHcAttnScale), {3});
    L.hc_ffn_fn = b.mat(n::blk(l, n::kHcFfnFn), mix, hcD);
    L.hc_ffn_base = b.vec(n::blk(l, n::kHcFfnBase), {mix});
    L.hc_ffn_scale = b.vec(n::blk(l, n::kHcFfnScale), {3});
    L.q_a = b.mat(n::blk(l, n::kAttnQA), c.q_lora, D);
    L.q_a_norm = b.vec(n::blk(l, n::kAttnQANorm), {c.q_lora});
    L.q_b = b.mat(n::blk(l, n::kAttnQB), qdim, c.q_lora);
    L.kv = b.mat(n::blk(l, n::kAttnKv), c.head_dim, D);
    L.kv_norm = b.vec(n::blk(l, n::kAttnKvNorm), {c.head_dim});
    L.o_a = b.mat_reshaped(n::blk(l, n::kAttnOutA), int64_t(c.o_groups) * c.o_lora, qdim / c.o_groups);
    L.o_b = b.mat(n::blk(l, n::kAttnOutB), D, int64_t(c.o_groups) * c.o_lora);
    L.sinks = b.vec(n::blk(l, n::kAttnSinks), {c.n_heads});
    if (at != AttnType::Sliding) {
        int coff = at == AttnType::CSA ? 2 : 1;
        bind_compressor(b, c, l, ratio, L.comp, n::kCompKv, n::kCompGate, n::kCompApe, n::kCompNorm, c.head_dim, coff);
    }
    if (at == AttnType::CSA) {
        bind_compressor(b, c, l, ratio, L.idx_comp, n::kIdxCompKv, n::kIdxCompGate, n::kIdxCompApe, n::kIdxCompNorm,
                        c.index_head_dim, 2);
        L.idx_q_b = b.mat(n::blk(l, n::kIdxQB), int64_t(c.index_heads) * c.index_head_dim, c.q_lora);
        L.idx_proj = b.mat(n::blk(l, n::kIdxProj), c.index_heads, D);
    }
    L.gate_inp = b.mat(n::blk(l, n::kFfnGateInp), c.n_experts, D);
    if (mlp == MlpType::Hash) {
        L.tid2eid = b.ints(n::blk(l, n::kFfnTid2eid), {c.top_k, c.vocab});
        for (int32_t e : L.tid2eid)
            if (e < 0 || e >= c.n_experts)
                fail(f.path(), ": tensor '", n::blk(l, n::kFfnTid2eid), "' holds expert id ", e, " outside [0, ",
                     c.n_experts, ")");
    } else {
        L.exp_probs_b = b.vec(n::blk(l, n::kFfnExpProbsB), {c.n_experts});
    }
    L.gate_exps = b.stack(n::blk(l, n::kFfnGateExps), c.n_experts, c.moe_inter, D);
    L.up_exps = b.stack(n::blk(l, n::kFfnUpExps), c.n_experts, c.moe_inter, D);
    L.down_exps = b.stack(n::blk(l, n::kFfnDownExps), c.n_experts, D, c.moe_inter);
    L.gate_sh = b.mat(n::blk(l, n::kFfnGateShexp), c.moe_inter, D);
    L.up_sh = b.mat(n::blk(l, n::kFfnUpShexp), c.moe_inter, D);
    L.down_sh = b.mat(n::blk(l, n::kFfnDownShexp), D, c.moe_inter);
    return L;
}

}  // namespace

Mat column_slice(const Mat& m, int64_t c0, int64_t c1) {
    const int64_t block = gguf::type_block_elems(m.type);
    if (c0 < 0 || c1 > m.cols || c0 > c1 || c0 % block != 0 || c1 % block != 0)
        fail("columns [", c0, ", ", c1, ") of a [", m.rows, ", ", m.cols, "] ", gguf::type_name(m.type),
             " matrix do not fall on its blocks of ", block);
    Mat v = m;
    v.cols = c1 - c0;
    v.data = m.data + size_t(c0 / block) * gguf::type_block_bytes(m.type);
    return v;
}

ModelWeights bind_weights(const gguf::Reader& f, const ModelConfig& c) {
    Binder b(f);
    ModelWeights w;
    const int64_t D = c.hidden, hcD = int64_t(c.hc_mult) * D;
    w.embed = b.mat(n::kTokenEmbd, c.vocab, D);
    w.output = b.mat(n::kOutput, c.vocab, D);
    w.output_norm = b.vec(n::kOutputNorm, {D});
    w.hc_head_fn = b.mat(n::kOutputHcFn, c.hc_mult, hcD);
    w.hc_head_base = b.vec(n::kOutputHcBase, {c.hc_mult});
    w.hc_head_scale = b.vec(n::kOutputHcScale, {1});

    for (int l = 0; l < c.n_layers; ++l)
        w.layers.push_back(bind_layer(b, f, c, l, c.attn[size_t(l)], c.ratio[size_t(l)], c.mlp[size_t(l)]));
    // MTP blocks: sliding-window attention and top-k routing (REFERENCE.md §8).
    for (int i = 0; i < c.n_nextn; ++i) {
        const int l = c.n_layers + i;
        MtpWeights m;
        m.block = bind_layer(b, f, c, l, AttnType::Sliding, 0, MlpType::TopK);
        m.e_proj = b.mat(n::blk(l, n::kNextnEProj), D, D);
        m.h_proj = b.mat(n::blk(l, n::kNextnHProj), D, D);
        m.enorm = b.vec(n::blk(l, n::kNextnENorm), {D});
        m.hnorm = b.vec(n::blk(l, n::kNextnHNorm), {D});
        m.norm = b.vec(n::blk(l, n::kNextnHeadNorm), {D});
        m.hc_head_fn = b.mat(n::blk(l, n::kNextnHcHeadFn), c.hc_mult, hcD);
        m.hc_head_base = b.vec(n::blk(l, n::kNextnHcHeadBase), {c.hc_mult});
        m.hc_head_scale = b.vec(n::blk(l, n::kNextnHcHeadScale), {1});
        w.mtp.push_back(std::move(m));
    }
    b.check_all_used();
    return w;
}

}  // namespace dsv4
