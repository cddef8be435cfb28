// The decode matvec (T <= 8 tokens) on the int8 tensor cores, for Q8_0 (device layout) and Q2_K
// (GGUF layout) weights; the arithmetic and the fragment layouts are in q8_0_device.h, shared with
// the CPU replay of a warp in tests/test_q8_0_device.cpp, and the Q2_K differences at Q2Step below.
//
// Two launches per product:
//   1. pack_x_limbs_kernel: x of every token into int8 limbs and a power-of-two scale per
//      32-column block, in the order the B fragments are read (the workspace). Tiny: T x cols
//      values.
//   2. int8_matvec_kernel: no dequantisation to floats; 8 MMAs per 16 rows x 128 columns and
//      token (16 for Q2_K: the min codes take a second set). Q8_0 weights go straight from global
//      memory into registers, one group ahead (two 16-byte loads per row and block); Q2_K's,
//      a third the bytes per group, through a per-warp ring in shared memory (at Q2Step below). It is
//      launched with programmatic dependent launch: its blocks start while the pack runs and load
//      their first weights, and wait (griddepcontrol.wait) only before their first read of the
//      packed x.
// A block of 8 warps takes 8 / WC row tiles of 16 rows at a time; the WC warps of a tile split
// its groups and their sums are added in shared memory in warp order. WC grows (1, 2, 4, 8)
// until the blocks fill the multiprocessors, so a matrix of few rows still spreads. Every sum is
// taken in a fixed order: the result is deterministic.
#include "backend/cuda/matvec_int8.h"

#include <algorithm>
#include <type_traits>

#include "backend/cuda/common.cuh"
#include "backend/cuda/q2_k_device.h"
#include "backend/cuda/q8_0_device.h"

