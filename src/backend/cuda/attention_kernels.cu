// The attention block's kernels (see attention_kernels.h).
//
// rope: one thread per (row, pair). The angle is the float32 product float(pos) * inv_freq[i],
//   cos/sin are taken in double of it and rounded to float, and the rotation uses the CPU's
//   operations without contraction (__fmul_rn / __fsub_rn), so results equal cpu::Rope::apply up
//   to the last-bit differences of the device's double cos/sin.
// compress_windows: one block per window, threads over channels. Per channel the softmax over
//   its <= 2 * ratio slots is done in the CPU's order (max; sum of exp; sum of value * (e / sum)),
//   the logits recomputed on each pass rather than held; the sum of squares for the RMSNorm is
//   accumulated in double and reduced over the block; the RoPE of the trailing channels reads the
//   normed row from shared memory. Only expf (<= 2 ulp on the device) differs from the CPU.
// indexer_topk: (1) scoring, a block of 128 threads = 128 consecutive rows (each thread holds its
//   k row in registers) for a group of 8 queries, the query's heads staged in shared memory; the
//   dot product repeats cpu::dot's eight-lane order and every product and sum is rounded as on
//   the CPU, so the scores are bitwise those of cpu::attention_block. (2) selection, one block per
//   query: a 4-pass radix select (8 bits a pass) on order-preserving keys of the float bits (-0 is
//   mapped to +0, so equal floats have equal keys) finds the top_k-th key K and how many rows equal
//   to K are needed; then one ordered pass with block prefix sums writes the rows with key > K and
//   the lowest-index rows with key == K, in ascending index order.
// sparse_attention: one block per (query, group of <= 16 heads), one warp per head, lanes split
//   the width (4 consecutive channels per lane per 128 when width % 128 == 0, else one per 32).
//   Key rows stream through shared memory in tiles of 32 rows (cp.async, double buffered), shared
//   by all heads of the block. Per tile each warp computes the 32 dot products (lane partials,
//   then a transposing butterfly: 31 shuffles leave row j's sum in lane j), then walks the rows in
//   key order with the online-softmax update of cpu::attend_heads (m = sink, l = 1, acc = 0 at the
//   start; a new maximum rescales), and writes acc / l at the end.
//   Decode-sized calls (T * ceil(H / 16) under two waves, width % 64 == 0) instead split each
//   query's keys over ~one block per multiprocessor and merge the partial softmax sums in a second,
//   programmatically dependent kernel, in a fixed order (the decode path, below).
#include "backend/cuda/attention_kernels.h"

#include <algorithm>
#include <cmath>

#include "backend/cuda/common.cuh"

namespace dsv4::cuda {

namespace {

constexpr unsigned kFull = 0xffffffffu;

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

__device__ __forceinline__ uint32_t smem_u32(const void* p) { return uint32_t(__cvta_generic_to_shared(p)); }
__device__ __forceinline__ void cp_async16(void* dst, const void* src) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem_u32(dst)), "l"(src) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// ---------------------------------------------------------------------------------------------
// RoPE

__global__ void rope_kernel(float* v, int64_t rows, int width, int64_t row_stride, int per_pos, int64_t pos0,
                            const float* __restrict__ inv_freq, int half, bool inverse) {
    grid_begin();
    const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (idx >= rows * half) return;
    const int64_t r = idx / half;
    const int i = int(idx - r * half);
    const int64_t pos = pos0 + r / per_pos;
    const float angle = __fmul_rn(float(pos), inv_freq[i]);
    float* p = v + r * row_stride + (width - 2 * half) + 2 * i;
    float x0 = p[0], x1 = p[1];
    rotate_pair(x0, x1, angle, inverse);
    p[0] = x0;
    p[1] = x1;
}

// ---------------------------------------------------------------------------------------------
// Compressor windows

constexpr int kCompressThreads = 256;

__global__ void __launch_bounds__(kCompressThreads) compress_kernel(const CompressArgs a) {
    grid_begin();
    extern __shared__ float row[];  // [width]: the pooled, then normed row
    __shared__ double red[kCompressThreads / 32];
    __shared__ float s_scale;
    const int W = a.width, cw = a.coff * W, m = a.ratio;
    const int64_t win = blockIdx.x;
    const float* kv = a.kv + win * m * cw;
    const float* gate = a.gate + win * m * cw;
    // The A halves of the window before (coff == 2): slots 0 .. m-1 when present.
    const float* pkv = nullptr;
    const float* pg = nullptr;
    if (a.coff == 2) {
        if (win > 0) {
            pkv = kv - int64_t(m) * cw;
            pg = gate - int64_t(m) * cw;
        } else if (a.has_prev) {
            pkv = a.prev_kv;
            pg = a.prev_gate;
        }
    }
    const int na = pkv ? m : 0, n = na + m, boff = a.coff == 2 ? W : 0;
    const float* ape = a.ape;

    double ss = 0;
    for (int ch = threadIdx.x; ch < W; ch += blockDim.x) {
        auto logit = [&](int j) {
            return j < na ? __fadd_rn(pg[j * cw + ch], ape[j * cw + ch])
                          : __fadd_rn(gate[(j - na) * cw + boff + ch], ape[(j - na) * cw + boff + ch]);
        };
        auto value = [&](int j) { return j < na ? pkv[j * cw + ch] : kv[(j - na) * cw + boff + ch]; };
        float mx = -INFINITY;
        for (int j = 0; j < n; ++j) {
            const float x = logit(j);
            mx = mx < x ? x : mx;  // std::max(mx, x)
        }
        float sum = 0;
        for (int j = 0; j < n; ++j) sum = __fadd_rn(sum, expf(__fsub_rn(logit(j), mx)));
        float acc = 0;
        for (int j = 0; j < n; ++j)
            acc = __fadd_rn(acc, __fmul_rn(value(j), __fdiv_rn(expf(__fsub_rn(logit(j), mx)), sum)));
        row[ch] = acc;
        ss += double(acc) * double(acc);
    }
    // Block sum of the squares (double), then the CPU's rms_scale.
    for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(kFull, ss, o);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (lane == 0) red[warp] = ss;
    __syncthreads();
    if (threadIdx.x == 0) {
        double tot = 0;
        for (int w = 0; w < int(blockDim.x >> 5); ++w) tot += red[w];
        s_scale = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(float(tot / double(W)), a.eps)));
    }
    __syncthreads();
    const float s = s_scale;
    for (int ch = threadIdx.x; ch < W; ch += blockDim.x) row[ch] = __fmul_rn(a.norm[ch], __fmul_rn(row[ch], s));
    __syncthreads();
    const int64_t pos = (a.first_row + win) * m;
    const int rope0 = W - a.dim;
    float* out = a.rows + (a.first_row + win) * W;
    for (int ch = threadIdx.x; ch < W; ch += blockDim.x) {
        float y = row[ch];
        if (ch >= rope0) {
            const int i = (ch - rope0) >> 1;
            float x0 = row[rope0 + 2 * i], x1 = row[rope0 + 2 * i + 1];
            rotate_pair(x0, x1, __fmul_rn(float(pos), a.inv_freq[i]), false);
            y = ((ch - rope0) & 1) ? x1 : x0;
        }
        out[ch] = y;
    }
}

