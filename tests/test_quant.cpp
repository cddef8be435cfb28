// Storage formats: half/bfloat16 conversion and the Q8_0 / MXFP4 block layouts.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "backend/cpu/quant.h"
#include "core/half.h"

using namespace dsv4;
using gguf::TensorType;

TEST(Half, KnownBitPatterns) {
    EXPECT_EQ(f32_to_f16(1.0f), 0x3c00);
    EXPECT_EQ(f32_to_f16(-2.5f), 0xc100);
    EXPECT_EQ(f32_to_f16(65504.0f), 0x7bff);
    EXPECT_EQ(f32_to_f16(1e6f), 0x7c00);          // overflow -> inf
    EXPECT_EQ(f32_to_f16(5.9604645e-8f), 0x0001);  // smallest subnormal
    EXPECT_FLOAT_EQ(f16_to_f32(0x3555), 0.33325195f);
    EXPECT_FLOAT_EQ(f16_to_f32(0x0001), 5.9604645e-8f);
    EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
    EXPECT_EQ(f32_to_bf16(0.1f), 0x3dcd);  // 0x3dcccccd rounds up
    EXPECT_FLOAT_EQ(bf16_to_f32(0xc020), -2.5f);
}

TEST(Half, RoundTripIsNearest) {
    std::mt19937 g(1);
    std::uniform_real_distribution<float> d(-1000.0f, 1000.0f);
    for (int i = 0; i < 20000; ++i) {
        float x = d(g);
        float h = f16_to_f32(f32_to_f16(x));
        EXPECT_LE(std::fabs(h - x), std::fabs(x) * (1.0f / 2048) + 1e-7f);
        float b = bf16_to_f32(f32_to_bf16(x));
        EXPECT_LE(std::fabs(b - x), std::fabs(x) * (1.0f / 256));
    }
}

TEST(Q8_0, BlockLayoutAndError) {
    std::vector<float> x(64);
    std::mt19937 g(2);
    std::normal_distribution<float> d(0, 3);
    for (float& v : x) v = d(g);
    std::vector<uint8_t> q(cpu::row_bytes(TensorType::Q8_0, 64));
    ASSERT_EQ(q.size(), 68u);
    cpu::quantize_row(TensorType::Q8_0, x.data(), 64, q.data());
    std::vector<float> y(64);
    cpu::dequant_row(TensorType::Q8_0, q.data(), 64, y.data());
    for (int b = 0; b < 2; ++b) {
        uint16_t h;
        std::memcpy(&h, &q[34 * b], 2);
        float scale = f16_to_f32(h);
        float amax = 0;
        for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[32 * b + j]));
        EXPECT_NEAR(scale, amax / 127, amax / 127 * 1e-3);
        for (int j = 0; j < 32; ++j) {
            EXPECT_FLOAT_EQ(y[32 * b + j], scale * float(int8_t(q[34 * b + 2 + j])));
            EXPECT_LE(std::fabs(y[32 * b + j] - x[32 * b + j]), scale * 0.5f + 1e-6f);
        }
    }
}

TEST(MXFP4, DecodesLowNibbleFirstHalfHighNibbleSecondHalf) {
    uint8_t blk[17];
    blk[0] = 127 + 1;  // scale 2
    for (int j = 0; j < 16; ++j) blk[1 + j] = uint8_t((j & 15) | ((15 - j) << 4));
    float y[32];
    cpu::dequant_row(TensorType::MXFP4, blk, 32, y);
    for (int j = 0; j < 16; ++j) {
        EXPECT_FLOAT_EQ(y[j], 2.0f * cpu::e2m1_value(j));
        EXPECT_FLOAT_EQ(y[j + 16], 2.0f * cpu::e2m1_value(15 - j));
    }
    EXPECT_FLOAT_EQ(cpu::e2m1_value(7), 6.0f);
    EXPECT_FLOAT_EQ(cpu::e2m1_value(9), -0.5f);
}

TEST(MXFP4, GridValuesRoundTripExactly) {
    const float grid[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
    std::vector<float> x(64);
    for (int i = 0; i < 64; ++i) x[i] = grid[i % 8] * ((i / 8) % 2 ? -1.0f : 1.0f) * (i < 32 ? 0.25f : 8.0f);
    std::vector<uint8_t> q(cpu::row_bytes(TensorType::MXFP4, 64));
    cpu::quantize_row(TensorType::MXFP4, x.data(), 64, q.data());
    std::vector<float> y(64);
    cpu::dequant_row(TensorType::MXFP4, q.data(), 64, y.data());
    for (int i = 0; i < 64; ++i) EXPECT_FLOAT_EQ(y[i], x[i]) << i;
}
