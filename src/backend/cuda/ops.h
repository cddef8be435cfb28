// The CUDA versions of the CPU reference's per-token ops (backend/cpu/ops.h), on float32
// activations in device memory: norms, embeddings, hyper-connections, SwiGLU, expert routing and
// the expert-major grouping of a MoE layer. Every pointer is a device pointer; every call is
// asynchronous on its stream and throws (naming the value) on bad arguments, before any CUDA call.
// T = 0 is a no-op. Every op is deterministic (fixed reduction orders, no float atomics), and the
// arithmetic is the CPU's (same formulas and order, no fused multiply-adds where the CPU has
// none; exp and log1p correctly rounded): hc_post, add_to_streams, embed_streams and the MoE
// pieces agree with the CPU bit for bit, the others to float32 rounding (tests/cuda/test_cuda_ops.cpp).
#pragma once
#include <cstdint>

#include "backend/cuda/device_memory.h"

namespace dsv4::cuda {

// In place over T rows of n: x = x / sqrt(mean(x²) + eps) (* weight[n] when weight is given).
void rmsnorm(float* x, int64_t T, int64_t n, const float* weight, float eps, Stream stream = nullptr);

// rmsnorm, then rope (attention_kernels.h) of each row's trailing dim channels at position
// pos0 + row / per_pos, in one launch: bit for bit the two calls in turn (which it makes itself
// for rows the one-pass kernel does not take). The attention's q heads and kv row at decode.
void rmsnorm_rope(float* x, int64_t T, int64_t n, const float* weight, float eps, int per_pos, int64_t pos0,
                  const float* inv_freq, int dim, Stream stream = nullptr);

// X[t, k, :] = embed row tokens[t] (dequantised) for every stream k < hc. Token ids must be
// inside [0, embed.rows) (the caller checks them on the host before they are uploaded; an id
// outside gives NaN rows, not a fault). Any type dispatch_wtype (common.cuh) reads.
void embed_streams(const DeviceMat& embed, const int32_t* tokens, int64_t T, int hc, float* X,
                   Stream stream = nullptr);

// Shapes and constants of a hyper-connection site (ModelConfig: hc_mult, hidden, hc_iters,
// hc_eps, norm_eps).
struct HcShape {
    int n = 4;          // streams, 1..8
    int64_t D = 0;      // hidden
    int iters = 20;     // Sinkhorn iterations, >= 1
    float hc_eps = 1e-6f;
    float norm_eps = 1e-6f;
};

// As cpu::hc_pre: mix = fn · rms_normalise(X[t] flattened over n*D) ([mix_dim = (2+n)*n] per
// token), pre = sigmoid(mix[j]*scale[0] + base[j]) + eps, post = 2*sigmoid(mix[n+k]*scale[1] +
// base[n+k]), comb = row softmax + eps then Sinkhorn (column, then iters-1 x (row, column)),
// y[t] = sum_j pre[j] X[t, j]. fn: [mix_dim, n*D] any stored type; base [mix_dim], scale [3].
// Outputs y[T, D], post[T, n], comb[T, n, n]. One cluster of 1..16 blocks per token (more blocks
// per token when there are few tokens), fused: RMS scale, mix dot products, gates, y.
void hc_pre(const HcShape& s, const DeviceMat& fn, const float* base, const float* scale, const float* X, int64_t T,
            float* y, float* post, float* comb, Stream stream = nullptr);
// As cpu::hc_post: X[t, k] = post[t, k] * f[t] + sum_j comb[t, j, k] * X_old[t, j], in place.
void hc_post(const HcShape& s, float* X, const float* f, const float* post, const float* comb, int64_t T,
             Stream stream = nullptr);
// As cpu::hc_head: fn [n, n*D], base [n], scale [1]: y[t] = sum_j (sigmoid(mix[j]*scale[0] +
// base[j]) + hc_eps) X[t, j]. X rows t < T, output y[T, D].
void hc_head(const HcShape& s, const DeviceMat& fn, const float* base, const float* scale, const float* X, int64_t T,
             float* y, Stream stream = nullptr);

// gate[i] = silu(min(gate[i], L)) * clamp(up[i], -L, L) for i < n (limit 0: no clamp), in place.
void swiglu(float* gate, const float* up, int64_t n, float limit, Stream stream = nullptr);

// As cpu::route for T tokens: logits [T, E] -> ids [T, k], weights [T, k]. score = sqrt(softplus(x))
// (softplus as torch: x when x > 20); hash routing (tid2eid [vocab, k] given, bias null) takes
// ids = tid2eid[tokens[t] * k + i]; top-k routing (tid2eid null) takes the k largest score +
// bias[e] (bias null: score alone), ties to the lower id, in that order (descending key).
// weights = score[id] / (sum of the k chosen scores + 1e-20) * routed_scale. E <= 1024, k <= 16.
// A hash id outside [0, E), or a top-k slot left without a comparable key (NaN logits), gets id
// -1 / weight NaN there.
void route(const float* logits, int64_t T, int E, int k, const float* bias, const int32_t* tid2eid,
           const int32_t* tokens, float routed_scale, int32_t* ids, float* weights, Stream stream = nullptr);

// Expert-major grouping of the N = T*k (token, slot) pairs of ids [T, k] over E experts:
// offsets[E + 1] (offsets[e] = pairs routed to experts < e), order[N] (pair index t*k + i of
// each sorted position: by expert, then by pair index, so the result is deterministic),
// expert_of[N] (the expert of each sorted position) and slot_pos[N] (the sorted position of pair
// t*k + i: the inverse of order). E <= 1024; one block (stable counting sort). Pairs whose id is
// outside [0, E) are left out: not counted in offsets, slot_pos -1, and order / expert_of are -1
// at the positions from offsets[E] to N.
void moe_group(const int32_t* ids, int64_t T, int k, int E, int32_t* offsets, int32_t* order, int32_t* expert_of,
               int32_t* slot_pos, Stream stream = nullptr);

// xs[p, :] = x[order[p] / k, :] for p < N = T*k: each pair's input row, in sorted order. x [T, D].
// Rows whose order entry is negative are NaN.
void gather_rows(const float* x, const int32_t* order, int64_t N, int k, int64_t D, float* xs,
                 Stream stream = nullptr);

// out[t, :] = sum over the k slots of token t, in ascending expert id (the CPU's order), of
// weights[t, i] * ys[slot_pos[t*k + i], :], then + shared[t, :] (shared may be null). ids [T, k]
// gives the expert of each slot (equal experts: in slot order). ys [N, D] in sorted order.
// k <= 16. A slot whose slot_pos is negative makes the token's row NaN.
void moe_combine(const float* ys, const int32_t* ids, const float* weights, const int32_t* slot_pos, int64_t T, int k,
                 int64_t D, const float* shared, float* out, Stream stream = nullptr);

// X[t, j, :] += e[t, :] for every stream j < n (the MTP block adds the embedding projection to
// each of its input streams). X [T, n, D], e [T, D].
void add_to_streams(float* X, const float* e, int64_t T, int n, int64_t D, Stream stream = nullptr);

}  // namespace dsv4::cuda