// ---------------------------------------------------------------------------------------------
// Indexer: scores

constexpr int kScoreThreads = 128, kScoreQueries = 8;

__device__ __forceinline__ int64_t n_visible(int64_t pos0, int64_t t, int ratio, int64_t n_rows) {
    return min((pos0 + t + 1) / ratio, n_rows);
}

// cpu::dot(q, k, n) with q in shared memory: eight lanes over the blocks of 8, the same final
// sum, every operation rounded (bitwise the CPU's result). This form: k in registers.
template <int DIM>
__device__ __forceinline__ float dot_cpu_order(const float* q, const float (&k)[DIM]) {
    static_assert(DIM % 8 == 0, "register rows are whole blocks of 8");
    float s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
#pragma unroll
    for (int i = 0; i < DIM; i += 8) {
        const float4 q0 = *reinterpret_cast<const float4*>(q + i);
        const float4 q1 = *reinterpret_cast<const float4*>(q + i + 4);
        s[0] = __fadd_rn(s[0], __fmul_rn(q0.x, k[i + 0]));
        s[1] = __fadd_rn(s[1], __fmul_rn(q0.y, k[i + 1]));
        s[2] = __fadd_rn(s[2], __fmul_rn(q0.z, k[i + 2]));
        s[3] = __fadd_rn(s[3], __fmul_rn(q0.w, k[i + 3]));
        s[4] = __fadd_rn(s[4], __fmul_rn(q1.x, k[i + 4]));
        s[5] = __fadd_rn(s[5], __fmul_rn(q1.y, k[i + 5]));
        s[6] = __fadd_rn(s[6], __fmul_rn(q1.z, k[i + 6]));
        s[7] = __fadd_rn(s[7], __fmul_rn(q1.w, k[i + 7]));
    }
    const float a = __fadd_rn(__fadd_rn(s[0], s[1]), __fadd_rn(s[2], s[3]));
    const float b = __fadd_rn(__fadd_rn(s[4], s[5]), __fadd_rn(s[6], s[7]));
    return __fadd_rn(__fadd_rn(a, b), 0.0f);  // + the (empty) tail, as the CPU adds it
}

// The same for any n, k read from global memory.
__device__ __forceinline__ float dot_cpu_order(const float* q, const float* __restrict__ k, int n) {
    float s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int i = 0;
    for (; i + 8 <= n; i += 8)
#pragma unroll
        for (int j = 0; j < 8; ++j) s[j] = __fadd_rn(s[j], __fmul_rn(q[i + j], __ldg(k + i + j)));
    float tail = 0;
    for (; i < n; ++i) tail = __fadd_rn(tail, __fmul_rn(q[i], __ldg(k + i)));
    const float a = __fadd_rn(__fadd_rn(s[0], s[1]), __fadd_rn(s[2], s[3]));
    const float b = __fadd_rn(__fadd_rn(s[4], s[5]), __fadd_rn(s[6], s[7]));
    return __fadd_rn(__fadd_rn(a, b), tail);
}

