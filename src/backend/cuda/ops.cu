// The CUDA versions of the CPU reference's per-token ops (see ops.h).
//
// Arithmetic follows backend/cpu/ops.cpp operation for operation wherever that is cheap, so
// that most results agree bit for bit and the rest to float32 rounding:
//   * Products that the CPU adds afterwards are written __fmul_rn / __fadd_rn, so that nvcc
//     does not contract them into fused multiply-adds (the CPU reference has none).
//   * exp (and log1p in softplus) are taken in double and rounded once to float: that is the
//     correctly rounded float result, which is what glibc's expf returns in practice, where
//     CUDA's expf may be 2 ulp away.
//   * RMS scales accumulate x² in double and compute 1 / sqrt(float(ss / n) + eps) in float, as
//     cpu::rms_scale; only the order of the double sum differs.
//   * Only the dot products of the hyper-connection mixes (fn · normalised row) are summed in
//     another order (per-thread fused multiply-adds, then fixed-order tree and block sums), and
//     the RMS scale is applied to the sum rather than to each element (one pass over X, not two).
// Every reduction has a fixed order, so every op is deterministic run to run.
//
// Kernels:
//   rmsnorm         one block per row: double sum of squares (warp shuffles, then warps in order);
//                   rows of a multiple of 4 floats (aligned, up to 32K) in one pass held in
//                   registers as float4, up to 1024 threads (a decode step's row in one wave of loads).
//   embed_streams   one block per token: load_elem of the stored row, written to every stream.
//   hc_pre/hc_head  one cluster of blocks per token, fused: RMS sum, the (2+n)*n (or n) fn dot
//                   products over n*D columns, partial sums exchanged through distributed shared
//                   memory in rank order; the gates by one warp (n*n <= 32: lane per comb entry,
//                   shuffles in the CPU's order) or one thread; then y = sum_j pre_j X_j over each
//                   block's share of D, the Sinkhorn beside y. T <= 8 (decode): 16 blocks per
//                   token (8 where 16 cannot be scheduled), one wave of float4 loads; more tokens:
//                   8 down to 1 block per token.
//   hc_post         a thread per (token, column): the n old stream values in registers.
//   swiglu, add_to_streams   grid-stride elementwise.
//   route           a warp per token (4 per block): scores/keys in shared memory, computed by the
//                   whole block, then k rounds of a warp arg-max
//                   (larger key, then lower id), lane 0 normalises the weights in slot order.
//   moe_group       one block of 1024 threads: shared counters, scan, then a stable placement in
//                   chunks of 1024 pairs (__match_any_sync ranks within a warp, per-warp counts).
//   gather_rows     a block per sorted pair (float4 copies where aligned).
//   moe_combine     a block per (token, 512 columns): its k slots ranked by (expert, slot), then
//                   added in that order (float4 where aligned, every row's load in flight at once).
#include "backend/cuda/ops.h"

#include <cooperative_groups.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "backend/cpu/quant.h"
#include "backend/cuda/attention_kernels.h"
#include "backend/cuda/common.cuh"

namespace dsv4::cuda {

namespace {

namespace cg = cooperative_groups;

constexpr int kMaxHc = 8;                            // streams of a hyper-connection site
constexpr int kMaxMix = (2 + kMaxHc) * kMaxHc;       // mix rows of hc_pre
constexpr int kMaxTopK = 16;                         // experts per token (route, moe_combine)
constexpr int kMaxExperts = 1024;                    // route keeps 32 experts per lane; moe_group's shared counters
constexpr int kHcThreads = 256, kHcWarps = kHcThreads / 32;
constexpr int kHcMaxCluster = 8;                     // blocks per token of hc_pre / hc_head
constexpr int kGateWarpMaxN = 5;                    // hc gates by one warp: n*n <= 32 comb entries
constexpr int kRouteWarps = 4;
constexpr int kGroupThreads = 1024, kGroupWarps = kGroupThreads / 32;
constexpr int kNormMaxThreads = 1024;                // rmsnorm_vec_kernel
constexpr int kCombineThreads = 128;                 // moe_combine: columns per block, x 4 with float4

// ---- scalar helpers, as the CPU reference computes them ------------------------------------

__device__ __forceinline__ float exp_ref(float x) { return float(exp(double(x))); }
__device__ __forceinline__ float sigmoid_ref(float x) { return __fdiv_rn(1.0f, __fadd_rn(1.0f, exp_ref(-x))); }
// torch softplus (threshold 20), then sqrt: the routing score.
__device__ __forceinline__ float route_score(float x) {
    const float sp = x > 20.0f ? x : float(log1p(double(exp_ref(x))));
    return __fsqrt_rn(sp);
}
// 1 / sqrt(float(ss / n) + eps), as cpu::rms_scale.
__device__ __forceinline__ float rms_from_ss(double ss, int64_t n, float eps) {
    return __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(float(__ddiv_rn(ss, double(n))), eps)));
}

__device__ __forceinline__ int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

template <class V>
__device__ __forceinline__ V warp_sum(V v) {
    // Butterfly: every lane ends with the same value (float addition is commutative).
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// Sum of one double per thread over the block, in a fixed order; every thread gets it.
// red: kWarps doubles of shared memory.
__device__ double block_sum_double(double v, double* red) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    v = warp_sum(v);
    __syncthreads();  // red may still be read from a previous call
    if (lane == 0) red[warp] = v;
    __syncthreads();
    double s = 0;
    for (int w = 0; w < warps; ++w) s += red[w];
    return s;
}

// ---- rmsnorm --------------------------------------------------------------------------------

__global__ void __launch_bounds__(256) rmsnorm_kernel(float* x, int64_t n, const float* weight, float eps) {
    grid_begin();
    __shared__ double red[8];
    float* r = x + int64_t(blockIdx.x) * n;
    double ss = 0;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
        const double v = r[i];
        ss += v * v;  // exact in double (a float product has 48 significant bits)
    }
    const float s = rms_from_ss(block_sum_double(ss, red), n, eps);
    if (weight) {
        for (int64_t i = threadIdx.x; i < n; i += blockDim.x) r[i] = __fmul_rn(weight[i], __fmul_rn(r[i], s));
    } else {
        for (int64_t i = threadIdx.x; i < n; i += blockDim.x) r[i] = __fmul_rn(r[i], s);
    }
}

// The same for rows of n = 4 * n4 floats, 16-byte aligned, n4 <= V * blockDim.x: one pass, the
// row (and its weights, loaded before the reduction so that both loads are in flight at once)
// held in registers as V float4 per thread. At T = 1 the whole row is one wave of loads, where
// the loop above waits for n / 256 of them in turn.
// RopeTail (ROPE): then cpu::Rope::apply on the trailing 2 * half channels of the row (pairs
// (c, c+1) never straddle a float4: the first rotated channel is even), at position pos0 +
// row / per_pos, on the normed values, as rope() would rotate them afterwards.
struct RopeTail {
    const float* inv_freq = nullptr;
    int64_t pos0 = 0;
    int per_pos = 1, half = 0;
};

