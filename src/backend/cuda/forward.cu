#include "backend/cuda/forward.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "backend/cuda/attention_kernels.h"
#include "backend/cuda/common.cuh"
#include "backend/cuda/device_query.h"
#include "backend/cuda/matvec.h"
#include "backend/cuda/matvec_int8.h"
#include "backend/cuda/ops.h"
#include "core/trace.h"

namespace dsv4::cuda {

namespace {

__global__ void scale_kernel(float* x, int64_t n, float s) {
    grid_begin();
    const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= s;
}

void scale_inplace(float* x, int64_t n, float s, Stream stream) {
    if (n <= 0) return;
    launch(scale_kernel, ceil_div(n, 256), 256, 0, stream, x, n, s);
    DSV4_LAUNCH_CHECK();
}

HcShape hc_shape(const ModelConfig& c) {
    return HcShape{c.hc_mult, c.hidden, c.hc_iters, float(c.hc_eps), float(c.norm_eps)};
}

// Expert matrices for n problems, one per (token, slot) pair in sorted order: matvec with ids when
// there are few tokens (the decode weight stream), the grouped GEMM otherwise.
void experts_matmul(const DeviceWeight& w, const float* x, int64_t N, int64_t T, const int32_t* expert_of,
                    const int32_t* offsets, float* y, GemmWorkspace& ws, Stream S) {
    if (N == 0) return;
    if (T <= kMaxMatvecTokens) {
        MatvecArgs a;
        a.x = x;
        a.ldx = w.mat.cols;
        a.x_stride = w.mat.cols;
        a.T = 1;
        a.y = y;
        a.ldy = w.mat.rows;
        a.y_stride = w.mat.rows;
        a.n = int(N);
        a.ids = expert_of;
        const size_t need = matvec_workspace_bytes(w.mat, a);
        matvec(w.mat, a, need ? ws.get(need) : nullptr, need, S);
    } else {
        gemm_experts(w.mat, x, offsets, T, N, y, ws, S);
    }
}

// Expert parallel: the router's global expert ids -> this rank's local ids (id - e0), and -1
// for the slots another rank computes (moe_group leaves those out).
__global__ void local_expert_ids_kernel(const int32_t* ids, int64_t N, int e0, int e1, int32_t* local) {
    grid_begin();
    const int64_t p = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (p < N) local[p] = ids[p] >= e0 && ids[p] < e1 ? ids[p] - e0 : -1;
}

// ... and their slots read the zero row `zero_row` of the expert outputs, so moe_combine adds
// nothing for them (in place of the NaN that marks a missing row otherwise).
__global__ void redirect_left_out_kernel(int32_t* slot_pos, int64_t N, int32_t zero_row) {
    grid_begin();
    const int64_t p = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (p < N && slot_pos[p] < 0) slot_pos[p] = zero_row;
}

}  // namespace

CudaBackend::CudaBackend(const ModelConfig& c, DeviceModelWeights w, const Shard* shard)
    : cfg_(c), mtp_cfg_(mtp_block_config(c)), w_(std::move(w)), device_(device_name()) {
    graphs_ = env_switch("DSV4_CUDA_GRAPHS", true);
    precapture_ = env_switch("DSV4_CUDA_PRECAPTURE", true);
    // On since the H100 run of 2026-12-07 (docs/CUDA.md, "Launch overlap"); "0" turns each off.
    side_ = env_switch("DSV4_CUDA_SIDE", true);
    pack_once_ = env_switch("DSV4_CUDA_PACK_ONCE", true);
    gemm_env_precision();  // throws on a bad DSV4_GEMM_PRECISION now rather than in the first forward
    if (shard) {
        if (!shard->comm || shard->comm->size() != shard->plan.ranks || shard->comm->rank() != shard->plan.rank)
            fail("CUDA shard: the plan (rank ", shard->plan.rank, " of ", shard->plan.ranks,
                 ") does not match its communicator");
        sharded_ = true;
        shard_ = *shard;
        graphs_ = false;  // a staged communicator synchronises, which a capture does not allow
    }
    note_memory();
}

void CudaBackend::sum_over_ranks(float* x, int64_t n) const {
    if (!sharded_ || shard_.plan.ranks == 1) return;
    DSV4_TRACE("all_reduce");
    shard_.comm->all_reduce_sum(x, size_t(n));
}

CudaBackend::~CudaBackend() {
    for (auto& [key, exec] : execs_)
        if (exec) cudaGraphExecDestroy(exec);
    if (pinned_tokens_) cudaFreeHost(pinned_tokens_);
    if (graph_done_) cudaEventDestroy(graph_done_);
    if (fork_ev_) cudaEventDestroy(fork_ev_);
    if (join_ev_) cudaEventDestroy(join_ev_);
    if (side_stream_) cudaStreamDestroy(side_stream_);
}

GemmOptions CudaBackend::packed(const float* x, int64_t cols, int64_t T, const char* slot,
                                const std::vector<const DeviceMat*>& readers) const {
    GemmOptions o;
    if (!pack_once_ || T > kQ8Int8MaxTokens) return o;
    bool wanted = false;
    for (const DeviceMat* w : readers) wanted |= w->cols == cols && w->rows > 0 && q8_0_matvec_supported(*w);
    if (wanted) o.packed = q8_0_pack_x(x, cols, cols, int(T), bytes(slot, q8_0_packed_x_bytes(cols, int(T))),
                                       forward_stream());
    return o;
}

Stream CudaBackend::fork() const {
    const Stream S = forward_stream();
    if (!side_) return S;
    if (!side_stream_) {
        DSV4_CUDA_CHECK(cudaStreamCreateWithFlags(&side_stream_, cudaStreamNonBlocking));
        DSV4_CUDA_CHECK(cudaEventCreateWithFlags(&fork_ev_, cudaEventDisableTiming));
        DSV4_CUDA_CHECK(cudaEventCreateWithFlags(&join_ev_, cudaEventDisableTiming));
    }
    DSV4_CUDA_CHECK(cudaEventRecord(fork_ev_, S));
    DSV4_CUDA_CHECK(cudaStreamWaitEvent(side_stream_, fork_ev_, 0));
    return side_stream_;
}

void CudaBackend::join() const {
    if (!side_) return;
    DSV4_CUDA_CHECK(cudaEventRecord(join_ev_, side_stream_));
    DSV4_CUDA_CHECK(cudaStreamWaitEvent(forward_stream(), join_ev_, 0));
}

void* CudaBackend::bytes(const char* slot, size_t n) const {
    DeviceBuffer& b = scratch_[slot];
    if (b.size() < n) {
        const size_t grown = std::max(n, b.size() + b.size() / 2);
        if (capturing_) {
            // Nodes captured earlier in this graph may read the old buffer: keep it until the
            // graph has run (no synchronisation is allowed inside a capture).
            graveyard_.push_back(std::move(b));
            b = DeviceBuffer(grown);
        } else {
            synchronize();  // queued kernels may still use the old buffer
            b = DeviceBuffer(grown);
            note_memory();
        }
    }
    return b.get();
}
float* CudaBackend::f(const char* slot, int64_t floats) const {
    return static_cast<float*>(bytes(slot, size_t(std::max<int64_t>(floats, 1)) * sizeof(float)));
}
int32_t* CudaBackend::i(const char* slot, int64_t ints) const {
    return static_cast<int32_t*>(bytes(slot, size_t(std::max<int64_t>(ints, 1)) * sizeof(int32_t)));
}

void CudaBackend::note_memory() const {
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) == cudaSuccess) peak_used_ = std::max(peak_used_, total_b - free_b);
}