namespace dsv4::cuda {

namespace {

using namespace q8dev;

constexpr int kThreads = 256, kWarps = 8;

// m16n8k32 s8 x s8 + s32 -> s32 (the PTX fragment layouts; q8_0_device.h has how they are used).
__device__ __forceinline__ void imma16832(int32_t (&c)[4], const AFrag& a, uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
        : "r"(a.a0), "r"(a.a1), "r"(a.a2), "r"(a.a3), "r"(b0), "r"(b1));
}

// Weights are read once: 16 bytes past L1 (no allocation there), into four words.
__device__ __forceinline__ void ld_stream(const uint8_t* p, uint32_t* w) {
    asm("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];\n"
        : "=r"(w[0]), "=r"(w[1]), "=r"(w[2]), "=r"(w[3])
        : "l"(p));
}

// x's 8-lane teams: one (problem input, token, block) each, a lane holding 4 consecutive values.
__global__ void __launch_bounds__(kThreads) pack_x_limbs_kernel(const float* __restrict__ x, int64_t ldx,
                                                                int64_t x_stride, int T, int nb, int G, int P,
                                                                uint8_t* __restrict__ xl, float* __restrict__ xs) {
    // x comes from the kernel before; the matvec may start now: it loads weights until it needs
    // these limbs (grid_dependency_wait).
    grid_begin();
    const int64_t team = (int64_t(blockIdx.x) * kThreads + threadIdx.x) >> 3;
    const int k = int(threadIdx.x & 7);
    const int64_t nblk = int64_t(G) * 4;
    if (team >= int64_t(P) * T * nblk) return;  // whole teams leave together
    const unsigned mask = 0xffu << (threadIdx.x & 24);
    const int64_t b = team % nblk, pn = team / nblk;
    const int64_t p = pn / T, n = pn - p * T;
    float v[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    float m = 0.0f;
    bool nan = false;
    if (b < nb) {
        const float* xb = x + p * x_stride + n * ldx + b * 32 + 4 * k;
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            v[e] = xb[e];
            m = fmaxf(m, fabsf(v[e]));  // fmaxf skips NaN: counted apart
            nan |= v[e] != v[e];
        }
    }
#pragma unroll
    for (int off = 1; off < 8; off <<= 1) {
        m = fmaxf(m, __shfl_xor_sync(mask, m, off));
        nan |= __shfl_xor_sync(mask, int(nan), off) != 0;
    }
    const float s = nan ? NAN : x_block_scale(m);
    const bool finite = s <= 3.4028235e38f;
    const float inv = finite ? 1.0f / s : 0.0f;  // exact: a power of two
    int8_t l[4][4] = {};
    if (finite)
#pragma unroll
        for (int e = 0; e < 4; ++e) split_limbs(v[e] * inv, l[e]);
    uint8_t* group = xl + (pn * G + b / 4) * kGroupLimbBytes;
#pragma unroll
    for (int limb = 0; limb < 4; ++limb) {
        const uint32_t word = uint32_t(uint8_t(l[0][limb])) | (uint32_t(uint8_t(l[1][limb])) << 8) |
                              (uint32_t(uint8_t(l[2][limb])) << 16) | (uint32_t(uint8_t(l[3][limb])) << 24);
        *reinterpret_cast<uint32_t*>(group + limb_offset(limb, 4 * k, int(b % 4))) = word;
    }
    if (k == 0) xs[pn * nblk + b] = b < nb ? s : 0.0f;
}

struct Q8Params {
    const uint8_t* w;  // matrix or stack base (Q8_0: the device layout of q8_0_device.h; Q2_K: GGUF)
    size_t matrix_bytes, row_bytes;
    int64_t rows, count;
    const int32_t* ids;
    int nb, G;
    const uint8_t* xl;  // packed limbs [input][T][G][512]
    const float* xs;    // scales [input][T][G * 4]
    int x_per_prob;     // 1: problem p reads input p, 0: every problem input 0
    float* y;
    int64_t ldy, y_stride;
    int wc, sets;  // warps per row tile, row-tile sets (of 8 / wc tiles)
};

// The A fragments' bytes and the scales of group gi of rows g (W, dg) and g + 8 (U, dh).
struct AStep {
    uint32_t W[8], U[8];
    float dg, dh;
};
__device__ __forceinline__ void load_step(AStep& a, const uint8_t* rowg, const uint8_t* rowh, bool okg, bool okh,
                                          int gi, int t, int nb) {
    const int blk = 4 * gi + t;
    const bool valid = blk < nb;
    const size_t qo = quant_offset(blk), so = scale_offset(blk);
    if (okg && valid) {
        ld_stream(rowg + qo, a.W);
        ld_stream(rowg + qo + 16, a.W + 4);
        a.dg = __half2float(__ldg(reinterpret_cast<const __half*>(rowg + so)));
    } else {
#pragma unroll
        for (int i = 0; i < 8; ++i) a.W[i] = 0;
        a.dg = 0.0f;
    }
    if (okh && valid) {
        ld_stream(rowh + qo, a.U);
        ld_stream(rowh + qo + 16, a.U + 4);
        a.dh = __half2float(__ldg(reinterpret_cast<const __half*>(rowh + so)));
    } else {
#pragma unroll
        for (int i = 0; i < 8; ++i) a.U[i] = 0;
        a.dh = 0.0f;
    }
}

// Q2_K rows (GGUF layout, 4-byte aligned) on the same MMAs: q2_k_device.h has where a lane's
// words are and how they become A fragments (the codes times their sub-block scales, and a second
// set for the min codes); the epilogue scales the two int32 block sums by d s and dmin s.
//
// A group of 16 rows is only 672 bytes, so the weights do not go through registers one group
// ahead (too few bytes in flight: slower than the register kernel at T = 1) but through a ring
// of kQ2Stages groups per warp in shared memory, filled with 4-byte cp.async: row slot r (rows
// g and g + 8 of the tile) holds the 8 qs words, the two scale words of half h and d/dmin.
// Lane (g, t) copies qs words 2t, 2t + 1 of both its rows, lanes t = 0, 1, 2 also scale word 0,
// 1 and d/dmin, so a quad copies each row's 44 bytes once; __syncwarp after the wait makes them
// visible to the quad.
constexpr int kQ2Stages = 6;
constexpr int kQ2SlotWords = 12;                   // per row: qs[8], scale words[2], d/dmin, pad
constexpr int kQ2StageWords = 16 * kQ2SlotWords;   // 16 rows
struct Q2Step {  // rows g (Wg, scg, ddg) and g + 8 (Wh, sch, ddh)
    uint32_t Wg[8], Wh[8];
    uint32_t scg, sch, ddg, ddh;
};
__device__ __forceinline__ void cp_async4(uint32_t* dst, const void* src, bool ok) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(uint32_t(__cvta_generic_to_shared(dst))),
                 "l"(src), "r"(ok ? 4 : 0)
                 : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}