template <int V, bool ROPE = false>
__global__ void __launch_bounds__(kNormMaxThreads) rmsnorm_vec_kernel(float* x, int n4, const float* weight,
                                                                      float eps, RopeTail rope = {}) {
    grid_begin();
    __shared__ double red[kNormMaxThreads / 32];
    float4* r = reinterpret_cast<float4*>(x) + int64_t(blockIdx.x) * n4;
    const float4* w4 = reinterpret_cast<const float4*>(weight);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    float4 v[V], w[V];
    double ss = 0;
#pragma unroll
    for (int k = 0; k < V; ++k) {
        const int i = threadIdx.x + k * blockDim.x;
        v[k] = i < n4 ? r[i] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        w[k] = weight && i < n4 ? w4[i] : make_float4(1.0f, 1.0f, 1.0f, 1.0f);
        // Each product is exact in double, so a contracted fma rounds the same.
        ss += double(v[k].x) * v[k].x;
        ss += double(v[k].y) * v[k].y;
        ss += double(v[k].z) * v[k].z;
        ss += double(v[k].w) * v[k].w;
    }
    // Fixed-order block sum: warp butterflies, then every warp adds the warps' sums with the same
    // butterfly, so every thread gets the same value without a second barrier.
    ss = warp_sum(ss);
    if (lane == 0) red[warp] = ss;
    __syncthreads();
    const float s = rms_from_ss(warp_sum(lane < warps ? red[lane] : 0.0), int64_t(n4) * 4, eps);
#pragma unroll
    for (int k = 0; k < V; ++k) {
        const int i = threadIdx.x + k * blockDim.x;
        if (i >= n4) break;
        float4 o = make_float4(__fmul_rn(v[k].x, s), __fmul_rn(v[k].y, s), __fmul_rn(v[k].z, s), __fmul_rn(v[k].w, s));
        if (weight) o = make_float4(__fmul_rn(w[k].x, o.x), __fmul_rn(w[k].y, o.y), __fmul_rn(w[k].z, o.z), __fmul_rn(w[k].w, o.w));
        if constexpr (ROPE) {
            const int p = 2 * i - (2 * n4 - rope.half);  // pair index of channels 4i, 4i+1
            if (p >= 0) {
                const float pos = float(rope.pos0 + int64_t(blockIdx.x) / rope.per_pos);
                rotate_pair(o.x, o.y, __fmul_rn(pos, rope.inv_freq[p]), false);
                rotate_pair(o.z, o.w, __fmul_rn(pos, rope.inv_freq[p + 1]), false);
            }
        }
        r[i] = o;
    }
}

// ---- embed_streams --------------------------------------------------------------------------

template <int TYPE>
__global__ void __launch_bounds__(256) embed_kernel(const uint8_t* w, size_t row_bytes, int64_t rows, int64_t D,
                                                    const int32_t* tokens, int hc, float* X) {
    grid_begin();
    const int64_t t = blockIdx.x;
    const int32_t tok = tokens[t];
    const bool ok = tok >= 0 && tok < rows;  // the caller checks ids; an id outside gives NaN rows, not a fault
    const uint8_t* row = w + size_t(ok ? tok : 0) * row_bytes;
    float* out = X + t * hc * D;
    for (int64_t i = threadIdx.x; i < D; i += blockDim.x) {
        const float v = ok ? load_elem<TYPE>(row, i) : __int_as_float(0x7fc00000);
        for (int k = 0; k < hc; ++k) out[k * D + i] = v;
    }
}

// ---- hc_pre / hc_head -----------------------------------------------------------------------

struct HcArgs {
    const uint8_t* fn;
    size_t fn_row_bytes;
    int rows;  // mix rows: (2+n)*n for hc_pre, n for hc_head
    const float* base;
    const float* scale;
    const float* X;
    int n;
    int64_t D;
    int iters;
    float hc_eps, norm_eps;
    float* y;
    float* post;  // hc_pre only
    float* comb;  // hc_pre only
};

// The sigmoid / softmax / Sinkhorn part of cpu::hc_pre for one token, by one thread (any n):
// mix m[rows], base[rows], scale sc[3] -> pre[n], post[n], C = comb[n*n] (shared memory).
__device__ void hc_pre_gates_serial(const float* m, const float* base, const float* sc, int n, int iters, float eps,
                                    float* pre, float* post, float* C) {
    const float sc0 = sc[0], sc1 = sc[1], sc2 = sc[2];
    for (int j = 0; j < n; ++j) pre[j] = __fadd_rn(sigmoid_ref(__fadd_rn(__fmul_rn(m[j], sc0), base[j])), eps);
    for (int k = 0; k < n; ++k)
        post[k] = __fmul_rn(2.0f, sigmoid_ref(__fadd_rn(__fmul_rn(m[n + k], sc1), base[n + k])));
    for (int j = 0; j < n; ++j) {  // row softmax
        float* row = C + j * n;
        float mx = -INFINITY;
        for (int k = 0; k < n; ++k) {
            row[k] = __fadd_rn(__fmul_rn(m[2 * n + j * n + k], sc2), base[2 * n + j * n + k]);
            mx = mx < row[k] ? row[k] : mx;  // std::max(mx, row[k])
        }
        float sum = 0;
        for (int k = 0; k < n; ++k) {
            row[k] = exp_ref(__fsub_rn(row[k], mx));
            sum = __fadd_rn(sum, row[k]);
        }
        for (int k = 0; k < n; ++k) row[k] = __fadd_rn(__fdiv_rn(row[k], sum), eps);
    }
    auto normalise_columns = [&] {
        for (int k = 0; k < n; ++k) {
            float sum = 0;
            for (int j = 0; j < n; ++j) sum = __fadd_rn(sum, C[j * n + k]);
            for (int j = 0; j < n; ++j) C[j * n + k] = __fdiv_rn(C[j * n + k], __fadd_rn(sum, eps));
        }
    };
    normalise_columns();
    for (int it = 1; it < iters; ++it) {
        for (int j = 0; j < n; ++j) {
            float sum = 0;
            for (int k = 0; k < n; ++k) sum = __fadd_rn(sum, C[j * n + k]);
            for (int k = 0; k < n; ++k) C[j * n + k] = __fdiv_rn(C[j * n + k], __fadd_rn(sum, eps));
        }
        normalise_columns();
    }
}

// The same by one warp, for n*n <= 32: lane q < n*n holds comb entry (q / n, q % n); each row or
// column sum gathers its n entries with shuffles and adds them in the CPU's order (0 + C[.][0] +
// C[.][1] + ...), so the result is the serial version's, bit for bit, in a fraction of its time.
// Every lane of the warp must call it.
__device__ void hc_pre_gates_warp(const float* m, const float* base, const float* sc, int n, int iters, float eps,
                                  float* pre, float* post, float* comb) {
    const unsigned full = 0xffffffffu;
    const int lane = threadIdx.x & 31;
    if (lane < n) {
        pre[lane] = __fadd_rn(sigmoid_ref(__fadd_rn(__fmul_rn(m[lane], sc[0]), base[lane])), eps);
        post[lane] = __fmul_rn(2.0f, sigmoid_ref(__fadd_rn(__fmul_rn(m[n + lane], sc[1]), base[n + lane])));
    }
    const bool own = lane < n * n;
    const int j = lane / n, k = lane % n;  // lanes past n*n compute garbage that nobody reads
    // Row or column sums (and the row max) over n <= kGateWarpMaxN entries, in the CPU's order
    // (0 + C[.][0] + C[.][1] + ...). Unrolled to kGateWarpMaxN with selects past n: in a loop to
    // the runtime n each shuffle would wait for the previous addition (most of the Sinkhorn's time).
    auto row_sum = [&](float val) {
        float s = 0;
#pragma unroll
        for (int q = 0; q < kGateWarpMaxN; ++q) {
            const float r = __shfl_sync(full, val, j * n + (q < n ? q : 0));
            s = q < n ? __fadd_rn(s, r) : s;
        }
        return s;
    };
    auto column_sum = [&](float val) {
        float s = 0;
#pragma unroll
        for (int q = 0; q < kGateWarpMaxN; ++q) {
            const float r = __shfl_sync(full, val, (q < n ? q : 0) * n + k);
            s = q < n ? __fadd_rn(s, r) : s;
        }
        return s;
    };
    float v = own ? __fadd_rn(__fmul_rn(m[2 * n + lane], sc[2]), base[2 * n + lane]) : 0.0f;
    // row softmax
    float mx = -INFINITY;
#pragma unroll
    for (int q = 0; q < kGateWarpMaxN; ++q) {
        const float r = __shfl_sync(full, v, j * n + (q < n ? q : 0));
        mx = q < n && mx < r ? r : mx;
    }
    v = exp_ref(__fsub_rn(v, mx));
    v = __fadd_rn(__fdiv_rn(v, row_sum(v)), eps);
    v = __fdiv_rn(v, __fadd_rn(column_sum(v), eps));
    for (int it = 1; it < iters; ++it) {
        v = __fdiv_rn(v, __fadd_rn(row_sum(v), eps));
        v = __fdiv_rn(v, __fadd_rn(column_sum(v), eps));
    }
    if (own) comb[lane] = v;
}