CudaState& CudaBackend::state_of(State& st, const ModelConfig& c) const {
    if (int(st.layers.size()) != c.n_layers) fail("state was made for another model");
    if (!st.device.get()) {
        // A fresh State may start at a later position with nothing consumed (the MTP drafter's,
        // fed just the last window of a prompt); one the CPU has filled cannot move here.
        for (const LayerState& l : st.layers)
            if (l.n_window || l.comp.n_rows || l.comp.n_buf || l.idx.n_rows || l.idx.n_buf)
                fail("a state that ran on the CPU cannot continue on the CUDA backend");
        st.device.reset(std::make_unique<CudaState>(c));
    }
    auto* cs = dynamic_cast<CudaState*>(st.device.get());
    if (!cs) fail("the state belongs to another device backend");
    return *cs;
}

void CudaBackend::compress(DeviceCompressorState& s, const DeviceCompressor& w, const float* a, int64_t T,
                           const float* inv_freq, int rope_dim, float eps, const char* slot_kv,
                           const char* slot_gate, Stream S, GemmWorkspace& ws, const GemmOptions& packed_a) const {
    const int64_t cw = s.cw(), m = s.ratio, nb = s.n_buf, total = nb + T;
    topology_ += nb ? 'b' : '-';
    topology_ += (total / m) ? 'w' : '-';
    topology_ += (total % m) ? 'r' : '-';
    float* kv = f(slot_kv, total * cw);
    float* gate = f(slot_gate, total * cw);
    copy_d2d(kv, s.buf_kv.get(), size_t(nb * cw) * sizeof(float), S);
    copy_d2d(gate, s.buf_gate.get(), size_t(nb * cw) * sizeof(float), S);
    gemm(w.kv.mat, a, cfg_.hidden, T, kv + nb * cw, cw, ws, S, packed_a);
    gemm(w.gate.mat, a, cfg_.hidden, T, gate + nb * cw, cw, ws, S, packed_a);
    const int64_t nwin = total / m;
    if (nwin > 0) {
        s.reserve_rows(s.n_rows + nwin);
        CompressArgs ca;
        ca.kv = kv;
        ca.gate = gate;
        ca.prev_kv = s.prev_kv.as<const float>();
        ca.prev_gate = s.prev_gate.as<const float>();
        ca.has_prev = s.has_prev;
        ca.ape = w.ape.f();
        ca.norm = w.norm.f();
        ca.eps = eps;
        ca.width = s.width;
        ca.coff = s.coff;
        ca.ratio = s.ratio;
        ca.n_windows = nwin;
        ca.first_row = s.n_rows;
        ca.inv_freq = inv_freq;
        ca.dim = rope_dim;
        ca.rows = s.rows.as<float>();
        compress_windows(ca, S);
        s.n_rows += nwin;
        if (s.coff == 2) {  // the last closed window's A halves feed the next window
            copy_d2d(s.prev_kv.get(), kv + (nwin - 1) * m * cw, size_t(m * cw) * sizeof(float), S);
            copy_d2d(s.prev_gate.get(), gate + (nwin - 1) * m * cw, size_t(m * cw) * sizeof(float), S);
            s.has_prev = true;
        }
    }
    const int64_t rest = total - nwin * m;
    copy_d2d(s.buf_kv.get(), kv + nwin * m * cw, size_t(rest * cw) * sizeof(float), S);
    copy_d2d(s.buf_gate.get(), gate + nwin * m * cw, size_t(rest * cw) * sizeof(float), S);
    s.n_buf = int(rest);
}

