// y[T, rows] = x[T, cols] · Wᵀ for T <= 8 over weights in their stored format (see matvec.h).
// Q8_0 at T <= kQ8Int8MaxTokens has its own kernel (matvec_int8.cu); this file holds the
// 16-bit tensor path (F16, BF16, and Q8_0 above that T), the dedicated CUDA-core kernels and
// the oracle.
//
// 16-bit tensor path, one block of 8 warps per 32-row tile at a time (a block walks several
// tiles, and its copy pipeline runs on across tile boundaries):
//   * The tile's weight bytes stream through a 4-stage ring in shared memory, each stage 32 rows
//     x kScb 32-column blocks, copied with 16-byte cp.async. Each row segment is copied from its
//     start rounded down to 16 bytes and read back at that offset (the "delta"; always 0 for
//     Q8_0, whose device rows are chunks of 8 blocks, 272 bytes, and whose segments start at
//     chunk boundaries); a copy that would pass the end of the weight reads only the bytes
//     inside it (the zero-fill form).
//   * Each warp takes kScb/8 of a stage's column blocks for all 32 rows (two m16 sub-tiles) and
//     multiplies them on the tensor cores with mma.sync m16n8k16: rows are the m side, the
//     tokens the n = 8 side (tokens >= T are zero), the weights read from shared memory into the
//     A fragments (Q8_0 quants converted to f16 exactly, the block's scale applied to each
//     32-column partial sum in float32, as the CPU does). The eight warps' partial sums are added in shared memory at the
//     end of each tile.
//   * The block packs x itself, while its first weight stages are in flight: the columns of its
//     split, per token as two 16-bit limbs x = hi + lo (f16 limbs with a power-of-two scale, or
//     bf16 limbs for BF16 weights), kept in shared memory for the whole kernel. The k order
//     inside each 32-column block is permuted (lane quad t owns columns 4t..4t+3 and
//     16+4t..16+4t+3 of the block, for the weights and for x alike): a dot product does not care
//     about the order of its terms.
//   * Columns are split over blocks when the packed x would not fit shared memory, or when the
//     tiles of all problems leave multiprocessors idle (a [512, 4096] matrix is 16 tiles for 132
//     multiprocessors). Up to 8 splits of a tile form one thread-block cluster and the first block
//     adds their sums from the others' shared memory in rank order; more splits write partial
//     sums to the workspace and a second kernel adds them in split order. Either way the result
//     is deterministic.
#include "backend/cuda/matvec.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>

#include <cooperative_groups.h>

#include "backend/cuda/common.cuh"
#include "backend/cuda/matvec_int8.h"