void check_hc_shape(const char* op, const HcShape& s) {
    if (s.n < 1 || s.n > kMaxHc) fail("CUDA ", op, ": hc streams n = ", s.n, " (1..", kMaxHc, " supported)");
    if (s.D < 1) fail("CUDA ", op, ": hidden D = ", s.D);
    if (s.iters < 1) fail("CUDA ", op, ": Sinkhorn iterations = ", s.iters);
}

void check_weight(const char* op, const char* what, const DeviceMat& w, int64_t rows, int64_t cols) {
    if (!w.data) fail("CUDA ", op, ": ", what, " has no device data");
    if (w.rows != rows || w.cols != cols)
        fail("CUDA ", op, ": ", what, " is [", w.rows, ", ", w.cols, "], expected [", rows, ", ", cols, "]");
    if (!cpu::is_float_weight_type(w.type)) fail("CUDA ", op, ": ", what, " has type ", gguf::type_name(w.type));
    dispatch_wtype(int(w.type), [&]<int TYPE>() {});  // throws for a type the CUDA backend does not read
    const size_t need = cpu::row_bytes(w.type, cols);
    if (w.row_bytes < need)
        fail("CUDA ", op, ": ", what, " rows of ", w.row_bytes, " bytes, ", need, " needed for ", cols, " ",
             gguf::type_name(w.type), " values");
}

// Blocks per token: enough clusters to give every multiprocessor two blocks, at most 8.
int hc_cluster_size(int64_t T) {
    const int64_t want = 2 * int64_t(device_limits().sms);
    int c = kHcMaxCluster;
    while (c > 1 && T * (c / 2) >= want) c /= 2;
    return c;
}

// The hyper-connection kernels run in clusters of C blocks (of kHcThreads) along x.
cudaLaunchAttribute hc_cluster(int C) {
    cudaLaunchAttribute attr = {};
    attr.id = cudaLaunchAttributeClusterDimension;
    attr.val.clusterDim.x = unsigned(C);
    attr.val.clusterDim.y = 1;
    attr.val.clusterDim.z = 1;
    return attr;
}

// ---- hc_pre / hc_head ---------------------------------------------------------------------------

constexpr int kHcWideMaxT = 8;         // tokens up to which a token takes the widest cluster (16 blocks)
constexpr int kHcWideCluster = 16;

// One cluster of C blocks per token: C = 16 for a decode step (T <= kHcWideMaxT; 8 where the device
// cannot schedule 16), so that the mix rows are streamed by 16 multiprocessors per token (and by one
// wave of loads: with n*D = 16384, each thread takes 4 columns of every one of the 24 rows at once);
// for more tokens, 8 down to 1 (hc_cluster_size), each thread walking its columns 4 at a time.
// Block `rank` takes a contiguous 1/C of the n*D columns for the sums and 1/C of the D outputs.
// One pass over X: the dot products are taken with the raw X and multiplied by the RMS scale once
// summed (sum_i f_i (x_i s) and s sum_i f_i x_i differ by the rounding of the x_i s, far below that
// of the sum's order); the sums of squares are taken in the same pass. Partial sums go through
// distributed shared memory, added in rank order, so the result does not depend on timing. Every
// block then computes pre and writes its share of y; the Sinkhorn (post and comb, the longest
// serial part) runs on warp 0 of rank 0 meanwhile, which takes no share of y. VEC: X and y rows are
// float4-aligned (D % 4 == 0), and for F32 the fn rows too (float4 loads of fn and X are what keep
// the instruction count per column low: the kernel is issue-bound, not memory-bound).
template <int TYPE, int G, bool HEAD, bool VEC>
__global__ void __launch_bounds__(kHcThreads) hc_kernel(const HcArgs a) {
    grid_begin();
    __shared__ double s_red_d[kHcWarps];
    __shared__ double s_ss;            // this block's partial sum of squares
    __shared__ float s_red[G * kHcWarps];
    __shared__ float s_part[kMaxMix];  // this block's partial (unscaled) mix sums
    __shared__ float s_mix[kMaxMix], s_base[kMaxMix], s_sc[3];
    __shared__ float s_pre[kMaxHc], s_pre_gates[kMaxHc], s_post[kMaxHc], s_comb[kMaxHc * kMaxHc];

    cg::cluster_group cluster = cg::this_cluster();
    const unsigned C = cluster.num_blocks(), rank = cluster.block_rank();
    const int64_t t = int64_t(blockIdx.x / C);
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int n = a.n, rows = a.rows;
    const int64_t D = a.D, nD = int64_t(n) * D;
    const float* x = a.X + t * nD;
    constexpr bool kVecFn = VEC && TYPE == kF32;

    if (tid < rows) s_base[tid] = a.base[tid];  // read after the barriers below
    if (tid < (HEAD ? 1 : 3)) s_sc[tid] = a.scale[tid];

    // This block's columns, a multiple of 4 wide: a thread's 4-column group never straddles two blocks.
    const int64_t cchunk = ((nD + C - 1) / C + 3) / 4 * 4;
    const int64_t c0 = min64(nD, rank * cchunk), c1 = min64(nD, c0 + cchunk);

    // 1. Partial sums of squares and of the mix dot products over [c0, c1), G rows per pass.
    for (int r0 = 0; r0 < rows; r0 += G) {
        float acc[G];
#pragma unroll
        for (int g = 0; g < G; ++g) acc[g] = 0.0f;
        double ss = 0;
        for (int64_t i = c0 + 4 * tid; i < c1; i += 4 * kHcThreads) {
            // No branch guards a load (a guarded load is issued only after the previous one's
            // value arrived): out-of-range indices are clamped and their values replaced by 0
            // after the load; rows past the last one load the last row, their sums are dropped.
            float xv[4];
            if constexpr (VEC) {
                const float4 v = *reinterpret_cast<const float4*>(x + i);
                xv[0] = v.x, xv[1] = v.y, xv[2] = v.z, xv[3] = v.w;
            } else {
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const float v = x[min64(i + e, c1 - 1)];
                    xv[e] = i + e < c1 ? v : 0.0f;
                }
            }
#pragma unroll
            for (int e = 0; e < 4; ++e) ss += double(xv[e]) * xv[e];  // exact products
#pragma unroll
            for (int g = 0; g < G; ++g) {
                const int r = r0 + g < rows ? r0 + g : rows - 1;
                const uint8_t* row = a.fn + size_t(r) * a.fn_row_bytes;
                float w[4];
                if constexpr (kVecFn) {
                    const float4 v = __ldg(reinterpret_cast<const float4*>(row) + i / 4);
                    w[0] = v.x, w[1] = v.y, w[2] = v.z, w[3] = v.w;
                } else {
#pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        const float v = load_elem<TYPE>(row, min64(i + e, c1 - 1));
                        w[e] = i + e < c1 ? v : 0.0f;
                    }
                }
#pragma unroll
                for (int e = 0; e < 4; ++e) acc[g] = fmaf(w[e], xv[e], acc[g]);
            }
        }
