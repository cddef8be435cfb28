// Internal to the CUDA backend: pieces shared by gemm.cu (the float32 tiled kernel, the oracle)
// and gemm_tc.cu (the tensor-core kernel for T > 8): the register fetch of 16 consecutive weights
// of one row in their stored format, and the tensor path's host entry points.
#pragma once
#include <cstddef>
#include <cstdint>

#include "backend/cuda/common.cuh"
#include "backend/cuda/device_memory.h"

namespace dsv4::cuda::gemm_detail {

// e2m1 code (bit 3 = sign) -> float without a lookup table: 0, 0.5, then (1 + m/2) * 2^(e-1)
// for e = code bits 1..2, m = bit 0 (the same values as common.cuh's e2m1, bit for bit).
__device__ __forceinline__ float e2m1_bits(unsigned c) {
    const unsigned mag = c & 7u;
    const unsigned bits = mag < 2u ? (mag ? 0x3f000000u : 0u) : (((126u + (mag >> 1)) << 23) | ((mag & 1u) << 22));
    return __uint_as_float(bits | ((c & 8u) << 28));
}

// 16 consecutive weights of one row, columns k0 .. k0+15 (k0 a multiple of 16): fetch reads
// them in the stored format (row null: a row past the matrix, read as zeros), decode turns them
// into float32 exactly as cpu::dequant_row does. vec: rows are 16-byte aligned (plain types).
template <int TYPE>
struct WChunk;

template <>
struct WChunk<kF32> {
    float v[16];
    __device__ __forceinline__ void fetch(const uint8_t* row, int64_t k0, int64_t cols, bool vec) {
        const float* r = reinterpret_cast<const float*>(row);
        if (row && vec && k0 + 16 <= cols) {
#pragma unroll
            for (int q = 0; q < 4; ++q) {
                const float4 t = __ldg(reinterpret_cast<const float4*>(r + k0) + q);
                v[4 * q] = t.x;
                v[4 * q + 1] = t.y;
                v[4 * q + 2] = t.z;
                v[4 * q + 3] = t.w;
            }
        } else {
#pragma unroll
            for (int j = 0; j < 16; ++j) v[j] = row && k0 + j < cols ? __ldg(r + k0 + j) : 0.0f;
        }
    }
    __device__ __forceinline__ void decode(float (&o)[16]) const {
#pragma unroll
        for (int j = 0; j < 16; ++j) o[j] = v[j];
    }
};

// F16 and BF16: 8 words of two values each (low half first).
template <int TYPE>
struct WChunk16 {
    uint32_t v[8];
    __device__ __forceinline__ void fetch(const uint8_t* row, int64_t k0, int64_t cols, bool vec) {
        const uint16_t* r = reinterpret_cast<const uint16_t*>(row);
        if (row && vec && k0 + 16 <= cols) {
            const uint4 a = __ldg(reinterpret_cast<const uint4*>(r + k0));
            const uint4 b = __ldg(reinterpret_cast<const uint4*>(r + k0) + 1);
            v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w;
            v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
        } else {
#pragma unroll
            for (int j = 0; j < 8; ++j) {
                const uint32_t lo = row && k0 + 2 * j < cols ? __ldg(r + k0 + 2 * j) : 0u;
                const uint32_t hi = row && k0 + 2 * j + 1 < cols ? __ldg(r + k0 + 2 * j + 1) : 0u;
                v[j] = lo | (hi << 16);
            }
        }
    }
    __device__ __forceinline__ void decode(float (&o)[16]) const {
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            if constexpr (TYPE == kBF16) {
                o[2 * j] = __uint_as_float(v[j] << 16);
                o[2 * j + 1] = __uint_as_float(v[j] & 0xffff0000u);
            } else {
                o[2 * j] = __half2float(__ushort_as_half(uint16_t(v[j] & 0xffffu)));
                o[2 * j + 1] = __half2float(__ushort_as_half(uint16_t(v[j] >> 16)));
            }
        }
    }
};
template <>
struct WChunk<kF16> : WChunk16<kF16> {};
template <>
struct WChunk<kBF16> : WChunk16<kBF16> {};

