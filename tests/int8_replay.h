// Pieces of a CPU replay of the CUDA int8 tensor-core matvec (matvec_int8.cu) shared by
// tests/test_q8_0_device.cpp and tests/test_q2_k_int8.cpp: the mma.sync m16n8k32 s8 product over
// a warp's fragments, written from the PTX ISA's fragment tables independently of the kernel's
// headers; the kernel's pack of x into limbs and its B fragments; the walk over 16-row tiles and
// the warps that split a tile's groups, with the kernel's order of sums; random inputs.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "backend/cpu/ops.h"
#include "backend/cpu/quant.h"
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

// Lane by lane, the B fragments of group gi's 4 MMAs for limbs 0, 1 (bA) and 2, 3 (bB), and the
// lane's x block scale.
struct XFrags {
    uint32_t bA[4][32][2], bB[4][32][2];
    float s[32];
};
inline XFrags x_frags(const std::vector<uint8_t>& xl, const std::vector<float>& xs, int gi) {
    XFrags f{};
    const uint8_t* base = xl.data() + size_t(gi) * q8::kGroupLimbBytes;
    for (int lane = 0; lane < 32; ++lane) {
        const int g = lane / 4, t = lane % 4;
        uint32_t hA[2][4] = {}, hB[2][4] = {};
        if (q8::b_active(g, t))
            for (int h = 0; h < 2; ++h)
                for (int k = 0; k < 4; ++k) {
                    hA[h][k] = word_at(base + q8::b_offset(g, 0, h) + 4 * k);
                    hB[h][k] = word_at(base + q8::b_offset(g, 1, h) + 4 * k);
                }
        f.s[lane] = xs[size_t(gi) * 4 + t];
        for (int m = 0; m < 4; ++m) {
            q8::b_frag(hA, m, f.bA[m][lane][0], f.bA[m][lane][1]);
            q8::b_frag(hB, m, f.bB[m][lane][0], f.bB[m][lane][1]);
        }
    }
    return f;
}

// y[rows] for one token as the kernel sums it with WC warps per 16-row tile: group(r0, gi, acc)
// adds group gi of the tile at row r0 into each lane's acc (rows g and g + 8); the quad's
// shuffles add (0 + 1) + (2 + 3), then the tile's warps are added in warp order.
template <class Group>
std::vector<float> replay_tiles(int64_t rows, int64_t cols, int WC, Group group) {
    const int G = int(q8::groups(cols));
    std::vector<float> y(static_cast<size_t>(rows));
    for (int64_t r0 = 0; r0 < rows; r0 += 16) {
        std::vector<float> part(size_t(WC) * 16);
        for (int wc = 0; wc < WC; ++wc) {
            int ga, gb;
            q8::group_range(G, wc, WC, ga, gb);
            float acc[32][2] = {};
            for (int gi = ga; gi < gb; ++gi) group(r0, gi, acc);
            for (int g = 0; g < 8; ++g)
                for (int r = 0; r < 2; ++r)
                    part[size_t(wc) * 16 + g + 8 * r] =
                        (acc[4 * g][r] + acc[4 * g + 1][r]) + (acc[4 * g + 2][r] + acc[4 * g + 3][r]);
        }
        for (int rr = 0; rr < 16 && r0 + rr < rows; ++rr) {
            float v = 0.0f;
            for (int wc = 0; wc < WC; ++wc) v += part[size_t(wc) * 16 + rr];
            y[size_t(r0 + rr)] = v;
        }
    }
    return y;
}

// rows GGUF rows of `type` quantised from N(0, 0.05) values, every `every`-th row times `factor`
// (so that block scales vary).
inline std::vector<uint8_t> random_rows(gguf::TensorType type, int64_t rows, int64_t cols, int every, float factor,
                                        std::mt19937& rng) {
    const size_t rb = cpu::row_bytes(type, cols);
    std::vector<uint8_t> b(rb * size_t(rows));
    std::normal_distribution<float> nd(0.0f, 0.05f);
    std::vector<float> row(static_cast<size_t>(cols));
    for (int64_t r = 0; r < rows; ++r) {
        for (auto& v : row) v = nd(rng) * (r % every == 0 ? factor : 1.0f);
        cpu::quantize_row(type, row.data(), cols, b.data() + size_t(r) * rb);
    }
    return b;
}

// cols inputs N(0, 1) times 2^e, e uniform in [-spread, spread].
inline std::vector<float> random_x(int64_t cols, float spread, std::mt19937& rng) {
    std::vector<float> x(static_cast<size_t>(cols));
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::uniform_int_distribution<int> ex(-int(spread), int(spread));
    for (auto& v : x) v = std::ldexp(nd(rng), ex(rng));
    return x;
}

// y (a replay of one token over GGUF rows `w` of `type`) against cpu::matmul on the same rows:
// float32-grade, within 1e-6 of sum |x| |w| (the device tests' bound), and, where exact_bound > 0,
// within exact_bound of sum |x| |w| of the exact (double) sum.
inline void expect_float32_grade(gguf::TensorType type, const std::vector<uint8_t>& w, int64_t rows, int64_t cols,
                                 const std::vector<float>& x, const std::vector<float>& y, int WC,
                                 double exact_bound = 0.0) {
    Mat m;
    m.type = type;
    m.rows = rows;
    m.cols = cols;
    m.row_bytes = cpu::row_bytes(type, cols);
    m.data = w.data();
    std::vector<float> ref(static_cast<size_t>(rows));
    cpu::matmul(x.data(), 1, m, ref.data());
    std::vector<float> wrow(static_cast<size_t>(cols));
    for (int64_t r = 0; r < rows; ++r) {
        cpu::dequant_row(type, w.data() + size_t(r) * m.row_bytes, cols, wrow.data());
        double absdot = 0.0, exact = 0.0;
        for (int64_t k = 0; k < cols; ++k) {
            absdot += std::fabs(double(wrow[size_t(k)]) * x[size_t(k)]);
            exact += double(wrow[size_t(k)]) * x[size_t(k)];
        }
        ASSERT_LE(std::fabs(double(y[size_t(r)]) - ref[size_t(r)]), 1e-6 * absdot + 1e-30)
            << "[" << rows << ", " << cols << "] WC " << WC << " row " << r << ": " << y[size_t(r)] << " vs "
            << ref[size_t(r)];
        if (exact_bound > 0.0) {
            ASSERT_LE(std::fabs(double(y[size_t(r)]) - exact), exact_bound * absdot + 1e-30) << "row " << r;
        }
    }
}

}  // namespace dsv4::test