#pragma unroll
        for (int g = 0; g < G; ++g) {
            const float v = warp_sum(acc[g]);
            if (lane == 0) s_red[g * kHcWarps + warp] = v;
        }
        if (r0 == 0) {
            ss = warp_sum(ss);
            if (lane == 0) s_red_d[warp] = ss;
        }
        __syncthreads();
        if (tid < G && r0 + tid < rows) {
            float v = 0;
            for (int w = 0; w < kHcWarps; ++w) v = __fadd_rn(v, s_red[tid * kHcWarps + w]);
            s_part[r0 + tid] = v;
        }
        if (r0 == 0 && tid == kHcThreads - 1) {
            double v = 0;
            for (int w = 0; w < kHcWarps; ++w) v += s_red_d[w];
            s_ss = v;
        }
        __syncthreads();  // s_red is reused by the next pass
    }
    cluster.sync();  // every block's partials are written

    // 2. The whole mix, in every block: the C partials loaded together (remote loads are slow one
    // at a time), then added in rank order, then scaled.
    if (tid < rows) {
        double pss[kHcWideCluster];
        float pm[kHcWideCluster];
#pragma unroll
        for (int q = 0; q < kHcWideCluster; ++q) {
            const unsigned qq = q < int(C) ? unsigned(q) : C - 1;  // unguarded loads, as above
            pss[q] = *cluster.map_shared_rank(&s_ss, qq);
            pm[q] = *cluster.map_shared_rank(&s_part[tid], qq);
        }
        double tot = 0;
        float v = 0;
#pragma unroll
        for (int q = 0; q < kHcWideCluster; ++q) {
            tot = q < int(C) ? tot + pss[q] : tot;
            v = q < int(C) ? __fadd_rn(v, pm[q]) : v;
        }
        s_mix[tid] = __fmul_rn(v, rms_from_ss(tot, nD, a.norm_eps));
    }
    // Done reading the other blocks' shared memory; each block waits (at its end) until every
    // block has arrived before it exits and its shared memory goes.
    auto token = cluster.barrier_arrive();
    __syncthreads();

    // 3. pre (every block), as hc_pre_gates_*: sigmoid(mix[j]*scale[0] + base[j]) + eps.
    if (tid < n) s_pre[tid] = __fadd_rn(sigmoid_ref(__fadd_rn(__fmul_rn(s_mix[tid], s_sc[0]), s_base[tid])), a.hc_eps);
    __syncthreads();

    // 4. y[t, i] = sum_j pre[j] X[t, j, i] over this block's share of D; post and comb by warp 0
    // of rank 0 (which recomputes pre into its own array, bit for bit the same values).
    const bool gate_warp = !HEAD && rank == 0 && warp == 0;
    if (gate_warp) {
        if (n * n <= 32) {
            hc_pre_gates_warp(s_mix, s_base, s_sc, n, a.iters, a.hc_eps, s_pre_gates, s_post, s_comb);
        } else if (lane == 0) {
            hc_pre_gates_serial(s_mix, s_base, s_sc, n, a.iters, a.hc_eps, s_pre_gates, s_post, s_comb);
        }
        __syncwarp();
        if (lane < n) a.post[t * n + lane] = s_post[lane];
        for (int q = lane; q < n * n; q += 32) a.comb[t * n * n + q] = s_comb[q];
    } else {
        const int skip = !HEAD && rank == 0 ? 32 : 0;  // rank 0's warp 0 is the gate warp
        const int yt = tid - skip, ystride = kHcThreads - skip;
        const int64_t dchunk = ((D + C - 1) / C + 3) / 4 * 4;
        const int64_t d0 = min64(D, rank * dchunk), d1 = min64(D, d0 + dchunk);
        float* out = a.y + t * D;
        if constexpr (VEC) {
            for (int64_t i = d0 + 4 * yt; i < d1; i += 4 * ystride) {
                float4 v[kMaxHc];
#pragma unroll
                for (int j = 0; j < kMaxHc; ++j)  // streams past n load the last one (unguarded loads)
                    v[j] = *reinterpret_cast<const float4*>(x + (j < n ? j : n - 1) * D + i);
                float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
                for (int j = 0; j < kMaxHc; ++j) {  // selects, not an early exit (it would sink the loads)
                    const float p = s_pre[j < n ? j : n - 1];
                    const float4 sum = make_float4(__fadd_rn(acc.x, __fmul_rn(p, v[j].x)), __fadd_rn(acc.y, __fmul_rn(p, v[j].y)),
                                                   __fadd_rn(acc.z, __fmul_rn(p, v[j].z)), __fadd_rn(acc.w, __fmul_rn(p, v[j].w)));
                    acc = j < n ? sum : acc;
                }
                *reinterpret_cast<float4*>(out + i) = acc;
            }
        } else {
            for (int64_t i = d0 + yt; i < d1; i += ystride) {
                float v[kMaxHc];
#pragma unroll
                for (int j = 0; j < kMaxHc; ++j) v[j] = x[(j < n ? j : n - 1) * D + i];
                float acc = 0;
#pragma unroll
                for (int j = 0; j < kMaxHc; ++j) {
                    const float sum = __fadd_rn(acc, __fmul_rn(s_pre[j < n ? j : n - 1], v[j]));
                    acc = j < n ? sum : acc;
                }
                out[i] = acc;
            }
        }
    }
    cluster.barrier_wait(std::move(token));
}

// Blocks per token of an hc_kernel instantiation for a decode step: 16 (a non-portable cluster
// size) where the device can schedule a cluster of 16 of them, else 8 (always possible). Queried once.
template <class K>
int hc_decode_cluster(K kernel) {
    cudaLaunchAttribute cluster = hc_cluster(kHcWideCluster);
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(kHcWideCluster);
    cfg.blockDim = dim3(kHcThreads);
    cfg.attrs = &cluster;
    cfg.numAttrs = 1;
    int clusters = 0;
    if (cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) == cudaSuccess &&
        cudaOccupancyMaxActiveClusters(&clusters, kernel, &cfg) == cudaSuccess && clusters > 0)
        return kHcWideCluster;
    (void)cudaGetLastError();  // a refused query leaves an error behind: not this op's failure
    return kHcMaxCluster;
}

template <int TYPE, int G, bool HEAD, bool VEC>
void launch_hc_kernel(const char* op, const HcArgs& a, int64_t T, Stream stream) {
    const auto kernel = hc_kernel<TYPE, G, HEAD, VEC>;
    static const int decode_C = hc_decode_cluster(kernel);
    const int C = T <= kHcWideMaxT ? decode_C : hc_cluster_size(T);
    if (T * C > INT_MAX) fail("CUDA ", op, ": ", T, " tokens");
    const cudaLaunchAttribute cluster = hc_cluster(C);
    launch_ex(kernel, dim3(unsigned(T * C)), dim3(kHcThreads), 0, stream, &cluster, 1, a);
}

