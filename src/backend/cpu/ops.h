// CPU reference ops: float32 compute over weights in any stored format. Readable first;
// parallel over output rows or tokens with the thread pool.
#pragma once
#include <cstdint>
#include <vector>

#include "model/config.h"
#include "model/shard.h"
#include "model/weights.h"

namespace dsv4::cpu {

// Dot product with eight partial sums (vectorisable, and closer to the exact sum than one
// running total); every CPU op uses this one.
float dot(const float* a, const float* b, int64_t n);

// y[t, r - r0] = sum_i x[t, i] * W[r, i] for r in [r0, r1), t < T. Row strides ldx, ldy.
void matmul(const float* x, int64_t ldx, int64_t T, const Mat& w, int64_t r0, int64_t r1, float* y, int64_t ldy);
// y[T, W.rows] = x[T, W.cols] · Wᵀ (contiguous).
void matmul(const float* x, int64_t T, const Mat& w, float* y);

// In place over T rows of n: x = x / sqrt(mean(x²) + eps) (* weight when given).
void rmsnorm(float* x, int64_t T, int64_t n, const float* weight, float eps);

// One embedding row per token, copied into each of the hc streams: X[T, hc, D].
void embed_streams(const Mat& embed, const int32_t* tokens, int64_t T, int hc, float* X);

// Hyper-connection site, first half: from the streams X[T, hc, D] computes the collapse
// into the sublayer input y[T, D], and keeps post[T, hc] and comb[T, hc, hc] for the second half.
void hc_pre(const ModelConfig& c, const Mat& fn, const float* base, const float* scale, const float* X, int64_t T,
            float* y, float* post, float* comb);
// Second half: X[k] = post[k] * f + sum_j comb[j][k] * X[j], in place.
void hc_post(const ModelConfig& c, float* X, const float* f, const float* post, const float* comb, int64_t T);
// Final collapse (sigmoid gates, no Sinkhorn) with the head's fn [hc, hc*D], base [hc] and
// scale [1] (the main model's or the MTP block's): y[T, D].
void hc_head(const ModelConfig& c, const Mat& fn, const float* base, const float* scale, const float* X, int64_t T,
             float* y);

// Routed experts + shared expert for T tokens f[T, D] -> out[T, D]. Hash layers route by token id.
// With a shard, only its experts and shared columns: `out` is then this rank's partial sum.
void moe(const ModelConfig& c, const LayerWeights& w, MlpType type, const float* f, const int32_t* tokens, int64_t T,
         float* out, const ShardPlan* shard = nullptr);

// The expert choice of one token (exposed for tests): top_k ids and their weights.
void route(const ModelConfig& c, const LayerWeights& w, MlpType type, const float* logits, int32_t token, int32_t* ids,
           float* weights);

}  // namespace dsv4::cpu