namespace dsv4::cuda {

namespace cg = cooperative_groups;

namespace {

constexpr int kThreads = 256, kWarps = 8, kTileRows = 32, kStages = 4;
constexpr int kXBlockBytes = 128;  // packed x: per token and 32-column block, 32 hi + 32 lo limbs of 2 bytes
constexpr int kRedBytes = kWarps * 2 * 32 * 4 * 4;  // per warp, sub-tile, lane: 4 accumulators

// The tensor path's formats. kScb: 32-column blocks per stage; kSlot: bytes of one row's
// segment in a stage, padded so that the 8 rows a warp instruction touches fall in distinct
// banks (Q8_0: a slot of 4 words mod 32 and lanes reading words t and t + 4 of a block's
// quants; 2-byte types: 8 words mod 32 and lanes reading 8-byte pairs); kChunks: 16-byte copies
// that cover a segment starting up to 14 bytes past a 16-byte boundary.
template <int TYPE>
struct TcFmt;
template <>
struct TcFmt<kQ8_0> {  // kBlk: bytes per block on average (a chunk of 8 is 272)
    static constexpr int kBlk = 34, kScb = 16, kSlot = 656;
    static constexpr bool kBf16Limbs = false;
};
template <>
struct TcFmt<kF16> {
    static constexpr int kBlk = 64, kScb = 8, kSlot = 544;
    static constexpr bool kBf16Limbs = false;
};
template <>
struct TcFmt<kBF16> {
    static constexpr int kBlk = 64, kScb = 8, kSlot = 544;
    static constexpr bool kBf16Limbs = true;
};
template <int TYPE>
constexpr int kChunks = (14 + TcFmt<TYPE>::kScb * TcFmt<TYPE>::kBlk + 15) / 16;
template <int TYPE>
constexpr int kStageBytes = kTileRows * TcFmt<TYPE>::kSlot;

static_assert(kChunks<kQ8_0> * 16 <= TcFmt<kQ8_0>::kSlot && TcFmt<kQ8_0>::kSlot % 128 == 16, "Q8_0 slot");
static_assert(kChunks<kF16> * 16 <= TcFmt<kF16>::kSlot && TcFmt<kF16>::kSlot % 128 == 32, "F16 slot");
static_assert(TcFmt<kQ8_0>::kScb % q8dev::kChunkBlocks == 0, "Q8_0 stages are whole chunks");

// Bytes of n column blocks of a row from a block boundary (for Q8_0 one at a chunk boundary):
// a segment's length, and the offset of block n in the row.
template <int TYPE>
__host__ __device__ __forceinline__ size_t segment_bytes(int n) {
    if constexpr (TYPE == kQ8_0)
        return q8dev::row_bytes(int64_t(n) * 32);
    else
        return size_t(n) * TcFmt<TYPE>::kBlk;
}

struct TcParams {
    const uint8_t* w;       // matrix or stack base
    size_t w_bytes;         // readable bytes from w
    size_t matrix_bytes;    // rows * row_bytes
    size_t row_bytes;
    int64_t rows;
    int64_t count;          // matrices in the stack
    const int32_t* ids;     // [n] or null
    const float* x;         // problem p, token t: x + p * x_stride + t * ldx
    int64_t ldx, x_stride;
    float* y;
    int64_t ldy, y_stride;
    int T, nb, kb_per_split, tiles, xs_stride, xs_bytes;
    float* partial;         // splits added in global memory: [split][problem][token][rows], else null
    int cluster;            // 1: the splits of a tile are one cluster, added through its shared memory
};

// Shared memory past the stages and the warps' partial sums: per token the x scale and its
// inverse, the block's result of a tile (read by the cluster's first block), per token and warp
// the max |x| of the split.
constexpr int kTailFloats = 2 * kMaxMatvecTokens + kTileRows * kMaxMatvecTokens + kMaxMatvecTokens * kWarps;

__device__ __forceinline__ uint32_t smem_u32(const void* p) { return uint32_t(__cvta_generic_to_shared(p)); }

// 16-byte global -> shared copy; only src_bytes (1..16) are read, the rest of the 16 is zero.
__device__ __forceinline__ void cp_async16(void* dst, const void* src, int src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_u32(dst)), "l"(src), "r"(src_bytes)
                 : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// d += A · B for one m16n8k16 tile: A = {row g k0, row g+8 k0, row g k8, row g+8 k8} pairs,
// B = {k0, k8} pairs of column g (the PTX fragment layout), float32 accumulation.
template <bool BF16>
__device__ __forceinline__ void mma16816(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                         uint32_t b0, uint32_t b1) {
    if constexpr (BF16) {
        asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
            "{%0,%1,%2,%3};\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
    } else {
        asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
            "{%0,%1,%2,%3};\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
    }
}

// Four int8 (bytes 0..3) -> two f16x2 {q0, q1}, {q2, q3}, exactly: 0x64XX is the f16 1024 + XX,
// and XX = q + 128 after flipping the sign bit, so subtracting 1152 leaves q. Three integer and
// one half2 instruction per pair instead of four int->float conversions (which run at a quarter
// of the rate and would bound the kernel below the memory bandwidth).
__device__ __forceinline__ void i8x4_to_f16x2(uint32_t v, uint32_t& lo, uint32_t& hi) {
    const uint32_t u = v ^ 0x80808080u;
    const uint32_t bias = 0x64806480u;  // {1152, 1152}
    lo = __byte_perm(u, 0x64646464u, 0x4140);
    hi = __byte_perm(u, 0x64646464u, 0x4342);
    asm("sub.rn.f16x2 %0, %0, %1;\n" : "+r"(lo) : "r"(bias));
    asm("sub.rn.f16x2 %0, %0, %1;\n" : "+r"(hi) : "r"(bias));
}

template <int TYPE>
__global__ void __launch_bounds__(kThreads) tc_matvec_kernel(const TcParams p) {
    grid_begin();
    using F = TcFmt<TYPE>;
    constexpr int kCbw = F::kScb / kWarps;  // column blocks per warp per stage
    extern __shared__ __align__(128) uint8_t smem[];
    uint8_t* xs = smem;
    uint8_t* stages = smem + p.xs_bytes;
    float* red = reinterpret_cast<float*>(stages + kStages * kStageBytes<TYPE>);

    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
    const int prob = blockIdx.y;
    const int kb0 = blockIdx.z * p.kb_per_split;
    const int kb1 = min(p.nb, kb0 + p.kb_per_split);
    const int nks = (kb1 - kb0 + F::kScb - 1) / F::kScb;  // stages per tile
    const int T = p.T;

    const int64_t mat = p.ids ? int64_t(p.ids[prob]) : int64_t(prob);
    const bool bad = mat < 0 || mat >= p.count;
    const size_t wbase = bad ? 0 : size_t(mat) * p.matrix_bytes;

    const int bx = blockIdx.x;
    const int ntile = bx < p.tiles ? (p.tiles - 1 - bx) / int(gridDim.x) + 1 : 0;
    const int S = ntile * nks;

    float* xsc = red + kRedBytes / 4;               // [T] scale 2^e of each token's limbs
    float* xinv = xsc + kMaxMatvecTokens;           // [T] 2^-e
    float* tile_out = xinv + kMaxMatvecTokens;      // [T][32] this block's sums of a tile
    float* wmax = tile_out + kTileRows * kMaxMatvecTokens;  // [T][warps]

    auto stage_geometry = [&](int s, int& row0, int& cb0, int& ncb, int& ks) {
        const int k = s / nks;
        ks = s - k * nks;
        row0 = (bx + k * int(gridDim.x)) * kTileRows;
        cb0 = kb0 + ks * F::kScb;
        ncb = min(F::kScb, kb1 - cb0);
    };

    // This thread's 16-byte copies of every stage, (tile row, chunk), the same for all stages:
    // worked out once instead of per copy (a 5-10% faster kernel: it is issue-bound, and the
    // copies' address arithmetic was a large part of its instructions). A row's segment starts
    // r * row_bytes after the tile's, which fits 32 bits.
    constexpr int kCopies = (kTileRows * kChunks<TYPE> + kThreads - 1) / kThreads;
    int cp_r[kCopies], cp_ch[kCopies];
#pragma unroll
    for (int k = 0; k < kCopies; ++k) {
        const int i = tid + k * kThreads;
        cp_r[k] = i < kTileRows * kChunks<TYPE> ? i / kChunks<TYPE> : kTileRows;
        cp_ch[k] = i - cp_r[k] * kChunks<TYPE>;
    }
    auto tile_offset = [&](int row0, int cb0) { return wbase + size_t(row0) * p.row_bytes + segment_bytes<TYPE>(cb0); };

    auto load_stage = [&](int s) {
        if (s < S && !bad) {
            int row0, cb0, ncb, ks;
            stage_geometry(s, row0, cb0, ncb, ks);
            uint8_t* buf = stages + (s % kStages) * kStageBytes<TYPE>;
            const size_t tile = tile_offset(row0, cb0);
            const size_t seg_len = segment_bytes<TYPE>(ncb);
            const int rows_here = int(min(int64_t(kTileRows), p.rows - row0));
#pragma unroll
            for (int k = 0; k < kCopies; ++k) {
                const int r = cp_r[k];
                if (r >= rows_here) continue;
                const size_t start = tile + size_t(uint32_t(r) * uint32_t(p.row_bytes));
                const size_t addr = (start & ~size_t(15)) + size_t(cp_ch[k]) * 16;
                if (addr >= start + seg_len) continue;
                const int nbytes = int(min(size_t(16), p.w_bytes - addr));
                cp_async16(buf + r * F::kSlot + cp_ch[k] * 16, p.w + addr, nbytes);
            }
        }
        cp_async_commit();  // an empty group keeps the wait count uniform
    };

#pragma unroll
    for (int s = 0; s < kStages - 1; ++s) load_stage(s);

    // While the first stages are in flight: this problem's x, columns [kb0, kb1) of each token,
    // into shared memory as limbs (see pack_limbs). f16 limbs carry a power-of-two scale per token
    // and split that puts max|x| in [2^14, 2^15): no overflow, and both limbs stay normal numbers
    // for every value within 2^24 of the largest. Each split's own scale is as exact as one for
    // the whole row, since the split's partial sum is scaled back before the splits are added.
    {
        const float* xb = p.x + prob * p.x_stride + kb0 * 32;
        const int ncol = (kb1 - kb0) * 32;
        if constexpr (!F::kBf16Limbs) {
            for (int n = 0; n < T; ++n) {
                float m = 0.0f;
                for (int k = tid; k < ncol; k += kThreads) m = fmaxf(m, fabsf(xb[n * p.ldx + k]));  // NaN is skipped
                for (int off = 16; off; off >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, off));
                if (lane == 0) wmax[n * kWarps + warp] = m;
            }
            __syncthreads();
            if (tid < T) {
                float m = 0.0f;
                for (int w = 0; w < kWarps; ++w) m = fmaxf(m, wmax[tid * kWarps + w]);
                int e = 0;
                if (m > 0.0f && m <= 3.0e38f) {
                    int ex;
                    frexpf(m, &ex);  // m in [2^(ex-1), 2^ex)
                    e = max(-100, min(100, ex - 15));  // keeps 2^±e a normal float
                }
                xsc[tid] = ldexpf(1.0f, e);
                xinv[tid] = ldexpf(1.0f, -e);
            }
        } else if (tid < T) {
            xsc[tid] = 1.0f;
            xinv[tid] = 1.0f;
        }
        __syncthreads();
        for (int i = tid; i < T * ncol; i += kThreads) {
            const int n = i / ncol, k = i - n * ncol;
            const float v = xb[n * p.ldx + k] * xinv[n];  // exact: a power of two
            // The k order inside a 32-column block: lane quad t owns 4t..4t+3 and 16+4t..16+4t+3.
            const int j = k & 31;
            const int pos = j < 16 ? (j >> 2) * 8 + (j & 3) : ((j - 16) >> 2) * 8 + 4 + (j & 3);
            uint16_t hi, lo;
            if constexpr (F::kBf16Limbs) {
                const __nv_bfloat16 h = __float2bfloat16_rn(v);
                hi = __bfloat16_as_ushort(h);
                lo = __bfloat16_as_ushort(__float2bfloat16_rn(v - __bfloat162float(h)));
            } else {
                const __half h = __float2half_rn(v);
                hi = __half_as_ushort(h);
                lo = __half_as_ushort(__float2half_rn(v - __half2float(h)));
            }
            uint16_t* blk = reinterpret_cast<uint16_t*>(xs + n * p.xs_stride + (k >> 5) * kXBlockBytes);
            blk[pos] = hi;
            blk[32 + pos] = lo;
        }
        // The loop's first barrier publishes the limbs before any warp reads them.
    }