void CudaBackend::attention(const ModelConfig& c, int l, const DeviceLayer& L, const float* a, int64_t T, int64_t pos0,
                            int64_t band, DeviceLayerState& st, float* out) const {
    const Stream S = forward_stream();
    DSV4_TRACE("attention");
    // This rank's heads and output groups (all of them unsharded); w_ holds just their slices.
    const int H = sharded_ ? int(shard_.plan.heads.size()) : c.n_heads, d = c.head_dim, R = c.rope_dim;
    const int G = sharded_ ? int(shard_.plan.groups.size()) : c.o_groups;
    const int64_t Hd = int64_t(H) * d, D = c.hidden;
    if (H == 0) {  // a rank without heads adds nothing to the sum (and keeps no attention state)
        DSV4_CUDA_CHECK(cudaMemsetAsync(out, 0, size_t(T * D) * sizeof(float), S));
        return;
    }
    const float eps = float(c.norm_eps);
    const AttnType type = c.attn[size_t(l)];
    const float* inv = type == AttnType::Sliding ? w_.rope_main.f() : w_.rope_compress.f();

    // `a` feeds up to seven Q8_0 matvecs: its int8 limbs once for all of them.
    std::vector<const DeviceMat*> readers = {&L.q_a.mat, &L.kv.mat};
    if (type != AttnType::Sliding) readers.insert(readers.end(), {&L.comp.kv.mat, &L.comp.gate.mat});
    if (type == AttnType::CSA) readers.insert(readers.end(), {&L.idx_comp.kv.mat, &L.idx_comp.gate.mat, &L.idx_proj.mat});
    const GemmOptions pa = packed(a, D, T, "a_packed", readers);
    // The key/value path (the latent row, the compressors, the indexer weights) reads only `a`
    // and the state: it runs on the side stream while the query path runs here.
    const Stream K = fork();
    GemmWorkspace& kws = side_ws();
    // The window's rows and this chunk's, contiguous: position j lives at cat + (j - (pos0 - nw)) * d.
    const int64_t nw = st.n_window;
    topology_ += nw ? 'n' : '0';
    if (type == AttnType::CSA) topology_ += st.idx.n_rows + (st.idx.n_buf + T) / st.idx.ratio > c.index_topk ? 'k' : 'a';
    float* cat = f("cat", (nw + T) * d);
    copy_d2d(cat, st.window.get(), size_t(nw * d) * sizeof(float), K);
    float* kv = cat + nw * d;
    gemm(L.kv.mat, a, D, T, kv, d, kws, K, pa);
    rmsnorm_rope(kv, T, d, L.kv_norm.f(), eps, 1, pos0, inv, R, K);
    if (type != AttnType::Sliding) compress(st.comp, L.comp, a, T, inv, R, eps, "comp_kv", "comp_gate", K, kws, pa);
    const int IH = c.index_heads, Id = c.index_head_dim;
    float *qi = nullptr, *wi = nullptr;
    if (type == AttnType::CSA) {
        compress(st.idx, L.idx_comp, a, T, inv, R, eps, "idx_kv", "idx_gate", K, kws, pa);
        wi = f("wi", T * IH);
        gemm(L.idx_proj.mat, a, D, T, wi, IH, kws, K, pa);
        scale_inplace(wi, T * IH, float(std::pow(double(IH), -0.5)), K);
    }

    float* qr = f("qr", T * c.q_lora);
    gemm(L.q_a.mat, a, D, T, qr, c.q_lora, ws_, S, pa);
    rmsnorm(qr, T, c.q_lora, L.q_a_norm.f(), eps, S);
    const GemmOptions pqr = packed(qr, c.q_lora, T, "qr_packed", {&L.q_b.mat, &L.idx_q_b.mat});
    float* q = f("q", T * Hd);
    gemm(L.q_b.mat, qr, c.q_lora, T, q, Hd, ws_, S, pqr);
    rmsnorm_rope(q, T * H, d, nullptr, eps, H, pos0, inv, R, S);  // per head; the heads of a token share pos
    if (type == AttnType::CSA) {
        qi = f("qi", T * IH * Id);
        gemm(L.idx_q_b.mat, qr, c.q_lora, T, qi, int64_t(IH) * Id, ws_, S, pqr);
        rope(qi, T * IH, Id, Id, IH, pos0, inv, R, false, S);
    }
    join();

    float* attn = f("attn", T * Hd);
    if (band <= 0) band = T;
    int32_t *picked = nullptr, *n_picked = nullptr;
    if (type == AttnType::CSA) {
        picked = i("picked", std::min(band, T) * c.index_topk);
        n_picked = i("n_picked", std::min(band, T));
    }
    for (int64_t b0 = 0; b0 < T; b0 += band) {
        const int64_t Tb = std::min(band, T - b0);
        if (type == AttnType::CSA) {
            IndexerArgs ia;
            ia.q = qi + b0 * IH * Id;
            ia.w = wi + b0 * IH;
            ia.k = st.idx.rows.as<const float>();
            ia.T = Tb;
            ia.pos0 = pos0 + b0;
            ia.n_rows = st.idx.n_rows;
            ia.heads = IH;
            ia.dim = Id;
            ia.ratio = c.ratio[size_t(l)];
            ia.top_k = c.index_topk;
            ia.scale = float(std::pow(double(Id), -0.5));
            ia.picked = picked;
            ia.n_picked = n_picked;
            const size_t need = indexer_workspace_bytes(Tb, st.idx.n_rows);
            indexer_topk(ia, bytes("idx_ws", need), need, S);
        }
        SparseAttnArgs sa;
        sa.q = q + b0 * Hd;
        sa.T = Tb;
        sa.pos0 = pos0 + b0;
        sa.H = H;
        sa.width = d;
        sa.scale = float(std::pow(double(d), -0.5));
        sa.sinks = L.sinks.f();
        sa.cache = cat;
        sa.cache_from = pos0 - nw;
        sa.chunk = kv + b0 * d;
        sa.window = c.window;
        if (type != AttnType::Sliding) {
            sa.comp = st.comp.rows.as<const float>();
            sa.n_comp = st.comp.n_rows;
            sa.ratio = c.ratio[size_t(l)];
        }
        if (type == AttnType::CSA) {
            sa.picked = picked;
            sa.n_picked = n_picked;
            sa.top_k = c.index_topk;
        }
        sa.out = attn + b0 * Hd;
        const size_t attn_need = sparse_attention_workspace_bytes(sa);
        sparse_attention(sa, bytes("attn_ws", attn_need), attn_need, S);
    }
    rope(attn, T * H, d, d, H, pos0, inv, R, /*inverse=*/true, S);  // V carried rope by its position

    // Keep the last (window - 1) latent rows for the next call.
    const int64_t total = nw + T, keep = std::min<int64_t>(total, c.window - 1);
    copy_d2d(st.window.get(), cat + (total - keep) * d, size_t(keep * d) * sizeof(float), S);
    st.n_window = int(keep);

    // Grouped low-rank output: each group of heads projects to o_lora, then one mix to hidden.
    const int64_t per_group = Hd / G, GL = int64_t(G) * c.o_lora;
    float* u = f("o_lora", T * GL);
    if (T <= kMaxMatvecTokens) {
        // One launch for all groups: o_a seen as G matrices [o_lora, per_group], problem g
        // reading its heads' slice of each token's row and writing its o_lora columns.
        DeviceMat stack = L.o_a.mat;
        stack.rows = c.o_lora;
        stack.count = G;
        MatvecArgs ma;
        ma.x = attn;
        ma.ldx = Hd;
        ma.x_stride = per_group;
        ma.T = int(T);
        ma.y = u;
        ma.ldy = GL;
        ma.y_stride = c.o_lora;
        ma.n = G;
        const size_t need = matvec_workspace_bytes(stack, ma);
        matvec(stack, ma, need ? ws_.get(need) : nullptr, need, S);
    } else {
        for (int g = 0; g < G; ++g)
            gemm(slice_rows(L.o_a.mat, int64_t(g) * c.o_lora, int64_t(g + 1) * c.o_lora), attn + g * per_group, Hd, T,
                 u + int64_t(g) * c.o_lora, GL, ws_, S);
    }
    gemm(L.o_b.mat, u, GL, T, out, D, ws_, S);
}