// Whether hc_kernel may read X and y (and an F32 fn) as float4.
bool hc_vec(const DeviceMat& fn, const HcArgs& a) {
    const auto aligned = [](const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; };
    const bool fn_ok = fn.type != gguf::TensorType::F32 || (aligned(fn.data) && fn.row_bytes % 16 == 0);
    return a.D % 4 == 0 && aligned(a.X) && aligned(a.y) && fn_ok;
}

template <bool HEAD>
void launch_hc(const char* op, const DeviceMat& fn, const HcArgs& a, int64_t T, Stream stream) {
    const bool vec = hc_vec(fn, a);
    dispatch_wtype(int(fn.type), [&]<int TYPE>() {
        if (a.rows <= 4) {  // G: the rows accumulated per pass (every row's load in flight at once)
            if (vec) launch_hc_kernel<TYPE, 4, HEAD, true>(op, a, T, stream);
            else launch_hc_kernel<TYPE, 4, HEAD, false>(op, a, T, stream);
        } else if (HEAD || a.rows <= 8) {  // hc_head has n <= 8 rows; hc_pre with n <= 2 has <= 8
            if (vec) launch_hc_kernel<TYPE, 8, HEAD, true>(op, a, T, stream);
            else launch_hc_kernel<TYPE, 8, HEAD, false>(op, a, T, stream);
        } else if constexpr (!HEAD) {
            if (vec) launch_hc_kernel<TYPE, 24, HEAD, true>(op, a, T, stream);
            else launch_hc_kernel<TYPE, 24, HEAD, false>(op, a, T, stream);
        }
    });
    DSV4_LAUNCH_CHECK();
}

// ---- hc_post --------------------------------------------------------------------------------

// One thread per (token, column i): reads X[t, j, i] for every stream j, writes every X[t, k, i].
__global__ void __launch_bounds__(256) hc_post_kernel(float* X, const float* f, const float* post, const float* comb,
                                                      int n, int64_t D, int64_t blocks_per_token) {
    grid_begin();
    const int64_t t = int64_t(blockIdx.x) / blocks_per_token;
    const int64_t i = (int64_t(blockIdx.x) % blocks_per_token) * blockDim.x + threadIdx.x;
    if (i >= D) return;
    float* x = X + t * n * D;
    const float* C = comb + t * n * n;
    float old[kMaxHc];
#pragma unroll
    for (int j = 0; j < kMaxHc; ++j)
        if (j < n) old[j] = x[j * D + i];
    const float fi = f[t * D + i];
#pragma unroll
    for (int k = 0; k < kMaxHc; ++k) {
        if (k >= n) break;
        float acc = 0;
#pragma unroll
        for (int j = 0; j < kMaxHc; ++j)
            if (j < n) acc = __fadd_rn(acc, __fmul_rn(C[j * n + k], old[j]));
        x[k * D + i] = __fadd_rn(__fmul_rn(post[t * n + k], fi), acc);
    }
}

// ---- swiglu ---------------------------------------------------------------------------------

__global__ void swiglu_kernel(float* gate, const float* up, int64_t n, float limit) {
    grid_begin();
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
        float g = gate[i], u = up[i];
        if (limit > 0) {
            g = limit < g ? limit : g;                          // std::min(g, limit)
            u = u < -limit ? -limit : (limit < u ? limit : u);  // std::clamp(u, -limit, limit)
        }
        gate[i] = __fmul_rn(__fdiv_rn(g, __fadd_rn(1.0f, exp_ref(-g))), u);
    }
}

// ---- route ----------------------------------------------------------------------------------

// (key, id) a beats (key, id) b: larger key, ties to the lower id. NaN keys never win.
__device__ __forceinline__ bool beats(float ka, int ia, float kb, int ib) {
    return ka > kb || (ka == kb && ia < ib);
}

// One warp per token, kRouteWarps tokens per block. The scores and keys (E each per token) are
// computed by the whole block into shared memory, so that the few tokens of a decode step share
// out the score's exp/log work (in double) over every warp; then top-k takes k rounds of a warp
// arg-max, lane l owning experts l, l+32, ... (chosen ones marked in a bit mask).
__global__ void __launch_bounds__(kRouteWarps * 32) route_kernel(const float* logits, int64_t T, int E, int k,
                                                                 const float* bias, const int32_t* tid2eid,
                                                                 const int32_t* tokens, float routed_scale,
                                                                 int32_t* ids, float* weights) {
    grid_begin();
    extern __shared__ float route_smem[];  // [kRouteWarps][2][E]: scores, keys
    __shared__ int32_t s_id[kRouteWarps][kMaxTopK];
    __shared__ float s_sc[kRouteWarps][kMaxTopK];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t t0 = int64_t(blockIdx.x) * kRouteWarps, t = t0 + warp;
    if (!tid2eid) {
        const int nt = int(min(int64_t(kRouteWarps), T - t0));
        for (int i = threadIdx.x; i < nt * E; i += blockDim.x) {
            const int w = i / E, e = i - w * E;
            const float sc = route_score(logits[(t0 + w) * E + e]);
            float* score = route_smem + size_t(w) * 2 * E;
            score[e] = sc;
            score[E + e] = bias ? __fadd_rn(sc, bias[e]) : sc;  // the key
        }
        __syncthreads();
    }
    if (t >= T) return;  // the whole warp
    const float* lg = logits + t * E;
    if (tid2eid) {
        if (lane < k) {
            const int32_t e = tid2eid[int64_t(tokens[t]) * k + lane];
            const bool ok = e >= 0 && e < E;
            s_id[warp][lane] = ok ? e : -1;
            s_sc[warp][lane] = ok ? route_score(lg[e]) : __int_as_float(0x7fc00000);
        }
    } else {
        const float* score = route_smem + size_t(warp) * 2 * E;
        const float* key = score + E;
        unsigned chosen = 0;  // bit j: expert lane + 32 j
        for (int r = 0; r < k; ++r) {
            float bk = -INFINITY, bs = 0;
            int bi = INT_MAX;
            for (int j = 0, e = lane; e < E; ++j, e += 32)
                if (!(chosen >> j & 1u) && beats(key[e], e, bk, bi)) {
                    bk = key[e];
                    bi = e;
                    bs = score[e];
                }
            for (int o = 16; o > 0; o >>= 1) {
                const float ok = __shfl_xor_sync(0xffffffffu, bk, o);
                const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
                const float os = __shfl_xor_sync(0xffffffffu, bs, o);
                if (beats(ok, oi, bk, bi)) {
                    bk = ok;
                    bi = oi;
                    bs = os;
                }
            }
            // Every lane holds the same winner (a total order over distinct ids).
            if (bi == INT_MAX) {  // fewer than k experts with a comparable key (NaN logits)
                bi = -1;
                bs = __int_as_float(0x7fc00000);
            } else if ((bi & 31) == lane) {
                chosen |= 1u << (bi >> 5);
            }
            if (lane == 0) {
                s_id[warp][r] = bi;
                s_sc[warp][r] = bs;
            }
        }
    }
    __syncwarp();
    if (lane == 0) {
        float sum = 0;
        for (int i = 0; i < k; ++i) sum = __fadd_rn(sum, s_sc[warp][i]);
        const float den = __fadd_rn(sum, 1e-20f);
        for (int i = 0; i < k; ++i) {
            ids[t * k + i] = s_id[warp][i];
            weights[t * k + i] = __fmul_rn(__fdiv_rn(s_sc[warp][i], den), routed_scale);
        }
    }
}

