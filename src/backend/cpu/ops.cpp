#include "backend/cpu/ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "backend/cpu/quant.h"
#include "core/error.h"
#include "core/half.h"
#include "core/thread_pool.h"
#include "core/trace.h"

namespace dsv4::cpu {

namespace {

float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

// Unweighted RMS scale of n values (double accumulation).
float rms_scale(const float* x, int64_t n, float eps) {
    double ss = 0;
    for (int64_t i = 0; i < n; ++i) ss += double(x[i]) * x[i];
    return 1.0f / std::sqrt(float(ss / double(n)) + eps);
}

}  // namespace

float dot(const float* a, const float* b, int64_t n) {
    float s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; ++k) s[k] += a[i + k] * b[i + k];
    float tail = 0;
    for (; i < n; ++i) tail += a[i] * b[i];
    return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7])) + tail;
}

namespace {
// dot(x, dequant_row(Q8_0 row)) without the row buffer, bitwise equal to it: the same products
// d * q, the same eight lanes (32 is a multiple of 8) and the same final sum, so a one-token
// decode and a K-token verification round to the same logits.
float dot_q8_0(const float* x, const uint8_t* row, int64_t K) {
    float s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int64_t b = 0; b < K / 32; ++b) {
        const uint8_t* blk = row + 34 * b;
        uint16_t h;
        std::memcpy(&h, blk, 2);
        const float d = f16_to_f32(h);
        const int8_t* q = reinterpret_cast<const int8_t*>(blk + 2);
        const float* xb = x + 32 * b;
        for (int j = 0; j < 32; j += 8)
            for (int k = 0; k < 8; ++k) s[k] += xb[j + k] * (d * float(q[j + k]));
    }
    return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7])) + 0.0f;
}

// Rows per chunk: at least 4, and enough that a chunk is ~64K multiply-adds, so that the small
// matrices of a one-token decode run on the calling thread instead of paying a pool wake-up
// (measured: most of a decode step's time on the embedded model went to wake-ups).
size_t matmul_grain(int64_t K, int64_t T) {
    const int64_t per_row = std::max<int64_t>(1, K * T);
    return size_t(std::max<int64_t>(4, (int64_t(1) << 16) / per_row));
}
}  // namespace

void matmul(const float* x, int64_t ldx, int64_t T, const Mat& w, int64_t r0, int64_t r1, float* y, int64_t ldy) {
    DSV4_TRACE("matmul");
    const int64_t K = w.cols;
    parallel_for(static_cast<size_t>(r1 - r0), [&](size_t b, size_t e) {
        std::vector<float> row(static_cast<size_t>(K));
        for (size_t r = b; r < e; ++r) {
            if (T == 1 && w.type == TensorType::Q8_0 && K % 32 == 0) {
                y[int64_t(r)] = dot_q8_0(x, w.row(r0 + int64_t(r)), K);
                continue;
            }
            const float* wr;
            if (w.type == TensorType::F32) {
                wr = reinterpret_cast<const float*>(w.row(r0 + int64_t(r)));
            } else {
                dequant_row(w.type, w.row(r0 + int64_t(r)), K, row.data());
                wr = row.data();
            }
            for (int64_t t = 0; t < T; ++t) y[t * ldy + int64_t(r)] = dot(x + t * ldx, wr, K);
        }
    }, matmul_grain(K, T));
}

void matmul(const float* x, int64_t T, const Mat& w, float* y) { matmul(x, w.cols, T, w, 0, w.rows, y, w.rows); }

void rmsnorm(float* x, int64_t T, int64_t n, const float* weight, float eps) {
    DSV4_TRACE("rmsnorm");
    for (int64_t t = 0; t < T; ++t) {
        float* r = x + t * n;
        float s = rms_scale(r, n, eps);
        if (weight)
            for (int64_t i = 0; i < n; ++i) r[i] = weight[i] * (r[i] * s);
        else
            for (int64_t i = 0; i < n; ++i) r[i] *= s;
    }
}

void embed_streams(const Mat& embed, const int32_t* tokens, int64_t T, int hc, float* X) {
    DSV4_TRACE("embed");
    const int64_t D = embed.cols;
    for (int64_t t = 0; t < T; ++t) {
        if (tokens[t] < 0 || tokens[t] >= embed.rows) fail("token id ", tokens[t], " outside the vocabulary of ", embed.rows);
        float* x0 = X + t * hc * D;
        dequant_row(embed.type, embed.row(tokens[t]), D, x0);
        for (int k = 1; k < hc; ++k) std::memcpy(x0 + k * D, x0, size_t(D) * 4);
    }
}

namespace {

// fn · (X flattened over its hc streams, then unweighted-RMS normalised as one vector):
// the mixing logits of a hyper-connection site or of the final head, [T, fn.rows].
std::vector<float> stream_mix(const ModelConfig& c, const Mat& fn, const float* X, int64_t T) {
    const int64_t nD = int64_t(c.hc_mult) * c.hidden;
    std::vector<float> flat(static_cast<size_t>(T * nD)), mix(static_cast<size_t>(T * fn.rows));
    for (int64_t t = 0; t < T; ++t) {
        const float* x = X + t * nD;
        float s = rms_scale(x, nD, float(c.norm_eps));
        for (int64_t i = 0; i < nD; ++i) flat[size_t(t * nD + i)] = x[i] * s;
    }
    matmul(flat.data(), T, fn, mix.data());
    return mix;
}

}  // namespace