// DIM > 0: the k row sits in registers (DIM % 8 == 0, 16-byte aligned rows); DIM == 0: any dim,
// the row read from global memory as the dot product goes.
template <int DIM>
__global__ void __launch_bounds__(kScoreThreads) indexer_score_kernel(const IndexerArgs a, int64_t t_begin,
                                                                       float* __restrict__ scores) {
    grid_begin();
    extern __shared__ __align__(16) float sm[];
    const int dim = DIM > 0 ? DIM : a.dim, heads = a.heads;
    float* qs = sm;                          // [heads, dim]
    float* ws = sm + int64_t(heads) * dim;   // [heads]
    const int64_t row0 = int64_t(blockIdx.y) * kScoreThreads, r = row0 + threadIdx.x;
    const int64_t tq0 = t_begin + int64_t(blockIdx.x) * kScoreQueries;

    float kr[DIM > 0 ? DIM : 8];
    if constexpr (DIM > 0) {
        if (r < a.n_rows) {
            const float4* src = reinterpret_cast<const float4*>(a.k + r * DIM);
#pragma unroll
            for (int i = 0; i < DIM / 4; ++i) {
                const float4 v = __ldg(src + i);
                kr[4 * i] = v.x;
                kr[4 * i + 1] = v.y;
                kr[4 * i + 2] = v.z;
                kr[4 * i + 3] = v.w;
            }
        } else {
#pragma unroll
            for (int i = 0; i < DIM; ++i) kr[i] = 0.0f;
        }
    }
    for (int tq = 0; tq < kScoreQueries; ++tq) {
        const int64_t t = tq0 + tq;
        if (t >= a.T) break;
        const int64_t nvis = n_visible(a.pos0, t, a.ratio, a.n_rows);
        if (row0 >= nvis) continue;  // uniform over the block
        __syncthreads();             // the previous query's q is no longer read
        const float* qt = a.q + t * heads * dim;
        for (int i = threadIdx.x; i < heads * dim; i += kScoreThreads) qs[i] = qt[i];
        for (int i = threadIdx.x; i < heads; i += kScoreThreads) ws[i] = a.w[t * heads + i];
        __syncthreads();
        if (r < nvis) {
            float s = 0;
            for (int h = 0; h < heads; ++h) {
                float d;
                if constexpr (DIM > 0)
                    d = dot_cpu_order<DIM>(qs + h * DIM, kr);
                else
                    d = dot_cpu_order(qs + h * dim, a.k + r * dim, dim);
                s = __fadd_rn(s, __fmul_rn(__fmul_rn(d > 0.0f ? d : 0.0f, a.scale), ws[h]));  // std::max(0, d)
            }
            scores[t * a.n_rows + r] = s;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Indexer: selection

constexpr int kSelectThreads = 512;

// Order-preserving key: a > b as floats iff key(a) > key(b); -0 and +0 share the key of +0.
__device__ __forceinline__ uint32_t order_key(float f) {
    uint32_t u = __float_as_uint(f);
    if ((u & 0x7fffffffu) == 0) u = 0;
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// Exclusive prefix sum over the block of v; total gets the block's sum. wsum: 32 words of
// shared memory. Every thread of the block must call it.
__device__ __forceinline__ unsigned block_exclusive_scan(unsigned v, unsigned* wsum, unsigned& total) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = int(blockDim.x >> 5);
    unsigned incl = v;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const unsigned y = __shfl_up_sync(kFull, incl, o);
        if (lane >= o) incl += y;
    }
    if (lane == 31) wsum[warp] = incl;
    __syncthreads();
    if (warp == 0) {
        unsigned x = lane < nw ? wsum[lane] : 0u;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            const unsigned y = __shfl_up_sync(kFull, x, o);
            if (lane >= o) x += y;
        }
        wsum[lane] = x;
    }
    __syncthreads();
    const unsigned base = warp ? wsum[warp - 1] : 0u;
    total = wsum[nw - 1];
    __syncthreads();  // wsum is free for the next call
    return base + incl - v;
}

__global__ void __launch_bounds__(kSelectThreads) indexer_select_kernel(const float* __restrict__ scores, int64_t n_rows,
                                                                         int64_t pos0, int ratio, int top_k,
                                                                         int32_t* __restrict__ picked,
                                                                         int32_t* __restrict__ n_picked) {
    grid_begin();
    __shared__ unsigned hist[256];
    __shared__ unsigned wsum[32];
    __shared__ unsigned s_bin, s_rem;
    const int64_t t = blockIdx.x;
    const int64_t nvis = n_visible(pos0, t, ratio, n_rows);
    int32_t* out = picked + t * top_k;
    const int tid = threadIdx.x;
    if (nvis <= top_k) {
        for (int64_t i = tid; i < nvis; i += blockDim.x) out[i] = int32_t(i);
        if (tid == 0) n_picked[t] = int32_t(nvis);
        return;
    }
    const float* sc = scores + t * n_rows;

    // Radix select of the top_k-th largest key, 8 bits a pass from the top.
    uint32_t prefix = 0, mask = 0;
    unsigned rem = unsigned(top_k);  // rank wanted among the keys matching prefix
    for (int shift = 24; shift >= 0; shift -= 8) {
        for (int i = tid; i < 256; i += blockDim.x) hist[i] = 0;
        __syncthreads();
        for (int64_t i = tid; i < nvis; i += blockDim.x) {
            const uint32_t k = order_key(sc[i]);
            if ((k & mask) == prefix) atomicAdd(&hist[(k >> shift) & 255u], 1u);
        }
        __syncthreads();
        if (tid < 32) {
            // Lane l holds bins 255 - 8l .. 248 - 8l (descending); a warp scan over the lanes.
            unsigned c[8], sum = 0;
#pragma unroll
            for (int j = 0; j < 8; ++j) sum += (c[j] = hist[255 - 8 * tid - j]);
            unsigned incl = sum;
#pragma unroll
            for (int o = 1; o < 32; o <<= 1) {
                const unsigned y = __shfl_up_sync(kFull, incl, o);
                if (tid >= o) incl += y;
            }
            const unsigned excl = incl - sum;
            if (excl < rem && rem <= incl) {
                unsigned before = excl;
                for (int j = 0; j < 8; ++j) {
                    if (before + c[j] >= rem) {
                        s_bin = unsigned(255 - 8 * tid - j);
                        s_rem = rem - before;
                        break;
                    }
                    before += c[j];
                }
            }
        }
        __syncthreads();
        prefix |= s_bin << shift;
        mask |= 255u << shift;
        rem = s_rem;
    }
    // prefix is the key K of the top_k-th score; rem rows equal to K are taken (the first ones).
    const uint32_t K = prefix;
    const unsigned need_eq = rem;
    const unsigned n_gt = unsigned(top_k) - need_eq;
    unsigned gt_base = 0, eq_base = 0;
    for (int64_t c0 = 0; c0 < nvis; c0 += blockDim.x) {
        const int64_t i = c0 + tid;
        unsigned gt = 0, eq = 0;
        if (i < nvis) {
            const uint32_t k = order_key(sc[i]);
            gt = k > K;
            eq = k == K;
        }
        unsigned total;
        const unsigned excl = block_exclusive_scan(gt | (eq << 16), wsum, total);
        const unsigned gb = gt_base + (excl & 0xffffu), eb = eq_base + (excl >> 16);
        if (gt || (eq && eb < need_eq)) out[gb + min(eb, need_eq)] = int32_t(i);
        gt_base += total & 0xffffu;
        eq_base += total >> 16;
        if (gt_base == n_gt && eq_base >= need_eq) break;  // all found (uniform over the block)
    }
    if (tid == 0) n_picked[t] = top_k;
}

// ---------------------------------------------------------------------------------------------
// Sparse attention

constexpr int kTileKeys = 32, kMaxHeadsPerBlock = 16;

struct KeyGeom {
    int64_t t, p, start;
    int n_win, n_keys;
};

// The keys query t sees (the visibility rules of attention_kernels.h): key j < n_win is window
// position start + j, key j >= n_win compressed row j - n_win of the HCA prefix or of t's picks.
// Every sparse-attention kernel derives its rows from this one function.
__device__ __forceinline__ KeyGeom key_geom(const SparseAttnArgs& a, int64_t t) {
    KeyGeom g;
    g.t = t;
    g.p = a.pos0 + t;
    g.start = max(max(int64_t(0), g.p - a.window + 1), a.cache_from);
    g.n_win = int(g.p - g.start + 1);
    int n_c = 0;
    if (a.comp) {
        if (a.picked)
            n_c = min(max(a.n_picked[t], 0), a.top_k);
        else
            n_c = int(min((g.p + 1) / a.ratio, a.n_comp));
    }
    g.n_keys = g.n_win + n_c;
    return g;
}

__device__ __forceinline__ const float* key_row(const SparseAttnArgs& a, const KeyGeom& g, int j) {
    if (j < g.n_win) {
        const int64_t pos = g.start + j;
        return pos < a.pos0 ? a.cache + (pos - a.cache_from) * a.width : a.chunk + (pos - a.pos0) * a.width;
    }
    int64_t r = j - g.n_win;
    if (a.picked) r = a.picked[g.t * a.top_k + r];
    return a.comp + r * a.width;
}

// Channel of lane `lane`'s i-th value: with NC % 4 == 0, groups of 4 consecutive channels every
// 128 (float4 reads of shared memory); otherwise one channel every 32.
template <int NC>
__device__ __forceinline__ int lane_channel(int lane, int i) {
    if constexpr (NC % 4 == 0)
        return (i >> 2) * 128 + lane * 4 + (i & 3);
    else
        return i * 32 + lane;
}

template <int NC>
__device__ __forceinline__ void load_lane(const float* row, int lane, float (&x)[NC]) {
    if constexpr (NC % 4 == 0) {
#pragma unroll
        for (int i = 0; i < NC / 4; ++i) {
            const float4 v = *reinterpret_cast<const float4*>(row + i * 128 + lane * 4);
            x[4 * i] = v.x;
            x[4 * i + 1] = v.y;
            x[4 * i + 2] = v.z;
            x[4 * i + 3] = v.w;
        }
    } else {
#pragma unroll
        for (int i = 0; i < NC; ++i) x[i] = row[i * 32 + lane];
    }
}

// part[j] (j < 32) are this lane's partial sums for 32 rows; returns in lane l the full sum of
// row l (5 butterfly steps that halve the values kept, 31 shuffles).
__device__ __forceinline__ float transpose_reduce(float (&part)[32], int lane) {
#define DSV4_TR_STEP(OFF)                                                            \
    {                                                                                \
        const bool up = lane & OFF;                                                  \
        _Pragma("unroll") for (int i = 0; i < OFF; ++i) {                            \
            const float send = up ? part[i] : part[i + OFF];                         \
            const float keep = up ? part[i + OFF] : part[i];                         \
            part[i] = keep + __shfl_xor_sync(kFull, send, OFF);                      \
        }                                                                            \
    }
    DSV4_TR_STEP(16)
    DSV4_TR_STEP(8)
    DSV4_TR_STEP(4)
    DSV4_TR_STEP(2)
    DSV4_TR_STEP(1)
#undef DSV4_TR_STEP
    return part[0];
}

template <int NC>
__global__ void __launch_bounds__(kMaxHeadsPerBlock * 32, 1) sparse_attn_kernel(const SparseAttnArgs a) {
    grid_begin();
    constexpr int width = NC * 32;
    constexpr int kChunksPerRow = width / 4;
    extern __shared__ __align__(16) float tiles[];  // [2][kTileKeys][width]
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int h = int(blockIdx.y) * kMaxHeadsPerBlock + warp;
    const bool active = h < a.H;

    const KeyGeom g = key_geom(a, blockIdx.x);
    const int n_tiles = (g.n_keys + kTileKeys - 1) / kTileKeys;

    float q[NC], acc[NC];
    float m = 0.0f, l = 1.0f;
    if (active) {
        const float* qh = a.q + (g.t * a.H + h) * int64_t(width);
#pragma unroll
        for (int i = 0; i < NC; ++i) {
            q[i] = qh[lane_channel<NC>(lane, i)];
            acc[i] = 0.0f;
        }
        m = a.sinks[h];
    }

    auto issue_tile = [&](int tile) {
        float* dst = tiles + (tile & 1) * (kTileKeys * width);
        const int j0 = tile * kTileKeys, nrows = min(kTileKeys, g.n_keys - j0);
        for (int c = threadIdx.x; c < nrows * kChunksPerRow; c += blockDim.x) {
            const int r = c / kChunksPerRow, col = (c - r * kChunksPerRow) * 4;
            cp_async16(dst + r * width + col, key_row(a, g, j0 + r) + col);
        }
        cp_async_commit();
    };

    if (n_tiles > 0) issue_tile(0);
    for (int tile = 0; tile < n_tiles; ++tile) {
        if (tile + 1 < n_tiles) {
            issue_tile(tile + 1);
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        if (active) {
            const float* kt = tiles + (tile & 1) * (kTileKeys * width);
            const int nvalid = min(kTileKeys, g.n_keys - tile * kTileKeys);
            float part[kTileKeys];
#pragma unroll
            for (int j = 0; j < kTileKeys; ++j) {
                float s = 0.0f;
                if (j < nvalid) {
                    float k[NC];
                    load_lane<NC>(kt + j * width, lane, k);
#pragma unroll
                    for (int i = 0; i < NC; ++i) s = fmaf(q[i], k[i], s);
                }
                part[j] = s;
            }
            const float zl = transpose_reduce(part, lane) * a.scale;
            for (int j = 0; j < nvalid; ++j) {
                const float z = __shfl_sync(kFull, zl, j);
                float k[NC];
                load_lane<NC>(kt + j * width, lane, k);
                if (z > m) {  // warp-uniform: every lane holds the same z and m
                    const float f = expf(m - z);
                    l = l * f + 1.0f;
#pragma unroll
                    for (int i = 0; i < NC; ++i) acc[i] = acc[i] * f + k[i];
                    m = z;
                } else {
                    const float pj = expf(z - m);
                    l += pj;
#pragma unroll
                    for (int i = 0; i < NC; ++i) acc[i] += pj * k[i];
                }
            }
        }
        __syncthreads();  // the buffer is refilled two tiles later
    }
    if (active) {
        const float inv = 1.0f / l;
        float* o = a.out + (g.t * a.H + h) * int64_t(width);
#pragma unroll
        for (int i = 0; i < NC; ++i) o[lane_channel<NC>(lane, i)] = acc[i] * inv;
    }
}

// ---------------------------------------------------------------------------------------------
// Sparse attention, decode path (split over the keys, flash-decoding style)
//
// With few queries the kernel above has T * ceil(H / 16) blocks (4 at T = 1, H = 64) on a GPU of
// 132 multiprocessors, each streaming all of its query's keys. Here each query's keys are cut
// into splits of `rows` consecutive keys (key order as in key_geom), and a block of 16 warps
// handles one (split, group of 16 heads, query):
//   - the split's rows stream through shared memory in tiles of 32 (cp.async, double buffered),
//     loaded once for the block's 16 heads. 16 threads copy a row; each fetches the row's address
//     (for CSA the picked id, a global load) one tile ahead, so issuing a tile never waits;
//   - warp w: row set rs = w >> 3 (rows 16 rs .. 16 rs + 15 of each tile), heads 4 * quad .. + 3
//     of the group (quad = (w >> 1) & 3) over channel half hf = w & 1 of the width (HC = width /
//     64 values a lane), for q during the scores and for the output sum after them. Four heads
//     per loaded key value keep the tile arithmetic-bound rather than shared-memory-bound (one
//     head a warp, as above, reads each row from shared memory twice per head); the two row sets
//     give 16 warps a multiprocessor;
//   - scores, per batch of 8 rows: lane partials for 4 heads x 8 rows, a transposing butterfly
//     (31 shuffles) that leaves (head lane >> 3, row lane & 7) in each lane, the two halves' sums
//     added in shared memory;
//   - softmax of the tile, one warp per head, a lane per row: the tile's maximum, the running
//     maximum m and sum l of the split (m = -inf, l = 0 at the start: the sink is counted once, by
//     the combine), p = exp(z - m), and the factor f = exp(m_old - m) that rescales the output sums;
//   - output sums, per row set: acc = acc * f + sum_j p_j k_j over the set's rows of the tile; at
//     the end set 1's sums are added to set 0's (through shared memory, in that order).
// The split writes its (m, l) per head and its unnormalised acc per (head, channel) to the
// workspace; sparse_attn_combine_kernel then merges the splits of each (query, head) in split
// order with the sink: M = max(sink, m_s), L = exp(sink - M) + sum_s l_s exp(m_s - M),
// out = (sum_s acc_s exp(m_s - M)) / L. No atomics, fixed orders: the result is bitwise
// repeatable. The math is cpu::attend_heads' (the same softmax over the same keys); only the
// rounding differs (summation orders, exp).

constexpr int kSplitHeads = 16, kSplitThreads = 512, kSplitTile = 32, kSplitBatch = 8;

// Stores the lane's values at the channels load_lane<NC> reads.
template <int NC>
__device__ __forceinline__ void store_lane(float* row, int lane, const float (&x)[NC]) {
    if constexpr (NC % 4 == 0) {
#pragma unroll
        for (int i = 0; i < NC / 4; ++i)
            *reinterpret_cast<float4*>(row + i * 128 + lane * 4) = make_float4(x[4 * i], x[4 * i + 1], x[4 * i + 2], x[4 * i + 3]);
    } else {
#pragma unroll
        for (int i = 0; i < NC; ++i) row[i * 32 + lane] = x[i];
    }
}

// HC: values a lane holds of one head in its warp's channel half (width = 64 * HC).
// Workspace: acc [T][n_splits][H][width] floats, then ml [T][n_splits][H] (m, l) pairs.
template <int HC>
__global__ void __launch_bounds__(kSplitThreads, 1)
    sparse_attn_split_kernel(const SparseAttnArgs a, int rows, int n_splits, float* __restrict__ ws_acc,
                             float2* __restrict__ ws_ml) {
    grid_dependency_wait();  // the dependents are allowed below, once this block has its geometry
    constexpr int width = HC * 64, half = HC * 32;
    constexpr int kSetRows = kSplitTile / 2;  // rows of a tile per row set
    static_assert(kSplitThreads == 2 * (kSplitHeads / 4) * 2 * 32, "a warp per (row set, quad of heads, channel half)");
    static_assert(kSplitThreads == kSplitHeads * kSplitTile && kSplitTile == 32, "the softmax: a warp per head, a lane per row");
    static_assert(kSplitThreads == 16 * kSplitTile, "the copy: 16 threads a row, HC chunks of 16 bytes each");
    static_assert(kSplitBatch * 4 == 32 && kSetRows % kSplitBatch == 0, "a batch: 4 heads x 8 rows = one butterfly");
    extern __shared__ __align__(16) float tiles[];                // [2][kSplitTile][width]
    __shared__ float s_dot[2][kSplitHeads][kSplitTile];           // score halves [channel half][head][row]
    __shared__ __align__(16) float s_p[kSplitTile][kSplitHeads];  // exp(z - m) [row][head]
    __shared__ __align__(16) float s_f[kSplitHeads];              // this tile's rescale factor per head

    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int rs = warp >> 3, quad = (warp >> 1) & 3, hf = warp & 1;
    const int h0 = int(blockIdx.y) * kSplitHeads;
    const int split = blockIdx.x;
    const KeyGeom g = key_geom(a, blockIdx.z);
    const int row0 = split * rows;
    // The combine may be scheduled now (it waits for this grid's completion before it reads).
    allow_dependents();
    if (row0 >= g.n_keys) return;  // a split past this query's keys (the grid covers the longest query)
    const int n_rows = min(rows, g.n_keys - row0);
    const int n_tiles = (n_rows + kSplitTile - 1) / kSplitTile;

    // The copy: thread -> (row cr of the tile, 16-byte chunks cc + 16 k, k < HC).
    const int cr = threadIdx.x >> 4, cc = threadIdx.x & 15;
    auto row_src = [&](int tile) -> const float* {
        const int j = tile * kSplitTile + cr;
        return tile < n_tiles && j < n_rows ? key_row(a, g, row0 + j) : nullptr;
    };
    auto issue_tile = [&](int tile, const float* src) {
        float* dst = tiles + (tile & 1) * (kSplitTile * width) + cr * width;
        if (src) {
#pragma unroll
            for (int k = 0; k < HC; ++k) cp_async16(dst + (cc + 16 * k) * 4, src + (cc + 16 * k) * 4);
        }
        cp_async_commit();
    };
    const float* src_next = row_src(0);
    issue_tile(0, src_next);
    src_next = row_src(1);

    // q of heads h0 + 4 * quad + e over this warp's half (zeros for heads past H: their scores are
    // 0 and nothing of theirs is written).
    float q[4][HC], acc[4][HC];
#pragma unroll
    for (int e = 0; e < 4; ++e) {
        const int h = h0 + 4 * quad + e;
        const float* qh = a.q + (g.t * a.H + h) * int64_t(width) + hf * half;
#pragma unroll
        for (int i = 0; i < HC; ++i) {
            q[e][i] = h < a.H ? qh[lane_channel<HC>(lane, i)] : 0.0f;
            acc[e][i] = 0.0f;
        }
    }
    // The split's softmax state of head h0 + warp, held (identically) by the lanes of the warp.
    float m_run = -INFINITY, l_run = 0.0f;

    for (int tile = 0; tile < n_tiles; ++tile) {
        if (tile + 1 < n_tiles) {
            issue_tile(tile + 1, src_next);
            src_next = row_src(tile + 2);  // in flight while this tile is computed
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        const float* kt = tiles + (tile & 1) * (kSplitTile * width) + hf * half;
        const int nvalid = min(kSplitTile, n_rows - tile * kSplitTile);
        const int set0 = rs * kSetRows, set_end = min(set0 + kSetRows, nvalid);  // this warp's rows

        // Scores: this warp's half of q · k for its 4 heads and each batch of 8 of its rows.
#pragma unroll
        for (int b = 0; b < kSetRows / kSplitBatch; ++b) {
            const int jb = set0 + b * kSplitBatch;
            if (jb >= set_end) break;  // uniform over the warp
            float part[32];            // [head e][row r] at e * 8 + r
#pragma unroll
            for (int r = 0; r < kSplitBatch; ++r) {
                float k[HC];
                if (jb + r < set_end) {
                    load_lane<HC>(kt + (jb + r) * width, lane, k);
                } else {
#pragma unroll
                    for (int i = 0; i < HC; ++i) k[i] = 0.0f;
                }
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    float s = 0.0f;
#pragma unroll
                    for (int i = 0; i < HC; ++i) s = fmaf(q[e][i], k[i], s);
                    part[e * kSplitBatch + r] = s;
                }
            }
            const float d = transpose_reduce(part, lane);  // head 4 * quad + (lane >> 3), row jb + (lane & 7)
            s_dot[hf][4 * quad + (lane >> 3)][jb + (lane & 7)] = d;
        }
        __syncthreads();

        // Softmax of the tile: warp = head, lane = row.
        {
            const bool valid = lane < nvalid;
            const float z = valid ? (s_dot[0][warp][lane] + s_dot[1][warp][lane]) * a.scale : -INFINITY;
            float mx = z;
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(kFull, mx, o));
            const float m_new = fmaxf(m_run, mx);  // finite: the tile has a valid row
            const float p = valid ? expf(z - m_new) : 0.0f;
            float ps = p;  // the butterfly gives every lane the same sum
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) ps += __shfl_xor_sync(kFull, ps, o);
            const float f = expf(m_run - m_new);  // 0 on the first tile (m_run = -inf)
            l_run = l_run * f + ps;
            m_run = m_new;
            s_p[lane][warp] = p;
            if (lane == 0) s_f[warp] = f;
        }
        __syncthreads();

        // Output sums of this warp's 4 heads over its half and its rows.
        {
            const float4 f4 = *reinterpret_cast<const float4*>(&s_f[4 * quad]);
#pragma unroll
            for (int i = 0; i < HC; ++i) {
                acc[0][i] *= f4.x;
                acc[1][i] *= f4.y;
                acc[2][i] *= f4.z;
                acc[3][i] *= f4.w;
            }
#pragma unroll 4
            for (int j = set0; j < set_end; ++j) {
                const float4 p4 = *reinterpret_cast<const float4*>(&s_p[j][4 * quad]);
                float k[HC];
                load_lane<HC>(kt + j * width, lane, k);
#pragma unroll
                for (int i = 0; i < HC; ++i) {
                    acc[0][i] = fmaf(p4.x, k[i], acc[0][i]);
                    acc[1][i] = fmaf(p4.y, k[i], acc[1][i]);
                    acc[2][i] = fmaf(p4.z, k[i], acc[2][i]);
                    acc[3][i] = fmaf(p4.w, k[i], acc[3][i]);
                }
            }
        }
        __syncthreads();  // the buffer is refilled by the next iteration's issue
    }

    // Set 1's sums join set 0's through the (now idle) tile buffer, [16 heads][width].
    float* red = tiles + 4 * quad * width + hf * half;
    if (rs == 1) {
#pragma unroll
        for (int e = 0; e < 4; ++e) store_lane<HC>(red + e * width, lane, acc[e]);
    }
    __syncthreads();
    const int64_t slot = (g.t * n_splits + split) * int64_t(a.H);  // + head
    if (rs == 0) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            float o[HC];
            load_lane<HC>(red + e * width, lane, o);
#pragma unroll
            for (int i = 0; i < HC; ++i) o[i] = acc[e][i] + o[i];
            const int h = h0 + 4 * quad + e;
            if (h < a.H) store_lane<HC>(ws_acc + (slot + h) * width + hf * half, lane, o);
        }
    }
    if (lane == 0 && h0 + warp < a.H) ws_ml[slot + h0 + warp] = make_float2(m_run, l_run);
}