void CudaBackend::moe(const ModelConfig& c, const DeviceLayer& L, MlpType mlp, const float* x, const int32_t* tokens,
                      int64_t T, float* out) const {
    const Stream S = forward_stream();
    DSV4_TRACE("moe");
    const int E = c.n_experts, k = c.top_k;
    const int64_t D = c.hidden, I = c.moe_inter, N = T * k;
    const float limit = float(c.swiglu_limit);
    // The shared expert over this rank's intermediate columns (all of them unsharded), on the
    // side stream while the router and the routed experts run here.
    const int64_t Is = sharded_ ? shard_.plan.shared_cols.size() : I;
    float* sy = f("sy", T * D);
    {
        const GemmOptions px = Is > 0 ? packed(x, D, T, "x_packed", {&L.gate_sh.mat, &L.up_sh.mat}) : GemmOptions{};
        const Stream Z = fork();
        GemmWorkspace& zws = side_ws();
        if (Is > 0) {
            float* sg = f("sg", T * Is);
            float* su = f("su", T * Is);
            gemm(L.gate_sh.mat, x, D, T, sg, Is, zws, Z, px);
            gemm(L.up_sh.mat, x, D, T, su, Is, zws, Z, px);
            swiglu(sg, su, T * Is, limit, Z);
            gemm(L.down_sh.mat, sg, Is, T, sy, D, zws, Z);
        } else {
            DSV4_CUDA_CHECK(cudaMemsetAsync(sy, 0, size_t(T * D) * sizeof(float), Z));
        }
    }
    float* lg = f("router", T * E);
    gemm(L.gate_inp.mat, x, D, T, lg, E, ws_, S);
    int32_t* ids = i("ids", N);
    float* wts = f("wts", N);
    route(lg, T, E, k, mlp == MlpType::TopK ? L.exp_probs_b.f() : nullptr,
          mlp == MlpType::Hash ? L.tid2eid.i() : nullptr, tokens, float(c.routed_scale), ids, wts, S);
    // Sharded: only this rank's experts [e0, e1) run; the others' slots read a zero row (row N).
    const int El = sharded_ ? int(shard_.plan.experts.size()) : E;
    if (sharded_ && N > 0) {
        int32_t* local = i("ids_local", N);
        launch(local_expert_ids_kernel, unsigned(ceil_div(N, 256)), 256, 0, S,
               ids, N, int(shard_.plan.experts.begin), int(shard_.plan.experts.end), local);
        DSV4_LAUNCH_CHECK();
        ids = local;
    }
    int32_t* offsets = i("offsets", El + 1);
    int32_t* order = i("order", N);
    int32_t* expert_of = i("expert_of", N);
    int32_t* slot_pos = i("slot_pos", N);
    moe_group(ids, T, k, El, offsets, order, expert_of, slot_pos, S);
    float* xs = f("xs", N * D);
    gather_rows(x, order, N, k, D, xs, S);
    float* g = f("g", N * I);
    float* up = f("up", N * I);
    float* ys = f("ys", (N + (sharded_ ? 1 : 0)) * D);
    experts_matmul(L.gate_exps, xs, N, T, expert_of, offsets, g, ws_, S);
    experts_matmul(L.up_exps, xs, N, T, expert_of, offsets, up, ws_, S);
    swiglu(g, up, N * I, limit, S);
    experts_matmul(L.down_exps, g, N, T, expert_of, offsets, ys, ws_, S);
    if (sharded_ && N > 0) {
        DSV4_CUDA_CHECK(cudaMemsetAsync(ys + N * D, 0, size_t(D) * sizeof(float), S));
        launch(redirect_left_out_kernel, unsigned(ceil_div(N, 256)), 256, 0, S, slot_pos, N, int32_t(N));
        DSV4_LAUNCH_CHECK();
    }

    join();  // the shared expert, queued first on the side stream
    moe_combine(ys, ids, wts, slot_pos, T, k, D, sy, out, S);
}