void hc_pre(const ModelConfig& c, const Mat& fn, const float* base, const float* scale, const float* X, int64_t T,
            float* y, float* post, float* comb) {
    DSV4_TRACE("hc_pre");
    const int n = c.hc_mult;
    const int64_t D = c.hidden, nD = n * D;
    const float eps = float(c.hc_eps);
    std::vector<float> mix = stream_mix(c, fn, X, T);
    for (int64_t t = 0; t < T; ++t) {
        const float* m = mix.data() + t * c.mix_dim();
        std::vector<float> pre(static_cast<size_t>(n));
        for (int j = 0; j < n; ++j) pre[size_t(j)] = sigmoid(m[j] * scale[0] + base[j]) + eps;
        for (int k = 0; k < n; ++k) post[t * n + k] = 2.0f * sigmoid(m[n + k] * scale[1] + base[n + k]);
        float* C = comb + t * n * n;
        for (int j = 0; j < n; ++j) {  // row softmax
            float* row = C + j * n;
            float mx = -INFINITY;
            for (int k = 0; k < n; ++k) {
                row[k] = m[2 * n + j * n + k] * scale[2] + base[2 * n + j * n + k];
                mx = std::max(mx, row[k]);
            }
            float sum = 0;
            for (int k = 0; k < n; ++k) sum += (row[k] = std::exp(row[k] - mx));
            for (int k = 0; k < n; ++k) row[k] = row[k] / sum + eps;
        }
        auto normalise_columns = [&] {
            for (int k = 0; k < n; ++k) {
                float sum = 0;
                for (int j = 0; j < n; ++j) sum += C[j * n + k];
                for (int j = 0; j < n; ++j) C[j * n + k] /= (sum + eps);
            }
        };
        normalise_columns();
        for (int it = 1; it < c.hc_iters; ++it) {
            for (int j = 0; j < n; ++j) {
                float sum = 0;
                for (int k = 0; k < n; ++k) sum += C[j * n + k];
                for (int k = 0; k < n; ++k) C[j * n + k] /= (sum + eps);
            }
            normalise_columns();
        }
        float* out = y + t * D;
        const float* x = X + t * nD;
        for (int64_t i = 0; i < D; ++i) {
            float acc = 0;
            for (int j = 0; j < n; ++j) acc += pre[size_t(j)] * x[j * D + i];
            out[i] = acc;
        }
    }
}

void hc_post(const ModelConfig& c, float* X, const float* f, const float* post, const float* comb, int64_t T) {
    DSV4_TRACE("hc_post");
    const int n = c.hc_mult;
    const int64_t D = c.hidden;
    parallel_for(static_cast<size_t>(T), [&](size_t b, size_t e) {
        std::vector<float> old(static_cast<size_t>(n * D));
        for (size_t t = b; t < e; ++t) {
            float* x = X + int64_t(t) * n * D;
            std::memcpy(old.data(), x, old.size() * 4);
            const float* C = comb + t * size_t(n * n);
            for (int k = 0; k < n; ++k)
                for (int64_t i = 0; i < D; ++i) {
                    float acc = 0;
                    for (int j = 0; j < n; ++j) acc += C[j * n + k] * old[size_t(j * D + i)];
                    x[k * D + i] = post[t * size_t(n) + size_t(k)] * f[int64_t(t) * D + i] + acc;
                }
        }
    });
}

void hc_head(const ModelConfig& c, const Mat& fn, const float* base, const float* scale, const float* X, int64_t T,
             float* y) {
    DSV4_TRACE("hc_head");
    const int n = c.hc_mult;
    const int64_t D = c.hidden, nD = n * D;
    std::vector<float> mix = stream_mix(c, fn, X, T);
    for (int64_t t = 0; t < T; ++t) {
        float pre[16];
        for (int j = 0; j < n; ++j)
            pre[j] = sigmoid(mix[size_t(t * n + j)] * scale[0] + base[size_t(j)]) + float(c.hc_eps);
        for (int64_t i = 0; i < D; ++i) {
            float acc = 0;
            for (int j = 0; j < n; ++j) acc += pre[j] * X[t * nD + j * D + i];
            y[t * D + i] = acc;
        }
    }
}

