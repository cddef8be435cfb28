// Q2_K (ggml type 10), the 2.625-bit routed-expert format: the block layout bit for bit against
// llama.cpp's dequantize_row_q2_K, the quantiser's error on Gaussian rows, and its edge cases.
// (tests/test_q2k_model.cpp measures what it does to a model's logits.)
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/quant.h"
#include "core/error.h"
#include "core/half.h"

using namespace dsv4;
using gguf::TensorType;

namespace {

constexpr int kN = 256, kBytes = 84;

struct Block {
    uint8_t scales[16] = {};
    uint8_t qs[64] = {};
    uint16_t d = 0, dmin = 0;

    std::vector<uint8_t> bytes() const {  // the file layout: scales, qs, d, dmin
        std::vector<uint8_t> b(kBytes);
        std::memcpy(b.data(), scales, 16);
        std::memcpy(b.data() + 16, qs, 64);
        std::memcpy(b.data() + 80, &d, 2);
        std::memcpy(b.data() + 82, &dmin, 2);
        return b;
    }
};

// llama.cpp's dequantize_row_q2_K, restated with its loop structure (not the per-value formula
// of quant.h): each half of 128 values walks 32 qs bytes four times with shifts 0, 2, 4, 6; each
// pass emits two sub-blocks of 16, from bytes 0..15 and 16..31 of the half.
std::vector<float> llama_order_decode(const Block& b) {
    std::vector<float> y;
    const float d = f16_to_f32(b.d), dmin = f16_to_f32(b.dmin);
    int is = 0;
    for (int half = 0; half < 2; ++half) {
        const uint8_t* q = b.qs + 32 * half;
        for (int shift = 0; shift < 8; shift += 2)
            for (int part = 0; part < 2; ++part) {
                const uint8_t sc = b.scales[is++];
                const float dl = d * float(sc & 15), ml = dmin * float(sc >> 4);
                for (int l = 0; l < 16; ++l) y.push_back(dl * float((q[16 * part + l] >> shift) & 3) - ml);
            }
    }
    return y;
}

std::vector<float> decode(const std::vector<uint8_t>& bytes, int64_t n) {
    std::vector<float> y(static_cast<size_t>(n));
    cpu::dequant_row(TensorType::Q2_K, bytes.data(), n, y.data());
    return y;
}

std::vector<float> round_trip(const std::vector<float>& x) {
    std::vector<uint8_t> q(cpu::row_bytes(TensorType::Q2_K, int64_t(x.size())));
    cpu::quantize_row(TensorType::Q2_K, x.data(), int64_t(x.size()), q.data());
    return decode(q, int64_t(x.size()));
}

double rms(const std::vector<float>& x) {
    double s = 0;
    for (float v : x) s += double(v) * v;
    return std::sqrt(s / double(x.size()));
}

double rms_diff(const std::vector<float>& a, const std::vector<float>& b) {
    double s = 0;
    for (size_t i = 0; i < a.size(); ++i) s += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    return std::sqrt(s / double(a.size()));
}

std::string error_of(const std::function<void()>& f) {
    try {
        f();
    } catch (const Error& e) {
        return e.what();
    }
    return "(no error)";
}

}  // namespace

TEST(Q2K, SizeIs84BytesPer256ValuesSo2625BitsPerWeight) {
    EXPECT_EQ(cpu::row_bytes(TensorType::Q2_K, 256), 84u);
    EXPECT_EQ(cpu::row_bytes(TensorType::Q2_K, 7168), 28u * 84u);  // 28 super-blocks, one after another
    EXPECT_EQ(gguf::type_block_elems(TensorType::Q2_K), 256);
    EXPECT_DOUBLE_EQ(84.0 * 8 / 256, 2.625);
    EXPECT_EQ(uint32_t(TensorType::Q2_K), 10u);  // ggml's GGML_TYPE_Q2_K
    EXPECT_STREQ(gguf::type_name(TensorType::Q2_K), "Q2_K");
}

// Each 2-bit field moves exactly one value: with d = 1, dmin = 0 and every scale code 1, a
// block whose only non-zero quant is value i's decodes to 3 at i and 0 elsewhere. The position of
// value i is stated independently here: half h = i / 128, r = i % 128, byte 32h + r % 32 of qs,
// bits 2 (r / 32) .. 2 (r / 32) + 1.
TEST(Q2K, EachQuantFieldDecodesToItsOwnValue) {
    for (int i = 0; i < kN; ++i) {
        Block b;
        for (uint8_t& s : b.scales) s = 1;
        b.d = f32_to_f16(1.0f);
        const int h = i / 128, r = i % 128;
        b.qs[32 * h + r % 32] = uint8_t(3 << (2 * (r / 32)));
        std::vector<float> y = decode(b.bytes(), kN);
        for (int j = 0; j < kN; ++j) ASSERT_EQ(y[size_t(j)], j == i ? 3.0f : 0.0f) << "field of value " << i << ", value " << j;
    }
}

