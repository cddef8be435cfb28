#include "backend/cuda/device_weights.h"

#include "backend/cpu/rope.h"

#include <cstring>

namespace dsv4::cuda {

namespace {

template <class T>
DeviceVec upload_values(const std::vector<T>& v) {
    DeviceVec d;
    d.n = int64_t(v.size());
    if (v.empty()) return d;
    d.buf = DeviceBuffer(v.size() * sizeof(T));
    d.buf.upload(v.data(), v.size() * sizeof(T));
    return d;
}

DeviceWeight up(const Mat& m) { return m ? upload(m) : DeviceWeight{}; }
DeviceWeight up(const MatStack& s) { return s.first ? upload(s) : DeviceWeight{}; }

// A rank's slices (model/shard.h): rows [r.begin, r.end) of m (contiguous in the file), columns
// [r.begin, r.end) repacked into rows of their own, matrices [r.begin, r.end) of a stack.
DeviceWeight up_rows(const Mat& m, Range r) {
    if (!m || r.empty()) return {};
    Mat v = m;
    v.rows = r.size();
    v.data = m.row(r.begin);
    return upload(v);
}
DeviceWeight up_cols(const Mat& m, Range r) {
    if (!m || r.empty()) return {};
    const Mat view = column_slice(m, r.begin, r.end);
    const size_t rb = gguf::tensor_bytes(m.type, {view.cols});
    std::vector<uint8_t> packed(rb * size_t(view.rows));
    for (int64_t i = 0; i < view.rows; ++i) std::memcpy(&packed[size_t(i) * rb], view.row(i), rb);
    Mat v = view;
    v.row_bytes = rb;
    v.data = packed.data();
    return upload(v);
}
DeviceWeight up_stack(const MatStack& s, Range r) {
    if (!s.first || r.empty()) return {};
    MatStack v = s;
    v.first = s.at(r.begin);
    v.n = r.size();
    return upload(v);
}
template <class T>
std::vector<T> part(const std::vector<T>& v, Range r) {
    return std::vector<T>(v.begin() + r.begin, v.begin() + r.end);
}

DeviceCompressor up(const CompressorWeights& c) {
    return {up(c.kv), up(c.gate), upload_vec(c.ape), upload_vec(c.norm)};
}

DeviceLayer up(const ModelConfig& c, const LayerWeights& L, const ShardPlan* plan) {
    DeviceLayer d;
    d.attn_norm = upload_vec(L.attn_norm);
    d.ffn_norm = upload_vec(L.ffn_norm);
    d.hc_attn_fn = up(L.hc_attn_fn);
    d.hc_ffn_fn = up(L.hc_ffn_fn);
    d.hc_attn_base = upload_vec(L.hc_attn_base);
    d.hc_attn_scale = upload_vec(L.hc_attn_scale);
    d.hc_ffn_base = upload_vec(L.hc_ffn_base);
    d.hc_ffn_scale = upload_vec(L.hc_ffn_scale);
    d.q_a = up(L.q_a);
    d.q_b = up(L.q_b);
    d.kv = up(L.kv);
    d.o_a = up(L.o_a);
    d.o_b = up(L.o_b);
    d.q_a_norm = upload_vec(L.q_a_norm);
    d.kv_norm = upload_vec(L.kv_norm);
    d.sinks = upload_vec(L.sinks);
    d.comp = up(L.comp);
    d.idx_comp = up(L.idx_comp);
    d.idx_q_b = up(L.idx_q_b);
    d.idx_proj = up(L.idx_proj);
    d.gate_inp = up(L.gate_inp);
    d.exp_probs_b = upload_vec(L.exp_probs_b);
    d.tid2eid = upload_vec(L.tid2eid);
    d.gate_exps = up(L.gate_exps);
    d.up_exps = up(L.up_exps);
    d.down_exps = up(L.down_exps);
    d.gate_sh = up(L.gate_sh);
    d.up_sh = up(L.up_sh);
    d.down_sh = up(L.down_sh);
    if (plan) {  // the rank's heads, output groups, experts and shared columns only
        const int64_t hd = c.head_dim, ol = c.o_lora;
        const Range q_rows{plan->heads.begin * hd, plan->heads.end * hd};
        const Range o_rows{plan->groups.begin * ol, plan->groups.end * ol};
        d.q_b = up_rows(L.q_b, q_rows);
        d.sinks = upload_vec(part(L.sinks, plan->heads));
        d.o_a = up_rows(L.o_a, o_rows);
        d.o_b = up_cols(L.o_b, o_rows);
        d.gate_exps = up_stack(L.gate_exps, plan->experts);
        d.up_exps = up_stack(L.up_exps, plan->experts);
        d.down_exps = up_stack(L.down_exps, plan->experts);
        d.gate_sh = up_rows(L.gate_sh, plan->shared_cols);
        d.up_sh = up_rows(L.up_sh, plan->shared_cols);
        d.down_sh = up_cols(L.down_sh, plan->shared_cols);
    }
    return d;
}

size_t b(const DeviceVec& v) { return v.buf.size(); }
size_t b(const DeviceWeight& w) { return w.buffer.size(); }
size_t b(const DeviceCompressor& c) { return b(c.kv) + b(c.gate) + b(c.ape) + b(c.norm); }
size_t b(const DeviceLayer& d) {
    return b(d.attn_norm) + b(d.ffn_norm) + b(d.hc_attn_fn) + b(d.hc_ffn_fn) + b(d.hc_attn_base) +
           b(d.hc_attn_scale) + b(d.hc_ffn_base) + b(d.hc_ffn_scale) + b(d.q_a) + b(d.q_b) + b(d.kv) + b(d.o_a) +
           b(d.o_b) + b(d.q_a_norm) + b(d.kv_norm) + b(d.sinks) + b(d.comp) + b(d.idx_comp) + b(d.idx_q_b) +
           b(d.idx_proj) + b(d.gate_inp) + b(d.exp_probs_b) + b(d.tid2eid) + b(d.gate_exps) + b(d.up_exps) +
           b(d.down_exps) + b(d.gate_sh) + b(d.up_sh) + b(d.down_sh);
}

}  // namespace

DeviceVec upload_vec(const std::vector<float>& v) { return upload_values(v); }
DeviceVec upload_vec(const std::vector<int32_t>& v) { return upload_values(v); }

DeviceModelWeights upload_weights(const ModelConfig& c, const ModelWeights& w, const ShardPlan* plan) {
    DeviceModelWeights d;
    d.embed = up(w.embed);
    d.output = plan ? up_rows(w.output, plan->vocab) : up(w.output);
    d.output_norm = upload_vec(w.output_norm);
    d.hc_head_base = upload_vec(w.hc_head_base);
    d.hc_head_scale = upload_vec(w.hc_head_scale);
    d.hc_head_fn = up(w.hc_head_fn);
    for (const LayerWeights& L : w.layers) d.layers.push_back(up(c, L, plan));
    for (const MtpWeights& m : w.mtp) {
        DeviceMtp t;
        t.block = up(c, m.block, plan);
        t.e_proj = up(m.e_proj);
        t.h_proj = up(m.h_proj);
        t.enorm = upload_vec(m.enorm);
        t.hnorm = upload_vec(m.hnorm);
        t.norm = upload_vec(m.norm);
        t.hc_head_base = upload_vec(m.hc_head_base);
        t.hc_head_scale = upload_vec(m.hc_head_scale);
        t.hc_head_fn = up(m.hc_head_fn);
        d.mtp.push_back(std::move(t));
    }
    d.rope_main = upload_vec(cpu::Rope(c.rope_main, c.rope_dim).inv_freq());
    d.rope_compress = upload_vec(cpu::Rope(c.rope_compress, c.rope_dim).inv_freq());
    d.bytes = weight_bytes(d);
    return d;
}

size_t weight_bytes(const DeviceModelWeights& w) {
    size_t n = b(w.embed) + b(w.output) + b(w.output_norm) + b(w.hc_head_base) + b(w.hc_head_scale) + b(w.hc_head_fn) +
               b(w.rope_main) + b(w.rope_compress);
    for (const DeviceLayer& L : w.layers) n += b(L);
    for (const DeviceMtp& m : w.mtp)
        n += b(m.block) + b(m.e_proj) + b(m.h_proj) + b(m.enorm) + b(m.hnorm) + b(m.norm) + b(m.hc_head_base) +
             b(m.hc_head_scale) + b(m.hc_head_fn);
    return n;
}

}  // namespace dsv4::cuda