    float acc[2][4] = {};
    for (int s = 0; s < S; ++s) {
        cp_async_wait<kStages - 2>();
        __syncthreads();  // stage s has landed for every thread, and stage s-1's buffer is free
        load_stage(s + kStages - 1);

        int row0, cb0, ncb, ks;
        stage_geometry(s, row0, cb0, ncb, ks);
        const uint8_t* buf = stages + (s % kStages) * kStageBytes<TYPE>;

        // Byte offsets in buf of this lane's rows g, g+8, 16+g, 24+g (segment start + delta).
        // Only the low 4 bits of the start matter, so 32-bit arithmetic does.
        int rowoff[4];
        const uint32_t tile_lo = uint32_t(tile_offset(row0, cb0));
#pragma unroll
        for (int q = 0; q < 4; ++q) {
            const int r = g + 8 * q;
            rowoff[q] = r * F::kSlot + int((tile_lo + uint32_t(r) * uint32_t(p.row_bytes)) & 15u);
        }

#pragma unroll
        for (int j = 0; j < kCbw; ++j) {
            const int c = warp * kCbw + j;
            if (c >= ncb) break;
            uint4 bh = make_uint4(0, 0, 0, 0), bl = make_uint4(0, 0, 0, 0);
            if (g < T) {
                const uint8_t* xq = xs + g * p.xs_stride + (ks * F::kScb + c) * kXBlockBytes + 16 * t;
                bh = *reinterpret_cast<const uint4*>(xq);
                bl = *reinterpret_cast<const uint4*>(xq + 64);
            }
#pragma unroll
            for (int sub = 0; sub < 2; ++sub) {
                if constexpr (TYPE == kQ8_0) {
                    // Block c of the segment in the device layout: its f16 scale in the chunk's
                    // scale area, its 32 quants 16-byte aligned after it (q8_0_device.h).
                    const int chunk = (c >> 3) * q8dev::kChunkBytes, bc = c & 7;
                    const int ra = rowoff[2 * sub] + chunk, rb = rowoff[2 * sub + 1] + chunk;  // rows g, g + 8
                    const float da = __half2float(*reinterpret_cast<const __half*>(buf + ra + 2 * bc));
                    const float db = __half2float(*reinterpret_cast<const __half*>(buf + rb + 2 * bc));
                    const uint32_t* wa = reinterpret_cast<const uint32_t*>(buf + ra + q8dev::kScaleArea + 32 * bc) + t;
                    const uint32_t* wb = reinterpret_cast<const uint32_t*>(buf + rb + q8dev::kScaleArea + 32 * bc) + t;
                    uint32_t a00, a08, a10, a18, b00, b08, b10, b18;
                    i8x4_to_f16x2(wa[0], a00, a08);
                    i8x4_to_f16x2(wa[4], a10, a18);
                    i8x4_to_f16x2(wb[0], b00, b08);
                    i8x4_to_f16x2(wb[4], b10, b18);
                    // Two independent chains (hi and lo limbs) halve the dependent mma latency.
                    float ph[4] = {0.0f, 0.0f, 0.0f, 0.0f}, pl[4] = {0.0f, 0.0f, 0.0f, 0.0f};
                    mma16816<false>(ph, a00, b00, a08, b08, bh.x, bh.y);
                    mma16816<false>(pl, a00, b00, a08, b08, bl.x, bl.y);
                    mma16816<false>(ph, a10, b10, a18, b18, bh.z, bh.w);
                    mma16816<false>(pl, a10, b10, a18, b18, bl.z, bl.w);
                    acc[sub][0] += da * (ph[0] + pl[0]);
                    acc[sub][1] += da * (ph[1] + pl[1]);
                    acc[sub][2] += db * (ph[2] + pl[2]);
                    acc[sub][3] += db * (ph[3] + pl[3]);
                } else {
                    const int oa = rowoff[2 * sub] + c * F::kBlk;      // row 16*sub + g
                    const int ob = rowoff[2 * sub + 1] + c * F::kBlk;  // row 16*sub + g + 8
                    const uint2 a0 = *reinterpret_cast<const uint2*>(buf + oa + 8 * t);
                    const uint2 a1 = *reinterpret_cast<const uint2*>(buf + oa + 32 + 8 * t);
                    const uint2 b0 = *reinterpret_cast<const uint2*>(buf + ob + 8 * t);
                    const uint2 b1 = *reinterpret_cast<const uint2*>(buf + ob + 32 + 8 * t);
                    mma16816<F::kBf16Limbs>(acc[sub], a0.x, b0.x, a0.y, b0.y, bh.x, bh.y);
                    mma16816<F::kBf16Limbs>(acc[sub], a0.x, b0.x, a0.y, b0.y, bl.x, bl.y);
                    mma16816<F::kBf16Limbs>(acc[sub], a1.x, b1.x, a1.y, b1.y, bh.z, bh.w);
                    mma16816<F::kBf16Limbs>(acc[sub], a1.x, b1.x, a1.y, b1.y, bl.z, bl.w);
                }
            }
        }

        if (ks == nks - 1) {  // the tile is complete: add the warps' partial sums
#pragma unroll
            for (int sub = 0; sub < 2; ++sub)
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    red[((warp * 2 + sub) * 32 + lane) * 4 + e] = acc[sub][e];
                    acc[sub][e] = 0.0f;
                }
            __syncthreads();
            for (int o = tid; o < kTileRows * T; o += kThreads) {
                const int n = o / kTileRows, r = o - n * kTileRows;
                const int64_t row = row0 + r;
                if (row >= p.rows) continue;
                const int sub = r >> 4, m = r & 15;
                const int src_lane = (m & 7) * 4 + (n >> 1), e = ((m >> 3) << 1) | (n & 1);
                float v = 0.0f;
#pragma unroll
                for (int w = 0; w < kWarps; ++w) v += red[((w * 2 + sub) * 32 + src_lane) * 4 + e];
                v = bad ? __int_as_float(0x7fc00000) : v * xsc[n];
                if (p.cluster)
                    tile_out[n * kTileRows + r] = v;
                else if (p.partial)
                    p.partial[((size_t(blockIdx.z) * gridDim.y + prob) * T + n) * p.rows + row] = v;
                else
                    p.y[prob * p.y_stride + n * p.ldy + row] = v;
            }
            if (p.cluster) {
                // The splits of this tile are the blocks of one cluster (same tiles, in the same
                // order): the first adds their results in rank order (deterministic).
                cg::cluster_group cluster = cg::this_cluster();
                cluster.sync();
                if (cluster.block_rank() == 0) {
                    const unsigned C = cluster.num_blocks();
                    for (int o = tid; o < kTileRows * T; o += kThreads) {
                        const int n = o / kTileRows, r = o - n * kTileRows;
                        const int64_t row = row0 + r;
                        if (row >= p.rows) continue;
                        float v = 0.0f;
                        for (unsigned q = 0; q < C; ++q) v += cluster.map_shared_rank(tile_out, q)[o];
                        p.y[prob * p.y_stride + n * p.ldy + row] = v;
                    }
                }
                cluster.sync();  // tile_out is rewritten at the next tile's end
            }
            // The next write of red follows the next top-of-loop barrier, after these reads.
        }
    }
    cp_async_wait<0>();  // no copy may still target shared memory when the block exits
}

