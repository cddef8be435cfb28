#include "io/convert_hf.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <set>
#include <sstream>

#include "backend/cpu/quant.h"
#include "core/error.h"
#include "core/half.h"
#include "core/progress.h"
#include "io/hf_config.h"
#include "io/names.h"
#include "io/safetensors.h"
#include "model/config_gguf.h"
#include "tokenizer/tokenizer.h"

namespace dsv4 {

namespace n = names;
using gguf::TensorType;

namespace {

bool file_exists(const std::string& path) { return access(path.c_str(), F_OK) == 0; }

std::string read_text(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) fail(path, ": cannot open");
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

std::string shape_str(const std::vector<int64_t>& s) {
    std::string out = "[";
    for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
    return out + "]";
}

float fp8_e4m3_value(uint8_t b) {
    int sign = b >> 7, exp = (b >> 3) & 15, man = b & 7;
    if (exp == 15 && man == 7) return NAN;
    float v = exp == 0 ? std::ldexp(float(man) / 8.0f, -6) : std::ldexp(1.0f + float(man) / 8.0f, exp - 7);
    return sign ? -v : v;
}

// Where the checkpoint keeps each tensor. Names are tried with and without a "model." prefix.
class Source {
public:
    explicit Source(const SafeTensors& st) : st_(st) {}

    const StTensor* find(std::initializer_list<std::string> names) const {
        for (const std::string& name : names) {
            for (const std::string& full : {name, "model." + name})
                if (const StTensor* t = st_.find(full)) return t;
        }
        return nullptr;
    }
    const StTensor& need(std::initializer_list<std::string> names, const std::vector<int64_t>& shape) {
        const StTensor* t = find(names);
        if (!t) fail(dir_hint_, ": missing tensor '", *names.begin(), "'");
        if (t->shape != shape)
            fail(t->file, ": tensor '", t->name, "' has shape ", shape_str(t->shape), ", expected ", shape_str(shape));
        used_.insert(t->name);
        if (const StTensor* s = scale_of(*t)) used_.insert(s->name);
        return *t;
    }
    // FP8 weights carry a block scale "<name>.scale" (upstream) or "<name>_scale_inv".
    const StTensor* scale_of(const StTensor& t) const {
        if (t.dtype != StDType::F8_E4M3 && t.dtype != StDType::I8 && t.dtype != StDType::U8) return nullptr;
        std::string base = t.name;
        if (base.size() > 7 && base.compare(base.size() - 7, 7, ".weight") == 0) base.resize(base.size() - 7);
        for (const std::string& s : {base + ".scale", base + ".weight_scale_inv"})
            if (const StTensor* x = st_.find(s)) return x;
        return nullptr;
    }
    // The tensor as float32, dequantising FP8 (128x128 block scales) and packed FP4 experts.
    std::vector<float> floats(const StTensor& t) const {
        if (t.dtype == StDType::F8_E4M3) {
            const StTensor* s = scale_of(t);
            if (!s || t.shape.size() != 2) fail(t.file, ": FP8 tensor '", t.name, "' has no block scale");
            int64_t rows = t.shape[0], cols = t.shape[1];
            int64_t sr = (rows + 127) / 128, sc = (cols + 127) / 128;
            if (s->shape != std::vector<int64_t>{sr, sc})
                fail(s->file, ": scale '", s->name, "' has shape ", shape_str(s->shape), ", expected ", shape_str({sr, sc}));
            std::vector<float> scale = scale_values(*s);
            std::vector<float> out(static_cast<size_t>(rows * cols));
            for (int64_t r = 0; r < rows; ++r)
                for (int64_t c = 0; c < cols; ++c)
                    out[size_t(r * cols + c)] =
                        fp8_e4m3_value(t.data[r * cols + c]) * scale[size_t((r / 128) * sc + c / 128)];
            return out;
        }
        if ((t.dtype == StDType::I8 || t.dtype == StDType::U8) && scale_of(t)) {  // FP4 e2m1 pairs
            const StTensor* s = scale_of(t);
            int64_t rows = t.shape[0], cols = t.shape[1] * 2;
            if (s->shape != std::vector<int64_t>{rows, cols / 32})
                fail(s->file, ": scale '", s->name, "' has shape ", shape_str(s->shape), ", expected ",
                     shape_str({rows, cols / 32}));
            std::vector<float> scale = scale_values(*s);
            std::vector<float> out(static_cast<size_t>(rows * cols));
            for (int64_t r = 0; r < rows; ++r)
                for (int64_t c = 0; c < cols; ++c) {
                    uint8_t b = t.data[r * (cols / 2) + c / 2];
                    int code = (c & 1) ? b >> 4 : b & 15;
                    out[size_t(r * cols + c)] = cpu::e2m1_value(code) * scale[size_t(r * (cols / 32) + c / 32)];
                }
            return out;
        }
        return st_.to_f32(t);
    }
    std::vector<float> scale_values(const StTensor& s) const {
        if (s.dtype == StDType::F8_E8M0) {
            std::vector<float> out(static_cast<size_t>(s.elements()));
            for (size_t i = 0; i < out.size(); ++i) out[i] = std::ldexp(1.0f, int(s.data[i]) - 127);
            return out;
        }
        return st_.to_f32(s);
    }
    bool used(const std::string& name) const { return used_.count(name) > 0; }
    void ignore(std::initializer_list<std::string> names) {
        if (const StTensor* t = find(names)) used_.insert(t->name);
    }
    void set_dir(const std::string& d) { dir_hint_ = d; }

private:
    const SafeTensors& st_;
    std::set<std::string> used_;
    std::string dir_hint_;
};

std::vector<uint8_t> encode(const std::vector<float>& x, int64_t row_len, TensorType t) {
    size_t rb = cpu::row_bytes(t, row_len);
    int64_t rows = int64_t(x.size()) / row_len;
    std::vector<uint8_t> out(rb * size_t(rows));
    for (int64_t r = 0; r < rows; ++r) cpu::quantize_row(t, x.data() + r * row_len, row_len, out.data() + rb * size_t(r));
    return out;
}

class Converter {
public:
    Converter(const ConvertOptions& o, const ModelConfig& c, const SafeTensors& st)
        : o_(o), c_(c), st_(st), src_(st) {
        src_.set_dir(o.hf_dir);
    }

