// CUDA gemm / gemm_experts (src/backend/cuda/gemm.h) against the CPU reference cpu::matmul, which
// reads the same stored weight rows through cpu::dequant_row. Random weights of every type
// (F32, F16, BF16, Q8_0, MXFP4, Q2_K), token counts on both sides of the matvec cut (T <= 8) and
// of the 64-token tile, odd row counts (partial 128-row tiles), column counts that are one step,
// several steps and (plain types) a partial step, padded strides, row slices, and expert stacks
// with uneven, empty and unassigned row groups. Outputs are poisoned (NaN) before each run so
// that an unwritten element fails, and padding between output rows must stay untouched.
//
// Tolerance, per output: |cuda - cpu| <= tol * sum_k |x_k| |w_k| (the scale of any rounding in
// the dot product), with
//   tol = 1e-5 on the float32 tiled kernel (float32 FMA in another order),
//   2e-6 on the tensor kernel with f16 limbs (Q8_0, Q2_K),
//   on its one-limb form (GemmPrecision::F16: one f16 limb of x, and of the weight for Q2_K, whose
//   rounding is at most 2^-11 of each) 2^-11 + 2e-6 for Q8_0, 2^-10 + 2e-6 for Q2_K, and over the
//   whole output ||cuda - cpu|| / ||cpu|| below 2^-11 (Q8_0) or 2^-10 (Q2_K): the per-term bound
//   (random rounding errors give about 0.6 and 0.8 of it),
//   and, where T <= 8 goes to matvec, the matvec test's: 2e-6 on its tensor path with f16 limbs
//   (Q8_0, F16), 1e-5 with bf16 limbs (BF16), 1e-6 on its simple path;
// and over the whole output ||cuda - cpu|| / ||cpu|| below 1e-5 (3e-5 for bf16 limbs). A wrong
// index, a missed step or a race gives errors of the order of the outputs themselves.
//
// The tensor kernel (T >= 16 on Q8_0 and Q2_K; its F16 and BF16 forms are off, gemm_tc.cu) is tested forced (GemmOptions::path) over
// T = 16..1000, rows that leave partial 128-row tiles, 256..4096 columns, strides, slices, the
// grouped form with workspace, tokens of magnitudes 1e-15..1e15, and against the float32 kernel on
// the same inputs (and bit-for-bit against itself). The environment variable DSV4_GEMM_PATH, if
// set when the tests run, moves the Auto tests to that path, and DSV4_GEMM_PRECISION=f16 their
// tensor calls to one limb (their tolerance follows).
//
// Device tests skip (reported as skipped, not passed) where no CUDA device is visible; the
// argument checks at the end run everywhere.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/ops.h"
#include "backend/cpu/quant.h"
#include "backend/cuda/device_memory.h"
#include "backend/cuda/gemm.h"
#include "backend/cuda/matvec.h"
#include "core/error.h"