// Adds the column splits' partial sums of every output in split order (deterministic).
__global__ void add_splits_kernel(const float* __restrict__ partial, int nsplit, int n, int T, int64_t rows,
                                  float* __restrict__ y, int64_t ldy, int64_t y_stride) {
    grid_begin();
    const int64_t total = int64_t(n) * T * rows;
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
        float v = 0.0f;
        for (int z = 0; z < nsplit; ++z) v += partial[size_t(z) * total + i];
        const int64_t r = i % rows, nt = i / rows;
        y[(nt / T) * y_stride + (nt % T) * ldy + r] = v;
    }
}

// The end of a warp-per-row kernel: each token's lane partial sums reduced over the warp and
// written by lane 0 (NaN for a problem whose matrix id is invalid).
__device__ __forceinline__ void write_row(const float (&acc)[kMaxMatvecTokens], const MatvecArgs& a, int prob,
                                          int64_t row, int lane, bool bad) {
#pragma unroll
    for (int n = 0; n < kMaxMatvecTokens; ++n) {
        if (n >= a.T) break;
        float v = acc[n];
        for (int off = 16; off; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
        if (lane == 0) a.y[prob * a.y_stride + n * a.ldy + row] = bad ? __int_as_float(0x7fc00000) : v;
    }
}

// Where a warp of the warp-per-row kernels (4 warps a block, blockIdx.y the problem) works: its
// lane, problem, output row (none when row >= rows) and matrix, bad when the id is outside the
// stack (that problem's outputs are NaN).
struct WarpRow {
    int lane, prob;
    int64_t row, mat;
    bool bad;
};
__device__ __forceinline__ WarpRow warp_row(const int32_t* ids, int64_t count) {
    const int prob = int(blockIdx.y);
    const int64_t mat = ids ? int64_t(ids[prob]) : int64_t(prob);
    return {int(threadIdx.x & 31), prob, int64_t(blockIdx.x) * 4 + (threadIdx.x >> 5), mat, mat < 0 || mat >= count};
}

// The oracle: one warp per output row, float32 products and sums on the CUDA cores.
template <int TYPE>
__global__ void __launch_bounds__(128) simple_matvec_kernel(const uint8_t* w, size_t matrix_bytes, size_t row_bytes,
                                                            int64_t rows, int64_t cols, int64_t count,
                                                            const int32_t* ids, MatvecArgs a) {
    grid_begin();
    const auto [lane, prob, row, mat, bad] = warp_row(ids, count);
    if (row >= rows) return;
    float acc[kMaxMatvecTokens] = {};
    if (!bad) {
        const uint8_t* wr = w + size_t(mat) * matrix_bytes + size_t(row) * row_bytes;
        const float* x = a.x + prob * a.x_stride;
        for (int64_t k = lane; k < cols; k += 32) {
            const float wv = load_elem<TYPE>(wr, k);
#pragma unroll
            for (int n = 0; n < kMaxMatvecTokens; ++n)
                if (n < a.T) acc[n] += wv * x[n * a.ldx + k];
        }
    }
    write_row(acc, a, prob, row, lane, bad);
}

// The exact float of a small unsigned integer (v < 2^23) without the int->float conversion
// unit (a quarter of the FP32 rate, which would bound these kernels below the memory bandwidth):
// 2^23 + v has v in its low mantissa bits, and subtracting 2^23 is exact.
__device__ __forceinline__ float small_u2f(uint32_t v) { return __int_as_float(0x4B000000u | v) - 8388608.0f; }
// The same for byte B of a word (any byte value).
template <int B>
__device__ __forceinline__ float byte_u2f(uint32_t w) {
    return __int_as_float(__byte_perm(w, 0x4B000000u, 0x7440 | B)) - 8388608.0f;
}

// Q2_K rows at T = 1 (decode), cols 2048, 4096, 8192 or 16384. A lane owns 16 qs bytes of a
// super-block (a quarter: half h, bytes 16c..16c+15), i.e. the 4 whole sub-blocks 8h + 2j + c
// (j = shift), 64 values; a warp's 32 lanes cover 2048 columns (a "slice"), and a row of S
// slices takes S warps of the block, the block's 8 / S warp groups taking different rows. The
// lane's 64 inputs stay in registers for every row it visits, with their 4 sub-block sums:
// sum (a q - m) x = a sum q x - m sum x, so a value costs one conversion (byte_u2f) and one FMA.
// Per row a lane issues 7 word loads (4 of quants, 2 of scales, d/dmin), hoisted 4 rows at a
// time so that enough bytes are in flight. Partial sums of a row's slices meet in shared memory
// and are added in slice order (deterministic). 4 rows per warp and tile: the routed experts'
// [2048, 4096] x 6 make 768 tiles, 3 for each of 256 blocks, 97% of the 2 x 132 resident block
// slots (with 8 rows, 384 tiles filled 73%: two of them for 192 blocks).
constexpr int kQ2Warps = 8, kQ2RowsPerWarp = 4, kQ2Hoist = 4;

__global__ void __launch_bounds__(kQ2Warps * 32, 2)
    q2k_matvec_t1_kernel(const uint8_t* __restrict__ w, size_t matrix_bytes, size_t row_bytes, int64_t rows,
                         int nsb, int64_t count, const int32_t* __restrict__ ids, const float* __restrict__ x,
                         int64_t x_stride, float* __restrict__ y, int64_t y_stride, int n_prob, int tiles_per_prob,
                         int tiles_per_block) {
    grid_begin();
    __shared__ float red[kQ2Warps][kQ2RowsPerWarp];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int S = nsb / 8, G = kQ2Warps / S;
    const int slice = warp % S, group = warp / S, TR = G * kQ2RowsPerWarp;
    const int u = slice * 32 + lane, sb = u >> 2, qq = u & 3, h = qq >> 1, c = qq & 1;
    const int xoff = sb * 256 + 128 * h + 16 * c;  // + 32 j + 4 i: shift j, quant word i
    const int qoff = sb * 84 + 16 + 16 * qq, soff = sb * 84 + 8 * h, doff = sb * 84 + 80;

    float4 xv[4][4];
    float xsum[4];
    int x_prob = -1;
    const int t0 = blockIdx.x * tiles_per_block, t1 = min(n_prob * tiles_per_prob, t0 + tiles_per_block);
    for (int tile = t0; tile < t1; ++tile) {
        const int prob = tile / tiles_per_prob;
        const int64_t row0 = int64_t(tile - prob * tiles_per_prob) * TR + group * kQ2RowsPerWarp;
        const int64_t mat = ids ? int64_t(ids[prob]) : int64_t(prob);
        const bool bad = mat < 0 || mat >= count;
        if (x_prob != (x_stride ? prob : 0)) {  // this problem's 64 inputs and their sub-block sums
            x_prob = x_stride ? prob : 0;
            const float* xp = x + x_prob * x_stride + xoff;
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                float s = 0.0f;
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    xv[j][i] = *reinterpret_cast<const float4*>(xp + 32 * j + 4 * i);
                    s += xv[j][i].x + xv[j][i].y + xv[j][i].z + xv[j][i].w;
                }
                xsum[j] = s;
            }
        }
        const uint8_t* wm = w + (bad ? 0 : size_t(mat) * matrix_bytes);
#pragma unroll
        for (int k0 = 0; k0 < kQ2RowsPerWarp; k0 += kQ2Hoist) {
            uint32_t q[kQ2Hoist][4], s0[kQ2Hoist], s1[kQ2Hoist], dd[kQ2Hoist];
#pragma unroll
            for (int r = 0; r < kQ2Hoist; ++r) {
                const int64_t row = row0 + k0 + r;
                const bool live = !bad && row < rows;
                const uint8_t* blk = wm + size_t(live ? row : 0) * row_bytes;
#pragma unroll
                for (int i = 0; i < 4; ++i) q[r][i] = live ? *reinterpret_cast<const uint32_t*>(blk + qoff + 4 * i) : 0u;
                s0[r] = live ? *reinterpret_cast<const uint32_t*>(blk + soff) : 0u;
                s1[r] = live ? *reinterpret_cast<const uint32_t*>(blk + soff + 4) : 0u;
                dd[r] = live ? *reinterpret_cast<const uint32_t*>(blk + doff) : 0u;
            }
#pragma unroll
            for (int r = 0; r < kQ2Hoist; ++r) {
                const float d = __half2float(__ushort_as_half(uint16_t(dd[r] & 0xffff)));
                const float dmin = __half2float(__ushort_as_half(uint16_t(dd[r] >> 16)));
                float acc = 0.0f;
#pragma unroll
                for (int j = 0; j < 4; ++j) {
                    const uint32_t sc = ((j < 2 ? s0[r] : s1[r]) >> (8 * (c + 2 * (j & 1)))) & 0xffu;
                    const float a = __fmul_rn(d, small_u2f(sc & 15)), m = __fmul_rn(dmin, small_u2f(sc >> 4));
                    float p = 0.0f;
#pragma unroll
                    for (int i = 0; i < 4; ++i) {
                        const uint32_t qm = (q[r][i] >> (2 * j)) & 0x03030303u;
                        p = fmaf(byte_u2f<0>(qm), xv[j][i].x, p);
                        p = fmaf(byte_u2f<1>(qm), xv[j][i].y, p);
                        p = fmaf(byte_u2f<2>(qm), xv[j][i].z, p);
                        p = fmaf(byte_u2f<3>(qm), xv[j][i].w, p);
                    }
                    acc = fmaf(a, p, acc);
                    acc = fmaf(-m, xsum[j], acc);
                }
                for (int off = 16; off; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
                if (lane == 0) red[warp][k0 + r] = acc;
            }
        }
        __syncthreads();
        if (threadIdx.x < TR) {
            const int g = threadIdx.x / kQ2RowsPerWarp, k = threadIdx.x % kQ2RowsPerWarp;
            const int64_t row = int64_t(tile - prob * tiles_per_prob) * TR + threadIdx.x;
            if (row < rows) {
                float v = 0.0f;
                for (int s = 0; s < S; ++s) v += red[g * S + s][k];
                y[prob * y_stride + row] = bad ? __int_as_float(0x7fc00000) : v;
            }
        }
        __syncthreads();  // red is rewritten by the next tile
    }
}

