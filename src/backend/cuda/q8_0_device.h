// Q8_0 as the CUDA backend keeps it in device memory, and the arithmetic of its decode matvec
// (matvec.cu), in one header that compiles for the host too: the layout conversion runs on the
// host at upload, and tests/test_q8_0_device.cpp replays a warp of the kernel lane by lane on
// the CPU (the IMMA fragment layouts, the x limbs, the epilogue) against a double reference.
//
// Layout. GGUF's Q8_0 block is 34 bytes (f16 d, 32 int8), so quants sit at 2-byte offsets and
// a lane cannot read them with one aligned 16-byte load. On the device a row is instead cut into
// chunks of 8 blocks (256 values): 16 bytes holding the 8 f16 scales, then the 8 x 32 quants.
// Same 34 bytes per 32 values, every block's quants 16-byte aligned; a last, shorter chunk
// (cols % 256 != 0) has the same 16-byte scale area (unused slots zero) and its blocks' quants,
// so rows stay multiples of 16 bytes. Element i: scale at scale_offset(i / 32), quant at
// quant_offset(i / 32) + i % 32, whatever the row length.
//
// Decode matvec, T <= 8 tokens (matvec.cu): int8 tensor cores, mma.sync m16n8k32 s8 x s8 -> s32.
//   * A group is 128 columns, 4 blocks. A warp multiplies a 16-row tile of one group per step:
//     lane (g, t) (g = lane / 4, t = lane % 4) holds the 32 quants of block t of rows g and g + 8
//     (two 16-byte loads each) and feeds them to the A fragments unchanged (no dequantisation).
//   * x is split per (token, block) into a power-of-two scale s and four int8 limbs,
//     x / s = l0 + l1 / 128 + l2 / 128^2 + l3 / 128^3 with every |l| <= 64 (pack_x_limbs below),
//     exact to s * 2^-22 (max |x| of the block * 2^-27).
//   * In each MMA the k positions of lane quad t (4t..4t+3, 16+4t..16+4t+3) hold block t's values,
//     and the 8 output columns are (block j, limb) pairs: column 2j + l has x's limb l of block j
//     at block j's k positions and zeros elsewhere. So the MMA itself keeps the 4 blocks apart,
//     and lane (g, t)'s outputs are exactly block t's limb sums of rows g and g + 8, exact in
//     int32 (|sum| <= 32 * 128 * 64). Two sets of 4 MMAs per group (limbs 0, 1 and limbs 2, 3).
//   * Epilogue per lane: v = l0 + 2^-7 (l1 + 2^-7 (l2 + 2^-7 l3)) in float, acc += v * (d * s),
//     one rounding per block as on the CPU (d * s is exact: s is a power of two).
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

#ifdef __CUDACC__
#define DSV4_HD __host__ __device__ __forceinline__
#else
#define DSV4_HD inline
#endif