// ---- moe_group ------------------------------------------------------------------------------

// One block. Counts per expert (shared atomics: the counts do not depend on their order), an
// exclusive scan for the offsets, then a stable placement in chunks of kGroupThreads pairs: a
// pair's position is its expert's running base + the same-expert pairs of earlier warps in the
// chunk + the same-expert pairs of earlier lanes of its warp (__match_any_sync).
__global__ void __launch_bounds__(kGroupThreads) moe_group_kernel(const int32_t* ids, int N, int E, int32_t* offsets,
                                                                 int32_t* order, int32_t* expert_of,
                                                                 int32_t* slot_pos) {
    grid_begin();
    extern __shared__ int32_t group_smem[];
    int32_t* base = group_smem;     // [E] running start of each expert's next pairs
    int32_t* wc = group_smem + E;   // [kGroupWarps][E] pairs of each warp of the chunk per expert
    __shared__ int32_t s_total;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;

    for (int e = tid; e < E; e += kGroupThreads) base[e] = 0;
    for (int q = tid; q < kGroupWarps * E; q += kGroupThreads) wc[q] = 0;
    __syncthreads();
    for (int p = tid; p < N; p += kGroupThreads) {
        const int e = ids[p];
        if (e >= 0 && e < E) atomicAdd(&base[e], 1);
    }
    __syncthreads();
    if (warp == 0) {
        int carry = 0;
        for (int e0 = 0; e0 < E; e0 += 32) {
            const int e = e0 + lane;
            const int v = e < E ? base[e] : 0;
            int incl = v;
            for (int o = 1; o < 32; o <<= 1) {
                const int u = __shfl_up_sync(0xffffffffu, incl, o);
                if (lane >= o) incl += u;
            }
            if (e < E) {
                base[e] = carry + incl - v;
                offsets[e] = carry + incl - v;
            }
            carry += __shfl_sync(0xffffffffu, incl, 31);
        }
        if (lane == 0) {
            offsets[E] = carry;
            s_total = carry;
        }
    }
    __syncthreads();
    const unsigned lt = (1u << lane) - 1u;
    for (int c0 = 0; c0 < N; c0 += kGroupThreads) {
        const int p = c0 + tid;
        const int e = p < N ? ids[p] : -1;
        const bool valid = e >= 0 && e < E;
        const unsigned same = __match_any_sync(0xffffffffu, valid ? e : -1);
        const int rank = __popc(same & lt);
        if (valid && rank == 0) wc[warp * E + e] = __popc(same);
        __syncthreads();
        if (valid) {
            int pos = base[e] + rank;
            for (int w = 0; w < warp; ++w) pos += wc[w * E + e];
            order[pos] = p;
            expert_of[pos] = e;
            slot_pos[p] = pos;
        } else if (p < N) {
            slot_pos[p] = -1;
        }
        __syncthreads();
        for (int ee = tid; ee < E; ee += kGroupThreads) {
            int add = 0;
            for (int w = 0; w < kGroupWarps; ++w) {
                add += wc[w * E + ee];
                wc[w * E + ee] = 0;
            }
            base[ee] += add;
        }
        __syncthreads();
    }
    for (int q = s_total + tid; q < N; q += kGroupThreads) {  // positions of left-out pairs
        order[q] = -1;
        expert_of[q] = -1;
    }
}

// ---- gather_rows, moe_combine, add_to_streams ------------------------------------------------

template <bool VEC4>
__global__ void __launch_bounds__(256) gather_rows_kernel(const float* x, const int32_t* order, int k, int64_t D,
                                                          float* xs) {
    grid_begin();
    const int64_t p = blockIdx.x;
    const int32_t pair = order[p];
    float* dst = xs + p * D;
    if (pair < 0) {
        for (int64_t i = threadIdx.x; i < D; i += blockDim.x) dst[i] = __int_as_float(0x7fc00000);
        return;
    }
    const float* src = x + int64_t(pair / k) * D;
    if constexpr (VEC4) {
        const float4* s4 = reinterpret_cast<const float4*>(src);
        float4* d4 = reinterpret_cast<float4*>(dst);
        for (int64_t i = threadIdx.x; i < D / 4; i += blockDim.x) d4[i] = s4[i];
    } else {
        for (int64_t i = threadIdx.x; i < D; i += blockDim.x) dst[i] = src[i];
    }
}

// Grid (token, chunk of kCombineThreads * W columns), W = 4 (float4) where D % 4 == 0 and the rows
// are 16-byte aligned, else 1: a decode step spreads its few tokens' rows over many blocks. Every
// block ranks its token's k slots by (expert, slot), thread i < k counting the slots before slot i
// (the order of a stable sort by expert), then each thread adds its W columns in that order, its
// k row loads issued together (the order of the additions is unchanged).
template <int W, int KMAX>
__global__ void __launch_bounds__(kCombineThreads) moe_combine_kernel(const float* ys, const int32_t* ids,
                                                                      const float* weights, const int32_t* slot_pos,
                                                                      int k, int64_t D, const float* shared,
                                                                      float* out) {
    grid_begin();
    using Vec = std::conditional_t<W == 4, float4, float>;
    __shared__ int32_t s_e[kMaxTopK], s_p[kMaxTopK], s_pos[kMaxTopK];
    __shared__ float s_wt[kMaxTopK], s_w[kMaxTopK];
    const int64_t t = blockIdx.x;
    const int tid = threadIdx.x;
    const int64_t i = (int64_t(blockIdx.y) * kCombineThreads + tid) * W;  // first column; D % W == 0
    const bool active = i < D;
    if (tid < k) {
        s_e[tid] = ids[t * k + tid];
        s_p[tid] = slot_pos[t * k + tid];
        s_wt[tid] = weights[t * k + tid];
    }
    Vec sh{};
    if (shared && active) sh = *reinterpret_cast<const Vec*>(shared + t * D + i);  // in flight meanwhile
    __syncthreads();
    if (tid < k) {
        const int32_t e = s_e[tid];
        int rank = 0;
        for (int j = 0; j < k; ++j) rank += s_e[j] < e || (s_e[j] == e && j < tid);
        s_pos[rank] = s_p[tid];
        s_w[rank] = s_wt[tid];
    }
    __syncthreads();
    if (!active) return;
    // All KMAX >= k loads issued before any is used: no branch guards them (slots past k load
    // the last slot's row again; a missing row loads row 0 and becomes NaN afterwards).
    Vec v[KMAX];
#pragma unroll
    for (int q = 0; q < KMAX; ++q) {
        const int32_t pos = s_pos[q < k ? q : k - 1];
        v[q] = *reinterpret_cast<const Vec*>(ys + int64_t(pos < 0 ? 0 : pos) * D + i);
    }
    float acc[W], vs[W], shs[W];
    for (int c = 0; c < W; ++c) acc[c] = 0;
    memcpy(shs, &sh, sizeof shs);
#pragma unroll
    for (int q = 0; q < KMAX; ++q) {  // selects, not an early exit (which would sink the loads here)
        const int qq = q < k ? q : k - 1;
        memcpy(vs, &v[q], sizeof vs);
        const float w = s_w[qq];
        const bool ok = s_pos[qq] >= 0;
#pragma unroll
        for (int c = 0; c < W; ++c) {
            const float sum = __fadd_rn(acc[c], __fmul_rn(ok ? vs[c] : __int_as_float(0x7fc00000), w));
            acc[c] = q < k ? sum : acc[c];
        }
    }
    if (shared)
#pragma unroll
        for (int c = 0; c < W; ++c) acc[c] = __fadd_rn(acc[c], shs[c]);
    Vec o;
    memcpy(&o, acc, sizeof o);
    *reinterpret_cast<Vec*>(out + t * D + i) = o;
}