// F32 rows (the router), one warp per row: 16-byte loads of the weight and of each token's x,
// four in flight per lane. Needs 16-byte aligned rows and inputs (the caller checks).
__global__ void __launch_bounds__(128) f32_matvec_kernel(const float* __restrict__ w, size_t matrix_floats,
                                                         size_t row_floats, int64_t rows, int64_t cols, int64_t count,
                                                         const int32_t* __restrict__ ids, MatvecArgs a) {
    grid_begin();
    const auto [lane, prob, row, mat, bad] = warp_row(ids, count);
    if (row >= rows) return;
    float acc[kMaxMatvecTokens] = {};
    if (!bad) {
        const float4* wr = reinterpret_cast<const float4*>(w + size_t(mat) * matrix_floats + size_t(row) * row_floats);
        const float* x = a.x + prob * a.x_stride;
        const int64_t n4 = cols / 4;
        int64_t k = lane;
        for (; k + 96 < n4; k += 128) {
            float4 wv[4];
#pragma unroll
            for (int u = 0; u < 4; ++u) wv[u] = wr[k + 32 * u];
#pragma unroll
            for (int n = 0; n < kMaxMatvecTokens; ++n) {
                if (n >= a.T) break;
                const float4* xr = reinterpret_cast<const float4*>(x + n * a.ldx);
#pragma unroll
                for (int u = 0; u < 4; ++u) {
                    const float4 xv = xr[k + 32 * u];
                    acc[n] += wv[u].x * xv.x + wv[u].y * xv.y + wv[u].z * xv.z + wv[u].w * xv.w;
                }
            }
        }
        for (; k < n4; k += 32) {
            const float4 wv = wr[k];
#pragma unroll
            for (int n = 0; n < kMaxMatvecTokens; ++n) {
                if (n >= a.T) break;
                const float4 xv = reinterpret_cast<const float4*>(x + n * a.ldx)[k];
                acc[n] += wv.x * xv.x + wv.y * xv.y + wv.z * xv.z + wv.w * xv.w;
            }
        }
    }
    write_row(acc, a, prob, row, lane, bad);
}