// This lane's copies of group gi into stage `st` (rows past the matrix: zeros, read from `none`).
__device__ __forceinline__ void q2_issue(uint32_t* st, const uint8_t* rowg, const uint8_t* rowh, bool okg, bool okh,
                                         int gi, int g, int t, const void* none) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const bool ok = r ? okh : okg;
        const uint8_t* row = r ? rowh : rowg;
        uint32_t* slot = st + (g + 8 * r) * kQ2SlotWords;
        cp_async4(slot + 2 * t, ok ? row + q2dev::qs_word_offset(gi, 2 * t) : none, ok);
        cp_async4(slot + 2 * t + 1, ok ? row + q2dev::qs_word_offset(gi, 2 * t + 1) : none, ok);
        if (t < 2) cp_async4(slot + 8 + t, ok ? row + q2dev::scale_word_offset(gi, 2 * t) : none, ok);
        else if (t == 2) cp_async4(slot + 10, ok ? row + q2dev::dd_offset(gi) : none, ok);
    }
}
__device__ __forceinline__ void q2_take(Q2Step& a, const uint32_t* st, int g, int t) {
    const uint32_t* sg = st + g * kQ2SlotWords;
    const uint32_t* sh = st + (g + 8) * kQ2SlotWords;
#pragma unroll
    for (int q = 0; q < 2; ++q) {
        const uint4 vg = reinterpret_cast<const uint4*>(sg)[q], vh = reinterpret_cast<const uint4*>(sh)[q];
        a.Wg[4 * q] = vg.x, a.Wg[4 * q + 1] = vg.y, a.Wg[4 * q + 2] = vg.z, a.Wg[4 * q + 3] = vg.w;
        a.Wh[4 * q] = vh.x, a.Wh[4 * q + 1] = vh.y, a.Wh[4 * q + 2] = vh.z, a.Wh[4 * q + 3] = vh.w;
    }
    a.scg = sg[8 + (t >> 1)];  // q2dev::scale_word_offset(gi, t): sub-blocks 8h + 2t, + 1
    a.sch = sh[8 + (t >> 1)];
    a.ddg = sg[10];
    a.ddh = sh[10];
}
template <int FMT, int T>
__global__ void __launch_bounds__(kThreads, 2) int8_matvec_kernel(const Q8Params p) {
    __shared__ float red[kWarps][16][T];
    __shared__ __align__(16) uint32_t q2ring[FMT == kQ2_K ? kWarps * kQ2Stages * kQ2StageWords : 4];
    const int warp = int(threadIdx.x >> 5), lane = int(threadIdx.x & 31), g = lane >> 2, t = lane & 3;
    const int WC = p.wc, WR = kWarps / WC, wr = warp / WC, wc = warp - wr * WC;
    const int prob = int(blockIdx.y);
    const int64_t mat = p.ids ? int64_t(p.ids[prob]) : int64_t(prob);
    const bool bad = mat < 0 || mat >= p.count;
    const uint8_t* wm = p.w + (bad ? 0 : size_t(mat) * p.matrix_bytes);
    int ga, gb;
    group_range(p.G, wc, WC, ga, gb);
    const size_t in = p.x_per_prob ? size_t(prob) : 0;
    const uint8_t* xl = p.xl + in * T * size_t(p.G) * kGroupLimbBytes;
    const float* xs = p.xs + in * T * size_t(p.G) * 4;
    const bool bact = b_active(g, t);
    bool waited = false;

    for (int set = int(blockIdx.x); set < p.sets; set += int(gridDim.x)) {
        const int64_t r0 = (int64_t(set) * WR + wr) * 16;
        const bool okg = !bad && r0 + g < p.rows, okh = !bad && r0 + g + 8 < p.rows;
        const uint8_t* rowg = wm + size_t(r0 + g) * p.row_bytes;
        const uint8_t* rowh = rowg + 8 * p.row_bytes;
        float acc[T][2];
#pragma unroll
        for (int n = 0; n < T; ++n) acc[n][0] = acc[n][1] = 0.0f;

        using Step = std::conditional_t<FMT == kQ2_K, Q2Step, AStep>;
        Step cur, nxt;
        [[maybe_unused]] uint32_t* ring = q2ring + warp * kQ2Stages * kQ2StageWords;
        auto stage = [&](int gi) { return ring + (gi % kQ2Stages) * kQ2StageWords; };
        if constexpr (FMT == kQ2_K) {
            __syncwarp();  // the previous set's reads of the ring are done
#pragma unroll
            for (int q = 0; q < kQ2Stages - 1; ++q) {
                if (ga + q < gb) q2_issue(stage(ga + q), rowg, rowh, okg, okh, ga + q, g, t, p.w);
                cp_async_commit();
            }
        } else {
            if (ga < gb) load_step(cur, rowg, rowh, okg, okh, ga, t, p.nb);
        }
        if (!waited) {  // the packed x is complete past this point (a no-op without the dependent launch)
            grid_begin();
            waited = true;
        }
        for (int gi = ga; gi < gb; ++gi) {
            [[maybe_unused]] q2dev::Frag fg, fh;
            if constexpr (FMT == kQ2_K) {
                cp_async_wait<kQ2Stages - 2>();  // group gi has landed (this lane's copies)
                __syncwarp();                    // ... and the quad's; stage gi - 1 is free
                q2_take(cur, stage(gi), g, t);
                const int ahead = gi + kQ2Stages - 1;
                if (ahead < gb) q2_issue(stage(ahead), rowg, rowh, okg, okh, ahead, g, t, p.w);
                cp_async_commit();
                fg = q2dev::frag(cur.Wg, cur.scg, t);
                fh = q2dev::frag(cur.Wh, cur.sch, t);
            } else {
                if (gi + 1 < gb) load_step(nxt, rowg, rowh, okg, okh, gi + 1, t, p.nb);  // in flight meanwhile
            }
#pragma unroll
            for (int n = 0; n < T; ++n) {
                const uint8_t* xg = xl + (size_t(n) * p.G + gi) * kGroupLimbBytes;
                uint32_t hA[2][4] = {}, hB[2][4] = {};
                if (bact) {
#pragma unroll
                    for (int h = 0; h < 2; ++h) {
                        const uint4 va = __ldg(reinterpret_cast<const uint4*>(xg + b_offset(g, 0, h)));
                        const uint4 vb = __ldg(reinterpret_cast<const uint4*>(xg + b_offset(g, 1, h)));
                        hA[h][0] = va.x, hA[h][1] = va.y, hA[h][2] = va.z, hA[h][3] = va.w;
                        hB[h][0] = vb.x, hB[h][1] = vb.y, hB[h][2] = vb.z, hB[h][3] = vb.w;
                    }
                }
                const float s = __ldg(xs + (size_t(n) * p.G + gi) * 4 + t);
                int32_t cA[4] = {0, 0, 0, 0}, cB[4] = {0, 0, 0, 0};
                if constexpr (FMT == kQ2_K) {
                    int32_t mA[4] = {0, 0, 0, 0}, mB[4] = {0, 0, 0, 0};
#pragma unroll
                    for (int m = 0; m < 4; ++m) {
                        const AFrag a = a_frag(fg.A, fh.A, m);
                        const AFrag mn = q2dev::min_frag(fg, fh, m);
                        uint32_t b0, b1;
                        b_frag(hA, m, b0, b1);
                        imma16832(cA, a, b0, b1);
                        imma16832(mA, mn, b0, b1);
                        b_frag(hB, m, b0, b1);
                        imma16832(cB, a, b0, b1);
                        imma16832(mB, mn, b0, b1);
                    }
                    const float dg = __half2float(__ushort_as_half(uint16_t(cur.ddg & 0xffffu)));
                    const float mg = __half2float(__ushort_as_half(uint16_t(cur.ddg >> 16)));
                    const float dh = __half2float(__ushort_as_half(uint16_t(cur.ddh & 0xffffu)));
                    const float mh = __half2float(__ushort_as_half(uint16_t(cur.ddh >> 16)));
                    acc[n][0] = fmaf(combine_limbs(cA[0], cA[1], cB[0], cB[1]), dg * s, acc[n][0]);
                    acc[n][0] = fmaf(combine_limbs(mA[0], mA[1], mB[0], mB[1]), -(mg * s), acc[n][0]);
                    acc[n][1] = fmaf(combine_limbs(cA[2], cA[3], cB[2], cB[3]), dh * s, acc[n][1]);
                    acc[n][1] = fmaf(combine_limbs(mA[2], mA[3], mB[2], mB[3]), -(mh * s), acc[n][1]);
                } else {
#pragma unroll
                    for (int m = 0; m < 4; ++m) {
                        const AFrag a = a_frag(cur.W, cur.U, m);
                        uint32_t b0, b1;
                        b_frag(hA, m, b0, b1);
                        imma16832(cA, a, b0, b1);
                        b_frag(hB, m, b0, b1);
                        imma16832(cB, a, b0, b1);
                    }
                    acc[n][0] = fmaf(combine_limbs(cA[0], cA[1], cB[0], cB[1]), cur.dg * s, acc[n][0]);
                    acc[n][1] = fmaf(combine_limbs(cA[2], cA[3], cB[2], cB[3]), cur.dh * s, acc[n][1]);
                }
            }
            if constexpr (FMT != kQ2_K)
                if (gi + 1 < gb) cur = nxt;
        }

        // Lane quad t holds blocks t, t + 4, ...: add the quad in a fixed order ((0+1)+(2+3)).
#pragma unroll
        for (int n = 0; n < T; ++n)
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                acc[n][r] += __shfl_xor_sync(0xffffffffu, acc[n][r], 1);
                acc[n][r] += __shfl_xor_sync(0xffffffffu, acc[n][r], 2);
            }
        const float nan = __int_as_float(0x7fc00000);
        if (WC == 1) {
            if (t == 0)
#pragma unroll
                for (int n = 0; n < T; ++n) {
                    float* yn = p.y + prob * p.y_stride + n * p.ldy;
                    if (r0 + g < p.rows) yn[r0 + g] = bad ? nan : acc[n][0];
                    if (r0 + g + 8 < p.rows) yn[r0 + g + 8] = bad ? nan : acc[n][1];
                }
        } else {
            if (t == 0)
#pragma unroll
                for (int n = 0; n < T; ++n) {
                    red[warp][g][n] = acc[n][0];
                    red[warp][g + 8][n] = acc[n][1];
                }
            __syncthreads();
            for (int o = int(threadIdx.x); o < WR * 16 * T; o += kThreads) {
                const int n = o % T, rr = (o / T) % 16, tile = o / (16 * T);
                const int64_t row = (int64_t(set) * WR + tile) * 16 + rr;
                if (row >= p.rows) continue;
                float v = 0.0f;
                for (int c = 0; c < WC; ++c) v += red[tile * WC + c][rr][n];
                p.y[prob * p.y_stride + n * p.ldy + row] = bad ? nan : v;
            }
            __syncthreads();  // red is rewritten by the next set
        }
    }
}