void route(const ModelConfig& c, const LayerWeights& w, MlpType type, const float* logits, int32_t token, int32_t* ids,
           float* weights) {
    const int E = c.n_experts, k = c.top_k;
    std::vector<float> score(static_cast<size_t>(E));
    for (int e = 0; e < E; ++e) {
        float x = logits[e];
        float sp = x > 20.0f ? x : std::log1p(std::exp(x));  // torch softplus, threshold 20
        score[size_t(e)] = std::sqrt(sp);
    }
    if (type == MlpType::Hash) {
        for (int i = 0; i < k; ++i) ids[i] = w.tid2eid[size_t(token) * size_t(k) + size_t(i)];
    } else {
        // Top-k of score + bias (the bias steers selection only); ties go to the lower id.
        std::vector<int32_t> order(static_cast<size_t>(E));
        std::iota(order.begin(), order.end(), 0);
        auto key = [&](int32_t e) { return score[size_t(e)] + w.exp_probs_b[size_t(e)]; };
        std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t a, int32_t b) {
            float ka = key(a), kb = key(b);
            return ka > kb || (ka == kb && a < b);
        });
        for (int i = 0; i < k; ++i) ids[i] = order[size_t(i)];
    }
    // transformers always renormalises the chosen scores, whatever norm_topk_prob says.
    float sum = 0;
    for (int i = 0; i < k; ++i) sum += score[size_t(ids[i])];
    for (int i = 0; i < k; ++i) weights[i] = score[size_t(ids[i])] / (sum + 1e-20f) * float(c.routed_scale);
}

namespace {

// silu(min(gate, L)) * clamp(up, -L, L), in place into gate.
void clamped_swiglu(float* gate, const float* up, int64_t n, float limit) {
    for (int64_t i = 0; i < n; ++i) {
        float g = gate[i], u = up[i];
        if (limit > 0) {
            g = std::min(g, limit);
            u = std::clamp(u, -limit, limit);
        }
        gate[i] = g / (1.0f + std::exp(-g)) * u;
    }
}

}  // namespace

void moe(const ModelConfig& c, const LayerWeights& w, MlpType type, const float* f, const int32_t* tokens, int64_t T,
         float* out, const ShardPlan* shard) {
    DSV4_TRACE("moe");
    const int64_t D = c.hidden, I = c.moe_inter;
    const int k = c.top_k;
    const float limit = float(c.swiglu_limit);
    std::vector<float> logits(static_cast<size_t>(T * c.n_experts));
    matmul(f, T, w.gate_inp, logits.data());
    std::vector<int32_t> ids(static_cast<size_t>(T * k));
    std::vector<float> wts(static_cast<size_t>(T * k));
    for (int64_t t = 0; t < T; ++t)
        route(c, w, type, logits.data() + t * c.n_experts, tokens[t], ids.data() + t * k, wts.data() + t * k);

    // Expert-major: gather each expert's tokens, run it once over them, add the weighted
    // result to each token in ascending expert order (the reference's accumulation order).
    std::fill(out, out + T * D, 0.0f);
    std::vector<std::vector<std::pair<int64_t, float>>> by_expert(static_cast<size_t>(c.n_experts));
    for (int64_t t = 0; t < T; ++t)
        for (int i = 0; i < k; ++i) by_expert[size_t(ids[size_t(t * k + i)])].push_back({t, wts[size_t(t * k + i)]});
    std::vector<float> xs, g, u, y;
    const Range experts = shard ? shard->experts : Range{0, c.n_experts};
    for (int e = int(experts.begin); e < int(experts.end); ++e) {
        const auto& list = by_expert[size_t(e)];
        if (list.empty()) continue;
        DSV4_TRACE_ARG("moe.expert", e);
        int64_t n = int64_t(list.size());
        xs.resize(static_cast<size_t>(n * D));
        g.resize(static_cast<size_t>(n * I));
        u.resize(static_cast<size_t>(n * I));
        y.resize(static_cast<size_t>(n * D));
        for (int64_t r = 0; r < n; ++r) std::memcpy(&xs[size_t(r * D)], f + list[size_t(r)].first * D, size_t(D) * 4);
        matmul(xs.data(), n, w.gate_exps.at(e), g.data());
        matmul(xs.data(), n, w.up_exps.at(e), u.data());
        clamped_swiglu(g.data(), u.data(), n * I, limit);
        matmul(g.data(), n, w.down_exps.at(e), y.data());
        for (int64_t r = 0; r < n; ++r) {
            float* o = out + list[size_t(r)].first * D;
            float wt = list[size_t(r)].second;
            for (int64_t i = 0; i < D; ++i) o[i] += y[size_t(r * D + i)] * wt;
        }
    }
    // The shared expert over this rank's intermediate columns (all of them unsharded): gate and
    // up rows [s0, s1), down columns [s0, s1), a partial sum of the whole expert.
    DSV4_TRACE("moe.shared");
    const Range cols = shard ? shard->shared_cols : Range{0, I};
    if (cols.empty()) return;
    const int64_t S = cols.size();
    std::vector<float> sg(static_cast<size_t>(T * S)), su(static_cast<size_t>(T * S)), sy(static_cast<size_t>(T * D));
    matmul(f, D, T, w.gate_sh, cols.begin, cols.end, sg.data(), S);
    matmul(f, D, T, w.up_sh, cols.begin, cols.end, su.data(), S);
    clamped_swiglu(sg.data(), su.data(), T * S, limit);
    const Mat down = shard ? column_slice(w.down_sh, cols.begin, cols.end) : w.down_sh;
    matmul(sg.data(), T, down, sy.data());
    for (int64_t i = 0; i < T * D; ++i) out[i] += sy[size_t(i)];
}

}  // namespace dsv4::cpu