void CudaBackend::run_layer(const ModelConfig& c, int l, const DeviceLayer& L, MlpType mlp, const int32_t* tokens,
                            int64_t T, int64_t pos0, int64_t band, DeviceLayerState& st, float* X) const {
    const Stream S = forward_stream();
    DSV4_TRACE_ARG("layer", l);
    const int64_t D = c.hidden;
    const int n = c.hc_mult;
    const HcShape hs = hc_shape(c);
    float* y = f("y", T * D);
    float* fo = f("f", T * D);
    float* post = f("post", T * n);
    float* comb = f("comb", T * n * n);
    hc_pre(hs, L.hc_attn_fn.mat, L.hc_attn_base.f(), L.hc_attn_scale.f(), X, T, y, post, comb, S);
    rmsnorm(y, T, D, L.attn_norm.f(), float(c.norm_eps), S);
    attention(c, l, L, y, T, pos0, band, st, fo);
    sum_over_ranks(fo, T * D);
    hc_post(hs, X, fo, post, comb, T, S);
    hc_pre(hs, L.hc_ffn_fn.mat, L.hc_ffn_base.f(), L.hc_ffn_scale.f(), X, T, y, post, comb, S);
    rmsnorm(y, T, D, L.ffn_norm.f(), float(c.norm_eps), S);
    moe(c, L, mlp, y, tokens, T, fo);
    sum_over_ranks(fo, T * D);
    hc_post(hs, X, fo, post, comb, T, S);
}