struct Q8Plan {
    int wc = 1, sets = 1, grid = 1;
};

Q8Plan plan_q8(const DeviceMat& w, const MatvecArgs& a) {
    const int64_t tiles = (w.rows + 15) / 16, G = groups(w.cols);
    const int64_t target = 2 * int64_t(device_limits().sms);  // two resident blocks per multiprocessor
    Q8Plan pl;
    for (int wc = 1; wc <= kWarps && wc <= G; wc *= 2) {
        pl.wc = wc;
        pl.sets = int((tiles + kWarps / wc - 1) / (kWarps / wc));
        if (int64_t(pl.sets) * a.n >= target) break;
    }
    pl.grid = int(std::min<int64_t>(pl.sets, std::max<int64_t>(1, (target + a.n - 1) / a.n)));
    return pl;
}

template <int FMT, int T>
void launch_main(const Q8Params& p, const Q8Plan& pl, int n, cudaStream_t stream) {
    launch_pdl(int8_matvec_kernel<FMT, T>, dim3(unsigned(pl.grid), unsigned(n), 1), dim3(kThreads), 0, stream, p);
}

}  // namespace

bool q8_0_matvec_supported(const DeviceMat& w) {
    return w.type == gguf::TensorType::Q8_0 && w.cols % 32 == 0 && w.row_bytes >= row_bytes(w.cols) && w.row_bytes % 16 == 0 &&
           (reinterpret_cast<uintptr_t>(w.data) & 15) == 0;
}