// ---- host side ----

int wtype(const DeviceMat& w) { return int(w.type); }

void check_args(const DeviceMat& w, const MatvecArgs& a) {
    if (a.T < 1 || a.T > kMaxMatvecTokens) fail("CUDA matvec: T = ", a.T, " tokens, the kernel takes 1..", kMaxMatvecTokens);
    if (a.n < 1) fail("CUDA matvec: n = ", a.n, " problems");
    if (!w.data) fail("CUDA matvec: the weight has no device data");
    if (w.rows < 1 || w.cols < 1 || w.count < 1)
        fail("CUDA matvec: weight shape [", w.rows, ", ", w.cols, "] x ", w.count);
    const auto type = w.type;
    const int t = int(type);
    if (t != kF32 && t != kF16 && t != kBF16 && t != kQ8_0 && t != kMXFP4 && t != kQ2_K)
        fail("CUDA matvec: unsupported weight type ", gguf::type_name(type));
    const int64_t be = gguf::type_block_elems(type);
    if (w.cols % be != 0) fail("CUDA matvec: ", gguf::type_name(type), " rows of ", w.cols, " values are not whole blocks");
    const size_t need = device_row_bytes(type, w.cols);
    if (w.row_bytes < need)
        fail("CUDA matvec: row_bytes ", w.row_bytes, " < ", need, " for ", w.cols, " ", gguf::type_name(type), " values");
    if (!a.ids && a.n > w.count) fail("CUDA matvec: ", a.n, " problems without ids but only ", w.count, " matrices");
    if (!a.x || !a.y) fail("CUDA matvec: null x or y");
    if (a.T > 1 && a.ldx < w.cols) fail("CUDA matvec: ldx ", a.ldx, " < cols ", w.cols);
    if (a.T > 1 && a.ldy < w.rows) fail("CUDA matvec: ldy ", a.ldy, " < rows ", w.rows);
    if (a.n > 1 && a.y_stride == 0) fail("CUDA matvec: ", a.n, " problems would all write y (y_stride = 0)");
}

bool aligned(const void* p, size_t n) { return reinterpret_cast<uintptr_t>(p) % n == 0; }

void launch_q2k_t1(const DeviceMat& w, const MatvecArgs& a, cudaStream_t stream) {
    const int nsb = int(w.cols / 256), S = nsb / 8, G = kQ2Warps / S;
    const int64_t TR = int64_t(G) * kQ2RowsPerWarp;
    const int64_t tiles_per_prob = (w.rows + TR - 1) / TR, tiles = tiles_per_prob * a.n;
    // Two blocks per multiprocessor are resident (launch bounds); consecutive tiles of one block
    // share the problem, so its inputs stay in registers.
    const int64_t slots = 2 * int64_t(device_limits().sms);
    const int64_t per_block = (tiles + slots - 1) / slots, blocks = (tiles + per_block - 1) / per_block;
    if (tiles > INT32_MAX) fail("CUDA matvec: ", tiles, " Q2_K tiles");
    launch(q2k_matvec_t1_kernel, unsigned(blocks), kQ2Warps * 32, 0, stream,
           w.data, w.matrix_bytes(), w.row_bytes, w.rows, nsb, w.count, a.ids, a.x, a.x_stride, a.y, a.y_stride, a.n,
           int(tiles_per_prob), int(per_block));
    DSV4_LAUNCH_CHECK();
}

// How the tensor kernel splits its work: column blocks per split (the packed x of a split must
// fit shared memory, and more splits are made when the tiles of all problems would leave
// multiprocessors idle: a [1024, 4096] matrix has 32 tiles for 132 of them), blocks per problem.
constexpr int kMaxClusterSplits = 8;  // the portable cluster size

struct TcPlan {
    int nsplit = 1, kbps = 0, xs_stride = 0, xs_bytes = 0, bpp = 0;
    size_t smem = 0;
};

template <int TYPE>
size_t tc_fixed_smem() {
    return size_t(kStages) * kStageBytes<TYPE> + kRedBytes + kTailFloats * sizeof(float);
}