void CudaBackend::head(const DeviceWeight& fn, const DeviceVec& base, const DeviceVec& scale, const DeviceVec& norm,
                       const float* X, int64_t rows, float* logits) const {
    const Stream S = forward_stream();
    DSV4_TRACE("head");
    const int64_t D = cfg_.hidden, V = cfg_.vocab;
    float* y = f("head_y", rows * D);
    hc_head(hc_shape(cfg_), fn.mat, base.f(), scale.f(), X, rows, y, S);
    rmsnorm(y, rows, D, norm.f(), float(cfg_.norm_eps), S);
    float* lo = f("logits", rows * V);
    if (sharded_ && shard_.plan.ranks > 1) {  // this rank's vocabulary rows into zeros, then the sum
        DSV4_CUDA_CHECK(cudaMemsetAsync(lo, 0, size_t(rows * V) * sizeof(float), S));
        const Range v = shard_.plan.vocab;
        if (!v.empty()) {
            // Into rows of their own first: the slice's columns start anywhere in the row, which
            // the GEMM's vector stores may not take; the strided copy takes any alignment.
            float* part = f("logits_part", rows * v.size());
            gemm(w_.output.mat, y, D, rows, part, v.size(), ws_, S);
            DSV4_CUDA_CHECK(cudaMemcpy2DAsync(lo + v.begin, size_t(V) * sizeof(float), part,
                                              size_t(v.size()) * sizeof(float), size_t(v.size()) * sizeof(float),
                                              size_t(rows), cudaMemcpyDeviceToDevice, S));
        }
        sum_over_ranks(lo, rows * V);
    } else {
        gemm(w_.output.mat, y, D, rows, lo, V, ws_, S);
    }
    if (logits) scratch_["logits"].download(logits, size_t(rows * V) * sizeof(float));
}

void CudaBackend::forward(const int32_t* tokens, int64_t T, State& st, float* logits, const ForwardOptions& opt) const {
    const Stream S = forward_stream();
    std::lock_guard<std::mutex> lk(mu_);
    DSV4_TRACE_ARG("forward", T);
    const ModelConfig& c = cfg_;
    CudaState& ds = state_of(st, c);
    if (T <= 0) return;
    for (int64_t t = 0; t < T; ++t)
        if (tokens[t] < 0 || tokens[t] >= c.vocab) fail("token id ", tokens[t], " outside the vocabulary of ", c.vocab);
    const int64_t nD = int64_t(c.hc_mult) * c.hidden;
    const bool want_logits = logits && opt.logits != Logits::None;
    const int64_t first = opt.logits == Logits::Last ? T - 1 : 0;
    // Decode-sized steps replay as one CUDA graph (the launches of ~50 kernels per layer would
    // otherwise cost more than the kernels); the first step of each size runs plainly, which
    // also sizes the scratch and the kernels' one-time setup.
    const bool graph = graphs_ && T <= kMaxMatvecTokens && warm_sizes_.count(T);
    if (graph) {
        if (!pinned_tokens_) {
            DSV4_CUDA_CHECK(cudaMallocHost(&pinned_tokens_, kMaxMatvecTokens * sizeof(int32_t)));
            DSV4_CUDA_CHECK(cudaEventCreateWithFlags(&graph_done_, cudaEventDisableTiming));
        }
        // A graph's token copy reads pinned_tokens_ when it runs: the last one must be done.
        DSV4_CUDA_CHECK(cudaEventSynchronize(graph_done_));
        std::copy(tokens, tokens + T, pinned_tokens_);
        if (take_precaptured(T, st.pos, ds, opt, want_logits, first)) {
            launch_exec(pre_.key);
        } else {
            const std::vector<HostCounters> before = counters(ds);
            try {
                launch_exec(capture_step(pinned_tokens_, T, st.pos, ds, opt, want_logits, first, ""));
            } catch (const std::exception&) {  // the capture is undone: run the step plainly
                restore(ds, before);
                launch_forward(tokens, T, st.pos, ds, opt, want_logits, first);
            }
        }
    } else {
        launch_forward(tokens, T, st.pos, ds, opt, want_logits, first);
        if (T <= kMaxMatvecTokens) warm_sizes_.insert(T);
    }
    // While this step runs, capture the next one if this is a run of plain decode steps.
    const bool decoding = T == 1 && last_state_ == ds.serial() && last_pos_ == st.pos;
    last_state_ = T == 1 ? ds.serial() : 0;
    last_pos_ = T == 1 ? st.pos + 1 : -1;
    if (graph && decoding && want_logits && precapture_) precapture_next(st.pos + 1, ds, opt, first);
    st.pos += T;
    if (opt.hidden && opt.hidden_from < T)
        scratch_["X"].download(opt.hidden, size_t((T - opt.hidden_from) * nD) * sizeof(float),
                               size_t(opt.hidden_from * nD) * sizeof(float));
    if (want_logits) scratch_["logits"].download(logits, size_t((T - first) * c.vocab) * sizeof(float));
    if (!graveyard_.empty()) {  // buffers replaced during a capture, no longer read by anything queued
        synchronize();
        graveyard_.clear();
    }
    note_memory();
}

void CudaBackend::launch_forward(const int32_t* tokens, int64_t T, int64_t pos0, CudaState& ds,
                                 const ForwardOptions& opt, bool want_logits, int64_t first) const {
    const Stream S = forward_stream();
    const ModelConfig& c = cfg_;
    const int64_t nD = int64_t(c.hc_mult) * c.hidden;
    int32_t* tok = i("tokens", T);
    DSV4_CUDA_CHECK(cudaMemcpyAsync(tok, tokens, size_t(T) * sizeof(int32_t), cudaMemcpyHostToDevice, S));
    float* X = f("X", T * nD);
    embed_streams(w_.embed.mat, tok, T, c.hc_mult, X, S);
    for (int l = 0; l < c.n_layers; ++l)
        run_layer(c, l, w_.layers[size_t(l)], c.mlp[size_t(l)], tok, T, pos0, opt.band, ds.layers[size_t(l)], X);
    if (want_logits)
        head(w_.hc_head_fn, w_.hc_head_base, w_.hc_head_scale, w_.output_norm, X + first * nD, T - first, nullptr);
}

