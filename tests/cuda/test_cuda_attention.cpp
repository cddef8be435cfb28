// The attention block's CUDA kernels (src/backend/cuda/attention_kernels.h) against the CPU
// reference they reproduce:
//   rope              vs cpu::Rope::apply (plain and YaRN tables, inverse, per_pos > 1, positions
//                     up to 1,000,000, row padding);
//   compress_windows  vs cpu::compressor_update fed token by token (the rows it appends), HCA-like
//                     (coff 1, ratio 128 / 32) and CSA-like (coff 2, ratio 4) windows, with and
//                     without a previous window, widths 64 / 128 / 512, rope dim 16 / 64;
//   indexer_topk      vs the scores of cpu::attention_block + cpu::indexer_select (n_visible below
//                     and above top_k, top_k 64 / 512, up to 32,768 rows, heads 4 / 64, dim 32 /
//                     128 and an odd dim, exact ties);
//   sparse_attention  vs cpu::attend_heads over the key sets cpu::window_keys builds, plus HCA rows
//                     or CSA picked lists (windows 64 / 128, widths 32 .. 512, H 1 .. 64, cache_from
//                     > 0, queries before the window is full, and the long shapes of DESIGN.md:
//                     10,240 queries from position 0 and a 129-query tail at position 122,880 over
//                     30,752 CSA / 961 HCA rows, at H = 64, width 512, checked on a subset);
//                     decode-sized steps (T 1 .. 8, and 65) take the split path, checked the
//                     same way; every call is made twice and must repeat bit for bit.
//
// Tolerances (never loosened to pass):
//   rope: |cuda - cpu| <= 1e-6 on inputs in [-1, 1) (the same float angle and the same rotation
//     arithmetic; only the device's double cos/sin may round differently in the last float bit);
//     channels that do not rotate and the padding between rows stay bit for bit as they were.
//   compress_windows: per row max |cuda - cpu| <= 1e-5 * max |cpu row| (expf differs by <= 2 ulp;
//     everything else is the CPU's arithmetic); rows before first_row are not written.
//   indexer_topk: exact. The scores are bitwise the CPU's (checked through the workspace), the
//     picked lists and counts equal the CPU's.
//   sparse_attention: per (query, head) max |cuda - cpu| <= 1e-5 * max |cpu output of that head|
//     (dot products in another order, expf; a wrong key or a race gives errors of the order of the
//     outputs themselves).
// Every output is poisoned with NaN (0xff bytes) before each call, so an unwritten element fails.
// Device tests skip (reported as skipped, not passed) where no CUDA device is visible; the
// argument checks at the end run everywhere.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "backend/cpu/attention.h"
#include "backend/cpu/ops.h"
#include "backend/cpu/rope.h"
#include "backend/cuda/attention_kernels.h"
#include "backend/cuda/device_memory.h"
#include "core/error.h"