// Sub-block s = i / 16 owns scales[s]: low nibble scales the quants by d, high nibble takes
// dmin times itself off every value of the sub-block (quants all 0 here, so y = -dmin * min code).
TEST(Q2K, ScaleByteLowNibbleScalesHighNibbleIsTheMin) {
    Block b;
    b.d = f32_to_f16(1.0f);
    b.dmin = f32_to_f16(0.5f);
    for (int s = 0; s < 16; ++s) b.scales[s] = uint8_t(((s + 1) % 16) << 4 | 15);
    std::vector<float> y = decode(b.bytes(), kN);
    for (int i = 0; i < kN; ++i) EXPECT_EQ(y[size_t(i)], -0.5f * float((i / 16 + 1) % 16)) << i;
    for (uint8_t& q : b.qs) q = 0x55;  // every quant 1: y = d * 15 - dmin * m
    y = decode(b.bytes(), kN);
    for (int i = 0; i < kN; ++i) EXPECT_EQ(y[size_t(i)], 15.0f - 0.5f * float((i / 16 + 1) % 16)) << i;
}

// A block with every field busy (distinct scale and min codes, pseudo-random quants, f16 d and
// dmin at bytes 80 and 82) decodes exactly as llama.cpp's loop does, and so does a row of two
// such blocks (blocks follow one another, 84 bytes apart).
TEST(Q2K, HandBuiltBlocksDecodeAsLlamaCppDoes) {
    std::mt19937 g(7);
    std::vector<uint8_t> row;
    std::vector<float> want;
    for (int k = 0; k < 2; ++k) {
        Block b;
        for (int s = 0; s < 16; ++s) b.scales[s] = uint8_t((s * 7 + k) % 16 | ((15 - s + 3 * k) % 16) << 4);
        for (uint8_t& q : b.qs) q = uint8_t(g());
        b.d = f32_to_f16(k ? 0.0371f : 1.25f);
        b.dmin = f32_to_f16(k ? 0.0123f : 0.3f);
        std::vector<uint8_t> bytes = b.bytes();
        row.insert(row.end(), bytes.begin(), bytes.end());
        std::vector<float> y = llama_order_decode(b);
        want.insert(want.end(), y.begin(), y.end());
    }
    std::vector<float> got = decode(row, 2 * kN);
    for (int i = 0; i < 2 * kN; ++i) ASSERT_EQ(got[size_t(i)], want[size_t(i)]) << "value " << i;
    // Spot values worked out by hand from block 0: value 0 is sub-block 0 (scale code 0, min 15)
    // with quant qs[0] & 3; value 200 is sub-block 12 (scale 12*7 % 16 = 4, min 3) with quant
    // (qs[32 + 200 % 32] >> 2 * ((200 - 128) / 32)) & 3 = (qs[40] >> 4) & 3.
    const Block b0 = [&] {
        Block b;
        std::memcpy(b.qs, row.data() + 16, 64);
        return b;
    }();
    const float d = f16_to_f32(f32_to_f16(1.25f)), dmin = f16_to_f32(f32_to_f16(0.3f));
    EXPECT_EQ(got[0], d * 0.0f * float(b0.qs[0] & 3) - dmin * 15.0f);
    EXPECT_EQ(got[200], d * 4.0f * float((b0.qs[40] >> 4) & 3) - dmin * 3.0f);
}

// Round trip on Gaussian rows: RMS error relative to the row's RMS. Measured over these 64 rows
// of 4096 Gaussian values: mean 0.2595, worst row 0.2660. The bounds (0.265, 0.272) sit about 2%
// above; the plain min/max encoding of the same format (each sub-block's range in 3 steps,
// codes rounded) measures 0.329 on these rows, so a search that regresses towards it fails.
TEST(Q2K, GaussianRoundTripError) {
    std::mt19937 g(11);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    double sum = 0, worst = 0;
    const int rows = 64, n = 4096;
    for (int r = 0; r < rows; ++r) {
        std::vector<float> x(n);
        const float sigma = std::ldexp(1.0f, r % 9 - 4);  // 1/16 .. 16: the error is scale-free
        for (float& v : x) v = sigma * nd(g);
        double rel = rms_diff(x, round_trip(x)) / rms(x);
        sum += rel;
        worst = std::max(worst, rel);
    }
    std::printf("[q2k] Gaussian rows: relative RMS error mean %.4f, worst %.4f\n", sum / rows, worst);
    EXPECT_LE(sum / rows, 0.265);
    EXPECT_LE(worst, 0.272);
}