std::vector<CudaBackend::HostCounters> CudaBackend::counters(const CudaState& ds) {
    std::vector<HostCounters> v;
    for (const DeviceLayerState& l : ds.layers)
        v.push_back({l.n_window, l.comp.n_rows, l.comp.n_buf, l.comp.has_prev, l.idx.n_rows, l.idx.n_buf, l.idx.has_prev});
    return v;
}

void CudaBackend::restore(CudaState& ds, const std::vector<HostCounters>& v) {
    for (size_t i = 0; i < v.size(); ++i) {
        DeviceLayerState& l = ds.layers[i];
        l.n_window = v[i].n_window;
        l.comp.n_rows = v[i].comp_rows;
        l.comp.n_buf = v[i].comp_buf;
        l.comp.has_prev = v[i].comp_prev;
        l.idx.n_rows = v[i].idx_rows;
        l.idx.n_buf = v[i].idx_buf;
        l.idx.has_prev = v[i].idx_prev;
    }
}

void CudaBackend::update_exec(cudaGraph_t g, const std::string& key) const {
    // One executable graph per topology (which optional copies and window closes the step has):
    // a step of a known topology only updates the kernels' arguments.
    DSV4_TRACE("cuda.graph_update");
    cudaGraphExec_t& exec = execs_[key];
    if (exec) {
        cudaGraphExecUpdateResultInfo info;
        if (cudaGraphExecUpdate(exec, g, &info) != cudaSuccess) {
            cudaGetLastError();
            cudaGraphExecDestroy(exec);
            exec = nullptr;
        }
    }
    const cudaError_t made = exec ? cudaSuccess : cudaGraphInstantiate(&exec, g, 0);
    cudaGraphDestroy(g);
    DSV4_CUDA_CHECK(made);
}

void CudaBackend::launch_exec(const std::string& key) const {
    DSV4_TRACE("cuda.graph_launch");
    DSV4_CUDA_CHECK(cudaGraphLaunch(execs_.at(key), forward_stream()));
    DSV4_CUDA_CHECK(cudaEventRecord(graph_done_, forward_stream()));
}

std::string CudaBackend::capture_step(const int32_t* tokens, int64_t T, int64_t pos, CudaState& ds,
                                      const ForwardOptions& opt, bool want_logits, int64_t first,
                                      const std::string& key_suffix) const {
    const Stream S = forward_stream();
    for (DeviceLayerState& l : ds.layers)  // no reallocation of state rows inside the capture
        for (DeviceCompressorState* cs : {&l.comp, &l.idx})
            if (cs->active()) cs->reserve_rows(cs->n_rows + T / cs->ratio + 1);
    i("tokens", T);
    cudaGraph_t g = nullptr;
    try {
        DSV4_TRACE("cuda.capture");
        topology_.clear();
        DSV4_CUDA_CHECK(cudaStreamBeginCapture(S, cudaStreamCaptureModeRelaxed));
        capturing_ = true;
        launch_forward(tokens, T, pos, ds, opt, want_logits, first);
        capturing_ = false;
        DSV4_CUDA_CHECK(cudaStreamEndCapture(S, &g));
    } catch (const std::exception&) {
        if (capturing_) {  // leave the capture and drop its graph
            capturing_ = false;
            cudaStreamEndCapture(S, &g);
            if (g) cudaGraphDestroy(g);
            cudaGetLastError();
        }
        throw;
    }
    std::string key = cat(T, ":", want_logits ? first : -1, ":", topology_, key_suffix);
    update_exec(g, key);
    return key;
}

size_t CudaBackend::buffers_fingerprint(const CudaState& ds) const {
    // Every device address a captured step may hold: the state's buffers, the scratch, the GEMM
    // workspace. Equal fingerprints (with equal counters) mean the captured arguments still hold.
    size_t h = 1469598103934665603ull;
    auto mix = [&h](const void* p, size_t n) {
        h = (h ^ reinterpret_cast<uintptr_t>(p)) * 1099511628211ull;
        h = (h ^ n) * 1099511628211ull;
    };
    for (const DeviceLayerState& l : ds.layers) {
        mix(l.window.get(), l.window.size());
        for (const DeviceCompressorState* cs : {&l.comp, &l.idx})
            for (const DeviceBuffer* b : {&cs->rows, &cs->buf_kv, &cs->buf_gate, &cs->prev_kv, &cs->prev_gate})
                mix(b->get(), b->size());
    }
    for (const auto& [slot, b] : scratch_) mix(b.get(), b.size());
    mix(ws_.data(), 0);
    mix(side_ws_.data(), 0);
    return h;
}

