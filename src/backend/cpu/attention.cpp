#include "backend/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "backend/cpu/ops.h"
#include "core/thread_pool.h"
#include "core/trace.h"

namespace dsv4::cpu {

namespace {

// Closes the window held in s.buf_*: per-channel softmax over its slots, norm, rope.
void close_window(CompressorState& s, const CompressorWeights& w, const Rope& rope, float norm_eps) {
    const int W = s.width, cw = s.coff * W, m = s.ratio;
    std::vector<float> logit(static_cast<size_t>(2 * m)), value(static_cast<size_t>(2 * m)), row(static_cast<size_t>(W));
    for (int ch = 0; ch < W; ++ch) {
        int n = 0;
        if (s.coff == 2) {
            if (s.has_prev)  // A halves of the previous window ("Ca")
                for (int j = 0; j < m; ++j, ++n) {
                    logit[size_t(n)] = s.prev_gate[size_t(j * W + ch)];
                    value[size_t(n)] = s.prev_kv[size_t(j * W + ch)];
                }
            for (int j = 0; j < m; ++j, ++n) {  // B halves of this window ("Cb")
                logit[size_t(n)] = s.buf_gate[size_t(j * cw + W + ch)] + w.ape[size_t(j * cw + W + ch)];
                value[size_t(n)] = s.buf_kv[size_t(j * cw + W + ch)];
            }
        } else {
            for (int j = 0; j < m; ++j, ++n) {
                logit[size_t(n)] = s.buf_gate[size_t(j * cw + ch)] + w.ape[size_t(j * cw + ch)];
                value[size_t(n)] = s.buf_kv[size_t(j * cw + ch)];
            }
        }
        float mx = -INFINITY;
        for (int j = 0; j < n; ++j) mx = std::max(mx, logit[size_t(j)]);
        float sum = 0;
        for (int j = 0; j < n; ++j) sum += (logit[size_t(j)] = std::exp(logit[size_t(j)] - mx));
        float acc = 0;
        for (int j = 0; j < n; ++j) acc += value[size_t(j)] * (logit[size_t(j)] / sum);
        row[size_t(ch)] = acc;
    }
    rmsnorm(row.data(), 1, W, w.norm.data(), norm_eps);
    rope.apply(row.data(), W, s.n_rows * m);
    s.rows.insert(s.rows.end(), row.begin(), row.end());
    ++s.n_rows;
    if (s.coff == 2) {  // this window's A halves feed the next entry
        for (int j = 0; j < m; ++j)
            for (int ch = 0; ch < W; ++ch) {
                s.prev_kv[size_t(j * W + ch)] = s.buf_kv[size_t(j * cw + ch)];
                s.prev_gate[size_t(j * W + ch)] = s.buf_gate[size_t(j * cw + ch)] + w.ape[size_t(j * cw + ch)];
            }
        s.has_prev = true;
    }
    s.n_buf = 0;
}

}  // namespace

void compressor_update(CompressorState& s, const CompressorWeights& w, const Rope& rope, float norm_eps,
                       const float* k, const float* g, int64_t T) {
    const int cw = s.coff * s.width, m = s.ratio;
    s.buf_kv.resize(static_cast<size_t>(m * cw));
    s.buf_gate.resize(static_cast<size_t>(m * cw));
    if (s.coff == 2) {
        s.prev_kv.resize(static_cast<size_t>(m * s.width));
        s.prev_gate.resize(static_cast<size_t>(m * s.width));
    }
    for (int64_t t = 0; t < T; ++t) {
        std::memcpy(&s.buf_kv[size_t(s.n_buf * cw)], k + t * cw, size_t(cw) * 4);
        std::memcpy(&s.buf_gate[size_t(s.n_buf * cw)], g + t * cw, size_t(cw) * 4);
        if (++s.n_buf == m) close_window(s, w, rope, norm_eps);
    }
}

namespace {
TopkGapObserver& topk_gap_observer() {
    static TopkGapObserver f;
    return f;
}

// The relative gap between the lowest picked score and the highest dropped one.
float topk_gap(const float* scores, int64_t n_visible, const std::vector<int32_t>& picked) {
    std::vector<bool> in(static_cast<size_t>(n_visible), false);
    float kth = INFINITY, next = -INFINITY;
    for (int32_t r : picked) {
        in[size_t(r)] = true;
        kth = std::min(kth, scores[r]);
    }
    for (int64_t r = 0; r < n_visible; ++r)
        if (!in[size_t(r)]) next = std::max(next, scores[r]);
    return (kth - next) / std::max(std::fabs(kth), 1e-30f);
}
}  // namespace

void set_topk_gap_observer(TopkGapObserver observer) { topk_gap_observer() = std::move(observer); }

void indexer_select(const float* scores, int64_t n_visible, int top_k, std::vector<int32_t>& out) {
    out.resize(static_cast<size_t>(n_visible));
    std::iota(out.begin(), out.end(), 0);
    if (n_visible <= top_k) return;
    std::partial_sort(out.begin(), out.begin() + top_k, out.end(), [&](int32_t a, int32_t b) {
        return scores[a] > scores[b] || (scores[a] == scores[b] && a < b);
    });
    out.resize(static_cast<size_t>(top_k));
    std::sort(out.begin(), out.end());
}

void attend_one(const float* q, const KeySet& keys, int width, float scale, float sink, float* out) {
    const size_t n = keys.rows.size();
    std::vector<float> z(n);
    float mx = sink;
    for (size_t j = 0; j < n; ++j) {
        z[j] = dot(q, keys.rows[j], width) * scale;
        mx = std::max(mx, z[j]);
    }
    float den = std::exp(sink - mx);
    for (size_t j = 0; j < n; ++j) den += (z[j] = std::exp(z[j] - mx));
    std::fill(out, out + width, 0.0f);
    for (size_t j = 0; j < n; ++j) {
        float p = z[j] / den;
        const float* v = keys.rows[j];
        for (int i = 0; i < width; ++i) out[i] += p * v[i];
    }
}

void attend_heads(const float* q, int H, const KeySet& keys, int width, float scale, const float* sinks, float* out) {
    // Running max m, denominator l and unnormalised sum per head; the sink starts each head
    // with m = sink, l = exp(0) = 1 and no value.
    std::vector<float> m(sinks, sinks + H), l(static_cast<size_t>(H), 1.0f);
    std::fill(out, out + int64_t(H) * width, 0.0f);
    for (const float* k : keys.rows) {
        for (int h = 0; h < H; ++h) {
            float z = dot(q + int64_t(h) * width, k, width) * scale;
            float* acc = out + int64_t(h) * width;
            if (z > m[size_t(h)]) {
                float f = std::exp(m[size_t(h)] - z);
                l[size_t(h)] = l[size_t(h)] * f + 1.0f;
                for (int i = 0; i < width; ++i) acc[i] = acc[i] * f + k[i];
                m[size_t(h)] = z;
            } else {
                float p = std::exp(z - m[size_t(h)]);
                l[size_t(h)] += p;
                for (int i = 0; i < width; ++i) acc[i] += p * k[i];
            }
        }
    }
    for (int h = 0; h < H; ++h) {
        float inv = 1.0f / l[size_t(h)];
        float* acc = out + int64_t(h) * width;
        for (int i = 0; i < width; ++i) acc[i] *= inv;
    }
}

void window_keys(const LatentRows& r, int64_t p, KeySet& keys) {
    // Rows before cache_from are not held: only a state that started at a later position (the
    // MTP drafter's, which is fed just the last window of a prompt) has a window shorter than
    // min(position, window - 1).
    for (int64_t j = std::max({int64_t(0), p - r.window + 1, r.cache_from}); j <= p; ++j)
        keys.rows.push_back(j < r.pos0 ? r.cache + (j - r.cache_from) * r.width : r.chunk + (j - r.pos0) * r.width);
}

void attention_block(const ModelConfig& c, int layer, const LayerWeights& w, const Rope& rope, const float* a,
                     int64_t T, int64_t pos0, int64_t band, LayerState& st, float* out, const ShardPlan* shard) {
    DSV4_TRACE("attention");
    const int d = c.head_dim, Wn = c.window;
    const Range heads = shard ? shard->heads : Range{0, c.n_heads};
    const Range groups = shard ? shard->groups : Range{0, c.o_groups};
    if (heads.empty()) {  // a rank without heads adds nothing to the sum (and keeps no state)
        std::fill(out, out + T * c.hidden, 0.0f);
        return;
    }
    const int H = int(heads.size());  // this rank's heads h0 .. h0 + H - 1
    const int64_t h0 = heads.begin, Hd = int64_t(H) * d;
    const float eps = float(c.norm_eps);
    const AttnType type = c.attn[size_t(layer)];

    // Q path: low rank, weighted norm, per-head unweighted norm, rope.
    std::vector<float> qr(static_cast<size_t>(T * c.q_lora)), q(static_cast<size_t>(T * Hd)), kv(static_cast<size_t>(T * d));
    matmul(a, T, w.q_a, qr.data());
    rmsnorm(qr.data(), T, c.q_lora, w.q_a_norm.data(), eps);
    matmul(qr.data(), c.q_lora, T, w.q_b, h0 * d, h0 * d + Hd, q.data(), Hd);
    rmsnorm(q.data(), T * H, d, nullptr, eps);
    // One latent K=V row per token.
    matmul(a, T, w.kv, kv.data());
    rmsnorm(kv.data(), T, d, w.kv_norm.data(), eps);
    for (int64_t t = 0; t < T; ++t) {
        for (int h = 0; h < H; ++h) rope.apply(&q[size_t(t * Hd + h * d)], d, pos0 + t);
        rope.apply(&kv[size_t(t * d)], d, pos0 + t);
    }

    // Compressed rows (state first, so a window closed by token t is visible to t itself).
    if (type != AttnType::Sliding) {
        DSV4_TRACE("attn.compressor");
        const int64_t cw = int64_t(st.comp.coff) * d;
        std::vector<float> ck(static_cast<size_t>(T * cw)), cg(static_cast<size_t>(T * cw));
        matmul(a, T, w.comp.kv, ck.data());
        matmul(a, T, w.comp.gate, cg.data());
        compressor_update(st.comp, w.comp, rope, eps, ck.data(), cg.data(), T);
    }
    const int IH = c.index_heads, Id = c.index_head_dim;
    std::vector<float> qi, wi;
    if (type == AttnType::CSA) {
        DSV4_TRACE("attn.indexer_proj");
        const int64_t cw = 2 * int64_t(Id);
        std::vector<float> ik(static_cast<size_t>(T * cw)), ig(static_cast<size_t>(T * cw));
        matmul(a, T, w.idx_comp.kv, ik.data());
        matmul(a, T, w.idx_comp.gate, ig.data());
        compressor_update(st.idx, w.idx_comp, rope, eps, ik.data(), ig.data(), T);
        qi.resize(static_cast<size_t>(T * IH * Id));
        matmul(qr.data(), T, w.idx_q_b, qi.data());
        for (int64_t t = 0; t < T; ++t)
            for (int h = 0; h < IH; ++h) rope.apply(&qi[size_t((t * IH + h) * Id)], Id, pos0 + t);
        wi.resize(static_cast<size_t>(T * IH));
        matmul(a, T, w.idx_proj, wi.data());
        const float ws = float(std::pow(double(IH), -0.5));
        for (float& x : wi) x *= ws;
    }

    // Sparse attention, one query at a time; visibility from positions only.
    const float scale = float(std::pow(double(d), -0.5));
    const float idx_scale = type == AttnType::CSA ? float(std::pow(double(Id), -0.5)) : 0.0f;
    const int ratio = c.ratio[size_t(layer)];
    std::vector<float> attn(static_cast<size_t>(T * Hd));
    const LatentRows latent{st.window.data(), pos0 - st.n_window, kv.data(), pos0, d, Wn};
    if (band <= 0) band = T;
    for (int64_t band0 = 0; band0 < T; band0 += band)
    parallel_for(static_cast<size_t>(std::min(band, T - band0)), [&](size_t b, size_t e) {
        DSV4_TRACE("attn.sparse");
        KeySet keys;
        std::vector<float> scores;
        std::vector<int32_t> picked;
        for (size_t tt = b; tt < e; ++tt) {
            const int64_t t = band0 + int64_t(tt), p = pos0 + t;
            keys.rows.clear();
            window_keys(latent, p, keys);
            if (type != AttnType::Sliding) {
                int64_t n_vis = std::min<int64_t>((p + 1) / ratio, st.comp.n_rows);
                if (type == AttnType::HCA) {
                    for (int64_t r = 0; r < n_vis; ++r) keys.rows.push_back(&st.comp.rows[size_t(r * d)]);
                } else {
                    scores.assign(static_cast<size_t>(n_vis), 0.0f);
                    const float* qt = &qi[size_t(t * IH * Id)];
                    for (int64_t r = 0; r < n_vis; ++r) {
                        const float* kr = &st.idx.rows[size_t(r * Id)];
                        float s = 0;
                        for (int h = 0; h < IH; ++h)
                            s += std::max(0.0f, dot(qt + h * Id, kr, Id)) * idx_scale * wi[size_t(t * IH + h)];
                        scores[size_t(r)] = s;
                    }
                    indexer_select(scores.data(), n_vis, c.index_topk, picked);
                    if (n_vis > c.index_topk && topk_gap_observer())
                        topk_gap_observer()(p, topk_gap(scores.data(), n_vis, picked));
                    for (int32_t r : picked) keys.rows.push_back(&st.comp.rows[size_t(r) * size_t(d)]);
                }
            }
            float* o = &attn[size_t(t * Hd)];
            attend_heads(&q[size_t(t * Hd)], H, keys, d, scale, w.sinks.data() + h0, o);
            for (int h = 0; h < H; ++h) rope.apply(o + h * d, d, p, /*inverse=*/true);  // V carried rope by its position
        }
    });

    // Keep the last (window - 1) latent rows for the next call.
    {
        DSV4_TRACE("attn.window_keep");
        std::vector<float> all(st.window.begin(), st.window.begin() + size_t(st.n_window) * size_t(d));
        all.insert(all.end(), kv.begin(), kv.end());
        int64_t total = st.n_window + T;
        int64_t keep = std::min<int64_t>(total, Wn - 1);
        st.window.assign(all.end() - keep * d, all.end());
        st.n_window = int(keep);
    }

    // Grouped low-rank output: each group of heads projects to o_lora, then one mix to hidden
    // (over this rank's groups: o_b's columns of them, a partial sum of the whole output).
    const int64_t L = c.o_lora, per_group = int64_t(c.n_heads / c.o_groups) * d, GL = groups.size() * L;
    std::vector<float> u(static_cast<size_t>(T * GL));
    for (int64_t g = groups.begin; g < groups.end; ++g)
        matmul(attn.data() + (g - groups.begin) * per_group, Hd, T, w.o_a, g * L, (g + 1) * L,
               u.data() + (g - groups.begin) * L, GL);
    const Mat o_b = shard ? column_slice(w.o_b, groups.begin * L, groups.end * L) : w.o_b;
    matmul(u.data(), T, o_b, out);
}

}  // namespace dsv4::cpu