// Scaling a row by a power of two (inside f16's normal range) scales every decoded value by
// the same power: the search has no absolute thresholds.
TEST(Q2K, PowerOfTwoScalingIsExact) {
    std::mt19937 g(5);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> x(kN);
    for (float& v : x) v = nd(g);
    std::vector<float> y = round_trip(x);
    for (int e : {-6, 3}) {
        std::vector<float> xs(x);
        for (float& v : xs) v = std::ldexp(v, e);
        std::vector<float> ys = round_trip(xs);
        for (int i = 0; i < kN; ++i) ASSERT_EQ(ys[size_t(i)], std::ldexp(y[size_t(i)], e)) << "2^" << e << ", value " << i;
    }
}

TEST(Q2K, AllZeroRowDecodesToZero) {
    std::vector<float> y = round_trip(std::vector<float>(2 * kN, 0.0f));
    for (float v : y) ASSERT_EQ(v, 0.0f);
}

// A constant row is one level of every sub-block; only the f16 rounding of the super-block
// scales (relative 2^-11, plus the 4-bit code's product) separates it from the value.
TEST(Q2K, ConstantRowsDecodeWithinHalfPrecision) {
    for (float c : {0.75f, -0.75f, 3e-3f, -41.0f}) {
        std::vector<float> y = round_trip(std::vector<float>(kN, c));
        for (int i = 0; i < kN; ++i) ASSERT_NEAR(y[size_t(i)], c, std::fabs(c) * 1e-3f) << "constant " << c << ", value " << i;
    }
}

// One outlier shares its super-block's two f16 scales with everything else there: the 4-bit
// scale codes span 15:1, so next to a sub-block of range 10 the sub-blocks of range ~0.05 get
// scale code 0 and lose their detail (measured: relative RMS error 1.00 there, against 0.25
// without the outlier; least squares keeps the outlier, whose error would cost more). That is
// the format's limit, not a bug; what must hold is that the damage stays in that block (blocks
// are encoded independently), that the outlier survives to f16 precision, and that the rest of
// its block stays bounded by its own magnitude (no blow-up from the large scales).
TEST(Q2K, OneOutlierStaysInItsBlock) {
    std::mt19937 g(3);
    std::normal_distribution<float> nd(0.0f, 0.01f);
    std::vector<float> x(4 * kN);
    for (float& v : x) v = nd(g);
    std::vector<float> plain = round_trip(x);
    const int at = kN + 77;  // block 1
    x[at] = 10.0f;
    std::vector<float> y = round_trip(x);
    for (int i = 0; i < 4 * kN; ++i) {
        if (i / kN == 1) continue;
        ASSERT_EQ(y[size_t(i)], plain[size_t(i)]) << "value " << i << " outside the outlier's block";
    }
    EXPECT_NEAR(y[at], 10.0f, 10.0f / 1024);  // measured 9.99756
    float rest_max = 0;
    for (int i = kN; i < 2 * kN; ++i) rest_max = std::max(rest_max, i == at ? 0.0f : std::fabs(x[size_t(i)]));
    for (int i = kN; i < 2 * kN; ++i) {
        if (i == at) continue;
        ASSERT_LE(std::fabs(y[size_t(i)] - x[size_t(i)]), 1.5f * rest_max) << "value " << i;
    }
}

// Values beyond what the f16 scales can reach saturate to finite values instead of inf.
TEST(Q2K, HugeValuesSaturateFinite) {
    std::vector<float> x(kN);
    for (int i = 0; i < kN; ++i) x[size_t(i)] = (i % 2 ? -1.0f : 1.0f) * 3e6f * float(i + 1) / kN;
    for (float v : round_trip(x)) ASSERT_TRUE(std::isfinite(v));
}

TEST(Q2K, NonFiniteValuesAreRejected) {
    for (float bad : {NAN, INFINITY, -INFINITY}) {
        std::vector<float> x(kN, 0.5f);
        x[100] = bad;
        std::vector<uint8_t> q(kBytes);
        std::string msg = error_of([&] { cpu::quantize_row(TensorType::Q2_K, x.data(), kN, q.data()); });
        EXPECT_NE(msg.find("cannot quantise a non-finite value"), std::string::npos) << msg;
        EXPECT_NE(msg.find("Q2_K"), std::string::npos) << msg;
    }
}

TEST(Q2K, RowsThatAreNotWholeSuperBlocksAreRejected) {
    std::vector<float> x(kN + 64, 0.0f);
    std::vector<uint8_t> q(2 * kBytes);
    std::string msg = error_of([&] { cpu::quantize_row(TensorType::Q2_K, x.data(), kN + 64, q.data()); });
    EXPECT_EQ(msg, "a Q2_K row holds whole super-blocks of 256 values, not 320");
    msg = error_of([&] { cpu::dequant_row(TensorType::Q2_K, q.data(), 64, x.data()); });
    EXPECT_EQ(msg, "a Q2_K row holds whole super-blocks of 256 values, not 64");
    EXPECT_THROW(gguf::tensor_bytes(TensorType::Q2_K, {64, 8}), Error);  // a GGUF tensor of such rows
}