void CudaBackend::precapture_next(int64_t pos, CudaState& ds, const ForwardOptions& opt, int64_t first) const {
    DSV4_TRACE("cuda.precapture");
    const std::vector<HostCounters> before = counters(ds);
    try {
        // The running step may still use the graph it was launched from: alternate two.
        pre_parity_ = !pre_parity_;
        pre_.key = capture_step(pinned_tokens_, 1, pos, ds, opt, true, first, pre_parity_ ? "#1" : "#0");
    } catch (const std::exception&) {  // nothing is captured ahead; the next step captures itself
        restore(ds, before);
        return;
    }
    pre_.after = counters(ds);
    restore(ds, before);
    pre_.before = before;
    pre_.state = ds.serial();
    pre_.pos = pos;
    pre_.band = opt.band;
    pre_.first = first;
    pre_.buffers = buffers_fingerprint(ds);
    pre_.ready = true;
}

bool CudaBackend::take_precaptured(int64_t T, int64_t pos, CudaState& ds, const ForwardOptions& opt,
                                   bool want_logits, int64_t first) const {
    if (!pre_.ready) return false;
    pre_.ready = false;  // taken now or never: a captured step serves one forward at most
    // Captured steps always produce logits (precapture_next runs only after a step with logits).
    const bool same = T == 1 && want_logits && ds.serial() == pre_.state && pos == pre_.pos &&
                      opt.band == pre_.band && first == pre_.first && counters(ds) == pre_.before &&
                      buffers_fingerprint(ds) == pre_.buffers;
    if (!same) return false;
    restore(ds, pre_.after);  // the counters as the captured step leaves them
    return true;
}

void CudaBackend::mtp_forward(const float* hidden, const int32_t* next, int64_t T, State& st, float* logits,
                              const ForwardOptions& opt) const {
    const Stream S = forward_stream();
    std::lock_guard<std::mutex> lk(mu_);
    DSV4_TRACE_ARG("mtp_forward", T);
    if (w_.mtp.empty()) fail("the model has no MTP block");
    const ModelConfig& c = mtp_cfg_;
    CudaState& ds = state_of(st, c);
    if (T <= 0) return;
    for (int64_t t = 0; t < T; ++t)
        if (next[t] < 0 || next[t] >= c.vocab) fail("token id ", next[t], " outside the vocabulary of ", c.vocab);
    const DeviceMtp& M = w_.mtp[0];
    const int n = c.hc_mult;
    const int64_t D = c.hidden, nD = int64_t(n) * D;
    const float eps = float(c.norm_eps);
    int32_t* tok = i("tokens", T);
    DSV4_CUDA_CHECK(cudaMemcpyAsync(tok, next, size_t(T) * sizeof(int32_t), cudaMemcpyHostToDevice, S));
    float* hs = f("mtp_hidden", T * nD);
    DSV4_CUDA_CHECK(cudaMemcpyAsync(hs, hidden, size_t(T * nD) * sizeof(float), cudaMemcpyHostToDevice, S));
    // X0 = e_proj(enorm(embed[next])) on every stream + h_proj(hnorm(stream)) per stream.
    float* e = f("mtp_e", T * D);
    float* ep = f("mtp_ep", T * D);
    embed_streams(w_.embed.mat, tok, T, 1, e, S);
    rmsnorm(e, T, D, M.enorm.f(), eps, S);
    gemm(M.e_proj.mat, e, D, T, ep, D, ws_, S);
    rmsnorm(hs, T * n, D, M.hnorm.f(), eps, S);
    float* X = f("X", T * nD);
    gemm(M.h_proj.mat, hs, D, T * n, X, D, ws_, S);
    add_to_streams(X, ep, T, n, D, S);
    run_layer(c, 0, M.block, MlpType::TopK, tok, T, st.pos, opt.band, ds.layers[0], X);
    st.pos += T;
    if (opt.hidden && opt.hidden_from < T)
        scratch_["X"].download(opt.hidden, size_t((T - opt.hidden_from) * nD) * sizeof(float),
                               size_t(opt.hidden_from * nD) * sizeof(float));
    if (logits && opt.logits != Logits::None) {
        const int64_t first = opt.logits == Logits::Last ? T - 1 : 0;
        head(M.hc_head_fn, M.hc_head_base, M.hc_head_scale, M.norm, X + first * nD, T - first, logits);
    }
}

void CudaBackend::mtp_head(const float* out, int64_t rows, float* logits) const {
    const Stream S = forward_stream();
    std::lock_guard<std::mutex> lk(mu_);
    if (w_.mtp.empty()) fail("the model has no MTP block");
    const DeviceMtp& M = w_.mtp[0];
    const int64_t nD = int64_t(cfg_.hc_mult) * cfg_.hidden;
    float* X = f("mtp_out", rows * nD);
    DSV4_CUDA_CHECK(cudaMemcpyAsync(X, out, size_t(rows * nD) * sizeof(float), cudaMemcpyHostToDevice, S));
    head(M.hc_head_fn, M.hc_head_base, M.hc_head_scale, M.norm, X, rows, logits);
}

}  // namespace dsv4::cuda