// Q8_0 in the device layout (q8_0_device.h): the chunk is half h of block k0/32, 16 quant
// bytes at a 16-byte aligned offset, and the block's f16 d from the chunk's scale area.
template <>
struct WChunk<kQ8_0> {
    uint32_t q[4];
    uint32_t d;
    __device__ __forceinline__ void fetch(const uint8_t* row, int64_t k0, int64_t, bool) {
        if (!row) {
            q[0] = q[1] = q[2] = q[3] = d = 0;
            return;
        }
        const int64_t b = k0 / 32;
        const uint4 v = __ldg(reinterpret_cast<const uint4*>(row + q8dev::quant_offset(b) + 16 * ((k0 / 16) & 1)));
        q[0] = v.x, q[1] = v.y, q[2] = v.z, q[3] = v.w;
        d = __ldg(reinterpret_cast<const uint16_t*>(row + q8dev::scale_offset(b)));
    }
    __device__ __forceinline__ void decode(float (&o)[16]) const {
        const float s = __half2float(__ushort_as_half(uint16_t(d)));
#pragma unroll
        for (int j = 0; j < 16; ++j) o[j] = s * float(int8_t(uint8_t(q[j / 4] >> (8 * (j % 4)))));
    }
};

// MXFP4: blocks of 17 bytes (e8m0 E, 16 bytes: element j in the low nibble of byte j, element
// j + 16 in the high nibble); the chunk is half h of block k0/32, so both halves read the same bytes.
template <>
struct WChunk<kMXFP4> {
    uint32_t b[4];
    uint32_t e, h;
    __device__ __forceinline__ void fetch(const uint8_t* row, int64_t k0, int64_t, bool) {
        if (!row) {
            b[0] = b[1] = b[2] = b[3] = e = h = 0;
            return;
        }
        const uint8_t* blk = row + (k0 / 32) * 17;
        e = __ldg(blk);
        h = uint32_t((k0 / 16) & 1);
#pragma unroll
        for (int j = 0; j < 4; ++j)
            b[j] = uint32_t(__ldg(blk + 1 + 4 * j)) | (uint32_t(__ldg(blk + 2 + 4 * j)) << 8) |
                   (uint32_t(__ldg(blk + 3 + 4 * j)) << 16) | (uint32_t(__ldg(blk + 4 + 4 * j)) << 24);
    }
    __device__ __forceinline__ void decode(float (&o)[16]) const {
        const float s = e8m0(uint8_t(e));
        const unsigned shift = 4 * h;
#pragma unroll
        for (int j = 0; j < 16; ++j) o[j] = e2m1_bits((b[j / 4] >> (8 * (j % 4) + shift)) & 15u) * s;
    }
};