    // A float tensor copied to GGUF as float32 (norms, biases, sinks, hyper-connection params).
    void f32(const std::string& gguf_name, std::initializer_list<std::string> names, const std::vector<int64_t>& shape) {
        const StTensor& t = src_.need(names, shape);
        add(gguf_name, TensorType::F32, t, shape);
    }
    // A matrix stored in the requested type (falls back to F16 when rows are not whole blocks).
    void mat(const std::string& gguf_name, std::initializer_list<std::string> names, int64_t rows, int64_t cols) {
        const StTensor& t = src_.need(names, {rows, cols});
        add(gguf_name, pick(o_.dtype, cols, gguf_name), t, {rows, cols});
    }
    void mat_f32(const std::string& gguf_name, std::initializer_list<std::string> names, int64_t rows, int64_t cols) {
        const StTensor& t = src_.need(names, {rows, cols});
        add(gguf_name, TensorType::F32, t, {rows, cols});
    }

    void tid2eid(int l) {
        const StTensor& t = src_.need({lname(l, "ffn.gate.tid2eid"), lname(l, "mlp.gate.tid2eid")}, {c_.vocab, c_.top_k});
        if (t.dtype != StDType::I64 && t.dtype != StDType::I32)
            fail(t.file, ": tensor '", t.name, "' has dtype ", st_dtype_name(t.dtype), ", expected I64 or I32");
        const StTensor* tp = &t;
        int E = c_.n_experts;
        w_.add_tensor(n::blk(l, n::kFfnTid2eid), TensorType::I32, {c_.top_k, c_.vocab}, [tp, E](std::vector<uint8_t>& out) {
            size_t count = size_t(tp->elements());
            out.resize(count * 4);
            for (size_t i = 0; i < count; ++i) {
                int64_t v;
                if (tp->dtype == StDType::I64) std::memcpy(&v, tp->data + 8 * i, 8);
                else { int32_t x; std::memcpy(&x, tp->data + 4 * i, 4); v = x; }
                if (v < 0 || v >= E) fail(tp->file, ": tensor '", tp->name, "' holds expert id ", v, " outside [0, ", E, ")");
                int32_t y = int32_t(v);
                std::memcpy(out.data() + 4 * i, &y, 4);
            }
        });
        ++count_;
    }