namespace {

namespace cuda = dsv4::cuda;
namespace cpu = dsv4::cpu;

#define REQUIRE_DEVICE() \
    if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device (cudaGetDeviceCount found none)"

// Deterministic and fast (splitmix64), so that the long shapes fill a gigabyte in about a second.
struct Rand {
    uint64_t s;
    explicit Rand(uint64_t seed) : s(seed * 0x2545F4914F6CDD1Dull + 1) {}
    uint64_t next() {
        uint64_t z = (s += 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        return z ^ (z >> 31);
    }
    float uniform() { return float(next() >> 40) * (1.0f / 16777216.0f); }  // [0, 1)
    float sym() { return 2.0f * uniform() - 1.0f; }                          // [-1, 1)
    // Unit variance, roughly normal (the sum of two uniforms: a triangle on [-sqrt 6, sqrt 6]).
    float normal() {
        const uint64_t z = next();
        const float u1 = float(z >> 40) * (1.0f / 16777216.0f), u2 = float((z >> 8) & 0xffffff) * (1.0f / 16777216.0f);
        return (u1 + u2 - 1.0f) * 2.4494897f;
    }
};

std::vector<float> randn(size_t n, uint64_t seed, float scale = 1.0f) {
    Rand r(seed);
    std::vector<float> v(n);
    for (float& x : v) x = scale * r.normal();
    return v;
}

template <class T>
cuda::DeviceBuffer to_device(const std::vector<T>& v) {
    cuda::DeviceBuffer b(v.size() * sizeof(T));
    b.upload(v.data(), v.size() * sizeof(T));
    return b;
}

template <class T>
std::vector<T> from_device(const cuda::DeviceBuffer& b, size_t n, size_t first = 0) {
    std::vector<T> v(n);
    b.download(v.data(), n * sizeof(T), first * sizeof(T));
    return v;
}

uint32_t bits(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return u;
}

dsv4::RopeParams plain_rope(double theta) {
    dsv4::RopeParams p;
    p.theta = theta;
    return p;
}

dsv4::RopeParams yarn_rope() {  // V4's compress table (REFERENCE.md §2.1)
    dsv4::RopeParams p;
    p.theta = 160000.0;
    p.yarn = true;
    p.factor = 16.0;
    p.original_context = 65536.0;
    p.beta_fast = 32.0;
    p.beta_slow = 1.0;
    return p;
}

// ---------------------------------------------------------------------------------------------
// RoPE

struct RopeCase {
    std::string name;
    dsv4::RopeParams params;
    int dim, width;
    int64_t row_stride;
    int per_pos;
    int64_t pos0, n_pos;
    bool inverse;
};

void check_rope(const RopeCase& c, uint64_t seed) {
    SCOPED_TRACE(c.name + " dim " + std::to_string(c.dim) + " width " + std::to_string(c.width) + " stride " +
                 std::to_string(c.row_stride) + " per_pos " + std::to_string(c.per_pos) + " pos0 " +
                 std::to_string(c.pos0) + (c.inverse ? " inverse" : ""));
    const cpu::Rope rope(c.params, c.dim);
    const int64_t rows = c.n_pos * c.per_pos;
    Rand r(seed);
    std::vector<float> x(size_t(rows * c.row_stride));
    for (float& v : x) v = r.sym();
    std::vector<float> ref = x;
    for (int64_t i = 0; i < rows; ++i) rope.apply(&ref[size_t(i * c.row_stride)], c.width, c.pos0 + i / c.per_pos, c.inverse);

    cuda::DeviceBuffer dx = to_device(x), dfreq = to_device(rope.inv_freq());
    cuda::rope(dx.as<float>(), rows, c.width, c.row_stride, c.per_pos, c.pos0, dfreq.as<const float>(), c.dim, c.inverse);
    cuda::synchronize();
    std::vector<float> got = from_device<float>(dx, x.size());

    int64_t bad = 0, exact = 0, rotated = 0;
    double worst = 0;
    for (int64_t i = 0; i < rows; ++i)
        for (int64_t ch = 0; ch < c.row_stride; ++ch) {
            const size_t k = size_t(i * c.row_stride + ch);
            if (ch < c.width - c.dim || ch >= c.width) {  // untouched: bit for bit
                if (bits(got[k]) != bits(x[k]) && bad++ < 5)
                    ADD_FAILURE() << "row " << i << " channel " << ch << " changed: " << x[k] << " -> " << got[k];
                continue;
            }
            ++rotated;
            const double e = std::fabs(double(got[k]) - double(ref[k]));
            worst = std::max(worst, e);
            exact += bits(got[k]) == bits(ref[k]);
            if (!(e <= 1e-6) && bad++ < 5)
                ADD_FAILURE() << "row " << i << " (pos " << c.pos0 + i / c.per_pos << ") channel " << ch << ": cuda "
                              << got[k] << ", cpu " << ref[k];
        }
    EXPECT_EQ(bad, 0);
    ::testing::Test::RecordProperty("rope_max_abs_err", std::to_string(worst));
    if (exact != rotated)
        std::printf("[rope %s dim %d pos0 %lld] %lld of %lld rotated values not bitwise equal, max |err| %.3g\n",
                    c.name.c_str(), c.dim, (long long)c.pos0, (long long)(rotated - exact), (long long)rotated, worst);
}

TEST(CudaAttention, RopeMatchesCpu) {
    REQUIRE_DEVICE();
    uint64_t seed = 100;
    struct Table {
        std::string name;
        dsv4::RopeParams p;
        int dim;
    };
    const Table tables[] = {{"plain", plain_rope(10000.0), 64}, {"yarn", yarn_rope(), 64}, {"plain", plain_rope(10000.0), 16},
                            {"yarn", yarn_rope(), 16}};
    for (const Table& tb : tables)
        for (auto [width, stride] : {std::pair<int, int64_t>{tb.dim, tb.dim}, {128, 131}, {512, 512}})
            for (int per_pos : {1, 3, 64})
                for (int64_t pos0 : {int64_t(0), int64_t(122880), int64_t(1000000) - 199})
                    for (bool inverse : {false, true}) {
                        const int64_t n_pos = per_pos == 64 ? 40 : 200;  // the last case reaches position 1,000,000
                        check_rope({tb.name, tb.p, tb.dim, width, stride, per_pos, pos0, n_pos, inverse}, seed++);
                    }
}

// ---------------------------------------------------------------------------------------------
// Compressor windows

struct CompCase {
    int width, coff, ratio, dim;
    int64_t first_row, n_windows;
};

void check_compress(const CompCase& c, uint64_t seed) {
    const bool has_prev = c.first_row > 0;  // coff 1 must ignore it (and its null prev pointers)
    SCOPED_TRACE("width " + std::to_string(c.width) + " coff " + std::to_string(c.coff) + " ratio " +
                 std::to_string(c.ratio) + " dim " + std::to_string(c.dim) + " first_row " + std::to_string(c.first_row) +
                 " n_windows " + std::to_string(c.n_windows) + (has_prev ? " has_prev" : ""));
    const int W = c.width, cw = c.coff * W, m = c.ratio;
    const int64_t n_tok = (c.first_row + c.n_windows) * m;
    const std::vector<float> kv = randn(size_t(n_tok * cw), seed), gate = randn(size_t(n_tok * cw), seed + 1, 2.0f);
    dsv4::CompressorWeights w;
    w.ape = randn(size_t(m * cw), seed + 2, 0.5f);
    w.norm = randn(size_t(W), seed + 3, 0.1f);
    for (float& v : w.norm) v += 1.0f;
    const float eps = 1e-6f;
    const cpu::Rope rope(yarn_rope(), c.dim);

    dsv4::CompressorState s;
    s.width = W;
    s.coff = c.coff;
    s.ratio = m;
    for (int64_t t = 0; t < n_tok; ++t)
        cpu::compressor_update(s, w, rope, eps, &kv[size_t(t * cw)], &gate[size_t(t * cw)], 1);
    ASSERT_EQ(s.n_rows, c.first_row + c.n_windows);

    const size_t off = size_t(c.first_row * m * cw);
    const std::vector<float> kv_new(kv.begin() + off, kv.end()), gate_new(gate.begin() + off, gate.end());
    cuda::DeviceBuffer dkv = to_device(kv_new), dgate = to_device(gate_new), dape = to_device(w.ape),
                       dnorm = to_device(w.norm), dfreq = to_device(rope.inv_freq());
    cuda::DeviceBuffer dpkv, dpgate;
    if (has_prev && c.coff == 2) {
        const size_t p0 = size_t((c.first_row - 1) * m * cw), n = size_t(m * cw);
        dpkv = to_device(std::vector<float>(kv.begin() + p0, kv.begin() + p0 + n));
        dpgate = to_device(std::vector<float>(gate.begin() + p0, gate.begin() + p0 + n));
    }
    const size_t n_out = size_t(s.n_rows * W);
    cuda::DeviceBuffer drows(n_out * 4);
    drows.fill_bytes(0xff);

    cuda::CompressArgs a;
    a.kv = dkv.as<const float>();
    a.gate = dgate.as<const float>();
    a.prev_kv = dpkv.as<const float>();
    a.prev_gate = dpgate.as<const float>();
    a.has_prev = has_prev;
    a.ape = dape.as<const float>();
    a.norm = dnorm.as<const float>();
    a.eps = eps;
    a.width = W;
    a.coff = c.coff;
    a.ratio = m;
    a.n_windows = c.n_windows;
    a.first_row = c.first_row;
    a.inv_freq = dfreq.as<const float>();
    a.dim = c.dim;
    a.rows = drows.as<float>();
    cuda::compress_windows(a);
    cuda::synchronize();
    const std::vector<float> got = from_device<float>(drows, n_out);

    int64_t bad = 0;
    double worst = 0;
    for (int64_t r = 0; r < s.n_rows; ++r) {
        const float* ref = &s.rows[size_t(r * W)];
        const float* g = &got[size_t(r * W)];
        if (r < c.first_row) {
            for (int ch = 0; ch < W; ++ch)
                if (bits(g[ch]) != 0xffffffffu && bad++ < 5) ADD_FAILURE() << "row " << r << " before first_row was written";
            continue;
        }
        double scale = 0;
        for (int ch = 0; ch < W; ++ch) scale = std::max(scale, std::fabs(double(ref[ch])));
        for (int ch = 0; ch < W; ++ch) {
            const double e = std::fabs(double(g[ch]) - double(ref[ch]));
            worst = std::max(worst, e / scale);
            if (!(e <= 1e-5 * scale) && bad++ < 5)
                ADD_FAILURE() << "row " << r << " channel " << ch << ": cuda " << g[ch] << ", cpu " << ref[ch] << " (row scale "
                              << scale << ")";
        }
    }
    EXPECT_EQ(bad, 0);
    ::testing::Test::RecordProperty("compress_max_rel_err", std::to_string(worst));
}

TEST(CudaAttention, CompressWindowsMatchCompressorUpdate) {
    REQUIRE_DEVICE();
    const CompCase cases[] = {
        {512, 1, 128, 64, 0, 3}, {512, 1, 128, 64, 2, 2},  // HCA
        {64, 1, 32, 16, 0, 5},   {64, 1, 32, 16, 3, 4},    // another non-overlapping ratio
        {512, 2, 4, 64, 0, 6},   {512, 2, 4, 64, 5, 7},    // CSA main compressor, first window / has_prev
        {64, 2, 4, 16, 0, 9},    {64, 2, 4, 16, 1, 9},     // narrow
        {128, 2, 4, 64, 7, 16},                            // the indexer's compressor
    };
    uint64_t seed = 1000;
    for (const CompCase& c : cases) check_compress(c, seed += 10);
}

// ---------------------------------------------------------------------------------------------
// Indexer

struct IdxCase {
    int heads, dim, top_k, ratio;
    int64_t n_rows, pos0, T;
    bool ties = false;  // every third k row zero (score exactly 0) and query 0's weights zero (all 0)
};

void check_indexer(const IdxCase& c, uint64_t seed) {
    SCOPED_TRACE("heads " + std::to_string(c.heads) + " dim " + std::to_string(c.dim) + " top_k " +
                 std::to_string(c.top_k) + " n_rows " + std::to_string(c.n_rows) + " pos0 " + std::to_string(c.pos0) +
                 " T " + std::to_string(c.T) + (c.ties ? " ties" : ""));
    const int IH = c.heads, Id = c.dim;
    std::vector<float> q = randn(size_t(c.T * IH * Id), seed), k = randn(size_t(c.n_rows * Id), seed + 1),
                       w = randn(size_t(c.T * IH), seed + 2, 1.0f / std::sqrt(float(IH)));
    if (c.ties) {
        for (int64_t r = 0; r < c.n_rows; r += 3) std::fill_n(&k[size_t(r * Id)], Id, 0.0f);
        std::fill_n(w.begin(), IH, 0.0f);
    }
    const float scale = float(std::pow(double(Id), -0.5));

    // The CPU: attention_block's score loop, then indexer_select.
    std::vector<std::vector<int32_t>> ref(size_t(c.T));
    std::vector<std::vector<float>> ref_scores(size_t(c.T));
    for (int64_t t = 0; t < c.T; ++t) {
        const int64_t n_vis = std::min<int64_t>((c.pos0 + t + 1) / c.ratio, c.n_rows);
        std::vector<float>& scores = ref_scores[size_t(t)];
        scores.assign(size_t(n_vis), 0.0f);
        const float* qt = &q[size_t(t * IH * Id)];
        for (int64_t r = 0; r < n_vis; ++r) {
            const float* kr = &k[size_t(r * Id)];
            float s = 0;
            for (int h = 0; h < IH; ++h) s += std::max(0.0f, cpu::dot(qt + h * Id, kr, Id)) * scale * w[size_t(t * IH + h)];
            scores[size_t(r)] = s;
        }
        cpu::indexer_select(scores.data(), n_vis, c.top_k, ref[size_t(t)]);
    }

    cuda::DeviceBuffer dq = to_device(q), dk = to_device(k), dw = to_device(w);
    cuda::DeviceBuffer dpicked(size_t(c.T * c.top_k) * 4), dn(size_t(c.T) * 4);
    dpicked.fill_bytes(0xff);
    dn.fill_bytes(0xff);
    const size_t wsb = cuda::indexer_workspace_bytes(c.T, c.n_rows);
    cuda::DeviceBuffer ws(wsb);
    ws.fill_bytes(0xff);
    cuda::IndexerArgs a;
    a.q = dq.as<const float>();
    a.w = dw.as<const float>();
    a.k = dk.as<const float>();
    a.T = c.T;
    a.pos0 = c.pos0;
    a.n_rows = c.n_rows;
    a.heads = IH;
    a.dim = Id;
    a.ratio = c.ratio;
    a.top_k = c.top_k;
    a.scale = scale;
    a.picked = dpicked.as<int32_t>();
    a.n_picked = dn.as<int32_t>();
    cuda::indexer_topk(a, ws.get(), wsb);
    cuda::synchronize();
    const std::vector<int32_t> picked = from_device<int32_t>(dpicked, size_t(c.T * c.top_k));
    const std::vector<int32_t> n_picked = from_device<int32_t>(dn, size_t(c.T));

    int64_t bad = 0, scored = 0;
    for (int64_t t = 0; t < c.T; ++t) {
        const std::vector<int32_t>& want = ref[size_t(t)];
        const std::vector<float>& sc = ref_scores[size_t(t)];
        const int64_t n_vis = int64_t(sc.size());
        if (n_vis > c.top_k) {  // scored: the workspace row must be the CPU's, bit for bit
            ++scored;
            const std::vector<float> got_sc = from_device<float>(ws, size_t(n_vis), size_t(t * c.n_rows));
            for (int64_t r = 0; r < n_vis; ++r)
                if (bits(got_sc[size_t(r)]) != bits(sc[size_t(r)]) && bad++ < 5)
                    ADD_FAILURE() << "query " << t << " row " << r << ": score " << got_sc[size_t(r)] << ", cpu " << sc[size_t(r)];
        }
        if (n_picked[size_t(t)] != int32_t(want.size())) {
            if (bad++ < 5)
                ADD_FAILURE() << "query " << t << ": n_picked " << n_picked[size_t(t)] << ", cpu " << want.size();
            continue;
        }
        for (size_t i = 0; i < want.size(); ++i)
            if (picked[size_t(t * c.top_k) + i] != want[i]) {
                if (bad++ < 5)
                    ADD_FAILURE() << "query " << t << " pick " << i << ": " << picked[size_t(t * c.top_k) + i] << ", cpu " << want[i];
                break;
            }
        for (size_t i = want.size(); i < size_t(c.top_k); ++i)  // past the count: left as they were
            if (picked[size_t(t * c.top_k) + i] != -1 && bad++ < 5)
                ADD_FAILURE() << "query " << t << " pick " << i << " past the count was written";
    }
    EXPECT_EQ(bad, 0);
    std::printf("[indexer heads %d dim %d top_k %d rows %lld] %lld of %lld queries scored and selected\n", IH, Id,
                c.top_k, (long long)c.n_rows, (long long)scored, (long long)c.T);
}

TEST(CudaAttention, IndexerTopkMatchesCpuSelection) {
    REQUIRE_DEVICE();
    const IdxCase cases[] = {
        {4, 32, 64, 4, 40, 0, 200},            // never more than top_k rows (n_rows caps n_visible)
        {4, 32, 64, 4, 3000, 200, 300},        // n_visible 50 .. 125 crosses top_k
        {64, 128, 512, 4, 400, 1000, 50},      // model shape, below top_k
        {64, 128, 512, 4, 4000, 2000, 100},    // model shape, n_visible 500 .. 525 crosses top_k
        {64, 128, 512, 4, 32768, 131068, 6},   // 32,767 and 32,768 rows
        {4, 32, 512, 4, 32768, 131000, 40},    // many rows, few heads
        {4, 32, 64, 4, 1000, 4000, 8, true},   // exact ties: zero rows, and a query whose scores are all 0
        {64, 128, 512, 4, 3000, 12000, 4, true},
        {3, 20, 64, 4, 500, 1000, 10},         // a dim that is no multiple of 8 (the generic scorer)
        {5, 64, 100, 4, 700, 2000, 12},        // top_k no power of two
    };
    uint64_t seed = 2000;
    for (const IdxCase& c : cases) check_indexer(c, seed += 10);
}

// ---------------------------------------------------------------------------------------------
// Sparse attention

enum class Comp { None, HCA, CSA };

struct AttnCase {
    std::string name;
    int H, width, window;
    int64_t pos0, T, cache_from;
    Comp comp = Comp::None;
    int ratio = 0, top_k = 0;
    float q_scale = 0.5f;
    std::vector<int64_t> checked = {};  // queries compared with the CPU; empty: all
    bool split = false;                 // expect the split (decode) path
};

void check_attention(const AttnCase& c, uint64_t seed) {
    SCOPED_TRACE(c.name + ": H " + std::to_string(c.H) + " width " + std::to_string(c.width) + " window " +
                 std::to_string(c.window) + " pos0 " + std::to_string(c.pos0) + " T " + std::to_string(c.T) +
                 " cache_from " + std::to_string(c.cache_from) +
                 (c.comp == Comp::HCA ? " HCA" : c.comp == Comp::CSA ? " CSA" : " sliding"));
    const int W = c.width, H = c.H;
    const int64_t n_cache = c.pos0 - c.cache_from;
    const int64_t n_comp = c.comp == Comp::None ? 0 : (c.pos0 + c.T) / c.ratio;
    const std::vector<float> cache = randn(size_t(n_cache * W), seed), chunk = randn(size_t(c.T * W), seed + 1),
                             comp = randn(size_t(n_comp * W), seed + 2),
                             q = randn(size_t(c.T * H * W), seed + 3, c.q_scale), sinks = randn(size_t(H), seed + 4);
    const float scale = 1.0f / std::sqrt(float(W));

    // CSA: each query's picked rows, as the indexer would give them (random scores).
    std::vector<int32_t> picked, n_picked;
    if (c.comp == Comp::CSA) {
        picked.assign(size_t(c.T * c.top_k), -1);
        n_picked.assign(size_t(c.T), 0);
        Rand r(seed + 5);
        std::vector<float> scores;
        std::vector<int32_t> sel;
        for (int64_t t = 0; t < c.T; ++t) {
            const int64_t n_vis = std::min<int64_t>((c.pos0 + t + 1) / c.ratio, n_comp);
            scores.resize(size_t(n_vis));
            for (float& s : scores) s = r.uniform();
            cpu::indexer_select(scores.data(), n_vis, c.top_k, sel);
            std::copy(sel.begin(), sel.end(), picked.begin() + t * c.top_k);
            n_picked[size_t(t)] = int32_t(sel.size());
        }
    }

    cuda::DeviceBuffer dq = to_device(q), dsinks = to_device(sinks), dcache = to_device(cache), dchunk = to_device(chunk),
                       dcomp = to_device(comp), dpicked = to_device(picked), dn = to_device(n_picked);
    const size_t n_out = size_t(c.T * H * W);
    cuda::DeviceBuffer dout(n_out * 4);
    dout.fill_bytes(0xff);
    cuda::SparseAttnArgs a;
    a.q = dq.as<const float>();
    a.T = c.T;
    a.pos0 = c.pos0;
    a.H = H;
    a.width = W;
    a.scale = scale;
    a.sinks = dsinks.as<const float>();
    a.cache = dcache.as<const float>();
    a.cache_from = c.cache_from;
    a.chunk = dchunk.as<const float>();
    a.window = c.window;
    if (c.comp != Comp::None) {
        a.comp = dcomp.as<const float>();
        a.n_comp = n_comp;
        a.ratio = c.ratio;
        if (c.comp == Comp::CSA) {
            a.picked = dpicked.as<const int32_t>();
            a.n_picked = dn.as<const int32_t>();
            a.top_k = c.top_k;
        }
    }
    a.out = dout.as<float>();
    // The workspace (the split path's partial sums) is poisoned too, and the call is made twice
    // into two poisoned outputs: the second must equal the first bit for bit (fixed reduction
    // orders, nothing read that was not written).
    const size_t wsb = cuda::sparse_attention_workspace_bytes(a);
    cuda::DeviceBuffer ws;
    if (wsb) {
        ws = cuda::DeviceBuffer(wsb);
        ws.fill_bytes(0xff);
        EXPECT_THROW(cuda::sparse_attention(a, ws.get(), wsb - 1), dsv4::Error);  // too small
    }
    if (c.split) {
        EXPECT_GT(wsb, 0u) << "expected the split (decode) path";
    }
    cuda::sparse_attention(a, ws.get(), wsb);
    cuda::DeviceBuffer dout2(n_out * 4);
    dout2.fill_bytes(0xff);
    if (wsb) ws.fill_bytes(0xff);
    a.out = dout2.as<float>();
    cuda::sparse_attention(a, ws.get(), wsb);
    cuda::synchronize();

    std::vector<int64_t> checked = c.checked;
    if (checked.empty()) {
        checked.resize(size_t(c.T));
        std::iota(checked.begin(), checked.end(), int64_t(0));
    }
    const cpu::LatentRows rows{cache.data(), c.cache_from, chunk.data(), c.pos0, W, c.window};
    cpu::KeySet keys;
    std::vector<float> ref(size_t(H * W));
    int64_t bad = 0;
    size_t max_keys = 0;
    double worst = 0;
    for (int64_t t : checked) {
        const int64_t p = c.pos0 + t;
        keys.rows.clear();
        cpu::window_keys(rows, p, keys);
        if (c.comp == Comp::HCA) {
            for (int64_t r = 0; r < std::min<int64_t>((p + 1) / c.ratio, n_comp); ++r) keys.rows.push_back(&comp[size_t(r * W)]);
        } else if (c.comp == Comp::CSA) {
            for (int32_t i = 0; i < n_picked[size_t(t)]; ++i)
                keys.rows.push_back(&comp[size_t(picked[size_t(t * c.top_k + i)]) * size_t(W)]);
        }
        max_keys = std::max(max_keys, keys.rows.size());
        cpu::attend_heads(&q[size_t(t * H * W)], H, keys, W, scale, sinks.data(), ref.data());
        const std::vector<float> got = from_device<float>(dout, size_t(H * W), size_t(t * H * W));
        const std::vector<float> again = from_device<float>(dout2, size_t(H * W), size_t(t * H * W));
        for (size_t i = 0; i < got.size(); ++i)
            if (bits(got[i]) != bits(again[i])) {
                if (bad++ < 5)
                    ADD_FAILURE() << "query " << t << " element " << i << ": a second call gave " << again[i] << ", the first "
                                  << got[i];
                break;
            }
        for (int h = 0; h < H; ++h) {
            double sc = 0;
            for (int i = 0; i < W; ++i) sc = std::max(sc, std::fabs(double(ref[size_t(h * W + i)])));
            for (int i = 0; i < W; ++i) {
                const double e = std::fabs(double(got[size_t(h * W + i)]) - double(ref[size_t(h * W + i)]));
                worst = std::max(worst, e / sc);
                if (!(e <= 1e-5 * sc) && bad++ < 5)
                    ADD_FAILURE() << "query " << t << " (pos " << p << ", " << keys.rows.size() << " keys) head " << h
                                  << " channel " << i << ": cuda " << got[size_t(h * W + i)] << ", cpu "
                                  << ref[size_t(h * W + i)] << " (head scale " << sc << ")";
            }
        }
    }
    EXPECT_EQ(bad, 0);
    ::testing::Test::RecordProperty("attention_max_rel_err", std::to_string(worst));
    std::printf("[attention %s] %zu of %lld queries checked, up to %zu keys, max |err| / head scale %.3g, %s\n",
                c.name.c_str(), checked.size(), (long long)c.T, max_keys, worst,
                wsb ? ("split path, workspace " + std::to_string(wsb) + " bytes").c_str() : "one-pass kernel");
}

TEST(CudaAttention, SparseAttentionSlidingWindow) {
    REQUIRE_DEVICE();
    check_attention({"window not full", 4, 64, 64, 0, 100, 0}, 3000);
    check_attention({"model shape from 0", 64, 512, 128, 0, 160, 0}, 3010);
    check_attention({"with cache", 64, 512, 128, 700, 50, 700 - 127}, 3020);
    check_attention({"sharp logits", 8, 512, 128, 300, 40, 300 - 127, Comp::None, 0, 0, 3.0f}, 3030);
}

TEST(CudaAttention, SparseAttentionHca) {
    REQUIRE_DEVICE();
    check_attention({"HCA small", 4, 64, 64, 300, 50, 300 - 63, Comp::HCA, 8}, 3100);
    check_attention({"HCA model", 64, 512, 128, 1000, 40, 1000 - 127, Comp::HCA, 128}, 3110);
    check_attention({"HCA from 0", 16, 256, 128, 0, 300, 0, Comp::HCA, 16}, 3120);
}

TEST(CudaAttention, SparseAttentionCsa) {
    REQUIRE_DEVICE();
    check_attention({"CSA model", 64, 512, 128, 4000, 24, 4000 - 127, Comp::CSA, 4, 512}, 3200);
    check_attention({"CSA below top_k", 4, 64, 128, 0, 300, 0, Comp::CSA, 4, 64}, 3210);
    check_attention({"CSA sharp", 8, 512, 128, 3000, 16, 3000 - 127, Comp::CSA, 4, 512, 2.0f}, 3220);
}

TEST(CudaAttention, SparseAttentionCacheFromAfterWindowStart) {
    REQUIRE_DEVICE();
    // A state that started later (the MTP drafter's): only 10 rows before pos0 are held, so the
    // first queries' windows are shorter than min(position, window - 1).
    check_attention({"cache_from > 0", 4, 64, 128, 1000, 20, 990, Comp::HCA, 4}, 3300);
    check_attention({"cache_from = pos0", 16, 512, 128, 5000, 140, 5000, Comp::CSA, 4, 512}, 3310);
}

TEST(CudaAttention, SparseAttentionOddHeadsAndWidths) {
    REQUIRE_DEVICE();
    // Widths on the one-channel-per-32 lane layout (96, 160, 480) and the float4 one (128, 384),
    // head counts that leave the last group of 16 partial.
    uint64_t seed = 3400;
    for (auto [H, W] : {std::pair<int, int>{20, 96}, {5, 160}, {1, 32}, {17, 480}, {33, 128}, {3, 384}})
        check_attention({"odd", H, W, 64, 100, 30, 37, Comp::HCA, 16}, seed += 10);
}

// Decode and verification steps (T <= 8, and up to the split path's limit): the split path at
// the model's shapes (H 64, width 512, window 128) and at other widths and head counts. Key
// counts that are no multiple of the split size, queries whose keys end before the grid's last
// split (CSA picks below top_k), windows not yet full, several tiles per split (T = 8), one split
// per query (T = 65 on a 132-multiprocessor GPU).
TEST(CudaAttention, SparseAttentionDecode) {
    REQUIRE_DEVICE();
    uint64_t seed = 3700;
    auto run = [&](AttnCase c) {
        c.split = c.T <= 8;
        check_attention(c, seed += 10);
    };
    for (int64_t T : {1, 2, 8}) {
        run({"decode sliding", 64, 512, 128, 2047, T, 2047 - 127});
        run({"decode CSA 512 picks", 64, 512, 128, 4000, T, 4000 - 127, Comp::CSA, 4, 512});
        run({"decode HCA", 64, 512, 128, 2047, T, 2047 - 127, Comp::HCA, 128});
    }
    run({"decode sliding, window not full", 64, 512, 128, 0, 1, 0});
    run({"decode sliding, window not full", 64, 512, 128, 5, 8, 0});
    run({"decode sliding, 61 rows", 64, 512, 128, 60, 1, 0});
    run({"decode sliding sharp", 64, 512, 128, 3000, 1, 3000 - 127, Comp::None, 0, 0, 3.0f});
    run({"decode CSA 250 picks", 64, 512, 128, 1001, 1, 1001 - 127, Comp::CSA, 4, 512});
    run({"decode CSA few picks", 64, 512, 128, 37, 8, 0, Comp::CSA, 4, 512});
    run({"decode CSA no picks yet", 64, 512, 128, 2, 2, 0, Comp::CSA, 4, 512});
    run({"decode CSA sharp", 64, 512, 128, 4000, 2, 4000 - 127, Comp::CSA, 4, 512, 2.0f});
    run({"decode HCA 167 rows", 64, 512, 128, 5000, 1, 5000 - 127, Comp::HCA, 128});
    run({"decode HCA at 122880", 64, 512, 128, 122880, 1, 122880 - 127, Comp::HCA, 128});
    run({"decode HCA at 122880", 64, 512, 128, 122880, 4, 122880 - 127, Comp::HCA, 128});
    run({"decode HCA 2 rows", 64, 512, 128, 300, 1, 300 - 127, Comp::HCA, 128});
    run({"decode cache_from > 0", 64, 512, 128, 1000, 3, 990, Comp::CSA, 4, 512});
    run({"split, one split a query", 64, 512, 128, 4000, 65, 4000 - 127, Comp::CSA, 4, 512});
    // Other widths: one value a lane per half (64), three (192, one channel every 32), four
    // (256, float4), seven (448); head counts that leave the last group of 16 partial.
    for (auto [H, W] : {std::pair<int, int>{20, 64}, {5, 192}, {33, 256}, {3, 448}, {1, 512}}) {
        run({"decode odd", H, W, 64, 100, 1, 37, Comp::HCA, 16});
        run({"decode odd", H, W, 64, 700, 8, 700 - 63, Comp::CSA, 4, 100});
    }
}

// The long shapes of DESIGN.md at the model's H and width, checked on a subset of queries.
TEST(CudaAttention, SparseAttentionLong10240Queries) {
    REQUIRE_DEVICE();
    std::vector<int64_t> checked = {0, 1, 2, 126, 127, 128, 129, 511, 2047, 2048, 2049, 2050, 2051, 4095, 8191, 10238, 10239};
    for (int64_t t = 256; t < 10240; t += 640) checked.push_back(t);
    check_attention({"10240 CSA", 64, 512, 128, 0, 10240, 0, Comp::CSA, 4, 512, 0.5f, checked}, 3500);
    check_attention({"10240 HCA", 64, 512, 128, 0, 10240, 0, Comp::HCA, 128, 0, 0.5f, checked}, 3510);
}

TEST(CudaAttention, SparseAttentionTailAt122880) {
    REQUIRE_DEVICE();
    std::vector<int64_t> checked;
    for (int64_t t = 0; t < 129; t += 6) checked.push_back(t);
    for (int64_t t : {125, 126, 127, 128}) checked.push_back(t);
    check_attention({"tail CSA", 64, 512, 128, 122880, 129, 122880 - 127, Comp::CSA, 4, 512, 0.5f, checked}, 3600);
    check_attention({"tail HCA", 64, 512, 128, 122880, 129, 122880 - 127, Comp::HCA, 128, 0, 0.5f, checked}, 3610);
}

// ---------------------------------------------------------------------------------------------
// Argument checks happen on the host before any CUDA call, so these run without a device.

TEST(CudaAttentionArgs, RejectsBadArguments) {
    alignas(16) static float fake[64];
    float* v = fake;
    // rope
    EXPECT_THROW(cuda::rope(v, 4, 64, 64, 1, 0, v, 63, false), dsv4::Error);  // odd dim
    EXPECT_THROW(cuda::rope(v, 4, 32, 64, 1, 0, v, 64, false), dsv4::Error);  // width < dim
    EXPECT_THROW(cuda::rope(v, 4, 64, 60, 1, 0, v, 64, false), dsv4::Error);  // stride < width
    EXPECT_THROW(cuda::rope(v, 4, 64, 64, 0, 0, v, 64, false), dsv4::Error);  // per_pos 0
    EXPECT_NO_THROW(cuda::rope(v, 0, 64, 64, 1, 0, v, 64, false));            // nothing to do
    // compress_windows
    cuda::CompressArgs c;
    c.kv = c.gate = c.ape = c.norm = c.inv_freq = v;
    c.rows = v;
    c.width = 64;
    c.ratio = 4;
    c.dim = 16;
    c.n_windows = 1;
    c.coff = 3;
    EXPECT_THROW(cuda::compress_windows(c), dsv4::Error);
    c.coff = 2;
    c.ratio = 0;
    EXPECT_THROW(cuda::compress_windows(c), dsv4::Error);
    c.ratio = 4;
    c.dim = 66;
    EXPECT_THROW(cuda::compress_windows(c), dsv4::Error);
    c.dim = 16;
    c.has_prev = true;  // without prev rows
    EXPECT_THROW(cuda::compress_windows(c), dsv4::Error);
    // indexer
    cuda::IndexerArgs x;
    x.q = x.w = x.k = v;
    int32_t ids[8];
    x.picked = x.n_picked = ids;
    x.T = 2;
    x.n_rows = 100;
    x.heads = 4;
    x.dim = 32;
    x.ratio = 4;
    x.top_k = 0;
    EXPECT_THROW(cuda::indexer_topk(x, fake, sizeof(fake)), dsv4::Error);  // top_k 0
    x.top_k = 4;
    EXPECT_THROW(cuda::indexer_topk(x, fake, sizeof(fake)), dsv4::Error);  // workspace too small
    EXPECT_EQ(cuda::indexer_workspace_bytes(2, 100), 800u);
    EXPECT_THROW(cuda::indexer_workspace_bytes(-1, 100), dsv4::Error);
    x.T = 0;
    EXPECT_NO_THROW(cuda::indexer_topk(x, nullptr, 0));
    // sparse_attention
    cuda::SparseAttnArgs s;
    s.q = s.sinks = s.chunk = v;
    s.out = v;
    s.T = 1;
    s.pos0 = 10;
    s.cache_from = 10;
    s.H = 4;
    s.window = 128;
    for (int width : {0, 48, 544}) {
        s.width = width;
        EXPECT_THROW(cuda::sparse_attention(s, nullptr, 0), dsv4::Error) << "width " << width;
    }
    s.width = 64;
    s.H = 0;
    EXPECT_THROW(cuda::sparse_attention(s, nullptr, 0), dsv4::Error);
    s.H = 4;
    s.cache_from = 11;  // after pos0
    EXPECT_THROW(cuda::sparse_attention(s, nullptr, 0), dsv4::Error);
    s.cache_from = 0;  // the window reaches back into a cache that is not given
    EXPECT_THROW(cuda::sparse_attention(s, nullptr, 0), dsv4::Error);
    s.cache = v;
    s.chunk = v + 1;  // not 16-byte aligned
    EXPECT_THROW(cuda::sparse_attention(s, nullptr, 0), dsv4::Error);
    s.chunk = v;
    s.comp = v;
    s.n_comp = 4;
    s.ratio = 0;  // HCA rows without a ratio
    EXPECT_THROW(cuda::sparse_attention(s, nullptr, 0), dsv4::Error);
    s.picked = ids;  // CSA lists without counts
    EXPECT_THROW(cuda::sparse_attention(s, nullptr, 0), dsv4::Error);
    s.T = 0;
    s.comp = nullptr;
    EXPECT_NO_THROW(cuda::sparse_attention(s, nullptr, 0));
}

}  // namespace