// One block per (head, query): merges the splits in a fixed order. Thread (group gr, quad c4)
// sums channels 4 c4 .. 4 c4 + 3 of the splits s = gr, gr + kCombineGroups, ... in ascending s,
// kCombineBatch loads in flight at a time; the groups' sums are then added in group order. The
// splits' (m, l) and weights are staged in shared memory (m, l, w: 3 * n_splits floats, then the
// groups' sums, kCombineGroups * width floats). Launched as a programmatic dependent of the split
// kernel (its launch overlaps the split kernel's run): it waits for that grid's completion and
// memory before it reads anything.
constexpr int kCombineGroups = 4, kCombineBatch = 8;

__global__ void __launch_bounds__(kCombineGroups * 128)
    sparse_attn_combine_kernel(const SparseAttnArgs a, int rows, int n_splits, const float* __restrict__ ws_acc,
                               const float2* __restrict__ ws_ml) {
    grid_begin();
    extern __shared__ __align__(16) float s_comb[];
    float* s_m = s_comb;
    float* s_l = s_comb + n_splits;
    float* s_w = s_comb + 2 * n_splits;
    float4* s_sum = reinterpret_cast<float4*>(s_comb + ((3 * n_splits + 3) & ~3));  // [group][width / 4]
    const int quads = a.width / 4;
    const int c4 = threadIdx.x % quads, gr = threadIdx.x / quads;
    const int h = blockIdx.x;
    const KeyGeom g = key_geom(a, blockIdx.y);
    const int ns = (g.n_keys + rows - 1) / rows;  // the splits that hold keys of this query
    const int64_t base = g.t * n_splits * int64_t(a.H) + h, stride = a.H;
    for (int s = threadIdx.x; s < ns; s += blockDim.x) {
        const float2 ml = ws_ml[base + s * stride];
        s_m[s] = ml.x;
        s_l[s] = ml.y;
    }
    __syncthreads();
    const float sink = a.sinks[h];
    float M = sink;
    for (int s = 0; s < ns; ++s) M = fmaxf(M, s_m[s]);
    for (int s = threadIdx.x; s < ns; s += blockDim.x) s_w[s] = expf(s_m[s] - M);
    __syncthreads();

    const float4* src = reinterpret_cast<const float4*>(ws_acc + base * a.width) + c4;
    const int64_t step = stride * quads;  // float4s from one split's row to the next
    float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    for (int s0 = gr; s0 < ns; s0 += kCombineGroups * kCombineBatch) {
        float4 v[kCombineBatch];
#pragma unroll
        for (int u = 0; u < kCombineBatch; ++u) {
            const int s = s0 + u * kCombineGroups;
            v[u] = s < ns ? src[s * step] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        }
#pragma unroll
        for (int u = 0; u < kCombineBatch; ++u) {
            const int s = s0 + u * kCombineGroups;
            if (s < ns) {
                const float w = s_w[s];
                acc.x += w * v[u].x;
                acc.y += w * v[u].y;
                acc.z += w * v[u].z;
                acc.w += w * v[u].w;
            }
        }
    }
    s_sum[gr * quads + c4] = acc;
    __syncthreads();
    if (gr != 0) return;
    float L = expf(sink - M);
    for (int s = 0; s < ns; ++s) L += s_l[s] * s_w[s];
    acc = s_sum[c4];
#pragma unroll
    for (int k = 1; k < kCombineGroups; ++k) {
        const float4 o = s_sum[k * quads + c4];
        acc.x += o.x;
        acc.y += o.y;
        acc.z += o.z;
        acc.w += o.w;
    }
    const float inv = 1.0f / L;
    float* o = a.out + (g.t * a.H + h) * int64_t(a.width) + 4 * c4;
    o[0] = acc.x * inv;
    o[1] = acc.y * inv;
    o[2] = acc.z * inv;
    o[3] = acc.w * inv;
}

