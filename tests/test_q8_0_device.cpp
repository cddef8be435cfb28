// The CUDA backend's Q8_0 device layout and the arithmetic of its int8 tensor-core matvec
// (src/backend/cuda/q8_0_device.h), on the CPU: the layout conversion element for element, the
// x limbs' range and exactness, and a replay of the kernel's warp, lane by lane, with the
// mma.sync m16n8k32 s8 fragment layouts as the PTX ISA documents them (written here
// independently of the header's mapping), against cpu::matmul on the same GGUF rows. The replay
// checks that the pieces of the kernel fit together and are float32-grade; the hardware itself
// is checked by tests/cuda/test_cuda_matvec.cpp on a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "backend/cpu/ops.h"
#include "backend/cpu/quant.h"
#include "backend/cuda/q8_0_device.h"
#include "core/half.h"
#include "int8_replay.h"

using namespace dsv4;
using gguf::TensorType;
namespace q8 = dsv4::cuda::q8dev;
using dsv4::test::mma_s8;
using dsv4::test::pack_x;
using dsv4::test::word_at;

namespace {

std::mt19937& rng() {
    static std::mt19937 g(20261204);
    return g;
}

std::vector<uint8_t> gguf_rows(int64_t rows, int64_t cols) {
    return dsv4::test::random_rows(TensorType::Q8_0, rows, cols, 7, 40.0f, rng());
}

float device_elem(const uint8_t* row, int64_t i) {
    uint16_t d;
    std::memcpy(&d, row + q8::scale_offset(i / 32), 2);
    return f16_to_f32(d) * float(int8_t(row[q8::quant_offset(i / 32) + i % 32]));
}

TEST(Q8_0Device, RowBytes) {
    EXPECT_EQ(q8::row_bytes(32), 16u + 32u);
    EXPECT_EQ(q8::row_bytes(64), 80u);
    EXPECT_EQ(q8::row_bytes(96), 112u);
    EXPECT_EQ(q8::row_bytes(256), 272u);             // GGUF's 8 x 34
    EXPECT_EQ(q8::row_bytes(4096), 4096u / 32 * 34);  // whole chunks: GGUF's size
    EXPECT_EQ(q8::row_bytes(288), 272u + 16 + 32);
    for (int64_t cols = 32; cols <= 1024; cols += 32) {
        EXPECT_EQ(q8::row_bytes(cols) % 16, 0u) << cols;
        EXPECT_GE(q8::row_bytes(cols), size_t(cols / 32 * 34)) << cols;
        for (int64_t b = 0; b < cols / 32; ++b) {
            EXPECT_EQ(q8::quant_offset(b) % 16, 0u);
            EXPECT_LE(q8::quant_offset(b) + 32, q8::row_bytes(cols));
        }
    }
}

TEST(Q8_0Device, ConversionKeepsEveryElement) {
    for (int64_t cols : {32, 96, 256, 288, 1056}) {
        const int64_t rows = 5;
        const std::vector<uint8_t> src = gguf_rows(rows, cols);
        std::vector<uint8_t> dst(q8::row_bytes(cols) * rows, 0xAB);
        q8::from_gguf(src.data(), rows, cols, dst.data());
        std::vector<float> ref(static_cast<size_t>(cols));
        for (int64_t r = 0; r < rows; ++r) {
            cpu::dequant_row(TensorType::Q8_0, src.data() + size_t(r) * cpu::row_bytes(TensorType::Q8_0, cols), cols,
                             ref.data());
            const uint8_t* row = dst.data() + size_t(r) * q8::row_bytes(cols);
            for (int64_t i = 0; i < cols; ++i) ASSERT_EQ(device_elem(row, i), ref[size_t(i)]) << cols << " " << r << " " << i;
            // The unused scale slots of a last, short chunk are zero, not left over.
            const int64_t nb = cols / 32;
            for (int64_t b = nb; b % 8 != 0; ++b) EXPECT_EQ(row[q8::scale_offset(b)] | row[q8::scale_offset(b) + 1], 0);
        }
    }
}

TEST(Q8_0Device, LimbsAreSmallAndExact) {
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::uniform_int_distribution<int> ex(-60, 60);
    for (int trial = 0; trial < 2000; ++trial) {
        float x[32], m = 0.0f;
        for (float& v : x) {
            v = std::ldexp(u(rng()), ex(rng()) / (trial % 3 + 1));  // up to 2^120 of dynamic range in a block
            m = std::max(m, std::fabs(v));
        }
        const float s = q8::x_block_scale(m);
        ASSERT_GE(m / s, 32.0f);
        ASSERT_LT(m / s, 64.0f);
        for (float v : x) {
            int8_t l[4];
            q8::split_limbs(v / s, l);
            double back = 0.0;
            for (int k = 3; k >= 0; --k) {
                ASSERT_LE(std::abs(int(l[k])), 64);
                back = back / 128.0 + l[k];
            }
            ASSERT_LE(std::fabs(back * s - double(v)), std::ldexp(double(s), -22));
        }
    }
    EXPECT_EQ(q8::x_block_scale(0.0f), 1.0f);
    EXPECT_TRUE(std::isnan(q8::x_block_scale(std::numeric_limits<float>::infinity())));
    EXPECT_TRUE(std::isnan(q8::x_block_scale(std::nanf(""))));
    const float tiny = std::numeric_limits<float>::denorm_min();
    EXPECT_EQ(q8::x_block_scale(tiny), std::ldexp(1.0f, -126));  // normal, and m / s < 64
}

// ---- the warp replay ----

// y[rows] for one token, as the kernel computes it with WC warps per 16-row tile.
std::vector<float> replay(const std::vector<uint8_t>& w, int64_t rows, int64_t cols, const float* x, int WC) {
    std::vector<uint8_t> xl;
    std::vector<float> xs;
    pack_x(x, cols, xl, xs);
    const size_t rb = q8::row_bytes(cols);
    const int nb = int(cols / 32);
    return dsv4::test::replay_tiles(rows, cols, WC, [&](int64_t r0, int gi, float (&acc)[32][2]) {
        uint32_t a[4][32][4];
        float dg[32], dh[32];
        for (int lane = 0; lane < 32; ++lane) {
            const int g = lane / 4, t = lane % 4, blk = 4 * gi + t;
            uint32_t W[8] = {}, U[8] = {};
            dg[lane] = dh[lane] = 0.0f;
            for (int half = 0; half < 2; ++half) {
                const int64_t row = r0 + g + 8 * half;
                if (row >= rows || blk >= nb) continue;
                const uint8_t* p = w.data() + size_t(row) * rb;
                uint32_t* dst = half ? U : W;
                for (int k = 0; k < 8; ++k) dst[k] = word_at(p + q8::quant_offset(blk) + 4 * k);
                uint16_t d;
                std::memcpy(&d, p + q8::scale_offset(blk), 2);
                (half ? dh : dg)[lane] = f16_to_f32(d);
            }
            for (int m = 0; m < 4; ++m) {
                const q8::AFrag f = q8::a_frag(W, U, m);
                a[m][lane][0] = f.a0, a[m][lane][1] = f.a1, a[m][lane][2] = f.a2, a[m][lane][3] = f.a3;
            }
        }
        const dsv4::test::XFrags xf = dsv4::test::x_frags(xl, xs, gi);
        int32_t cA[32][4] = {}, cB[32][4] = {};
        for (int m = 0; m < 4; ++m) {
            mma_s8(cA, a[m], xf.bA[m]);
            mma_s8(cB, a[m], xf.bB[m]);
        }
        for (int lane = 0; lane < 32; ++lane) {
            acc[lane][0] = std::fma(q8::combine_limbs(cA[lane][0], cA[lane][1], cB[lane][0], cB[lane][1]),
                                    dg[lane] * xf.s[lane], acc[lane][0]);
            acc[lane][1] = std::fma(q8::combine_limbs(cA[lane][2], cA[lane][3], cB[lane][2], cB[lane][3]),
                                    dh[lane] * xf.s[lane], acc[lane][1]);
        }
    });
}

void check_replay(int64_t rows, int64_t cols, int WC, float x_spread) {
    const std::vector<uint8_t> src = gguf_rows(rows, cols);
    std::vector<uint8_t> dev(q8::row_bytes(cols) * size_t(rows));
    q8::from_gguf(src.data(), rows, cols, dev.data());
    const std::vector<float> x = dsv4::test::random_x(cols, x_spread, rng());
    const std::vector<float> y = replay(dev, rows, cols, x.data(), WC);

    // float32-grade: within 1e-6 of sum |x| |w| of the CPU, and closer still to the exact sum.
    dsv4::test::expect_float32_grade(TensorType::Q8_0, src, rows, cols, x, y, WC, 4e-7);
}

TEST(Q8_0Device, WarpReplayMatchesCpu) {
    // Partial tiles (rows % 16), partial groups (cols % 128: 1, 3, 5 blocks left), one block,
    // model widths, and every split of a tile's groups over its warps.
    const std::pair<int64_t, int64_t> shapes[] = {{1, 32}, {7, 96}, {33, 160}, {20, 544}, {16, 1056}, {40, 4096}};
    for (auto [rows, cols] : shapes)
        for (int WC : {1, 2, 4, 8})
            if (WC <= q8::groups(cols)) check_replay(rows, cols, WC, 4.0f);
    check_replay(24, 2048, 4, 30.0f);  // inputs spread over 2^60 within blocks
}

TEST(Q8_0Device, WarpReplayPropagatesNaN) {
    const int64_t rows = 16, cols = 256;
    const std::vector<uint8_t> src = gguf_rows(rows, cols);
    std::vector<uint8_t> dev(q8::row_bytes(cols) * size_t(rows));
    q8::from_gguf(src.data(), rows, cols, dev.data());
    std::vector<float> x(size_t(cols), 0.5f);
    x[200] = std::nanf("");
    for (float v : replay(dev, rows, cols, x.data(), 2)) EXPECT_TRUE(std::isnan(v));
    std::fill(x.begin(), x.end(), 0.0f);
    for (float v : replay(dev, rows, cols, x.data(), 1)) EXPECT_EQ(v, 0.0f);
}

}  // namespace