namespace {

using dsv4::Mat;
using dsv4::MatStack;
using dsv4::gguf::TensorType;
namespace cuda = dsv4::cuda;

#define REQUIRE_DEVICE() \
    if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device (cudaGetDeviceCount found none)"

std::mt19937& rng() {
    static std::mt19937 g(20261119);
    return g;
}

// count matrices of [rows, cols] back to back, quantised from N(0, 0.05) values.
struct HostStack {
    std::vector<uint8_t> bytes;
    MatStack stack;
};

HostStack make_weights(TensorType type, int64_t rows, int64_t cols, int64_t count) {
    HostStack h;
    const size_t rb = dsv4::cpu::row_bytes(type, cols);
    h.bytes.resize(rb * size_t(rows * count));
    std::normal_distribution<float> nd(0.0f, 0.05f);
    std::vector<float> row(static_cast<size_t>(cols));
    for (int64_t r = 0; r < rows * count; ++r) {
        for (auto& v : row) v = nd(rng());
        dsv4::cpu::quantize_row(type, row.data(), cols, h.bytes.data() + size_t(r) * rb);
    }
    h.stack.first = Mat{type, rows, cols, rb, h.bytes.data()};
    h.stack.n = count;
    return h;
}

// T rows of cols (row stride ldx, padding NaN so that a read past cols shows): N(0, 1), with
// tokens of very different magnitudes (x1000, x0.001; extreme: x1e15, x1e-15 too) and a few outliers.
std::vector<float> make_x(int64_t T, int64_t cols, int64_t ldx, bool extreme = false) {
    std::vector<float> x(size_t(T * ldx), std::nanf(""));
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::uniform_int_distribution<int64_t> pick(0, cols - 1);
    for (int64_t t = 0; t < T; ++t) {
        float mag = t % 3 == 1 ? 1000.0f : t % 3 == 2 ? 0.001f : 1.0f;
        if (extreme && t % 5 == 3) mag = 1e15f;
        if (extreme && t % 5 == 4) mag = 1e-15f;
        float* r = x.data() + size_t(t * ldx);
        for (int64_t k = 0; k < cols; ++k) r[k] = mag * nd(rng());
        for (int i = 0; i < 3; ++i) r[pick(rng())] *= 50.0f;
    }
    return x;
}

// |W| of rows [r0, r1) of m as an F32 matrix, so that cpu::matmul(|x|, |W|) gives the
// tolerance scale sum_k |x_k| |w_k| of every output.
struct AbsMat {
    std::vector<float> v;
    Mat mat;
};

AbsMat abs_weights(const Mat& m, int64_t r0, int64_t r1) {
    AbsMat a;
    a.v.resize(size_t((r1 - r0) * m.cols));
    for (int64_t r = r0; r < r1; ++r) {
        float* dst = a.v.data() + size_t((r - r0) * m.cols);
        dsv4::cpu::dequant_row(m.type, m.row(r), m.cols, dst);
        for (int64_t k = 0; k < m.cols; ++k) dst[k] = std::fabs(dst[k]);
    }
    a.mat = Mat{TensorType::F32, r1 - r0, m.cols, size_t(m.cols) * 4, reinterpret_cast<const uint8_t*>(a.v.data())};
    return a;
}

std::vector<float> abs_of(const std::vector<float>& x) {
    std::vector<float> a(x.size());
    for (size_t i = 0; i < x.size(); ++i) a[i] = std::isnan(x[i]) ? 0.0f : std::fabs(x[i]);
    return a;
}

struct Tolerance {
    double per_output;  // times sum |x||w|
    double relative;    // ||err|| / ||ref||
};

Tolerance tensor_tolerance(const cuda::DeviceMat& w, cuda::GemmOptions opt = {}) {
    if (cuda::gemm_precision(opt) == cuda::GemmPrecision::F16) {
        const double u = w.type == TensorType::Q2_K ? std::ldexp(1.0, -10) : std::ldexp(1.0, -11);
        return {u + 2e-6, u};
    }
    if (w.type == TensorType::BF16) return {1e-5, 3e-5};
    return {2e-6, 1e-5};
}
constexpr Tolerance kSimtTolerance{1e-5, 1e-5};

// The tolerance of the path gemm takes for this view, T (or max_rows) and options.
Tolerance tolerance_for(const cuda::DeviceMat& w, int64_t T, cuda::GemmOptions opt = {}) {
    if (opt.path == cuda::GemmPath::Tensor) return tensor_tolerance(w, opt);
    if (opt.path == cuda::GemmPath::Simt) return kSimtTolerance;
    const bool tc = cuda::gemm_tensor_supported(w);
    if (T > cuda::kMaxMatvecTokens) {
        const cuda::GemmPath e = cuda::gemm_env_path();
        if (e == cuda::GemmPath::Simt) return kSimtTolerance;
        if (e == cuda::GemmPath::Tensor) return tc ? tensor_tolerance(w, opt) : kSimtTolerance;
        return T >= cuda::kMinTensorTokens && tc ? tensor_tolerance(w, opt) : kSimtTolerance;
    }
    if (!cuda::tensor_path_supported(w)) return {1e-6, 1e-5};
    if (w.type == TensorType::BF16) return {1e-5, 3e-5};
    return {2e-6, 1e-5};
}

bool poisoned(float v) {
    uint32_t bits;
    std::memcpy(&bits, &v, 4);
    return bits == 0xffffffffu;
}

// Accumulates the comparison of outputs against the reference (with their tolerance scale
// sum |x||w|) and of elements that must still hold the poison.
struct Checker {
    int64_t bad = 0, n = 0;
    double err2 = 0, ref2 = 0, worst = 0;