__global__ void add_to_streams_kernel(float* X, const float* e, int64_t T, int n, int64_t D) {
    grid_begin();
    const int64_t total = T * n * D;
    for (int64_t q = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; q < total; q += int64_t(gridDim.x) * blockDim.x) {
        const int64_t t = q / (int64_t(n) * D), i = q % D;
        X[q] = __fadd_rn(X[q], e[t * D + i]);
    }
}

// Grid for the grid-stride elementwise kernels.
unsigned elementwise_blocks(int64_t n) { return unsigned(std::clamp<int64_t>((n + 255) / 256, 1, 65536)); }

void need(const void* p, const char* op, const char* what) {
    if (!p) fail("CUDA ", op, ": ", what, " is null");
}

}  // namespace

namespace {

bool rmsnorm_vec_ok(const float* x, int64_t n, const float* weight) {
    return n % 4 == 0 && n / 4 <= 8 * kNormMaxThreads && (reinterpret_cast<uintptr_t>(x) & 15) == 0 &&
           (reinterpret_cast<uintptr_t>(weight) & 15) == 0;
}

// rmsnorm_vec_kernel over T rows of n (rmsnorm_vec_ok): the fewest float4 per thread that fit the
// row into 1024 threads, threads a whole number of warps.
template <bool ROPE>
void launch_rmsnorm_vec(float* x, int64_t T, int64_t n, const float* weight, float eps, RopeTail rope,
                        Stream stream) {
    const int64_t n4 = n / 4;
    const int V = n4 <= kNormMaxThreads ? 1 : n4 <= 2 * kNormMaxThreads ? 2 : n4 <= 4 * kNormMaxThreads ? 4 : 8;
    const unsigned threads = unsigned((ceil_div(n4, V) + 31) / 32 * 32);
    if (V == 1) launch(rmsnorm_vec_kernel<1, ROPE>, unsigned(T), threads, 0, stream, x, int(n4), weight, eps, rope);
    if (V == 2) launch(rmsnorm_vec_kernel<2, ROPE>, unsigned(T), threads, 0, stream, x, int(n4), weight, eps, rope);
    if (V == 4) launch(rmsnorm_vec_kernel<4, ROPE>, unsigned(T), threads, 0, stream, x, int(n4), weight, eps, rope);
    if (V == 8) launch(rmsnorm_vec_kernel<8, ROPE>, unsigned(T), threads, 0, stream, x, int(n4), weight, eps, rope);
    DSV4_LAUNCH_CHECK();
}

void check_rmsnorm(const float* x, int64_t T, int64_t n, const char* op) {
    if (T < 0 || n < 1) fail("CUDA ", op, ": T = ", T, ", n = ", n);
    if (T > INT_MAX) fail("CUDA ", op, ": ", T, " rows");
    if (T > 0) need(x, op, "x");
}

}  // namespace

void rmsnorm(float* x, int64_t T, int64_t n, const float* weight, float eps, Stream stream) {
    check_rmsnorm(x, T, n, "rmsnorm");
    if (T == 0) return;
    if (rmsnorm_vec_ok(x, n, weight)) {
        launch_rmsnorm_vec<false>(x, T, n, weight, eps, {}, stream);
    } else {
        launch(rmsnorm_kernel, unsigned(T), 256, 0, stream, x, n, weight, eps);
        DSV4_LAUNCH_CHECK();
    }
}

void rmsnorm_rope(float* x, int64_t T, int64_t n, const float* weight, float eps, int per_pos, int64_t pos0,
                  const float* inv_freq, int dim, Stream stream) {
    check_rmsnorm(x, T, n, "rmsnorm_rope");
    if (dim <= 0 || dim % 2 || dim > n) fail("CUDA rmsnorm_rope: dim = ", dim, " (positive, even, <= n = ", n, ")");
    if (per_pos < 1) fail("CUDA rmsnorm_rope: per_pos = ", per_pos);
    if (pos0 < 0) fail("CUDA rmsnorm_rope: pos0 = ", pos0);
    if (T == 0) return;
    if (!inv_freq) fail("CUDA rmsnorm_rope: null inv_freq");
    if (rmsnorm_vec_ok(x, n, weight) && (n - dim) % 4 == 0) {
        RopeTail rope;
        rope.inv_freq = inv_freq;
        rope.pos0 = pos0;
        rope.per_pos = per_pos;
        rope.half = dim / 2;
        launch_rmsnorm_vec<true>(x, T, n, weight, eps, rope, stream);
    } else {  // rows the one-pass kernel does not take: the two ops in turn (the same result)
        rmsnorm(x, T, n, weight, eps, stream);
        rope(x, T, int(n), n, per_pos, pos0, inv_freq, dim, false, stream);
    }
}

void embed_streams(const DeviceMat& embed, const int32_t* tokens, int64_t T, int hc, float* X, Stream stream) {
    if (T < 0 || hc < 1) fail("CUDA embed_streams: T = ", T, ", hc = ", hc);
    if (T > INT_MAX) fail("CUDA embed_streams: ", T, " tokens");
    if (T == 0) return;
    check_weight("embed_streams", "the embedding", embed, embed.rows, embed.cols);
    if (embed.rows < 1 || embed.cols < 1) fail("CUDA embed_streams: embedding [", embed.rows, ", ", embed.cols, "]");
    need(tokens, "embed_streams", "tokens");
    need(X, "embed_streams", "X");
    dispatch_wtype(int(embed.type), [&]<int TYPE>() {
        launch(embed_kernel<TYPE>, unsigned(T), 256, 0, stream, embed.data, embed.row_bytes, embed.rows, embed.cols,
               tokens, hc, X);
    });
    DSV4_LAUNCH_CHECK();
}

void hc_pre(const HcShape& s, const DeviceMat& fn, const float* base, const float* scale, const float* X, int64_t T,
            float* y, float* post, float* comb, Stream stream) {
    check_hc_shape("hc_pre", s);
    if (T < 0) fail("CUDA hc_pre: T = ", T);
    if (T == 0) return;
    const int mix = (2 + s.n) * s.n;
    check_weight("hc_pre", "fn", fn, mix, int64_t(s.n) * s.D);
    need(base, "hc_pre", "base");
    need(scale, "hc_pre", "scale");
    need(X, "hc_pre", "X");
    need(y, "hc_pre", "y");
    need(post, "hc_pre", "post");
    need(comb, "hc_pre", "comb");
    const HcArgs a{fn.data, fn.row_bytes, mix, base, scale, X, s.n, s.D, s.iters, s.hc_eps, s.norm_eps, y, post, comb};
    launch_hc<false>("hc_pre", fn, a, T, stream);
}

