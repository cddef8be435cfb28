// The Q2_K side of the CUDA int8 tensor-core matvec (src/backend/cuda/q2_k_device.h), on the CPU:
// a replay of the kernel's warp, lane by lane, reading GGUF Q2_K rows at the header's offsets,
// building the A fragments with its frag / min_frag, multiplying with the PTX-table MMA of
// int8_replay.h and scaling as the kernel's epilogue does, against cpu::matmul on the same rows.
// The hardware itself is checked by tests/cuda/test_cuda_matvec.cpp on a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "backend/cpu/ops.h"
#include "backend/cpu/quant.h"
#include "backend/cuda/q2_k_device.h"
#include "core/half.h"
#include "int8_replay.h"

using namespace dsv4;
using gguf::TensorType;
namespace q8 = dsv4::cuda::q8dev;
namespace q2 = dsv4::cuda::q2dev;
using dsv4::test::mma_s8;
using dsv4::test::pack_x;
using dsv4::test::word_at;

namespace {

std::mt19937& rng() {
    static std::mt19937 g(20261207);
    return g;
}

std::vector<uint8_t> q2k_rows(int64_t rows, int64_t cols) {
    return dsv4::test::random_rows(TensorType::Q2_K, rows, cols, 5, 30.0f, rng());  // super-block scales vary
}

// y[rows] for one token, as the kernel computes it with WC warps per 16-row tile.
std::vector<float> replay(const std::vector<uint8_t>& w, int64_t rows, int64_t cols, const float* x, int WC) {
    std::vector<uint8_t> xl;
    std::vector<float> xs;
    pack_x(x, cols, xl, xs);
    const size_t rb = cpu::row_bytes(TensorType::Q2_K, cols);
    return dsv4::test::replay_tiles(rows, cols, WC, [&](int64_t r0, int gi, float (&acc)[32][2]) {
        uint32_t a[4][32][4], mn[4][32][4];
        float dg[32], mg[32], dh[32], mh[32];
        for (int lane = 0; lane < 32; ++lane) {
            const int g = lane / 4, t = lane % 4;
            uint32_t W[2][8] = {}, sc[2] = {}, dd[2] = {};
            for (int half = 0; half < 2; ++half) {
                const int64_t row = r0 + g + 8 * half;
                if (row >= rows) continue;  // the kernel's zero-filled copies
                const uint8_t* p = w.data() + size_t(row) * rb;
                for (int i = 0; i < 8; ++i) W[half][i] = word_at(p + q2::qs_word_offset(gi, i));
                sc[half] = word_at(p + q2::scale_word_offset(gi, t));
                dd[half] = word_at(p + q2::dd_offset(gi));
            }
            dg[lane] = f16_to_f32(uint16_t(dd[0] & 0xffffu));
            mg[lane] = f16_to_f32(uint16_t(dd[0] >> 16));
            dh[lane] = f16_to_f32(uint16_t(dd[1] & 0xffffu));
            mh[lane] = f16_to_f32(uint16_t(dd[1] >> 16));
            const q2::Frag fg = q2::frag(W[0], sc[0], t), fh = q2::frag(W[1], sc[1], t);
            for (int m = 0; m < 4; ++m) {
                const q8::AFrag f = q8::a_frag(fg.A, fh.A, m), n = q2::min_frag(fg, fh, m);
                a[m][lane][0] = f.a0, a[m][lane][1] = f.a1, a[m][lane][2] = f.a2, a[m][lane][3] = f.a3;
                mn[m][lane][0] = n.a0, mn[m][lane][1] = n.a1, mn[m][lane][2] = n.a2, mn[m][lane][3] = n.a3;
            }
        }
        const dsv4::test::XFrags xf = dsv4::test::x_frags(xl, xs, gi);
        int32_t cA[32][4] = {}, cB[32][4] = {}, mA[32][4] = {}, mB[32][4] = {};
        for (int m = 0; m < 4; ++m) {
            mma_s8(cA, a[m], xf.bA[m]);
            mma_s8(mA, mn[m], xf.bA[m]);
            mma_s8(cB, a[m], xf.bB[m]);
            mma_s8(mB, mn[m], xf.bB[m]);
        }
        for (int lane = 0; lane < 32; ++lane) {
            const float sl = xf.s[lane];
            float& ag = acc[lane][0];
            float& ah = acc[lane][1];
            ag = std::fma(q8::combine_limbs(cA[lane][0], cA[lane][1], cB[lane][0], cB[lane][1]), dg[lane] * sl, ag);
            ag = std::fma(q8::combine_limbs(mA[lane][0], mA[lane][1], mB[lane][0], mB[lane][1]), -(mg[lane] * sl), ag);
            ah = std::fma(q8::combine_limbs(cA[lane][2], cA[lane][3], cB[lane][2], cB[lane][3]), dh[lane] * sl, ah);
            ah = std::fma(q8::combine_limbs(mA[lane][2], mA[lane][3], mB[lane][2], mB[lane][3]), -(mh[lane] * sl), ah);
        }
    });
}

void check_replay(int64_t rows, int64_t cols, int WC, float x_spread) {
    const std::vector<uint8_t> w = q2k_rows(rows, cols);
    const std::vector<float> x = dsv4::test::random_x(cols, x_spread, rng());
    const std::vector<float> y = replay(w, rows, cols, x.data(), WC);

    // The device test's bound for Q2_K (tests/cuda/test_cuda_matvec.cpp): 1e-6 of sum |x| |w|.
    dsv4::test::expect_float32_grade(TensorType::Q2_K, w, rows, cols, x, y, WC);
}

TEST(Q2KInt8, WarpReplayMatchesCpu) {
    // One super-block (two groups), an odd number of them, a model width; partial 16-row tiles;
    // every split of a tile's groups over its warps.
    const std::pair<int64_t, int64_t> shapes[] = {{5, 256}, {16, 768}, {33, 1024}, {20, 4096}};
    for (auto [rows, cols] : shapes)
        for (int WC : {1, 2, 4, 8})
            if (WC <= q8::groups(cols)) check_replay(rows, cols, WC, 4.0f);
    check_replay(24, 2048, 4, 30.0f);  // inputs spread over 2^60 within blocks
}

TEST(Q2KInt8, ScaledCodesFitAByteWithoutCarry) {
    // Every code (0..3) times every 4-bit scale (0..15) in every byte position: the word product
    // is the byte-wise product, and the min code fills every byte.
    for (uint32_t scale = 0; scale < 256; ++scale)
        for (int t = 0; t < 4; ++t) {
            uint32_t W[8];
            for (int i = 0; i < 8; ++i) W[i] = 0xE4E4E4E4u >> (i % 2);  // codes 0, 1, 2, 3 at every shift
            const uint32_t word = scale << (8 * ((2 * t) & 3)) | (scale ^ 0x5Au) << (8 * (((2 * t) & 3) + 1));
            const q2::Frag f = q2::frag(W, word, t);
            const uint32_t s0 = scale, s1 = scale ^ 0x5Au;
            for (int i = 0; i < 8; ++i)
                for (int byte = 0; byte < 4; ++byte) {
                    const uint32_t code = (W[i] >> (8 * byte + 2 * t)) & 3u;
                    const uint32_t want = code * ((i < 4 ? s0 : s1) & 15u);
                    ASSERT_EQ((f.A[i] >> (8 * byte)) & 0xffu, want) << scale << " " << t << " " << i << " " << byte;
                }
            for (int byte = 0; byte < 4; ++byte) {
                ASSERT_EQ((f.M[0] >> (8 * byte)) & 0xffu, s0 >> 4);
                ASSERT_EQ((f.M[1] >> (8 * byte)) & 0xffu, (s1 >> 4) & 15u);
            }
        }
}

}  // namespace