namespace dsv4::cuda::q8dev {

constexpr int kChunkBlocks = 8;   // blocks per chunk
constexpr int kScaleArea = 16;    // bytes of scales at the start of a chunk
constexpr int kChunkBytes = kScaleArea + kChunkBlocks * 32;  // 272
constexpr int kGroupCols = 128;   // columns of one matvec step (4 blocks)
constexpr int kGroupLimbBytes = 512;  // packed x limbs of one token and group

DSV4_HD size_t row_bytes(int64_t cols) {
    const int64_t nb = cols / 32, full = nb / kChunkBlocks, rem = nb % kChunkBlocks;
    return size_t(full) * kChunkBytes + (rem ? size_t(kScaleArea + 32 * rem) : 0);
}
DSV4_HD size_t scale_offset(int64_t block) {
    return size_t(block / kChunkBlocks) * kChunkBytes + size_t(block % kChunkBlocks) * 2;
}
DSV4_HD size_t quant_offset(int64_t block) {
    return size_t(block / kChunkBlocks) * kChunkBytes + kScaleArea + size_t(block % kChunkBlocks) * 32;
}
DSV4_HD int64_t groups(int64_t cols) { return (cols + kGroupCols - 1) / kGroupCols; }

// GGUF Q8_0 rows (34-byte blocks, cols % 32 == 0) -> device rows of row_bytes(cols), dst
// rows * row_bytes(cols) bytes. Host only.
inline void from_gguf(const uint8_t* src, int64_t rows, int64_t cols, uint8_t* dst) {
    const int64_t nb = cols / 32;
    const size_t drb = row_bytes(cols), srb = size_t(nb) * 34;
    for (int64_t r = 0; r < rows; ++r) {
        const uint8_t* s = src + size_t(r) * srb;
        uint8_t* d = dst + size_t(r) * drb;
        std::memset(d, 0, drb);
        for (int64_t b = 0; b < nb; ++b) {
            std::memcpy(d + scale_offset(b), s + 34 * b, 2);
            std::memcpy(d + quant_offset(b), s + 34 * b + 2, 32);
        }
    }
}

// ---- x limbs: the packed x of one token, per group kGroupLimbBytes of limbs, then per block a
// float scale. Limb l of value i (0..31) of block j (0..3) of a group sits at limb_offset(l, i, j):
// set l / 2 (the MMA set), half i / 16, slot 2j + l % 2, byte i % 16. A lane (g, t) with
// t == g / 2 reads slot g of each set and half: 16 bytes, the B fragments of 2 MMAs. ----
DSV4_HD int limb_offset(int limb, int i, int j) {
    return (limb >> 1) * 256 + (i >> 4) * 128 + (2 * j + (limb & 1)) * 16 + (i & 15);
}

// The power-of-two scale of a block whose largest |x| is m: m / s in [32, 64), so that the
// limbs stay within [-64, 64]; 1 for m = 0 (every limb 0) and NaN when m is not finite (the
// block's products are then NaN, as the CPU's would be). s >= 2^-126 keeps it normal.
DSV4_HD float x_block_scale(float m) {
    if (!(m <= 3.4028235e38f)) return NAN;  // NaN or inf
    if (m == 0.0f) return 1.0f;
    int ex = 0;
    (void)frexpf(m, &ex);  // m in [2^(ex-1), 2^ex)
    const int e = ex - 6 < -126 ? -126 : ex - 6;
    return ldexpf(1.0f, e);
}

// The four limbs of v = x / s (|v| < 64), each step exact: v - rint(v) is exact and so is * 128.
DSV4_HD void split_limbs(float v, int8_t (&l)[4]) {
    for (int k = 0; k < 4; ++k) {
        const float r = rintf(v);
        l[k] = int8_t(int(r));
        v = (v - r) * 128.0f;
    }
}

// ---- the warp's step: lane (g, t), group gi of rows r0 .. r0 + 15 ----

// Whether lane (g, t) supplies x in the B fragments (its k positions are block t's; column g is
// block g / 2), and the byte offset of its 16 bytes in a group's limbs for set S, half h.
DSV4_HD bool b_active(int g, int t) { return t == (g >> 1); }
DSV4_HD int b_offset(int g, int S, int h) { return S * 256 + h * 128 + g * 16; }

// MMA m (0..3) of a set: A = {row g words 2m, 2m+1; row g+8 words 2m, 2m+1} of the lane's two
// blocks (W: row g, U: row g + 8, 8 words of 4 quants each), B = words 2 (m % 2), +1 of half
// m / 2 (hb[h] = the lane's 16 bytes of half h).
struct AFrag {
    uint32_t a0, a1, a2, a3;
};
DSV4_HD AFrag a_frag(const uint32_t (&W)[8], const uint32_t (&U)[8], int m) {
    return {W[2 * m], U[2 * m], W[2 * m + 1], U[2 * m + 1]};
}
DSV4_HD void b_frag(const uint32_t (&hb)[2][4], int m, uint32_t& b0, uint32_t& b1) {
    b0 = hb[m >> 1][2 * (m & 1)];
    b1 = hb[m >> 1][2 * (m & 1) + 1];
}

// The groups [ga, gb) of warp wc of the WC warps that share a row tile (an even split).
DSV4_HD void group_range(int G, int wc, int WC, int& ga, int& gb) {
    ga = int(int64_t(G) * wc / WC);
    gb = int(int64_t(G) * (wc + 1) / WC);
}

// The block sum of one row from its four limb sums (cA: limbs 0, 1; cB: limbs 2, 3).
DSV4_HD float combine_limbs(int32_t l0, int32_t l1, int32_t l2, int32_t l3) {
    const float k = 1.0f / 128.0f;
    return fmaf(fmaf(fmaf(float(l3), k, float(l2)), k, float(l1)), k, float(l0));
}

}  // namespace dsv4::cuda::q8dev
