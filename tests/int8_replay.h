// Pieces of a CPU replay of the CUDA int8 tensor-core matvec (matvec_int8.cu) shared by
// tests/test_q8_0_device.cpp and tests/test_q2_k_int8.cpp: the mma.sync m16n8k32 s8 product over
// a warp's fragments, written from the PTX ISA's fragment tables independently of the kernel's
// headers, and the kernel's pack of x into limbs.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "backend/cuda/q8_0_device.h"

namespace dsv4::test {

namespace q8 = dsv4::cuda::q8dev;

// mma.sync.m16n8k32.row.col.s32.s8.s8.s32, from the PTX ISA's fragment tables: A (16 x 32):
// register r of lane (g, t) holds row g + 8 (r & 1), columns 4t + 16 (r >> 1) + byte; B (32 x 8):
// register r holds rows 4t + 16 r + byte of column g; C/D (16 x 8): c[i] is row g + 8 (i >> 1),
// column 2t + (i & 1).
inline void mma_s8(int32_t (&c)[32][4], const uint32_t (&a)[32][4], const uint32_t (&b)[32][2]) {
    int A[16][32], B[32][8];
    for (int lane = 0; lane < 32; ++lane) {
        const int g = lane / 4, t = lane % 4;
        for (int r = 0; r < 4; ++r)
            for (int byte = 0; byte < 4; ++byte)
                A[g + 8 * (r & 1)][4 * t + 16 * (r >> 1) + byte] = int8_t(uint8_t(a[lane][r] >> (8 * byte)));
        for (int r = 0; r < 2; ++r)
            for (int byte = 0; byte < 4; ++byte) B[4 * t + 16 * r + byte][g] = int8_t(uint8_t(b[lane][r] >> (8 * byte)));
    }
    for (int lane = 0; lane < 32; ++lane) {
        const int g = lane / 4, t = lane % 4;
        for (int i = 0; i < 4; ++i) {
            const int row = g + 8 * (i >> 1), col = 2 * t + (i & 1);
            for (int k = 0; k < 32; ++k) c[lane][i] += A[row][k] * B[k][col];
        }
    }
}

inline uint32_t word_at(const uint8_t* p) {
    uint32_t w;
    std::memcpy(&w, p, 4);
    return w;
}

// The kernel's pack of one token's x (cols values) into limbs and block scales.
inline void pack_x(const float* x, int64_t cols, std::vector<uint8_t>& xl, std::vector<float>& xs) {
    const int64_t nb = cols / 32, G = q8::groups(cols);
    xl.assign(size_t(G) * q8::kGroupLimbBytes, 0);
    xs.assign(size_t(G) * 4, 0.0f);
    for (int64_t b = 0; b < nb; ++b) {
        float m = 0.0f;
        bool nan = false;
        for (int i = 0; i < 32; ++i) {
            m = std::fmax(m, std::fabs(x[32 * b + i]));
            nan |= std::isnan(x[32 * b + i]);
        }
        const float s = nan ? NAN : q8::x_block_scale(m);
        xs[size_t(b)] = s;
        if (!(s <= 3.4028235e38f)) continue;
        for (int i = 0; i < 32; ++i) {
            int8_t l[4];
            q8::split_limbs(x[32 * b + i] * (1.0f / s), l);
            for (int limb = 0; limb < 4; ++limb)
                xl[size_t(b / 4) * q8::kGroupLimbBytes + q8::limb_offset(limb, i, int(b % 4))] = uint8_t(l[limb]);
        }
    }
}

}  // namespace dsv4::test