// The decode path's cut: splits = 0 means the one-pass kernel. Taken when the one-pass grid,
// T * ceil(H / 16) blocks, is under two waves of the multiprocessors and the width is a multiple
// of 64 (two channel halves of whole warps). The splits aim at about one block per
// multiprocessor: rows = the longest query's key count over (SMs / (T * groups)), rounded up to
// whole batches of 8 (so 8 or more rows a block: fewer, and the partial sums written would
// outweigh the rows read). It depends on the shapes and positions only (not on n_picked, which is
// on the device), so the grid and the workspace are known on the host.
struct SplitPlan {
    int rows = 0, splits = 0;
};

SplitPlan split_plan(const SparseAttnArgs& a) {
    SplitPlan p;
    if (a.T <= 0 || a.H <= 0 || a.width <= 0 || a.width % 64 || a.width > 512 || a.window <= 0) return p;
    const int64_t groups = ceil_div(a.H, kSplitHeads);
    const int64_t sms = device_limits().sms;
    if (a.T * groups >= 2 * sms) return p;
    // Upper bounds of key_geom's counts over the T queries.
    const int64_t n_win = std::min<int64_t>(a.window, a.pos0 + a.T - a.cache_from);
    int64_t n_c = 0;
    if (a.comp) n_c = a.picked ? std::max(a.top_k, 0) : a.ratio > 0 ? std::min((a.pos0 + a.T) / a.ratio, a.n_comp) : 0;
    const int64_t n_max = std::max<int64_t>(1, n_win + std::max<int64_t>(n_c, 0));
    if (n_max > 0x3fffffff) return p;  // key counts are int; such a query takes the one-pass kernel
    const int64_t want = std::max<int64_t>(1, sms / (a.T * groups));
    const int64_t per = (n_max + want - 1) / want;
    const int64_t rows = std::max<int64_t>(kSplitBatch, (per + kSplitBatch - 1) / kSplitBatch * kSplitBatch);
    p.rows = int(rows);
    p.splits = int((n_max + rows - 1) / rows);
    return p;
}