size_t q8_0_packed_x_bytes(int64_t cols, int T) {
    return size_t(T) * size_t(groups(cols)) * (kGroupLimbBytes + 4 * sizeof(float));
}

bool q2_k_matvec_supported(const DeviceMat& w) {
    return w.type == gguf::TensorType::Q2_K && w.cols % 256 == 0 && w.row_bytes % 4 == 0 &&
           (reinterpret_cast<uintptr_t>(w.data) & 3) == 0;
}

size_t int8_matvec_workspace_bytes(const DeviceMat& w, const MatvecArgs& a) {
    if (a.packed.data) return 0;
    const size_t inputs = a.x_stride ? size_t(a.n) : 1;
    return inputs * q8_0_packed_x_bytes(w.cols, a.T);
}

namespace {
// The packed x of P inputs x T tokens at xl: their limbs, then their scales.
const float* packed_scales(const uint8_t* xl, int P, int T, int64_t cols) {
    return reinterpret_cast<const float*>(xl + size_t(P) * T * groups(cols) * kGroupLimbBytes);
}

void launch_pack(const float* x, int64_t ldx, int64_t x_stride, int T, int64_t cols, int P, uint8_t* xl,
                 Stream stream) {
    const int G = int(groups(cols)), nb = int(cols / 32);
    const int64_t lanes = int64_t(P) * T * G * 4 * 8;
    float* xs = const_cast<float*>(packed_scales(xl, P, T, cols));
    launch(pack_x_limbs_kernel, ceil_div(lanes, kThreads), kThreads, 0, stream, x, ldx, x_stride, T, nb, G, P, xl, xs);
    DSV4_LAUNCH_CHECK();
}
}  // namespace