void hc_post(const HcShape& s, float* X, const float* f, const float* post, const float* comb, int64_t T,
             Stream stream) {
    check_hc_shape("hc_post", s);
    if (T < 0) fail("CUDA hc_post: T = ", T);
    if (T == 0) return;
    need(X, "hc_post", "X");
    need(f, "hc_post", "f");
    need(post, "hc_post", "post");
    need(comb, "hc_post", "comb");
    const int64_t bpt = ceil_div(s.D, 256);
    if (T * bpt > INT_MAX) fail("CUDA hc_post: ", T, " tokens of ", s.D);
    launch(hc_post_kernel, unsigned(T * bpt), 256, 0, stream, X, f, post, comb, s.n, s.D, bpt);
    DSV4_LAUNCH_CHECK();
}

void hc_head(const HcShape& s, const DeviceMat& fn, const float* base, const float* scale, const float* X, int64_t T,
             float* y, Stream stream) {
    check_hc_shape("hc_head", s);
    if (T < 0) fail("CUDA hc_head: T = ", T);
    if (T == 0) return;
    check_weight("hc_head", "fn", fn, s.n, int64_t(s.n) * s.D);
    need(base, "hc_head", "base");
    need(scale, "hc_head", "scale");
    need(X, "hc_head", "X");
    need(y, "hc_head", "y");
    const HcArgs a{fn.data, fn.row_bytes, s.n, base, scale, X, s.n, s.D, s.iters, s.hc_eps, s.norm_eps, y, nullptr,
                   nullptr};
    launch_hc<true>("hc_head", fn, a, T, stream);
}

void swiglu(float* gate, const float* up, int64_t n, float limit, Stream stream) {
    if (n < 0) fail("CUDA swiglu: n = ", n);
    if (n == 0) return;
    need(gate, "swiglu", "gate");
    need(up, "swiglu", "up");
    launch(swiglu_kernel, elementwise_blocks(n), 256, 0, stream, gate, up, n, limit);
    DSV4_LAUNCH_CHECK();
}

void route(const float* logits, int64_t T, int E, int k, const float* bias, const int32_t* tid2eid,
           const int32_t* tokens, float routed_scale, int32_t* ids, float* weights, Stream stream) {
    if (T < 0) fail("CUDA route: T = ", T);
    if (E < 1 || E > kMaxExperts) fail("CUDA route: ", E, " experts (1..", kMaxExperts, " supported)");
    if (k < 1 || k > E || k > kMaxTopK) fail("CUDA route: top-k ", k, " of ", E, " experts (at most ", kMaxTopK, ")");
    if (T == 0) return;
    need(logits, "route", "logits");
    need(ids, "route", "ids");
    need(weights, "route", "weights");
    if (tid2eid) need(tokens, "route", "tokens (hash routing)");
    const int64_t blocks = (T + kRouteWarps - 1) / kRouteWarps;
    if (blocks > INT_MAX) fail("CUDA route: ", T, " tokens");
    const size_t smem = tid2eid ? 0 : size_t(kRouteWarps) * 2 * size_t(E) * sizeof(float);
    launch(route_kernel, unsigned(blocks), kRouteWarps * 32, smem, stream, logits, T, E, k, bias, tid2eid, tokens,
           routed_scale, ids, weights);
    DSV4_LAUNCH_CHECK();
}

void moe_group(const int32_t* ids, int64_t T, int k, int E, int32_t* offsets, int32_t* order, int32_t* expert_of,
               int32_t* slot_pos, Stream stream) {
    if (T < 0 || k < 1) fail("CUDA moe_group: T = ", T, ", k = ", k);
    if (E < 1 || E > kMaxExperts) fail("CUDA moe_group: ", E, " experts (1..", kMaxExperts, " supported)");
    const int64_t N = T * k;
    if (N > INT_MAX) fail("CUDA moe_group: ", N, " (token, slot) pairs");
    need(offsets, "moe_group", "offsets");
    if (N > 0) {
        need(ids, "moe_group", "ids");
        need(order, "moe_group", "order");
        need(expert_of, "moe_group", "expert_of");
        need(slot_pos, "moe_group", "slot_pos");
    }
    const size_t smem = size_t(1 + kGroupWarps) * size_t(E) * sizeof(int32_t);
    if (smem > 48 * 1024)
        DSV4_CUDA_CHECK(cudaFuncSetAttribute(moe_group_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    launch(moe_group_kernel, 1, kGroupThreads, smem, stream, ids, int(N), E, offsets, order, expert_of, slot_pos);
    DSV4_LAUNCH_CHECK();
}

void gather_rows(const float* x, const int32_t* order, int64_t N, int k, int64_t D, float* xs, Stream stream) {
    if (N < 0 || k < 1 || D < 1) fail("CUDA gather_rows: N = ", N, ", k = ", k, ", D = ", D);
    if (N > INT_MAX) fail("CUDA gather_rows: ", N, " rows");
    if (N == 0) return;
    need(x, "gather_rows", "x");
    need(order, "gather_rows", "order");
    need(xs, "gather_rows", "xs");
    const bool vec = D % 4 == 0 && (reinterpret_cast<uintptr_t>(x) & 15) == 0 && (reinterpret_cast<uintptr_t>(xs) & 15) == 0;
    if (vec)
        launch(gather_rows_kernel<true>, unsigned(N), 256, 0, stream, x, order, k, D, xs);
    else
        launch(gather_rows_kernel<false>, unsigned(N), 256, 0, stream, x, order, k, D, xs);
    DSV4_LAUNCH_CHECK();
}

void moe_combine(const float* ys, const int32_t* ids, const float* weights, const int32_t* slot_pos, int64_t T, int k,
                 int64_t D, const float* shared, float* out, Stream stream) {
    if (T < 0 || D < 1) fail("CUDA moe_combine: T = ", T, ", D = ", D);
    if (k < 1 || k > kMaxTopK) fail("CUDA moe_combine: k = ", k, " (1..", kMaxTopK, " supported)");
    if (T > INT_MAX) fail("CUDA moe_combine: ", T, " tokens");
    if (T == 0) return;
    need(ys, "moe_combine", "ys");
    need(ids, "moe_combine", "ids");
    need(weights, "moe_combine", "weights");
    need(slot_pos, "moe_combine", "slot_pos");
    need(out, "moe_combine", "out");
    const auto aligned = [](const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; };
    const bool vec = D % 4 == 0 && aligned(ys) && aligned(out) && (!shared || aligned(shared));
    const int64_t chunks = ceil_div(D, int64_t(kCombineThreads) * (vec ? 4 : 1));
    if (chunks > 65535) fail("CUDA moe_combine: D = ", D);
    const dim3 grid{unsigned(T), unsigned(chunks)};
    const auto go = [&]<int W, int KMAX>() {
        launch(moe_combine_kernel<W, KMAX>, grid, kCombineThreads, 0, stream, ys, ids, weights, slot_pos, k, D,
               shared, out);
    };
    if (vec && k <= 8) go.template operator()<4, 8>();
    else if (vec) go.template operator()<4, kMaxTopK>();
    else if (k <= 8) go.template operator()<1, 8>();
    else go.template operator()<1, kMaxTopK>();
    DSV4_LAUNCH_CHECK();
}

void add_to_streams(float* X, const float* e, int64_t T, int n, int64_t D, Stream stream) {
    if (T < 0 || n < 1 || D < 1) fail("CUDA add_to_streams: T = ", T, ", n = ", n, ", D = ", D);
    if (T == 0) return;
    need(X, "add_to_streams", "X");
    need(e, "add_to_streams", "e");
    launch(add_to_streams_kernel, elementwise_blocks(T * n * D), 256, 0, stream, X, e, T, n, D);
    DSV4_LAUNCH_CHECK();
}

}  // namespace dsv4::cuda