    // Routed experts: per-expert upstream tensors, or the fused HF gate_up_proj / down_proj.
    void experts(int l) {
        const int64_t E = c_.n_experts, I = c_.moe_inter, D = c_.hidden;
        TensorType t_gu = pick(o_.experts_same ? o_.dtype : o_.experts, D, n::blk(l, n::kFfnGateExps));
        pick(o_.experts_same ? o_.dtype : o_.experts, D, n::blk(l, n::kFfnUpExps));  // same rows: report up's fallback too
        TensorType t_dn = pick(o_.experts_same ? o_.dtype : o_.experts, I, n::blk(l, n::kFfnDownExps));
        const StTensor* fused = src_.find({lname(l, "mlp.experts.gate_up_proj")});
        if (fused) {
            const StTensor& gu = src_.need({lname(l, "mlp.experts.gate_up_proj")}, {E, 2 * I, D});
            const StTensor& dn = src_.need({lname(l, "mlp.experts.down_proj")}, {E, D, I});
            const StTensor *pgu = &gu, *pdn = &dn;
            const Source* s = &src_;
            auto half = [=](int which) {
                return [=](std::vector<uint8_t>& out) {
                    std::vector<float> all = s->floats(*pgu), part(static_cast<size_t>(E * I * D));
                    for (int64_t e = 0; e < E; ++e)
                        std::memcpy(&part[size_t(e * I * D)], &all[size_t((e * 2 + which) * I * D)], size_t(I * D) * 4);
                    out = encode(part, D, t_gu);
                };
            };
            w_.add_tensor(n::blk(l, n::kFfnGateExps), t_gu, {D, I, E}, half(0));
            w_.add_tensor(n::blk(l, n::kFfnUpExps), t_gu, {D, I, E}, half(1));
            w_.add_tensor(n::blk(l, n::kFfnDownExps), t_dn, {I, D, E},
                          [=](std::vector<uint8_t>& out) { out = encode(s->floats(*pdn), I, t_dn); });
            count_ += 3;
            return;
        }
        stacked(l, "w1", n::kFfnGateExps, E, I, D, t_gu);
        stacked(l, "w3", n::kFfnUpExps, E, I, D, t_gu);
        stacked(l, "w2", n::kFfnDownExps, E, D, I, t_dn);
    }

    void finish_and_write() {
        size_t skipped = 0;
        for (const auto& [name, t] : st_.all()) {
            if (src_.used(name)) continue;
            if (c_.n_nextn == 0 && (name.rfind("mtp.", 0) == 0 || name.rfind("model.mtp.", 0) == 0)) {
                ++skipped;  // an MTP block without its e_proj is not one we can convert
                continue;
            }
            fail(t.file, ": unknown tensor '", name, "' (not part of a DeepSeek-V4 model with this config.json)");
        }
        report_.skipped = skipped;
        report_.tensors = count_;
        std::unique_ptr<Progress> bar;  // on a terminal only; the count is known at the first call
        w_.write(o_.out_path, [&](size_t i, size_t total) {
            if (!bar)
                bar = std::make_unique<Progress>("convert: writing tensors", int64_t(total), "tensors", stderr,
                                                 o_.quiet ? Progress::Mode::Never : Progress::Mode::Auto);
            bar->update(int64_t(i));
        });
        if (bar) bar->finish();
    }

    void ignore(std::initializer_list<std::string> names) { src_.ignore(names); }
    gguf::Writer& writer() { return w_; }
    ConvertReport& report() { return report_; }
    // Checkpoint name of a block's tensor: main layers are layers.N.*, MTP block i is mtp.i.*.
    std::string lname(int l, const std::string& suffix) const {
        if (l >= c_.n_layers) return "mtp." + std::to_string(l - c_.n_layers) + "." + suffix;
        return "layers." + std::to_string(l) + "." + suffix;
    }

private:
    TensorType pick(TensorType want, int64_t row_len, const std::string& name) {
        if (gguf::type_block_elems(want) > 1 && row_len % gguf::type_block_elems(want) != 0) {
            report_.notes += name + ": rows of " + std::to_string(row_len) + " are not whole " +
                             gguf::type_name(want) + " blocks, stored as F16\n";
            return TensorType::F16;
        }
        return want;
    }

    void add(const std::string& gguf_name, TensorType type, const StTensor& t, const std::vector<int64_t>& shape) {
        std::vector<int64_t> ne(shape.rbegin(), shape.rend());
        const StTensor* tp = &t;
        const Source* s = &src_;
        int64_t row_len = ne[0];
        w_.add_tensor(gguf_name, type, ne, [=](std::vector<uint8_t>& out) { out = encode(s->floats(*tp), row_len, type); });
        ++count_;
    }