PackedX q8_0_pack_x(const float* x, int64_t ldx, int64_t cols, int T, void* out, Stream stream) {
    if (!x || !out || (reinterpret_cast<uintptr_t>(out) & 15)) fail("CUDA q8_0_pack_x: null x or unaligned output");
    if (T < 1 || T > kMaxMatvecTokens || cols <= 0 || cols % 32 || (T > 1 && ldx < cols))
        fail("CUDA q8_0_pack_x: T = ", T, ", cols = ", cols, ", ldx = ", ldx);
    launch_pack(x, ldx, 0, T, cols, 1, static_cast<uint8_t*>(out), stream);
    return PackedX{out, x, ldx, cols, T};
}

namespace {
// Either weight format: x packed here into the workspace (or given, a.packed), then the MMAs.
template <int FMT>
void int8_matvec(const DeviceMat& w, const MatvecArgs& a, void* ws, size_t ws_bytes, Stream stream) {
    if (a.n > 65535) fail("CUDA matvec: ", a.n, " problems");
    const int G = int(groups(w.cols)), nb = int(w.cols / 32);
    const int P = a.x_stride ? a.n : 1;
    const uint8_t* xl = nullptr;
    if (a.packed.data) {
        const PackedX& k = a.packed;
        if (a.x_stride || k.x != a.x || k.cols != w.cols || k.T != a.T || (a.T > 1 && k.ldx != a.ldx))
            fail("CUDA matvec: the packed x (", k.T, " x ", k.cols, ") was made from another input than this product's (",
                 a.T, " x ", w.cols, ")");
        xl = static_cast<const uint8_t*>(k.data);
    } else {
        const size_t need = int8_matvec_workspace_bytes(w, a);
        if (!ws || ws_bytes < need || (reinterpret_cast<uintptr_t>(ws) & 15))
            fail("CUDA matvec: the int8 kernel needs a 16-byte aligned workspace of ", need, " bytes, got ", ws_bytes);
        launch_pack(a.x, a.ldx, a.x_stride, a.T, w.cols, P, static_cast<uint8_t*>(ws), stream);
        xl = static_cast<const uint8_t*>(ws);
    }
    const float* xs = packed_scales(xl, P, a.T, w.cols);

    const Q8Plan pl = plan_q8(w, a);
    Q8Params p{};
    p.w = w.data;
    p.matrix_bytes = w.matrix_bytes();
    p.row_bytes = w.row_bytes;
    p.rows = w.rows;
    p.count = w.count;
    p.ids = a.ids;
    p.nb = nb;
    p.G = G;
    p.xl = xl;
    p.xs = xs;
    p.x_per_prob = a.x_stride ? 1 : 0;
    p.y = a.y;
    p.ldy = a.ldy;
    p.y_stride = a.y_stride;
    p.wc = pl.wc;
    p.sets = pl.sets;
    switch (a.T) {
        case 1: launch_main<FMT, 1>(p, pl, a.n, stream); break;
        case 2: launch_main<FMT, 2>(p, pl, a.n, stream); break;
        case 3: launch_main<FMT, 3>(p, pl, a.n, stream); break;
        case 4: launch_main<FMT, 4>(p, pl, a.n, stream); break;
        case 5: launch_main<FMT, 5>(p, pl, a.n, stream); break;
        case 6: launch_main<FMT, 6>(p, pl, a.n, stream); break;
        case 7: launch_main<FMT, 7>(p, pl, a.n, stream); break;
        default: launch_main<FMT, 8>(p, pl, a.n, stream); break;
    }
}
}  // namespace

void q8_0_matvec(const DeviceMat& w, const MatvecArgs& a, void* ws, size_t ws_bytes, Stream stream) {
    int8_matvec<kQ8_0>(w, a, ws, ws_bytes, stream);
}

void q2_k_matvec(const DeviceMat& w, const MatvecArgs& a, void* ws, size_t ws_bytes, Stream stream) {
    if (!q2_k_matvec_supported(w)) fail("CUDA matvec: the int8 Q2_K kernel does not take [", w.rows, ", ", w.cols, "]");
    int8_matvec<kQ2_K>(w, a, ws, ws_bytes, stream);
}

}  // namespace dsv4::cuda