    // Output y[t][r] (named only when it fails: the loops visit millions of elements).
    void output(int64_t t, int64_t r, float got, float ref, float absdot, double tol) {
        const double e = std::fabs(double(got) - double(ref));
        const double lim = tol * double(absdot) + 1e-30;
        if (!(e <= lim) && bad++ < 5)  // NaN fails too
            ADD_FAILURE() << "y[" << t << "][" << r << "] = " << got << ", cpu " << ref << ", |err| " << e << " > "
                          << lim;
        worst = std::max(worst, e / (double(absdot) + 1e-30));
        ++n;
        err2 += e * e;
        ref2 += double(ref) * ref;
    }
    void untouched(int64_t t, int64_t r, float got) {
        if (!poisoned(got) && bad++ < 5) ADD_FAILURE() << "y[" << t << "][" << r << "] was written: " << got;
    }
    void finish(double relative) {
        EXPECT_EQ(bad, 0);
        // A statistic over many outputs: a handful can cancel to nearly zero, where only the
        // per-output bound means anything.
        if (ref2 > 0 && n >= 32) {
            EXPECT_LE(std::sqrt(err2 / ref2), relative);
        }
        ::testing::Test::RecordProperty("worst_err_over_absdot", std::to_string(worst));
    }
};

// A weight on the host and on the device, and the view of rows [r0, r1) that gemm multiplies.
struct Weight {
    HostStack host;
    cuda::DeviceWeight dev;
};

Weight make_weight(TensorType type, int64_t rows, int64_t cols, int64_t count = 1) {
    Weight w;
    w.host = make_weights(type, rows, cols, count);
    w.dev = count == 1 ? cuda::upload(w.host.stack.first) : cuda::upload(w.host.stack);
    return w;
}

// gemm of rows [r0, r1) of w (the whole matrix when r0 = 0, r1 = rows, else through slice_rows)
// for T tokens with strides cols + pad_x, (r1 - r0) + pad_y, checked against cpu::matmul.
void check_gemm(const Weight& w, int64_t r0, int64_t r1, int64_t T, int64_t pad_x, int64_t pad_y,
                cuda::GemmWorkspace& ws, cuda::GemmOptions opt = {}, bool extreme = false) {
    const Mat& m = w.host.stack.first;
    const int64_t n = r1 - r0, ldx = m.cols + pad_x, ldy = n + pad_y;
    SCOPED_TRACE(std::string(dsv4::gguf::type_name(m.type)) + " [" + std::to_string(m.rows) + ", " +
                 std::to_string(m.cols) + "] rows " + std::to_string(r0) + ".." + std::to_string(r1) +
                 " T=" + std::to_string(T) + " ldx=" + std::to_string(ldx) + " ldy=" + std::to_string(ldy) +
                 " path=" + std::to_string(int(opt.path)) + " precision=" + std::to_string(int(opt.precision)));
    const cuda::DeviceMat view = (r0 == 0 && r1 == m.rows) ? w.dev.mat : cuda::slice_rows(w.dev.mat, r0, r1);

    std::vector<float> x = make_x(T, m.cols, ldx, extreme);
    cuda::DeviceBuffer dx(x.size() * sizeof(float));
    dx.upload(x.data(), x.size() * sizeof(float));
    const size_t ysize = size_t(T * ldy);
    cuda::DeviceBuffer dy(ysize * sizeof(float));
    dy.fill_bytes(0xff);  // NaN everywhere: whatever the kernel does not write stays NaN
    cuda::gemm(view, dx.as<const float>(), ldx, T, dy.as<float>(), ldy, ws, nullptr, opt);
    cuda::synchronize();
    std::vector<float> y(ysize);
    dy.download(y.data(), ysize * sizeof(float));

    std::vector<float> ref(ysize, 0.0f), absdot(ysize, 0.0f);
    dsv4::cpu::matmul(x.data(), ldx, T, m, r0, r1, ref.data(), ldy);
    const AbsMat aw = abs_weights(m, r0, r1);
    const std::vector<float> ax = abs_of(x);
    dsv4::cpu::matmul(ax.data(), ldx, T, aw.mat, 0, n, absdot.data(), ldy);

    const Tolerance tol = tolerance_for(view, T, opt);
    Checker c;
    for (int64_t t = 0; t < T; ++t)
        for (int64_t r = 0; r < ldy; ++r) {
            const size_t i = size_t(t * ldy + r);
            if (r >= n)
                c.untouched(t, r, y[i]);  // padding between output rows
            else
                c.output(t, r, y[i], ref[i], absdot[i], tol.per_output);
        }
    c.finish(tol.relative);
}

const TensorType kAllTypes[] = {TensorType::F32,  TensorType::F16,   TensorType::BF16,
                                TensorType::Q8_0, TensorType::MXFP4, TensorType::Q2_K};
const int64_t kTokens[] = {1, 5, 8, 9, 17, 64, 100, 300};

bool plain(TensorType t) { return t == TensorType::F32 || t == TensorType::F16 || t == TensorType::BF16; }

TEST(CudaGemm, MatchesCpuForEveryTypeShapeAndTokenCount) {
    REQUIRE_DEVICE();
    cuda::GemmWorkspace ws;
    // Rows that leave partial 128-row tiles (1, 7, 33, 100, 257, 1000), columns of one 32-column
    // step up to 32 steps; Q2_K rows are whole 256-value super-blocks, so its 32 becomes 256.
    const std::pair<int64_t, int64_t> shapes[] = {{1, 32},    {7, 256},   {33, 512},
                                                  {100, 1024}, {257, 256}, {1000, 512}};
    for (TensorType type : kAllTypes)
        for (auto [rows, cols] : shapes) {
            if (type == TensorType::Q2_K && cols % 256 != 0) cols = 256;
            const Weight w = make_weight(type, rows, cols);
            for (int64_t T : kTokens) check_gemm(w, 0, rows, T, 3, 5, ws);
        }
}

TEST(CudaGemm, PlainTypesTakeAnyColumnCount) {
    REQUIRE_DEVICE();
    cuda::GemmWorkspace ws;
    // 33 columns: a full step and a 1-column one; 100: three steps and a partial fourth; 45 with
    // F32 rows of 180 bytes, not 16-byte aligned (the scalar loads).
    for (TensorType type : kAllTypes) {
        if (!plain(type)) continue;
        for (auto [rows, cols] : {std::pair<int64_t, int64_t>{7, 33}, {100, 100}, {257, 45}, {33, 1}}) {
            const Weight w = make_weight(type, rows, cols);
            for (int64_t T : kTokens) check_gemm(w, 0, rows, T, 3, 5, ws);
        }
    }
}

TEST(CudaGemm, StridesAndRowSlices) {
    REQUIRE_DEVICE();
    cuda::GemmWorkspace ws;
    for (TensorType type : kAllTypes) {
        // Q8_0 [*, 96] rows are one short chunk of the device layout (3 of 8 blocks, 112 bytes).
        const int64_t cols = type == TensorType::Q2_K ? 512 : type == TensorType::Q8_0 ? 96 : 512;
        const Weight w = make_weight(type, 300, cols);
        for (int64_t T : {int64_t(5), int64_t(9), int64_t(100)}) {
            check_gemm(w, 0, 300, T, 0, 0, ws);     // contiguous
            check_gemm(w, 0, 300, T, 61, 200, ws);  // wide padding
            check_gemm(w, 37, 250, T, 3, 1, ws);    // an interior slice
            check_gemm(w, 0, 1, T, 0, 0, ws);       // first row alone
            check_gemm(w, 299, 300, T, 7, 0, ws);   // last row alone
            check_gemm(w, 128, 256, T, 1, 0, ws);   // exactly one row tile
        }
    }
}

TEST(CudaGemm, ModelWidths) {
    REQUIRE_DEVICE();
    cuda::GemmWorkspace ws;
    // Long column loops (4096 = 128 steps) at a prefill band width.
    for (TensorType type : {TensorType::Q8_0, TensorType::MXFP4, TensorType::BF16, TensorType::Q2_K}) {
        const Weight w = make_weight(type, 1024, 4096);
        check_gemm(w, 0, 1024, 130, 0, 0, ws);
    }
}

TEST(CudaGemm, ZeroTokensWritesNothing) {
    REQUIRE_DEVICE();
    cuda::GemmWorkspace ws;
    const Weight w = make_weight(TensorType::Q8_0, 10, 64);
    cuda::DeviceBuffer dx(64 * 4), dy(10 * 4);
    dy.fill_bytes(0xff);
    cuda::gemm(w.dev.mat, dx.as<const float>(), 64, 0, dy.as<float>(), 10, ws);
    cuda::synchronize();
    std::vector<float> y(10);
    dy.download(y.data(), 40);
    for (float v : y) EXPECT_TRUE(poisoned(v));
}

// ---- gemm_experts ----

// offsets [count + 1] over N rows of x (rows past offsets[count] belong to no expert and must
// stay unwritten), checked expert by expert against cpu::matmul.
// grouped: false calls the form without workspace (the float32 kernel); true the form with n_rows
// = N and a workspace, on path opt.
void check_experts(TensorType type, int64_t rows, int64_t cols, const std::vector<int32_t>& offsets, int64_t N,
                   int64_t max_rows, bool grouped = false, cuda::GemmOptions opt = {}) {
    const int64_t count = int64_t(offsets.size()) - 1;
    std::string desc = std::string(dsv4::gguf::type_name(type)) + " [" + std::to_string(rows) + ", " +
                       std::to_string(cols) + "] x" + std::to_string(count) + " N=" + std::to_string(N) +
                       " max_rows=" + std::to_string(max_rows) + (grouped ? " with workspace" : "") +
                       " path=" + std::to_string(int(opt.path)) + " precision=" + std::to_string(int(opt.precision)) +
                       " offsets";
    for (int32_t o : offsets) desc += " " + std::to_string(o);
    SCOPED_TRACE(desc);
    const Weight w = make_weight(type, rows, cols, count);
    std::vector<float> x = make_x(N, cols, cols);
    cuda::DeviceBuffer dx(std::max<size_t>(1, x.size()) * sizeof(float));
    if (!x.empty()) dx.upload(x.data(), x.size() * sizeof(float));
    cuda::DeviceBuffer doff(offsets.size() * sizeof(int32_t));
    doff.upload(offsets.data(), offsets.size() * sizeof(int32_t));
    const size_t ysize = size_t(N * rows);
    cuda::DeviceBuffer dy(std::max<size_t>(1, ysize) * sizeof(float));
    dy.fill_bytes(0xff);
    cuda::GemmWorkspace ws;
    if (grouped)
        cuda::gemm_experts(w.dev.mat, dx.as<const float>(), doff.as<const int32_t>(), max_rows, N, dy.as<float>(), ws,
                           nullptr, opt);
    else
        cuda::gemm_experts(w.dev.mat, dx.as<const float>(), doff.as<const int32_t>(), max_rows, dy.as<float>());
    cuda::synchronize();
    std::vector<float> y(ysize);
    if (ysize) dy.download(y.data(), ysize * sizeof(float));

    std::vector<float> ref(ysize, 0.0f), absdot(ysize, 0.0f);
    const std::vector<float> ax = abs_of(x);
    for (int64_t e = 0; e < count; ++e) {
        const int64_t b = offsets[size_t(e)], n = offsets[size_t(e) + 1] - b;
        if (n == 0) continue;
        const Mat m = w.host.stack.at(e);
        dsv4::cpu::matmul(x.data() + b * cols, cols, n, m, 0, rows, ref.data() + b * rows, rows);
        const AbsMat aw = abs_weights(m, 0, rows);
        dsv4::cpu::matmul(ax.data() + b * cols, cols, n, aw.mat, 0, rows, absdot.data() + b * rows, rows);
    }
    const int64_t assigned = offsets.back();
    const Tolerance tol = grouped ? tolerance_for(w.dev.mat, max_rows, opt) : kSimtTolerance;
    Checker c;
    for (int64_t t = 0; t < N; ++t)
        for (int64_t r = 0; r < rows; ++r) {
            const size_t i = size_t(t * rows + r);
            if (t >= assigned)
                c.untouched(t, r, y[i]);  // rows of no expert
            else
                c.output(t, r, y[i], ref[i], absdot[i], tol.per_output);
        }
    c.finish(tol.relative);
}

TEST(CudaGemmExperts, MatchesPerExpertCpuMatmul) {
    REQUIRE_DEVICE();
    for (TensorType type : kAllTypes) {
        // Counts 0, 37, 70, 0, 130, 3 (two empty experts, one over two 64-row tiles); 10 rows
        // past the last expert; max_rows larger than any count.
        check_experts(type, 100, 512, {0, 0, 37, 107, 107, 237, 240}, 250, 200);
        // Counts at the tile edges: 1, 64, 65, 0, 129, 3, 0, 10 rows; max_rows exactly the largest.
        check_experts(type, 257, 256, {0, 1, 65, 130, 130, 259, 262, 262, 272}, 272, 129);
    }
    // Plain types with columns that leave a partial step.
    for (TensorType type : {TensorType::F32, TensorType::F16, TensorType::BF16})
        check_experts(type, 33, 45, {0, 5, 5, 80}, 80, 80);
    // One expert that owns every row (a dense product through the grouped path).
    check_experts(TensorType::Q8_0, 130, 1024, {0, 300}, 300, 300);
}

TEST(CudaGemmExperts, NoRowsWritesNothing) {
    REQUIRE_DEVICE();
    // Every expert empty: no block has work, y stays poisoned.
    check_experts(TensorType::Q8_0, 40, 64, {0, 0, 0, 0}, 12, 12);
}

// ---- the tensor kernel, forced, and against the float32 kernel ----

const TensorType kTensorTypes[] = {TensorType::Q8_0, TensorType::Q2_K};  // what tc_supported offers

cuda::GemmOptions with_path(cuda::GemmPath p) {
    cuda::GemmOptions o;
    o.path = p;
    return o;
}

TEST(CudaGemmTensor, MatchesCpuForEveryTypeShapeAndTokenCount) {
    REQUIRE_DEVICE();
    cuda::GemmWorkspace ws;
    const auto tensor = with_path(cuda::GemmPath::Tensor);
    const int64_t Ts[] = {16, 17, 64, 100, 300, 1000};
    for (TensorType type : kTensorTypes) {
        // Rows leaving partial 128-row tiles; 256 .. 4096 columns (1 .. 16 Q2_K super-blocks).
        for (auto [rows, cols] : {std::pair<int64_t, int64_t>{100, 256}, {257, 1024}, {1000, 256}}) {
            const Weight w = make_weight(type, rows, cols);
            for (int64_t T : Ts) check_gemm(w, 0, rows, T, 3, 5, ws, tensor);
        }
        const Weight w = make_weight(type, 257, 4096);
        for (int64_t T : {int64_t(16), int64_t(100), int64_t(300)}) check_gemm(w, 0, 257, T, 0, 0, ws, tensor);
        const Weight big = make_weight(type, 1000, 1024);
        check_gemm(big, 0, 1000, 1000, 0, 0, ws, tensor);
    }
}

TEST(CudaGemmTensor, SmallTokenCountsAndOneBlockOfColumns) {
    REQUIRE_DEVICE();
    cuda::GemmWorkspace ws;
    const auto tensor = with_path(cuda::GemmPath::Tensor);
    for (TensorType type : kTensorTypes) {
        const int64_t cols = type == TensorType::Q2_K ? 256 : 32;  // a single step
        const Weight w = make_weight(type, 33, cols);
        for (int64_t T : {int64_t(1), int64_t(2), int64_t(8), int64_t(9), int64_t(127), int64_t(128), int64_t(129)})
            check_gemm(w, 0, 33, T, 1, 2, ws, tensor);
    }
}

TEST(CudaGemmTensor, StridesAndRowSlices) {
    REQUIRE_DEVICE();
    cuda::GemmWorkspace ws;
    const auto tensor = with_path(cuda::GemmPath::Tensor);
    for (TensorType type : kTensorTypes) {
        // Q8_0 [*, 96] rows are one short chunk of the device layout (3 of 8 blocks, 112 bytes).
        const int64_t cols = type == TensorType::Q2_K ? 512 : type == TensorType::Q8_0 ? 96 : 512;
        const Weight w = make_weight(type, 300, cols);
        for (int64_t T : {int64_t(16), int64_t(100)}) {
            check_gemm(w, 0, 300, T, 0, 0, ws, tensor);
            check_gemm(w, 0, 300, T, 61, 200, ws, tensor);
            check_gemm(w, 37, 250, T, 3, 1, ws, tensor);
            check_gemm(w, 0, 1, T, 0, 0, ws, tensor);
            check_gemm(w, 299, 300, T, 7, 0, ws, tensor);
            check_gemm(w, 128, 256, T, 1, 0, ws, tensor);
        }
    }
}

TEST(CudaGemmTensor, TokensOfExtremeMagnitudes) {
    REQUIRE_DEVICE();
    cuda::GemmWorkspace ws;
    // Per-token power-of-two scales: tokens x1e15 and x1e-15 next to x1 in one tile.
    for (TensorType type : kTensorTypes) {
        const Weight w = make_weight(type, 130, 1024);
        check_gemm(w, 0, 130, 40, 0, 0, ws, with_path(cuda::GemmPath::Tensor), true);
    }
}

TEST(CudaGemmTensor, AutoTakesTheTensorPathAtSixteenTokens) {
    REQUIRE_DEVICE();
    cuda::GemmWorkspace ws;
    for (TensorType type : kTensorTypes) {
        const Weight w = make_weight(type, 200, 512);
        for (int64_t T : {int64_t(15), int64_t(16), int64_t(200)}) check_gemm(w, 0, 200, T, 2, 3, ws);
    }
}

// y [T, rows] = x · Wᵀ through gemm with `opt`, the output poisoned first (x already in dx).
std::vector<float> run_gemm(const Weight& w, const cuda::DeviceBuffer& dx, int64_t T, cuda::DeviceBuffer& dy,
                            cuda::GemmWorkspace& ws, cuda::GemmOptions opt) {
    const int64_t rows = w.host.stack.first.rows, cols = w.host.stack.first.cols;
    dy.fill_bytes(0xff);
    cuda::gemm(w.dev.mat, dx.as<const float>(), cols, T, dy.as<float>(), rows, ws, nullptr, opt);
    cuda::synchronize();
    std::vector<float> y(size_t(T * rows));
    dy.download(y.data(), y.size() * 4);
    return y;
}

// The same inputs through both kernels: each within its tolerance of the other (their bounds
// added), and the tensor kernel bit for bit the same on a second run (no atomics).
TEST(CudaGemmTensor, AgreesWithTheFloat32KernelAndRepeatsBitForBit) {
    REQUIRE_DEVICE();
    cuda::GemmWorkspace ws;
    for (TensorType type : kTensorTypes) {
        const int64_t rows = 300, cols = 2048, T = 260;
        SCOPED_TRACE(dsv4::gguf::type_name(type));
        const Weight w = make_weight(type, rows, cols);
        const Mat& m = w.host.stack.first;
        std::vector<float> x = make_x(T, cols, cols);
        cuda::DeviceBuffer dx(x.size() * 4), dy(size_t(T * rows) * 4);
        dx.upload(x.data(), x.size() * 4);
        auto run = [&](cuda::GemmPath p) { return run_gemm(w, dx, T, dy, ws, with_path(p)); };
        const std::vector<float> yt = run(cuda::GemmPath::Tensor), ys = run(cuda::GemmPath::Simt);
        const std::vector<float> yt2 = run(cuda::GemmPath::Tensor);
        EXPECT_EQ(std::memcmp(yt.data(), yt2.data(), yt.size() * 4), 0) << "tensor path not repeatable";

        std::vector<float> absdot(yt.size(), 0.0f);
        const AbsMat aw = abs_weights(m, 0, rows);
        const std::vector<float> ax = abs_of(x);
        dsv4::cpu::matmul(ax.data(), cols, T, aw.mat, 0, rows, absdot.data(), rows);
        const double tol = tensor_tolerance(w.dev.mat).per_output + kSimtTolerance.per_output;
        Checker c;
        for (int64_t t = 0; t < T; ++t)
            for (int64_t r = 0; r < rows; ++r) {
                const size_t i = size_t(t * rows + r);
                c.output(t, r, yt[i], ys[i], absdot[i], tol);
            }
        c.finish(tensor_tolerance(w.dev.mat).relative + kSimtTolerance.relative);
    }
}

TEST(CudaGemmTensor, ExpertsWithWorkspace) {
    REQUIRE_DEVICE();
    const auto tensor = with_path(cuda::GemmPath::Tensor);
    for (TensorType type : kTensorTypes) {
        const int64_t cols = type == TensorType::Q2_K ? 512 : 256;
        // The token tile follows the average rows an expert (32, 64 or 128 tokens; gemm_tc.cu).
        // Counts 0, 37, 133, 0, 130, 3 (two empty experts, two over a 128-token tile), 7 rows of
        // no expert; max_rows larger than any count. 50 rows an expert: 64-token tiles.
        check_experts(type, 100, cols, {0, 0, 37, 170, 170, 300, 303}, 310, 200, true, tensor);
        // Counts 1, 128, 129, 0, 257, 16: tile edges; max_rows exactly the largest. 128-token tiles.
        check_experts(type, 257, cols, {0, 1, 129, 258, 258, 515, 531}, 531, 257, true, tensor);
        // Counts 0, 31, 32, 33, 65, 1: the edges of 32-token tiles (27 rows an expert).
        check_experts(type, 70, cols, {0, 0, 31, 63, 96, 161, 162}, 162, 65, true, tensor);
        // Counts 64, 65, 0, 1, 128: the edges of 64-token tiles (52 rows an expert).
        check_experts(type, 70, cols, {0, 64, 129, 129, 130, 258}, 258, 128, true, tensor);
        // Auto through the grouped form: max_rows >= 16 takes the tensor path.
        check_experts(type, 130, 1024, {0, 17, 17, 300}, 300, 283, true);
    }
    // The grouped form forced onto the float32 kernel, and every expert empty.
    check_experts(TensorType::Q8_0, 100, 256, {0, 0, 37, 170, 170, 300, 303}, 310, 200, true,
                  with_path(cuda::GemmPath::Simt));
    check_experts(TensorType::Q8_0, 40, 64, {0, 0, 0, 0}, 12, 12, true, tensor);
}

// ---- the one-limb form (GemmPrecision::F16) ----

cuda::GemmOptions one_limb() {
    cuda::GemmOptions o = with_path(cuda::GemmPath::Tensor);
    o.precision = cuda::GemmPrecision::F16;
    return o;
}

TEST(CudaGemmOneLimb, MatchesCpuWithinTheF16Bound) {
    REQUIRE_DEVICE();
    cuda::GemmWorkspace ws;
    const auto f16 = one_limb();
    for (TensorType type : kTensorTypes) {
        // Partial row tiles, 1 .. 16 super-blocks of columns, all three token tiles and partial ones.
        for (auto [rows, cols] : {std::pair<int64_t, int64_t>{100, 256}, {257, 1024}, {300, 4096}}) {
            const Weight w = make_weight(type, rows, cols);
            for (int64_t T : {int64_t(16), int64_t(33), int64_t(64), int64_t(100), int64_t(300)})
                check_gemm(w, 0, rows, T, 3, 5, ws, f16);
        }
        const Weight w = make_weight(type, 300, type == TensorType::Q2_K ? 512 : 96);
        check_gemm(w, 37, 250, 100, 3, 1, ws, f16);  // an interior slice, padded strides
        check_gemm(w, 0, 300, 40, 0, 0, ws, f16, true);  // tokens x1e15 and x1e-15 in one tile
    }
}

TEST(CudaGemmOneLimb, Experts) {
    REQUIRE_DEVICE();
    for (TensorType type : kTensorTypes) {
        const int64_t cols = type == TensorType::Q2_K ? 512 : 256;
        check_experts(type, 100, cols, {0, 0, 37, 170, 170, 300, 303}, 310, 200, true, one_limb());  // 64-token tiles
        check_experts(type, 257, cols, {0, 1, 129, 258, 258, 515, 531}, 531, 257, true, one_limb());  // 128
        check_experts(type, 70, cols, {0, 0, 31, 63, 96, 161, 162}, 162, 65, true, one_limb());  // 32
    }
}

// The option reaches the kernel: one limb gives other bits than two (and repeats bit for bit).
TEST(CudaGemmOneLimb, DiffersFromTwoLimbsAndRepeats) {
    REQUIRE_DEVICE();
    cuda::GemmWorkspace ws;
    for (TensorType type : kTensorTypes) {
        SCOPED_TRACE(dsv4::gguf::type_name(type));
        const int64_t rows = 200, cols = 1024, T = 70;
        const Weight w = make_weight(type, rows, cols);
        std::vector<float> x = make_x(T, cols, cols);
        cuda::DeviceBuffer dx(x.size() * 4), dy(size_t(T * rows) * 4);
        dx.upload(x.data(), x.size() * 4);
        auto run = [&](cuda::GemmPrecision p) {
            cuda::GemmOptions o = with_path(cuda::GemmPath::Tensor);
            o.precision = p;
            return run_gemm(w, dx, T, dy, ws, o);
        };
        const std::vector<float> a = run(cuda::GemmPrecision::F16), b = run(cuda::GemmPrecision::F32);
        const std::vector<float> a2 = run(cuda::GemmPrecision::F16);
        EXPECT_NE(std::memcmp(a.data(), b.data(), a.size() * 4), 0) << "one limb gave the two-limb results";
        EXPECT_EQ(std::memcmp(a.data(), a2.data(), a.size() * 4), 0) << "one-limb path not repeatable";
    }
}

TEST(CudaGemmTensor, ModelShapes) {
    REQUIRE_DEVICE();
    cuda::GemmWorkspace ws;
    // A prefill band on the [4096, 1024]-ish shapes (rows cut to keep the CPU reference quick).
    for (TensorType type : kTensorTypes) {
        const Weight w = make_weight(type, 384, 4096);
        check_gemm(w, 0, 384, 256, 0, 0, ws);
    }
}

// ---- argument checks: on the host before any CUDA call, so these run without a device ----

cuda::DeviceMat fake_mat(TensorType type, int64_t rows, int64_t cols, const uint8_t* data) {
    cuda::DeviceMat w;
    w.type = type;
    w.rows = rows;
    w.cols = cols;
    w.row_bytes = cuda::device_row_bytes(type, cols);  // as upload lays rows out on the device
    w.data = data;
    return w;
}

TEST(CudaGemmArgs, RejectsBadArguments) {
    alignas(16) static uint8_t fake[4096];
    static float xy[64];
    cuda::GemmWorkspace ws;
    cuda::DeviceMat w = fake_mat(TensorType::Q8_0, 4, 64, fake);

    EXPECT_THROW(cuda::gemm(w, xy, 64, -1, xy, 4, ws), dsv4::Error);  // T < 0
    EXPECT_NO_THROW(cuda::gemm(w, xy, 64, 0, xy, 4, ws));             // T = 0: nothing to do
    for (int64_t T : {int64_t(5), int64_t(20)}) {
        SCOPED_TRACE("T = " + std::to_string(T));
        EXPECT_THROW(cuda::gemm(w, xy, 63, T, xy, 4, ws), dsv4::Error);       // ldx < cols
        EXPECT_THROW(cuda::gemm(w, xy, 64, T, xy, 3, ws), dsv4::Error);       // ldy < rows
        EXPECT_THROW(cuda::gemm(w, nullptr, 64, T, xy, 4, ws), dsv4::Error);  // null x
        EXPECT_THROW(cuda::gemm(w, xy, 64, T, nullptr, 4, ws), dsv4::Error);  // null y

        cuda::DeviceMat bad = w;
        bad.count = 2;  // a stack: gemm_experts' job
        EXPECT_THROW(cuda::gemm(bad, xy, 64, T, xy, 4, ws), dsv4::Error);
        bad = w;
        bad.cols = 50;  // not whole Q8_0 blocks
        EXPECT_THROW(cuda::gemm(bad, xy, 64, T, xy, 4, ws), dsv4::Error);
        bad = w;
        bad.row_bytes = 64;  // shorter than the 80 bytes of two Q8_0 blocks on the device
        EXPECT_THROW(cuda::gemm(bad, xy, 64, T, xy, 4, ws), dsv4::Error);
        bad = fake_mat(TensorType::Q2_K, 4, 256, fake);
        bad.cols = 128;  // Q2_K rows are whole 256-value super-blocks
        EXPECT_THROW(cuda::gemm(bad, xy, 128, T, xy, 4, ws), dsv4::Error);
        bad = fake_mat(TensorType::I8, 4, 64, fake);  // not a weight type
        EXPECT_THROW(cuda::gemm(bad, xy, 64, T, xy, 4, ws), dsv4::Error);
        bad = fake_mat(TensorType::F32, 4, 16, fake + 2);  // F32 rows not 4-byte aligned
        EXPECT_THROW(cuda::gemm(bad, xy, 64, T, xy, 4, ws), dsv4::Error);
        bad = w;
        bad.data = nullptr;
        EXPECT_THROW(cuda::gemm(bad, xy, 64, T, xy, 4, ws), dsv4::Error);
        bad = w;
        bad.rows = 0;
        EXPECT_THROW(cuda::gemm(bad, xy, 64, T, xy, 4, ws), dsv4::Error);
    }
}

TEST(CudaGemmArgs, ExpertsRejectBadArguments) {
    alignas(16) static uint8_t fake[4096];
    static float xy[64];
    static int32_t offsets[4];
    cuda::DeviceMat w = fake_mat(TensorType::MXFP4, 4, 64, fake);
    w.count = 3;
    EXPECT_THROW(cuda::gemm_experts(w, xy, offsets, -1, xy), dsv4::Error);       // max_rows < 0
    EXPECT_THROW(cuda::gemm_experts(w, xy, nullptr, 8, xy), dsv4::Error);        // no offsets
    EXPECT_THROW(cuda::gemm_experts(w, nullptr, offsets, 8, xy), dsv4::Error);   // null x
    EXPECT_THROW(cuda::gemm_experts(w, xy, offsets, 8, nullptr), dsv4::Error);   // null y
    cuda::DeviceMat bad = w;
    bad.count = 0;
    EXPECT_THROW(cuda::gemm_experts(bad, xy, offsets, 8, xy), dsv4::Error);
    bad = w;
    bad.cols = 48;  // not whole MXFP4 blocks
    EXPECT_THROW(cuda::gemm_experts(bad, xy, offsets, 8, xy), dsv4::Error);
    EXPECT_NO_THROW(cuda::gemm_experts(w, xy, offsets, 0, xy));  // max_rows = 0: nothing to do
}

TEST(CudaGemmArgs, TensorPathRejectsWhatItDoesNotTake) {
    alignas(16) static uint8_t fake[4096];
    static float xy[64];
    cuda::GemmWorkspace ws;
    cuda::GemmOptions tensor;
    tensor.path = cuda::GemmPath::Tensor;
    const cuda::DeviceMat mx = fake_mat(TensorType::MXFP4, 4, 64, fake);
    const cuda::DeviceMat f32 = fake_mat(TensorType::F32, 4, 64, fake);
    const cuda::DeviceMat odd = fake_mat(TensorType::F16, 4, 48, fake);  // cols % 32 != 0
    EXPECT_FALSE(cuda::gemm_tensor_supported(mx));
    EXPECT_FALSE(cuda::gemm_tensor_supported(f32));
    EXPECT_FALSE(cuda::gemm_tensor_supported(odd));
    EXPECT_TRUE(cuda::gemm_tensor_supported(fake_mat(TensorType::Q8_0, 4, 64, fake)));
    EXPECT_TRUE(cuda::gemm_tensor_supported(fake_mat(TensorType::Q2_K, 4, 256, fake)));
    // Implemented but switched off (gemm_tc.cu says why).
    for (TensorType t : {TensorType::F16, TensorType::BF16})
        EXPECT_FALSE(cuda::gemm_tensor_supported(fake_mat(t, 4, 256, fake)));
    for (const cuda::DeviceMat& w : {mx, f32, odd})
        EXPECT_THROW(cuda::gemm(w, xy, 64, 20, xy, 4, ws, nullptr, tensor), dsv4::Error);
    static int32_t offsets[4];
    cuda::DeviceMat st = mx;
    st.count = 3;
    EXPECT_THROW(cuda::gemm_experts(st, xy, offsets, 20, 20, xy, ws, nullptr, tensor), dsv4::Error);
    EXPECT_THROW(cuda::gemm_experts(st, xy, offsets, 20, -1, xy, ws), dsv4::Error);  // n_rows < 0
}

TEST(CudaGemmArgs, SliceRows) {
    alignas(16) static uint8_t fake[4096];
    const cuda::DeviceMat w = fake_mat(TensorType::Q8_0, 10, 96, fake);  // device rows of 112 bytes
    const cuda::DeviceMat s = cuda::slice_rows(w, 3, 7);
    EXPECT_EQ(s.rows, 4);
    EXPECT_EQ(s.cols, 96);
    EXPECT_EQ(s.row_bytes, 112u);
    EXPECT_EQ(s.count, 1);
    EXPECT_EQ(s.type, TensorType::Q8_0);
    EXPECT_EQ(s.data, fake + 3 * 112);
    EXPECT_EQ(cuda::slice_rows(w, 0, 10).data, fake);
    EXPECT_EQ(cuda::slice_rows(w, 9, 10).rows, 1);
    EXPECT_THROW(cuda::slice_rows(w, -1, 3), dsv4::Error);
    EXPECT_THROW(cuda::slice_rows(w, 3, 11), dsv4::Error);
    EXPECT_THROW(cuda::slice_rows(w, 5, 5), dsv4::Error);  // empty
    EXPECT_THROW(cuda::slice_rows(w, 6, 5), dsv4::Error);
    cuda::DeviceMat stack = w;
    stack.count = 2;
    EXPECT_THROW(cuda::slice_rows(stack, 0, 1), dsv4::Error);
}

}  // namespace