template <int TYPE>
int tc_blocks_per_sm(size_t smem) {
    const DeviceLimits& lim = device_limits();
    static const bool attr_set = [&] {
        DSV4_CUDA_CHECK(cudaFuncSetAttribute(tc_matvec_kernel<TYPE>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             int(lim.smem_optin)));
        return true;
    }();
    (void)attr_set;
    // Asked for every product (twice with the workspace size): the few shared-memory sizes a
    // model uses are answered once.
    static std::mutex mu;
    static std::map<size_t, int> known;
    std::lock_guard<std::mutex> lk(mu);
    if (auto it = known.find(smem); it != known.end()) return it->second;
    int per_sm = 0;
    DSV4_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, tc_matvec_kernel<TYPE>, kThreads, smem));
    if (per_sm < 1) fail("CUDA matvec: a block of ", smem, " bytes of shared memory does not fit a multiprocessor");
    known[smem] = per_sm;
    return per_sm;
}

template <int TYPE>
TcPlan plan_tc(const DeviceMat& w, const MatvecArgs& a, size_t x_smem_limit) {
    using F = TcFmt<TYPE>;
    const DeviceLimits& lim = device_limits();
    const size_t fixed = tc_fixed_smem<TYPE>();
    if (lim.smem_optin < fixed + 256) fail("CUDA matvec: the device has ", lim.smem_optin, " bytes of shared memory per block");
    size_t budget = lim.smem_optin - fixed;
    if (x_smem_limit) budget = std::min(budget, x_smem_limit);
    const int nb = int(w.cols / 32);
    // One token of a split of nbk column blocks takes nbk * 128 + 64 bytes (the 64 staggers the
    // tokens across banks); the total is rounded up to 128.
    const int64_t per_tok = (int64_t(budget) - 127) / a.T;
    // Q8_0 splits start at chunk boundaries (8 blocks) of the device layout.
    constexpr int kAlign = TYPE == kQ8_0 ? q8dev::kChunkBlocks : 1;
    const int64_t nbk_max = (per_tok - 64) / kXBlockBytes / kAlign * kAlign;
    if (nbk_max < 1) fail("CUDA matvec: no room in shared memory for the packed x (", budget, " bytes for ", a.T, " tokens)");
    auto finish = [&](TcPlan& pl, int kbps) {
        pl.kbps = kbps;
        pl.nsplit = (nb + kbps - 1) / kbps;
        pl.xs_stride = kbps * kXBlockBytes + 64;
        pl.xs_bytes = (a.T * pl.xs_stride + 127) / 128 * 128;
        pl.smem = size_t(pl.xs_bytes) + fixed;
    };
    TcPlan pl;
    const int min_split = int((nb + nbk_max - 1) / nbk_max);
    finish(pl, ((nb + min_split - 1) / min_split + kAlign - 1) / kAlign * kAlign);  // <= nbk_max
    const int64_t tiles = (w.rows + kTileRows - 1) / kTileRows;
    const int stages = (nb + F::kScb - 1) / F::kScb;
    if (stages > 1) {
        const int64_t want = int64_t(tc_blocks_per_sm<TYPE>(pl.smem)) * lim.sms;
        const int64_t have = tiles * a.n * pl.nsplit;
        if (have < want) {
            // Whole stages per split, at least one, as many splits as fill the idle slots, and
            // no more than one cluster holds (their sums are added through its shared memory).
            const int64_t splits = std::min<int64_t>({int64_t(stages), int64_t(kMaxClusterSplits),
                                                      (want + tiles * a.n - 1) / (tiles * a.n)});
            const int kbps = int((stages + splits - 1) / splits) * F::kScb;
            if (kbps < pl.kbps) finish(pl, kbps);
        }
    }
    // Blocks per problem: enough to fill every resident slot, then evened out so that every
    // block walks the same number of tiles (64 tiles over 44 blocks would leave half of them
    // idle for the second half of the kernel; 32 blocks of 2 tiles finish together).
    const int64_t want = int64_t(tc_blocks_per_sm<TYPE>(pl.smem)) * lim.sms;
    const int64_t per_problem = std::max<int64_t>(1, want / (int64_t(a.n) * pl.nsplit));
    const int64_t tiles_per_block = (tiles + per_problem - 1) / per_problem;
    pl.bpp = int((tiles + tiles_per_block - 1) / tiles_per_block);
    return pl;
}

// Workspace: the splits' partial sums, when there are more splits than a cluster holds.
size_t split_bytes(const TcPlan& pl, const DeviceMat& w, const MatvecArgs& a) {
    return pl.nsplit > kMaxClusterSplits ? size_t(pl.nsplit) * a.n * a.T * size_t(w.rows) * sizeof(float) : 0;
}

template <int TYPE>
void launch_tc(const DeviceMat& w, const MatvecArgs& a, void* ws, size_t ws_bytes, cudaStream_t stream,
               size_t x_smem_limit) {
    const TcPlan pl = plan_tc<TYPE>(w, a, x_smem_limit);
    const size_t need = split_bytes(pl, w, a);
    if (ws_bytes < need || (need && !aligned(ws, 16)))
        fail("CUDA matvec: workspace of ", ws_bytes, " bytes, ", need, " needed, 16-byte aligned");
    TcParams p{};
    p.w = w.data;
    p.w_bytes = w.bytes();
    p.matrix_bytes = w.matrix_bytes();
    p.row_bytes = w.row_bytes;
    p.rows = w.rows;
    p.count = w.count;
    p.ids = a.ids;
    p.x = a.x;
    p.ldx = a.ldx;
    p.x_stride = a.x_stride;
    p.y = a.y;
    p.ldy = a.ldy;
    p.y_stride = a.y_stride;
    p.T = a.T;
    p.nb = int(w.cols / 32);
    p.kb_per_split = pl.kbps;
    p.tiles = int((w.rows + kTileRows - 1) / kTileRows);
    p.xs_stride = pl.xs_stride;
    p.xs_bytes = pl.xs_bytes;
    p.partial = need ? static_cast<float*>(ws) : nullptr;
    p.cluster = pl.nsplit > 1 && !need;
    if (a.n > 65535 || pl.nsplit > 65535) fail("CUDA matvec: grid of ", a.n, " problems x ", pl.nsplit, " splits");
    cudaLaunchAttribute cluster{};
    cluster.id = cudaLaunchAttributeClusterDimension;
    cluster.val.clusterDim.x = 1;
    cluster.val.clusterDim.y = 1;
    cluster.val.clusterDim.z = p.cluster ? unsigned(pl.nsplit) : 1;
    launch_ex(tc_matvec_kernel<TYPE>, dim3(unsigned(pl.bpp), unsigned(a.n), unsigned(pl.nsplit)), dim3(kThreads),
              pl.smem, stream, &cluster, 1, p);
    if (p.partial) {
        const int64_t total = int64_t(a.n) * a.T * w.rows;
        launch(add_splits_kernel, unsigned(std::min<int64_t>((total + 255) / 256, 4096)), 256, 0, stream,
               p.partial, pl.nsplit, a.n, a.T, w.rows, a.y, a.ldy, a.y_stride);
        DSV4_LAUNCH_CHECK();
    }
}