    void stacked(int l, const char* w, const std::string& gguf_suffix, int64_t E, int64_t rows, int64_t cols,
                 TensorType type) {
        std::vector<const StTensor*> parts;
        for (int64_t e = 0; e < E; ++e) {
            std::string name = lname(l, "ffn.experts." + std::to_string(e) + "." + w + ".weight");
            const StTensor* t = src_.find({name});
            if (!t) fail(o_.hf_dir, ": missing tensor '", name, "'");
            // Packed FP4 experts hold two values per byte: their stored shape is [rows, cols / 2].
            bool fp4 = (t->dtype == StDType::I8 || t->dtype == StDType::U8) && src_.scale_of(*t);
            src_.need({name}, fp4 ? std::vector<int64_t>{rows, cols / 2} : std::vector<int64_t>{rows, cols});
            parts.push_back(t);
        }
        const Source* s = &src_;
        bool repack = type == TensorType::MXFP4 && parts[0]->dtype != StDType::F32 && s->scale_of(*parts[0]) &&
                      parts[0]->dtype != StDType::F8_E4M3;
        w_.add_tensor(n::blk(l, gguf_suffix), type, {cols, rows, E}, [=](std::vector<uint8_t>& out) {
            out.clear();
            for (const StTensor* p : parts) {
                std::vector<uint8_t> one;
                if (repack) {  // FP4 + e8m0 per 32 -> MXFP4 blocks, bit for bit
                    const StTensor* sc = s->scale_of(*p);
                    one.resize(static_cast<size_t>(rows) * cpu::row_bytes(TensorType::MXFP4, cols));
                    for (int64_t r = 0; r < rows; ++r)
                        for (int64_t b = 0; b < cols / 32; ++b) {
                            uint8_t* blk = one.data() + (r * (cols / 32) + b) * 17;
                            blk[0] = sc->data[r * (cols / 32) + b];
                            const uint8_t* src = p->data + r * (cols / 2) + b * 16;
                            for (int j = 0; j < 16; ++j) {
                                // source byte i holds elements 2i (low) and 2i+1 (high)
                                int lo = (j % 2 == 0) ? src[j / 2] & 15 : src[j / 2] >> 4;
                                int hi = ((j + 16) % 2 == 0) ? src[(j + 16) / 2] & 15 : src[(j + 16) / 2] >> 4;
                                blk[1 + j] = uint8_t(lo | hi << 4);
                            }
                        }
                } else {
                    one = encode(s->floats(*p), cols, type);
                }
                out.insert(out.end(), one.begin(), one.end());
            }
        });
        ++count_;
    }