size_t split_workspace_bytes(const SparseAttnArgs& a, const SplitPlan& p) {
    return size_t(a.T) * size_t(p.splits) * size_t(a.H) * (size_t(a.width) + 2) * sizeof(float);
}

template <int HC>
void launch_split(const SparseAttnArgs& a, const SplitPlan& p, void* workspace, Stream stream) {
    const size_t smem = size_t(2) * kSplitTile * HC * 64 * sizeof(float);
    static const bool attr_set = [&] {
        DSV4_CUDA_CHECK(cudaFuncSetAttribute(sparse_attn_split_kernel<HC>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
        return true;
    }();
    (void)attr_set;
    float* ws_acc = static_cast<float*>(workspace);
    float2* ws_ml = reinterpret_cast<float2*>(ws_acc + size_t(a.T) * size_t(p.splits) * size_t(a.H) * size_t(a.width));
    const dim3 grid(unsigned(p.splits), ceil_div(a.H, kSplitHeads), unsigned(a.T));
    launch(sparse_attn_split_kernel<HC>, grid, kSplitThreads, smem, stream, a, p.rows, p.splits, ws_acc, ws_ml);
    DSV4_LAUNCH_CHECK();
    // The combine's launch overlaps the split kernel's run (it waits in grid_begin).
    const size_t combine_smem =
        (size_t(3 * p.splits + 3) & ~size_t(3)) * sizeof(float) + size_t(kCombineGroups) * a.width * sizeof(float);
    launch_pdl(sparse_attn_combine_kernel, dim3(unsigned(a.H), unsigned(a.T)), dim3(unsigned(kCombineGroups * a.width / 4)),
               combine_smem, stream, a, p.rows, p.splits, static_cast<const float*>(ws_acc),
               static_cast<const float2*>(ws_ml));
}

template <int NC>
void launch_sparse(const SparseAttnArgs& a, Stream stream) {
    const size_t smem = size_t(2) * kTileKeys * NC * 32 * sizeof(float);
    static const bool attr_set = [&] {
        DSV4_CUDA_CHECK(cudaFuncSetAttribute(sparse_attn_kernel<NC>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
        return true;
    }();
    (void)attr_set;
    const int warps = std::min(a.H, kMaxHeadsPerBlock);
    const dim3 grid(unsigned(a.T), ceil_div(a.H, kMaxHeadsPerBlock));
    launch(sparse_attn_kernel<NC>, grid, warps * 32, smem, stream, a);
    DSV4_LAUNCH_CHECK();
}

template <int DIM>
void launch_score(const IndexerArgs& a, int64_t t_begin, float* scores, Stream stream) {
    const size_t smem = (size_t(a.heads) * size_t(a.dim) + size_t(a.heads)) * sizeof(float);
    const DeviceLimits& lim = device_limits();
    if (smem > lim.smem_optin)
        fail("CUDA indexer: heads ", a.heads, " x dim ", a.dim, " queries need ", smem,
             " bytes of shared memory, the device has ", lim.smem_optin);
    static const bool attr_set = [&] {
        DSV4_CUDA_CHECK(cudaFuncSetAttribute(indexer_score_kernel<DIM>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             int(lim.smem_optin)));
        return true;
    }();
    (void)attr_set;
    const dim3 grid(ceil_div(a.T - t_begin, kScoreQueries), ceil_div(a.n_rows, kScoreThreads));
    launch(indexer_score_kernel<DIM>, grid, kScoreThreads, smem, stream, a, t_begin, scores);
    DSV4_LAUNCH_CHECK();
}

}  // namespace

void rope(float* v, int64_t rows, int width, int64_t row_stride, int per_pos, int64_t pos0, const float* inv_freq,
          int dim, bool inverse, Stream stream) {
    if (rows < 0) fail("CUDA rope: rows = ", rows);
    if (dim <= 0 || dim % 2) fail("CUDA rope: dim = ", dim, " (must be positive and even)");
    if (width < dim) fail("CUDA rope: width ", width, " < dim ", dim);
    if (row_stride < width) fail("CUDA rope: row_stride ", row_stride, " < width ", width);
    if (per_pos < 1) fail("CUDA rope: per_pos = ", per_pos);
    if (pos0 < 0) fail("CUDA rope: pos0 = ", pos0);
    if (rows == 0) return;
    if (!v || !inv_freq) fail("CUDA rope: null ", !v ? "v" : "inv_freq");
    const int64_t n = rows * (dim / 2);
    launch(rope_kernel, ceil_div(n, 256), 256, 0, stream, v, rows, width, row_stride, per_pos, pos0, inv_freq, dim / 2,
           inverse);
    DSV4_LAUNCH_CHECK();
}

void compress_windows(const CompressArgs& a, Stream stream) {
    if (a.width <= 0) fail("CUDA compress_windows: width = ", a.width);
    if (a.coff != 1 && a.coff != 2) fail("CUDA compress_windows: coff = ", a.coff, " (1 or 2)");
    if (a.ratio <= 0) fail("CUDA compress_windows: ratio = ", a.ratio);
    if (a.n_windows < 0) fail("CUDA compress_windows: n_windows = ", a.n_windows);
    if (a.first_row < 0) fail("CUDA compress_windows: first_row = ", a.first_row);
    if (a.dim < 0 || a.dim % 2 || a.dim > a.width)
        fail("CUDA compress_windows: rope dim ", a.dim, " (even, at most width ", a.width, ")");
    if (a.n_windows > 0x7fffffff) fail("CUDA compress_windows: n_windows = ", a.n_windows, " is more than one grid");
    if (size_t(a.width) * sizeof(float) > 48 * 1024) fail("CUDA compress_windows: width ", a.width, " too wide");
    if (a.n_windows == 0) return;
    if (!a.kv || !a.gate || !a.ape || !a.norm || !a.rows) fail("CUDA compress_windows: null kv, gate, ape, norm or rows");
    if (a.dim > 0 && !a.inv_freq) fail("CUDA compress_windows: null inv_freq with dim ", a.dim);
    if (a.coff == 2 && a.has_prev && (!a.prev_kv || !a.prev_gate))
        fail("CUDA compress_windows: has_prev without prev_kv / prev_gate");
    launch(compress_kernel, unsigned(a.n_windows), kCompressThreads, size_t(a.width) * sizeof(float), stream, a);
    DSV4_LAUNCH_CHECK();
}

size_t indexer_workspace_bytes(int64_t T, int64_t n_rows) {
    if (T < 0 || n_rows < 0) fail("CUDA indexer: T = ", T, ", n_rows = ", n_rows);
    return size_t(T) * size_t(n_rows) * sizeof(float);
}

void indexer_topk(const IndexerArgs& a, void* workspace, size_t workspace_bytes, Stream stream) {
    if (a.T < 0 || a.pos0 < 0 || a.n_rows < 0)
        fail("CUDA indexer: T = ", a.T, ", pos0 = ", a.pos0, ", n_rows = ", a.n_rows);
    if (a.heads <= 0 || a.dim <= 0) fail("CUDA indexer: heads = ", a.heads, ", dim = ", a.dim);
    if (a.ratio <= 0) fail("CUDA indexer: ratio = ", a.ratio);
    if (a.top_k <= 0) fail("CUDA indexer: top_k = ", a.top_k);
    if (a.n_rows > 0x7fffffff) fail("CUDA indexer: n_rows = ", a.n_rows, " (row ids are int32)");
    if (a.T > 0x7fffffff) fail("CUDA indexer: T = ", a.T, " is more than one grid");
    if (a.n_rows > int64_t(65535) * kScoreThreads) fail("CUDA indexer: n_rows = ", a.n_rows, " is more than one grid");
    const size_t need = indexer_workspace_bytes(a.T, a.n_rows);
    if (workspace_bytes < need || (need && !workspace))
        fail("CUDA indexer: workspace of ", workspace_bytes, " bytes, ", need, " needed");
    if (a.T == 0) return;
    if (!a.picked || !a.n_picked) fail("CUDA indexer: null picked or n_picked");
    // Queries that see at most top_k rows take them all and need no scores: n_visible(t) > top_k
    // iff n_rows > top_k and pos0 + t + 1 >= (top_k + 1) * ratio.
    const int64_t t_begin = a.n_rows > a.top_k ? std::max<int64_t>(0, int64_t(a.top_k + 1) * a.ratio - a.pos0 - 1) : a.T;
    if (t_begin < a.T) {
        if (!a.q || !a.w || !a.k) fail("CUDA indexer: null q, w or k");
        float* scores = static_cast<float*>(workspace);
        const bool reg = aligned16(a.k);
        switch (reg ? a.dim : 0) {
            case 16: launch_score<16>(a, t_begin, scores, stream); break;
            case 32: launch_score<32>(a, t_begin, scores, stream); break;
            case 64: launch_score<64>(a, t_begin, scores, stream); break;
            case 128: launch_score<128>(a, t_begin, scores, stream); break;
            default: launch_score<0>(a, t_begin, scores, stream); break;
        }
    }
    launch(indexer_select_kernel, unsigned(a.T), kSelectThreads, 0, stream, static_cast<const float*>(workspace),
           a.n_rows, a.pos0, a.ratio, a.top_k, a.picked, a.n_picked);
    DSV4_LAUNCH_CHECK();
}

size_t sparse_attention_workspace_bytes(const SparseAttnArgs& a) {
    if (a.T <= 0) return 0;
    const SplitPlan p = split_plan(a);
    return p.splits > 0 ? split_workspace_bytes(a, p) : 0;
}

void sparse_attention(const SparseAttnArgs& a, void* workspace, size_t workspace_bytes, Stream stream) {
    if (a.T < 0 || a.pos0 < 0) fail("CUDA sparse_attention: T = ", a.T, ", pos0 = ", a.pos0);
    if (a.T > 0x7fffffff) fail("CUDA sparse_attention: T = ", a.T, " is more than one grid");
    if (a.H <= 0) fail("CUDA sparse_attention: H = ", a.H);
    if (a.width <= 0 || a.width % 32 || a.width > 512)
        fail("CUDA sparse_attention: width = ", a.width, " (a multiple of 32 up to 512)");
    if (a.window <= 0) fail("CUDA sparse_attention: window = ", a.window);
    if (a.cache_from < 0 || a.cache_from > a.pos0)
        fail("CUDA sparse_attention: cache_from = ", a.cache_from, " outside [0, pos0 = ", a.pos0, "]");
    if (a.comp) {
        if (a.n_comp < 0) fail("CUDA sparse_attention: n_comp = ", a.n_comp);
        if (a.picked) {
            if (!a.n_picked || a.top_k <= 0)
                fail("CUDA sparse_attention: picked rows need n_picked and top_k > 0 (top_k = ", a.top_k, ")");
        } else if (a.ratio <= 0) {
            fail("CUDA sparse_attention: ratio = ", a.ratio, " with compressed rows and no picked lists");
        }
        if (!aligned16(a.comp)) fail("CUDA sparse_attention: comp is not 16-byte aligned");
    }
    if (a.T == 0) return;
    if (!a.q || !a.sinks || !a.chunk || !a.out) fail("CUDA sparse_attention: null q, sinks, chunk or out");
    if (!aligned16(a.chunk)) fail("CUDA sparse_attention: chunk is not 16-byte aligned");
    // The first query's window reaches furthest back: the cache is read iff it starts before pos0.
    const int64_t start0 = std::max({int64_t(0), a.pos0 - a.window + 1, a.cache_from});
    if (start0 < a.pos0) {
        if (!a.cache) fail("CUDA sparse_attention: null cache with window rows from position ", start0, " < pos0 ", a.pos0);
        if (!aligned16(a.cache)) fail("CUDA sparse_attention: cache is not 16-byte aligned");
    }
    const SplitPlan p = split_plan(a);
    if (p.splits > 0) {
        const size_t need = split_workspace_bytes(a, p);
        if (workspace_bytes < need || !workspace)
            fail("CUDA sparse_attention: workspace of ", workspace_bytes, " bytes, ", need, " needed");
        if (!aligned16(workspace)) fail("CUDA sparse_attention: workspace is not 16-byte aligned");
        switch (a.width / 64) {
            case 1: launch_split<1>(a, p, workspace, stream); break;
            case 2: launch_split<2>(a, p, workspace, stream); break;
            case 3: launch_split<3>(a, p, workspace, stream); break;
            case 4: launch_split<4>(a, p, workspace, stream); break;
            case 5: launch_split<5>(a, p, workspace, stream); break;
            case 6: launch_split<6>(a, p, workspace, stream); break;
            case 7: launch_split<7>(a, p, workspace, stream); break;
            case 8: launch_split<8>(a, p, workspace, stream); break;
        }
        return;
    }
    switch (a.width / 32) {
        case 1: launch_sparse<1>(a, stream); break;
        case 2: launch_sparse<2>(a, stream); break;
        case 3: launch_sparse<3>(a, stream); break;
        case 4: launch_sparse<4>(a, stream); break;
        case 5: launch_sparse<5>(a, stream); break;
        case 6: launch_sparse<6>(a, stream); break;
        case 7: launch_sparse<7>(a, stream); break;
        case 8: launch_sparse<8>(a, stream); break;
        case 9: launch_sparse<9>(a, stream); break;
        case 10: launch_sparse<10>(a, stream); break;
        case 11: launch_sparse<11>(a, stream); break;
        case 12: launch_sparse<12>(a, stream); break;
        case 13: launch_sparse<13>(a, stream); break;
        case 14: launch_sparse<14>(a, stream); break;
        case 15: launch_sparse<15>(a, stream); break;
        case 16: launch_sparse<16>(a, stream); break;
    }
}

}  // namespace dsv4::cuda