// Workspace of the tensor path: the splits' partial sums when they are added in global memory.
size_t tc_workspace_bytes(const DeviceMat& w, const MatvecArgs& a, size_t x_smem_limit) {
    // At most 8 column blocks are one stage for every type, whose x fits unless a test lowers
    // the limit: never split (and no device query, so the argument checks run without a device).
    if (w.cols / 32 <= 8 && x_smem_limit == 0) return 0;
    TcPlan pl;
    switch (int(w.type)) {
        case kQ8_0: pl = plan_tc<kQ8_0>(w, a, x_smem_limit); break;
        case kF16: pl = plan_tc<kF16>(w, a, x_smem_limit); break;
        default: pl = plan_tc<kBF16>(w, a, x_smem_limit); break;
    }
    return split_bytes(pl, w, a);
}

}  // namespace

bool tensor_path_supported(const DeviceMat& w) {
    // Q8_0 in the device layout (both of its kernels need the same). The F16/BF16 kernel reads
    // 2-byte rows as aligned 8-byte pairs (row_bytes a multiple of 16, which GGUF rows are when
    // cols % 32 == 0).
    const int t = int(w.type);
    if (t == kQ8_0) return q8_0_matvec_supported(w);
    return (t == kF16 || t == kBF16) && w.cols % 32 == 0 && w.row_bytes % 16 == 0 &&
           (reinterpret_cast<uintptr_t>(w.data) & 15) == 0;
}

namespace {
bool use_tensor(const DeviceMat& w, MatvecOptions opt) {
    if (opt.path == MatvecPath::Simple) return false;
    if (opt.path == MatvecPath::Tensor) {
        if (!tensor_path_supported(w))
            fail("CUDA matvec: the tensor path takes Q8_0 (device layout), F16 or BF16 weights with cols % 32 == 0 and "
                 "a 16-byte aligned base, not ", gguf::type_name(w.type), " with cols ", w.cols);
        return true;
    }
    return tensor_path_supported(w);
}
// Q8_0 on the tensor path: the int8 kernel up to kQ8Int8MaxTokens tokens, where it is faster,
// the 16-bit one above (docs/CUDA.md has the measurements).
bool int8_q8_0(const DeviceMat& w, const MatvecArgs& a) {
    return w.type == gguf::TensorType::Q8_0 && a.T <= kQ8Int8MaxTokens;
}
// Whether the Q2_K register kernel takes this product (T = 1, a width it has slices for, 4-byte
// rows, 16-byte aligned inputs).
bool q2k_t1_takes(const DeviceMat& w, const MatvecArgs& a) {
    const bool x16 = aligned(a.x, 16) && a.x_stride % 4 == 0;
    const bool w4 = w.row_bytes % 4 == 0 && aligned(w.data, 4);
    return wtype(w) == kQ2_K && a.T == 1 && x16 && w4 &&
           (w.cols == 2048 || w.cols == 4096 || w.cols == 8192 || w.cols == 16384);
}
// Q2_K takes the int8 kernel on Auto (Simple is the oracle; Tensor names the 16-bit and Q8_0
// kernels and refuses Q2_K), except where the register kernel takes it: at T = 1 that one is faster (H100, 2026-12-07, 6 of 256 [2048, 4096] experts:
// 16.1 us against 24.3 us for the int8 kernel with its shared-memory ring; without the ring the
// int8 kernel took 8 Flash layers' decode from 375-383 down to 308-323 tok/s).
bool int8_q2_k(const DeviceMat& w, const MatvecArgs& a, MatvecOptions opt) {
    return opt.path == MatvecPath::Auto && q2_k_matvec_supported(w) && !q2k_t1_takes(w, a);
}
}  // namespace

size_t matvec_workspace_bytes(const DeviceMat& w, const MatvecArgs& a, MatvecOptions opt) {
    check_args(w, a);
    if (int8_q2_k(w, a, opt)) return int8_matvec_workspace_bytes(w, a);
    if (!use_tensor(w, opt)) return 0;
    return int8_q8_0(w, a) ? int8_matvec_workspace_bytes(w, a) : tc_workspace_bytes(w, a, opt.x_smem_limit);
}

void matvec(const DeviceMat& w, const MatvecArgs& a, void* workspace, size_t workspace_bytes, Stream stream,
            MatvecOptions opt) {
    check_args(w, a);
    if (int8_q2_k(w, a, opt)) {
        q2_k_matvec(w, a, workspace, workspace_bytes, stream);
        return;
    }
    if (use_tensor(w, opt)) {
        switch (int(w.type)) {
            case kQ8_0:
                if (int8_q8_0(w, a))
                    q8_0_matvec(w, a, workspace, workspace_bytes, stream);
                else
                    launch_tc<kQ8_0>(w, a, workspace, workspace_bytes, stream, opt.x_smem_limit);
                break;
            case kF16: launch_tc<kF16>(w, a, workspace, workspace_bytes, stream, opt.x_smem_limit); break;
            case kBF16: launch_tc<kBF16>(w, a, workspace, workspace_bytes, stream, opt.x_smem_limit); break;
        }
        return;
    }
    if (a.n > 65535) fail("CUDA matvec: ", a.n, " problems");
    const dim3 grid(ceil_div(w.rows, 4), unsigned(a.n));
    const bool dedicated = opt.path != MatvecPath::Simple;
    const bool w16 = w.row_bytes % 16 == 0 && aligned(w.data, 16);
    const bool x16 = aligned(a.x, 16) && a.x_stride % 4 == 0 && (a.T == 1 || a.ldx % 4 == 0);
    if (dedicated && q2k_t1_takes(w, a)) {
        launch_q2k_t1(w, a, stream);
        return;
    }
    if (dedicated && wtype(w) == kF32 && w16 && x16 && w.cols % 4 == 0) {
        launch(f32_matvec_kernel, grid, 128, 0, stream, reinterpret_cast<const float*>(w.data), w.matrix_bytes() / 4,
               w.row_bytes / 4, w.rows, w.cols, w.count, a.ids, a);
        DSV4_LAUNCH_CHECK();
        return;
    }
    dispatch_wtype(wtype(w), [&]<int TYPE>() {
        launch(simple_matvec_kernel<TYPE>, grid, 128, 0, stream, w.data, w.matrix_bytes(), w.row_bytes, w.rows, w.cols,
               w.count, a.ids, a);
    });
    DSV4_LAUNCH_CHECK();
}

}  // namespace dsv4::cuda