// Q2_K: super-blocks of 84 bytes (4-byte aligned: rows are whole super-blocks and the matrix
// base is aligned). Columns i0 .. i0+15 of a super-block (i0 % 16 == 0) share one scale/min byte
// (sub-block i0/16) and one shift, 2 * ((i0 % 128) / 32), and their quants are the 16 consecutive
// bytes at 16 + 32 * (i0 / 128) + i0 % 32.
template <>
struct WChunk<kQ2_K> {
    uint32_t q[4];
    uint32_t dd, sc, shift;
    __device__ __forceinline__ void fetch(const uint8_t* row, int64_t k0, int64_t, bool) {
        if (!row) {
            q[0] = q[1] = q[2] = q[3] = dd = sc = shift = 0;
            return;
        }
        const uint8_t* sb = row + (k0 / 256) * 84;
        const int i0 = int(k0 % 256);
        sc = __ldg(sb + i0 / 16);
        dd = __ldg(reinterpret_cast<const uint32_t*>(sb + 80));  // f16 d (low half), f16 dmin
        shift = uint32_t(2 * ((i0 % 128) / 32));
        const uint32_t* qs = reinterpret_cast<const uint32_t*>(sb + 16 + 32 * (i0 / 128) + i0 % 32);
#pragma unroll
        for (int j = 0; j < 4; ++j) q[j] = __ldg(qs + j);
    }
    __device__ __forceinline__ void decode(float (&o)[16]) const {
        const float d = __half2float(__ushort_as_half(uint16_t(dd & 0xffffu)));
        const float dmin = __half2float(__ushort_as_half(uint16_t(dd >> 16)));
        // The CPU's a * q - m with a = d * (sc & 15), m = dmin * (sc >> 4), each operation
        // rounded on its own (no fused multiply-add), so the decoded values are identical.
        const float a = __fmul_rn(d, float(sc & 15u)), m = __fmul_rn(dmin, float(sc >> 4));
#pragma unroll
        for (int j = 0; j < 16; ++j) {
            const uint32_t qv = (q[j / 4] >> (8 * (j % 4) + shift)) & 3u;
            o[j] = __fsub_rn(__fmul_rn(a, float(qv)), m);
        }
    }
    // The tensor path's operands: w 2^k (up = 2^k) of the 16 values as f16x2 pairs, hi[j] =
    // values 2j, 2j+1 rounded to f16, and with LO their remainders lo = w 2^k - hi. A sub-block's
    // codes take four values only: those are decoded as decode() does (so the limbs are the same
    // bits as rounding decode()'s output), and each pair picked from them by one byte permute
    // whose selector is made from the two codes: value q sits at bytes 2q, 2q+1 of the table.
    template <bool LO>
    __device__ __forceinline__ void limbs_f16(float up, uint32_t (&hi)[8], uint32_t (&lo)[8]) const {
        const float d = __half2float(__ushort_as_half(uint16_t(dd & 0xffffu)));
        const float dmin = __half2float(__ushort_as_half(uint16_t(dd >> 16)));
        const float a = __fmul_rn(d, float(sc & 15u)), m = __fmul_rn(dmin, float(sc >> 4));
        uint16_t th[4], tl[4];
#pragma unroll
        for (int c = 0; c < 4; ++c) {
            const float v = __fsub_rn(__fmul_rn(a, float(c)), m) * up;  // exact: a power of two
            const __half h = __float2half_rn(v);
            th[c] = __half_as_ushort(h);
            tl[c] = LO ? __half_as_ushort(__float2half_rn(v - __half2float(h))) : 0;
        }
        const uint32_t h01 = th[0] | uint32_t(th[1]) << 16, h23 = th[2] | uint32_t(th[3]) << 16;
        const uint32_t l01 = tl[0] | uint32_t(tl[1]) << 16, l23 = tl[2] | uint32_t(tl[3]) << 16;
#pragma unroll
        for (int w = 0; w < 4; ++w) {
            const uint32_t x = q[w] >> shift;  // codes of values 4w .. 4w+3 in bits 0-1, 8-9, 16-17, 24-25
            // Selector nibbles (2 q0, 2 q0 + 1, 2 q1, 2 q1 + 1) of the pair's codes q0, q1.
            const uint32_t s0 = (x & 0x303u) * 0x22u + 0x1010u, s1 = ((x >> 16) & 0x303u) * 0x22u + 0x1010u;
            hi[2 * w] = __byte_perm(h01, h23, s0);
            hi[2 * w + 1] = __byte_perm(h01, h23, s1);
            if constexpr (LO) {
                lo[2 * w] = __byte_perm(l01, l23, s0);
                lo[2 * w + 1] = __byte_perm(l01, l23, s1);
            }
        }
    }
};

// ---- the tensor-core path (gemm_tc.cu) ----

// Whether the tensor kernel takes this weight: Q8_0 with cols % 32 == 0 or Q2_K (the
// alignment rules of check_weight in gemm.cu hold already).
bool tc_supported(const DeviceMat& w);

// Workspace bytes for n_rows packed rows of x (limbs, per-row scale).
size_t tc_workspace_bytes(const DeviceMat& w, int64_t n_rows);

// y = x · Wᵀ on the tensor cores: x rows 0..T-1 (stride ldx) packed into ws, then multiplied.
// limbs: 2 (float32-grade) or 1 (one 16-bit limb of x and of Q2_K weights: f16-grade, gemm.h).
void tc_gemm(const DeviceMat& w, const float* x, int64_t ldx, int64_t T, float* y, int64_t ldy, void* ws,
             size_t ws_bytes, int limbs, cudaStream_t stream);

// The grouped form: x [n_rows, cols] contiguous (every row packed; rows past offsets[count]
// are packed but belong to no expert), expert e owns rows offsets[e] .. offsets[e+1].
void tc_gemm_experts(const DeviceMat& w, const float* x, const int32_t* offsets, int64_t max_rows, int64_t n_rows,
                     float* y, void* ws, size_t ws_bytes, int limbs, cudaStream_t stream);

}  // namespace dsv4::cuda::gemm_detail