    const ConvertOptions& o_;
    const ModelConfig& c_;
    const SafeTensors& st_;
    Source src_;
    gguf::Writer w_;
    size_t count_ = 0;
    ConvertReport report_;
};

// One block: blk.l.* from the checkpoint's layers.l.* (or mtp.i.*) tensors.
void convert_block(Converter& cv, const ModelConfig& c, int l, AttnType at, int ratio, MlpType mlp) {
    const int64_t D = c.hidden, hcD = int64_t(c.hc_mult) * D, mix = c.mix_dim();
    const int64_t Hd = int64_t(c.n_heads) * c.head_dim;
    auto L = [&](int layer, const std::string& s) { return cv.lname(layer, s); };
    auto B = [&](const std::string& s) { return n::blk(l, s); };
    cv.f32(B(n::kAttnNorm), {L(l, "attn_norm.weight"), L(l, "input_layernorm.weight")}, {D});
    cv.f32(B(n::kFfnNorm), {L(l, "ffn_norm.weight"), L(l, "post_attention_layernorm.weight")}, {D});
    for (const char* site : {"attn", "ffn"}) {
        std::string up = std::string("hc_") + site, hf = std::string(site) + "_hc";
        cv.mat_f32(B(up + "_fn.weight"), {L(l, up + "_fn"), L(l, hf + ".fn")}, mix, hcD);
        cv.f32(B(up + "_base.weight"), {L(l, up + "_base"), L(l, hf + ".base")}, {mix});
        cv.f32(B(up + "_scale.weight"), {L(l, up + "_scale"), L(l, hf + ".scale")}, {3});
    }
    cv.mat(B(n::kAttnQA), {L(l, "attn.wq_a.weight"), L(l, "self_attn.q_a_proj.weight")}, c.q_lora, D);
    cv.f32(B(n::kAttnQANorm), {L(l, "attn.q_norm.weight"), L(l, "self_attn.q_a_norm.weight")}, {c.q_lora});
    cv.mat(B(n::kAttnQB), {L(l, "attn.wq_b.weight"), L(l, "self_attn.q_b_proj.weight")}, Hd, c.q_lora);
    cv.mat(B(n::kAttnKv), {L(l, "attn.wkv.weight"), L(l, "self_attn.kv_proj.weight")}, c.head_dim, D);
    cv.f32(B(n::kAttnKvNorm), {L(l, "attn.kv_norm.weight"), L(l, "attn.norm.weight"), L(l, "self_attn.kv_norm.weight")},
           {c.head_dim});
    cv.mat(B(n::kAttnOutA), {L(l, "attn.wo_a.weight"), L(l, "self_attn.o_a_proj.weight")},
           int64_t(c.o_groups) * c.o_lora, Hd / c.o_groups);
    cv.mat(B(n::kAttnOutB), {L(l, "attn.wo_b.weight"), L(l, "self_attn.o_b_proj.weight")}, D,
           int64_t(c.o_groups) * c.o_lora);
    cv.f32(B(n::kAttnSinks), {L(l, "attn.attn_sink"), L(l, "self_attn.sinks")}, {c.n_heads});
    if (at != AttnType::Sliding) {
        int64_t out = (at == AttnType::CSA ? 2 : 1) * int64_t(c.head_dim), m = ratio;
        cv.mat(B(n::kCompKv), {L(l, "attn.compressor.wkv.weight"), L(l, "self_attn.compressor.kv_proj.weight")}, out, D);
        cv.mat(B(n::kCompGate), {L(l, "attn.compressor.wgate.weight"), L(l, "self_attn.compressor.gate_proj.weight")},
               out, D);
        cv.f32(B(n::kCompApe), {L(l, "attn.compressor.ape"), L(l, "self_attn.compressor.position_bias")}, {m, out});
        cv.f32(B(n::kCompNorm), {L(l, "attn.compressor.norm.weight"), L(l, "self_attn.compressor.kv_norm.weight")},
               {c.head_dim});
    }
    if (at == AttnType::CSA) {
        int64_t out = 2 * int64_t(c.index_head_dim), m = ratio;
        std::string hf = "self_attn.compressor.indexer.";
        cv.mat(B(n::kIdxQB), {L(l, "attn.indexer.wq_b.weight"), L(l, hf + "q_b_proj.weight")},
               int64_t(c.index_heads) * c.index_head_dim, c.q_lora);
        cv.mat(B(n::kIdxProj), {L(l, "attn.indexer.weights_proj.weight"), L(l, hf + "scorer.weights_proj.weight")},
               c.index_heads, D);
        cv.mat(B(n::kIdxCompKv), {L(l, "attn.indexer.compressor.wkv.weight"), L(l, hf + "kv_proj.weight")}, out, D);
        cv.mat(B(n::kIdxCompGate), {L(l, "attn.indexer.compressor.wgate.weight"), L(l, hf + "gate_proj.weight")}, out,
               D);
        cv.f32(B(n::kIdxCompApe), {L(l, "attn.indexer.compressor.ape"), L(l, hf + "position_bias")}, {m, out});
        cv.f32(B(n::kIdxCompNorm), {L(l, "attn.indexer.compressor.norm.weight"), L(l, hf + "kv_norm.weight")},
               {c.index_head_dim});
    }
    cv.mat_f32(B(n::kFfnGateInp), {L(l, "ffn.gate.weight"), L(l, "mlp.gate.weight")}, c.n_experts, D);
    if (mlp == MlpType::Hash) {
        cv.tid2eid(l);
        cv.ignore({L(l, "ffn.gate.bias")});  // upstream hash gates may carry an unused bias
    } else {
        cv.f32(B(n::kFfnExpProbsB), {L(l, "ffn.gate.bias"), L(l, "mlp.gate.e_score_correction_bias")}, {c.n_experts});
    }
    cv.experts(l);
    cv.mat(B(n::kFfnGateShexp), {L(l, "ffn.shared_experts.w1.weight"), L(l, "mlp.shared_experts.gate_proj.weight")},
           c.moe_inter, D);
    cv.mat(B(n::kFfnUpShexp), {L(l, "ffn.shared_experts.w3.weight"), L(l, "mlp.shared_experts.up_proj.weight")},
           c.moe_inter, D);
    cv.mat(B(n::kFfnDownShexp), {L(l, "ffn.shared_experts.w2.weight"), L(l, "mlp.shared_experts.down_proj.weight")}, D,
           c.moe_inter);
}

// The MTP block's own tensors (REFERENCE.md §8), as llama.cpp names them on blk.{n_layers + i}.
void convert_nextn(Converter& cv, const ModelConfig& c, int i) {
    const int l = c.n_layers + i;
    const int64_t D = c.hidden, hcD = int64_t(c.hc_mult) * D;
    auto B = [&](const std::string& s) { return n::blk(l, s); };
    auto M = [&](const std::string& s) { return cv.lname(l, s); };
    cv.mat(B(n::kNextnEProj), {M("e_proj.weight")}, D, D);
    cv.mat(B(n::kNextnHProj), {M("h_proj.weight")}, D, D);
    cv.f32(B(n::kNextnENorm), {M("enorm.weight")}, {D});
    cv.f32(B(n::kNextnHNorm), {M("hnorm.weight")}, {D});
    cv.f32(B(n::kNextnHeadNorm), {M("norm.weight")}, {D});
    cv.mat_f32(B(n::kNextnHcHeadFn), {M("hc_head_fn"), M("hc_head.hc_fn")}, c.hc_mult, hcD);
    cv.f32(B(n::kNextnHcHeadBase), {M("hc_head_base"), M("hc_head.hc_base")}, {c.hc_mult});
    cv.f32(B(n::kNextnHcHeadScale), {M("hc_head_scale"), M("hc_head.hc_scale")}, {1});
}

}  // namespace

ConvertReport convert_hf(const ConvertOptions& o) {
    std::string cfg_path = o.hf_dir + "/config.json";
    std::string cfg_text = read_text(cfg_path);
    ModelConfig c = config_from_hf_json(cfg_text, cfg_path);
    SafeTensors st = SafeTensors::open_dir(o.hf_dir);
    // MTP blocks mtp.0, mtp.1, ... (official naming; transformers does not build them) become
    // blk.{n_layers + i}; a block counts when its e_proj is there.
    while (st.find("mtp." + std::to_string(c.n_nextn) + ".e_proj.weight") ||
           st.find("model.mtp." + std::to_string(c.n_nextn) + ".e_proj.weight"))
        ++c.n_nextn;
    Converter cv(o, c, st);
    gguf::Writer& w = cv.writer();
    config_to_gguf(c, w);
    w.set(n::kName, gguf::Value::str("dsv4 conversion of " + o.hf_dir));
    w.set(n::kDsv4HfConfig, gguf::Value::str(cfg_text));
    // The tokenizer travels inside the GGUF (tokenizer.ggml.* keys, padded to the embedding
    // rows) so that a model file is all `dsv4 run` needs.
    std::string tok_path = o.tokenizer_json.empty() ? o.hf_dir + "/tokenizer.json" : o.tokenizer_json;
    if (!o.tokenizer_json.empty() || file_exists(tok_path)) {
        Tokenizer tok = Tokenizer::from_hf_json(tok_path);
        if (tok.vocab_size() > size_t(c.vocab))
            fail(tok_path, ": the tokenizer has ", tok.vocab_size(), " tokens, more than the model's vocabulary of ",
                 c.vocab);
        tok.write_gguf(w, size_t(c.vocab));
        cv.report().tokenizer = tok_path;
    }

    const int64_t D = c.hidden, hcD = int64_t(c.hc_mult) * D;
    cv.mat(n::kTokenEmbd, {"embed.weight", "embed_tokens.weight"}, c.vocab, D);
    cv.mat(n::kOutput, {"head.weight", "lm_head.weight"}, c.vocab, D);
    cv.f32(n::kOutputNorm, {"norm.weight"}, {D});
    cv.mat_f32(n::kOutputHcFn, {"hc_head_fn", "hc_head.hc_fn"}, c.hc_mult, hcD);
    cv.f32(n::kOutputHcBase, {"hc_head_base", "hc_head.hc_base"}, {c.hc_mult});
    cv.f32(n::kOutputHcScale, {"hc_head_scale", "hc_head.hc_scale"}, {1});
    for (int l = 0; l < c.n_layers; ++l) convert_block(cv, c, l, c.attn[size_t(l)], c.ratio[size_t(l)], c.mlp[size_t(l)]);
    for (int i = 0; i < c.n_nextn; ++i) {
        convert_block(cv, c, c.n_layers + i, AttnType::Sliding, 0, MlpType::TopK);
        convert_nextn(cv, c, i);
    }
    cv.report().mtp_blocks = c.n_nextn;
    cv.finish_and_write();
    return cv.report();
}

}  // namespace dsv4
