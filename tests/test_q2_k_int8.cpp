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
    const size_t rb = cpu::row_bytes(TensorType::Q2_K, cols);
    std::vector<uint8_t> b(rb * size_t(rows));
    std::normal_distribution<float> nd(0.0f, 0.05f);
    std::vector<float> row(static_cast<size_t>(cols));
    for (int64_t r = 0; r < rows; ++r) {
        for (auto& v : row) v = nd(rng()) * (r % 5 == 0 ? 30.0f : 1.0f);  // super-block scales vary
        cpu::quantize_row(TensorType::Q2_K, row.data(), cols, b.data() + size_t(r) * rb);
    }
    return b;
}

// y[rows] for one token, as the kernel computes it with WC warps per 16-row tile.
std::vector<float> replay(const std::vector<uint8_t>& w, int64_t rows, int64_t cols, const float* x, int WC) {
    std::vector<uint8_t> xl;
    std::vector<float> xs;
    pack_x(x, cols, xl, xs);
    const size_t rb = cpu::row_bytes(TensorType::Q2_K, cols);
    const int G = int(q8::groups(cols));
    std::vector<float> y(static_cast<size_t>(rows));
    for (int64_t r0 = 0; r0 < rows; r0 += 16) {
        std::vector<float> part(size_t(WC) * 16);
        for (int wc = 0; wc < WC; ++wc) {
            int ga, gb;
            q8::group_range(G, wc, WC, ga, gb);
            float acc[32][2] = {};
            for (int gi = ga; gi < gb; ++gi) {
                uint32_t a[4][32][4], mn[4][32][4], bA[4][32][2], bB[4][32][2];
                float dg[32], mg[32], dh[32], mh[32], s[32];
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
                    uint32_t hA[2][4] = {}, hB[2][4] = {};
                    if (q8::b_active(g, t))
                        for (int h = 0; h < 2; ++h)
                            for (int k = 0; k < 4; ++k) {
                                const uint8_t* base = xl.data() + size_t(gi) * q8::kGroupLimbBytes;
                                hA[h][k] = word_at(base + q8::b_offset(g, 0, h) + 4 * k);
                                hB[h][k] = word_at(base + q8::b_offset(g, 1, h) + 4 * k);
                            }
                    s[lane] = xs[size_t(gi) * 4 + t];
                    for (int m = 0; m < 4; ++m) {
                        const q8::AFrag f = q8::a_frag(fg.A, fh.A, m), n = q2::min_frag(fg, fh, m);
                        a[m][lane][0] = f.a0, a[m][lane][1] = f.a1, a[m][lane][2] = f.a2, a[m][lane][3] = f.a3;
                        mn[m][lane][0] = n.a0, mn[m][lane][1] = n.a1, mn[m][lane][2] = n.a2, mn[m][lane][3] = n.a3;
                        q8::b_frag(hA, m, bA[m][lane][0], bA[m][lane][1]);
                        q8::b_frag(hB, m, bB[m][lane][0], bB[m][lane][1]);
                    }
                }
                int32_t cA[32][4] = {}, cB[32][4] = {}, mA[32][4] = {}, mB[32][4] = {};
                for (int m = 0; m < 4; ++m) {
                    mma_s8(cA, a[m], bA[m]);
                    mma_s8(mA, mn[m], bA[m]);
                    mma_s8(cB, a[m], bB[m]);
                    mma_s8(mB, mn[m], bB[m]);
                }
                for (int lane = 0; lane < 32; ++lane) {
                    const float sl = s[lane];
                    float& ag = acc[lane][0];
                    float& ah = acc[lane][1];
                    ag = std::fma(q8::combine_limbs(cA[lane][0], cA[lane][1], cB[lane][0], cB[lane][1]), dg[lane] * sl, ag);
                    ag = std::fma(q8::combine_limbs(mA[lane][0], mA[lane][1], mB[lane][0], mB[lane][1]), -(mg[lane] * sl), ag);
                    ah = std::fma(q8::combine_limbs(cA[lane][2], cA[lane][3], cB[lane][2], cB[lane][3]), dh[lane] * sl, ah);
                    ah = std::fma(q8::combine_limbs(mA[lane][2], mA[lane][3], mB[lane][2], mB[lane][3]), -(mh[lane] * sl), ah);
                }
            }
            for (int g = 0; g < 8; ++g)  // the quad's shuffles: (0 + 1) + (2 + 3)
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

void check_replay(int64_t rows, int64_t cols, int WC, float x_spread) {
    const std::vector<uint8_t> w = q2k_rows(rows, cols);
    std::vector<float> x(static_cast<size_t>(cols));
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::uniform_int_distribution<int> ex(-int(x_spread), int(x_spread));
    for (auto& v : x) v = std::ldexp(nd(rng()), ex(rng()));
    const std::vector<float> y = replay(w, rows, cols, x.data(), WC);

    Mat m;
    m.type = TensorType::Q2_K;
    m.rows = rows;
    m.cols = cols;
    m.row_bytes = cpu::row_bytes(TensorType::Q2_K, cols);
    m.data = w.data();
    std::vector<float> ref(static_cast<size_t>(rows));
    cpu::matmul(x.data(), 1, m, ref.data());
    std::vector<float> wrow(static_cast<size_t>(cols));
    for (int64_t r = 0; r < rows; ++r) {
        cpu::dequant_row(TensorType::Q2_K, w.data() + size_t(r) * m.row_bytes, cols, wrow.data());
        double absdot = 0.0;
        for (int64_t k = 0; k < cols; ++k) absdot += std::fabs(double(wrow[size_t(k)]) * x[size_t(k)]);
        // The device test's bound for Q2_K (tests/cuda/test_cuda_matvec.cpp): 1e-6 of sum |x| |w|.
        ASSERT_LE(std::fabs(double(y[size_t(r)]) - ref[size_t(r)]), 1e-6 * absdot + 1e-30)
            << "[" << rows << ", " << cols << "] WC " << WC << " row " << r << ": " << y[size_t(r)] << " vs "
            << ref[size_t(r)];
    }
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
