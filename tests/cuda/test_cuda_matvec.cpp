// CUDA matvec (src/backend/cuda/matvec.h) against the CPU reference cpu::matmul, which reads the
// same stored weight rows through cpu::dequant_row. Random weights of every supported type, odd
// shapes, T = 1..8, expert stacks, the split-column path; fresh random inputs for every check,
// outputs poisoned (NaN) before each run so that an unwritten element fails.
//
// Tolerance, per output: |cuda - cpu| <= tol * sum_k |x_k| |w_k| (the scale of any rounding in
// the dot product, so it stays meaningful when the result itself is near zero), with
//   tol = 2e-6 on the tensor path with f16 limbs (Q8_0, F16 weights: x kept to 22 bits),
//   tol = 1e-5 on the tensor path with bf16 limbs (BF16 weights: x kept to 16 bits, 2^-17),
//   tol = 1e-6 on the simple path (float32 like the reference, another summation order) and on
//           the int8 Q2_K kernel (exact int32 block sums of x limbs kept to 2^-22 of the block's
//           largest value, then float32 as the simple path);
// and over the whole output ||cuda - cpu|| / ||cpu|| below 1e-5 (3e-5 for bf16 limbs). A wrong
// index, a missed block or a race gives errors of the order of the outputs themselves.
//
// Device tests skip (reported as skipped, not passed) where no CUDA device is visible; the
// argument checks at the end run everywhere.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/ops.h"
#include "backend/cpu/quant.h"
#include "backend/cuda/device_memory.h"
#include "backend/cuda/matvec.h"
#include "backend/cuda/matvec_int8.h"
#include "core/error.h"

namespace {

using dsv4::Mat;
using dsv4::MatStack;
using dsv4::gguf::TensorType;
namespace cuda = dsv4::cuda;

#define REQUIRE_DEVICE() \
    if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device (cudaGetDeviceCount found none)"

std::mt19937& rng() {
    static std::mt19937 g(20261118);
    return g;
}

// count matrices of [rows, cols] back to back, quantised from N(0, 0.05) values (a spread of
// exponents, so that Q8_0 block scales and bf16/f16 rounding all vary).
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

// n_x input sets of T rows of cols (row stride ldx): N(0, 1), with tokens of very different
// magnitudes (x1000, x0.001) and a few outliers, to exercise the per-token limb scale.
std::vector<float> make_x(int n_x, int T, int64_t cols, int64_t ldx) {
    std::vector<float> x(size_t(n_x) * T * ldx, 0.0f);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::uniform_int_distribution<int64_t> pick(0, cols - 1);
    for (int p = 0; p < n_x; ++p)
        for (int t = 0; t < T; ++t) {
            const float mag = t % 3 == 1 ? 1000.0f : t % 3 == 2 ? 0.001f : 1.0f;
            float* r = x.data() + (size_t(p) * T + t) * ldx;
            for (int64_t k = 0; k < cols; ++k) r[k] = mag * nd(rng());
            for (int i = 0; i < 3; ++i) r[pick(rng())] *= 50.0f;
        }
    return x;
}

struct Tolerance {
    double per_output;  // times sum |x||w|
    double relative;    // ||err|| / ||ref||
};

Tolerance tolerance_for(TensorType type, cuda::MatvecPath path, int64_t cols) {
    const bool tensor = path != cuda::MatvecPath::Simple && (type == TensorType::Q8_0 || type == TensorType::F16 ||
                                                              type == TensorType::BF16) && cols % 32 == 0;
    if (!tensor) return {1e-6, 1e-5};
    if (type == TensorType::BF16) return {1e-5, 3e-5};
    return {2e-6, 1e-5};
}

struct Case {
    TensorType type;
    int64_t rows, cols;
    int T;
    int64_t count = 1;           // matrices in the stack
    std::vector<int32_t> ids;    // empty: problem p uses matrix p, n = count
    bool shared_x = true;        // false: each problem has its own x
    cuda::MatvecPath path = cuda::MatvecPath::Auto;
    size_t x_smem_limit = 0;
    int64_t pad = 3;             // ldx = cols + pad, ldy = rows + pad (padding must stay untouched)
};

std::string describe(const Case& c) {
    return std::string(dsv4::gguf::type_name(c.type)) + " [" + std::to_string(c.rows) + ", " + std::to_string(c.cols) +
           "] x" + std::to_string(c.count) + " T=" + std::to_string(c.T) + " n=" +
           std::to_string(c.ids.empty() ? c.count : int64_t(c.ids.size())) + (c.shared_x ? " shared-x" : " own-x") +
           (c.path == cuda::MatvecPath::Simple ? " simple" : c.path == cuda::MatvecPath::Tensor ? " tensor" : " auto") +
           (c.x_smem_limit ? " x_smem_limit=" + std::to_string(c.x_smem_limit) : "");
}

// Runs the case on the device and returns its outputs [n][T][ldy] (downloaded as is).
struct RunResult {
    std::vector<float> y;
    std::vector<float> ref;     // valid entries only (padding left 0)
    std::vector<float> absdot;
};

RunResult run_case(const Case& c) {
    HostStack w = make_weights(c.type, c.rows, c.cols, c.count);
    std::vector<int32_t> ids = c.ids;
    const int n = ids.empty() ? int(c.count) : int(ids.size());
    const int n_x = c.shared_x ? 1 : n;
    const int64_t ldx = c.cols + c.pad, ldy = c.rows + c.pad;
    std::vector<float> x = make_x(n_x, c.T, c.cols, ldx);

    cuda::DeviceWeight dw = cuda::upload(w.stack);
    cuda::DeviceBuffer dx(x.size() * sizeof(float));
    dx.upload(x.data(), x.size() * sizeof(float));
    const size_t ysize = size_t(n) * c.T * ldy;
    cuda::DeviceBuffer dy(ysize * sizeof(float));
    dy.fill_bytes(0xff);  // NaN everywhere: whatever the kernel does not write stays NaN
    cuda::DeviceBuffer dids;
    if (!ids.empty()) {
        dids = cuda::DeviceBuffer(ids.size() * sizeof(int32_t));
        dids.upload(ids.data(), ids.size() * sizeof(int32_t));
    }

    cuda::MatvecArgs a;
    a.x = dx.as<const float>();
    a.ldx = ldx;
    a.x_stride = c.shared_x ? 0 : c.T * ldx;
    a.T = c.T;
    a.y = dy.as<float>();
    a.ldy = ldy;
    a.y_stride = c.T * ldy;
    a.n = n;
    a.ids = ids.empty() ? nullptr : dids.as<const int32_t>();
    cuda::MatvecOptions opt;
    opt.path = c.path;
    opt.x_smem_limit = c.x_smem_limit;
    const size_t ws_bytes = cuda::matvec_workspace_bytes(dw.mat, a, opt);
    cuda::DeviceBuffer ws(ws_bytes);
    cuda::matvec(dw.mat, a, ws.get(), ws_bytes, nullptr, opt);
    cuda::synchronize();

    RunResult res;
    res.y.resize(ysize);
    dy.download(res.y.data(), ysize * sizeof(float));
    res.ref.assign(ysize, 0.0f);
    res.absdot.assign(ysize, 0.0f);
    std::vector<float> wrow(static_cast<size_t>(c.cols));
    for (int p = 0; p < n; ++p) {
        const int32_t m = ids.empty() ? p : ids[size_t(p)];
        if (m < 0 || m >= c.count) continue;  // invalid id: outputs must be NaN, checked by the caller
        const Mat mat = w.stack.at(m);
        const float* xp = x.data() + size_t(c.shared_x ? 0 : p) * c.T * ldx;
        float* yp = res.ref.data() + size_t(p) * c.T * ldy;
        dsv4::cpu::matmul(xp, ldx, c.T, mat, 0, c.rows, yp, ldy);
        for (int64_t r = 0; r < c.rows; ++r) {
            dsv4::cpu::dequant_row(c.type, mat.row(r), c.cols, wrow.data());
            for (int t = 0; t < c.T; ++t) {
                double s = 0;
                for (int64_t k = 0; k < c.cols; ++k) s += std::fabs(double(xp[t * ldx + k]) * wrow[size_t(k)]);
                res.absdot[size_t(p) * c.T * ldy + size_t(t) * ldy + size_t(r)] = float(s);
            }
        }
    }
    return res;
}

void check_case(const Case& c) {
    SCOPED_TRACE(describe(c));
    RunResult res = run_case(c);
    const Tolerance tol = tolerance_for(c.type, c.path, c.cols);
    const int n = c.ids.empty() ? int(c.count) : int(c.ids.size());
    const int64_t ldy = c.rows + c.pad;
    double err2 = 0, ref2 = 0, worst = 0;
    int64_t n_checked = 0;
    int64_t bad = 0;
    for (int p = 0; p < n; ++p) {
        const int32_t m = c.ids.empty() ? p : c.ids[size_t(p)];
        const bool valid = m >= 0 && m < c.count;
        for (int t = 0; t < c.T; ++t)
            for (int64_t r = 0; r < ldy; ++r) {
                const size_t i = size_t(p) * c.T * ldy + size_t(t) * ldy + size_t(r);
                const float got = res.y[i];
                if (r >= c.rows) {  // padding between output rows: never written
                    uint32_t bits;
                    std::memcpy(&bits, &got, 4);
                    if (bits != 0xffffffffu && bad++ < 5)
                        ADD_FAILURE() << "padding y[" << p << "][" << t << "][" << r << "] was written: " << got;
                    continue;
                }
                if (!valid) {
                    if (!std::isnan(got) && bad++ < 5)
                        ADD_FAILURE() << "problem " << p << " has invalid id " << m << " but y = " << got;
                    continue;
                }
                const double e = std::fabs(double(got) - double(res.ref[i]));
                const double lim = tol.per_output * double(res.absdot[i]) + 1e-30;
                if (!(e <= lim)) {  // NaN fails too
                    if (bad++ < 5)
                        ADD_FAILURE() << "y[" << p << "][" << t << "][" << r << "] = " << got << ", cpu "
                                      << res.ref[i] << ", |err| " << e << " > " << lim;
                }
                worst = std::max(worst, e / (double(res.absdot[i]) + 1e-30));
                ++n_checked;
                err2 += e * e;
                ref2 += double(res.ref[i]) * res.ref[i];
            }
    }
    EXPECT_EQ(bad, 0);
    // The norm bound is a statistic over many outputs; a handful (one row x three tokens) can sum
    // to nearly zero by cancellation, where only the per-output bound above means anything.
    if (ref2 > 0 && n_checked >= 32) {
        EXPECT_LE(std::sqrt(err2 / ref2), tol.relative);
    }
    ::testing::Test::RecordProperty("worst_err_over_absdot", std::to_string(worst));
}

const TensorType kTensorTypes[] = {TensorType::Q8_0, TensorType::F16, TensorType::BF16};
const TensorType kAllTypes[] = {TensorType::F32, TensorType::F16, TensorType::BF16, TensorType::Q8_0,
                                TensorType::MXFP4};

TEST(CudaMatvec, TensorPathMatchesCpuOnOddShapes) {
    REQUIRE_DEVICE();
    // Rows that leave partial 32-row tiles, column counts that leave partial stages, a single
    // 32-column block, and rows whose byte length is not a multiple of 16 (Q8_0 [*, 96] rows are
    // 102 bytes, so segments start at every even offset).
    const std::pair<int64_t, int64_t> shapes[] = {{1, 32}, {7, 96}, {33, 160}, {100, 544}, {257, 1056}, {64, 4096}};
    for (TensorType type : kTensorTypes)
        for (auto [rows, cols] : shapes)
            for (int T : {1, 2, 3, 5, 8}) check_case({type, rows, cols, T, 1, {}, true, cuda::MatvecPath::Tensor});
}

TEST(CudaMatvec, TensorPathMatchesCpuAtModelShape) {
    REQUIRE_DEVICE();
    // A V4-Flash projection, [4096, 4096], at the decode and verify widths.
    for (TensorType type : kTensorTypes)
        for (int T : {1, 4, 8}) check_case({type, 4096, 4096, T, 1, {}, true, cuda::MatvecPath::Tensor});
}

TEST(CudaMatvec, SimplePathMatchesCpuForEveryType) {
    REQUIRE_DEVICE();
    for (TensorType type : kAllTypes)
        for (auto [rows, cols] : {std::pair<int64_t, int64_t>{5, 64}, {37, 416}})
            for (int T : {1, 3, 8}) check_case({type, rows, cols, T, 1, {}, true, cuda::MatvecPath::Simple});
    // Plain types need no 32-column blocks: odd column counts (Auto takes the simple path).
    for (TensorType type : {TensorType::F32, TensorType::F16, TensorType::BF16})
        for (int T : {1, 4}) check_case({type, 19, 45, T, 1, {}, true, cuda::MatvecPath::Auto});
    // Auto for F32, MXFP4 and Q2_K (its int8 kernel) at a model-like width.
    for (TensorType type : {TensorType::F32, TensorType::MXFP4, TensorType::Q2_K})
        check_case({type, 300, 2048, 2, 1, {}, true, cuda::MatvecPath::Auto});
    // Q2_K rows are whole 256-value super-blocks.
    for (auto [rows, cols] : {std::pair<int64_t, int64_t>{5, 256}, {37, 768}})
        for (int T : {1, 3, 8}) check_case({TensorType::Q2_K, rows, cols, T, 1, {}, true, cuda::MatvecPath::Simple});
}

TEST(CudaMatvec, DedicatedKernelsMatchCpu) {
    REQUIRE_DEVICE();
    // Q2_K on the int8 kernel (matvec_int8.cu), every T: one super-block, an odd number of them,
    // model widths; rows that leave partial 16-row tiles and few-row matrices (the warps of a
    // tile then split its groups); inputs aligned (pad 0) and not (pad 3).
    for (auto [rows, cols] : {std::pair<int64_t, int64_t>{5, 256}, {37, 768}, {37, 2048}, {300, 4096}, {70, 8192},
                              {5, 16384}})
        for (int T : {1, 2, 3, 5, 8})
            for (int64_t pad : {int64_t(0), int64_t(3)}) {
                Case c{TensorType::Q2_K, rows, cols, T, 1, {}, true, cuda::MatvecPath::Auto};
                c.pad = pad;
                check_case(c);
            }
    // Expert stacks with shared and own inputs and an invalid id (its outputs NaN).
    for (bool shared : {true, false})
        for (int T : {1, 4, 8}) {
            Case c{TensorType::Q2_K, 96, 4096, T, 9, {4, 0, 8, -1, 4, 2}, shared, cuda::MatvecPath::Auto};
            check_case(c);
            c.cols = 2048;
            check_case(c);
        }
    // F32 (the router's type) with aligned rows and inputs, and without.
    for (int T : {1, 3, 8})
        for (int64_t pad : {int64_t(0), int64_t(3)}) {
            Case c{TensorType::F32, 256, 4096, T, 1, {}, true, cuda::MatvecPath::Auto};
            c.pad = pad;
            check_case(c);
            c.cols = 4100;  // a tail of one float4 per lane fewer than the unrolled loop takes
            check_case(c);
        }
}

TEST(CudaMatvec, FewTilesSplitColumnsToFillTheDevice) {
    REQUIRE_DEVICE();
    // Decode shapes with fewer 32-row tiles than multiprocessors ([512, 4096] is 16 tiles): the
    // columns are split over blocks and the partial sums added in split order.
    for (auto [rows, cols] : {std::pair<int64_t, int64_t>{512, 4096}, {1024, 4096}, {8, 2048}, {64, 1056}})
        for (int T : {1, 2, 8}) check_case({TensorType::Q8_0, rows, cols, T, 1, {}, true, cuda::MatvecPath::Auto});
    check_case({TensorType::Q8_0, 64, 4096, 1, 16, {11, 2, 7, 15, 0, 8}, false, cuda::MatvecPath::Auto});
}

TEST(CudaMatvec, SplitColumnsAddUp) {
    REQUIRE_DEVICE();
    // A small x budget forces the column range to be split over blocks whose partial sums are
    // added in split order: in global memory (more splits than a cluster holds) or through the
    // cluster's shared memory. Q8_0 splits are whole chunks of 8 blocks (its device layout), so
    // its budgets are larger: at T = 8, 9000 bytes make 9 splits of 8 blocks, 18000 make 5 of 16;
    // its T = 1 runs the int8 kernel, which has no x budget.
    for (TensorType type : kTensorTypes)
        for (int T : {1, 8})
            for (size_t limit : type == TensorType::Q8_0 ? std::vector<size_t>{9000, 18000} : std::vector<size_t>{2048, 9000})
                check_case({type, 70, 2080, T, 1, {}, true, cuda::MatvecPath::Tensor, limit});
}

TEST(CudaMatvec, ExpertStacks) {
    REQUIRE_DEVICE();
    // Q8_0 [33, 96] experts are 3366 bytes, so expert starts are not 16-byte aligned.
    for (TensorType type : kTensorTypes) {
        for (bool shared : {true, false}) {
            for (int T : {1, 4}) {
                Case c{type, 33, 96, T, 5, {3, 0, 3, 4}, shared, cuda::MatvecPath::Tensor};
                check_case(c);
                c.path = cuda::MatvecPath::Simple;
                check_case(c);
            }
        }
        // Without ids, problem p uses matrix p.
        check_case({type, 64, 256, 2, 3, {}, false, cuda::MatvecPath::Tensor});
        // A decode-like MoE shape: 6 of 16 experts [256, 1024], split columns too.
        check_case({type, 256, 1024, 1, 16, {11, 2, 7, 15, 0, 8}, true, cuda::MatvecPath::Tensor});
        // Q8_0 splits are whole chunks of 8 blocks, so its x budget must hold one (at T = 8 9000
        // bytes make 4 splits; 5000 bytes make 8 splits of the 16-bit types).
        check_case({type, 256, 1024, 8, 16, {11, 2, 7, 15, 0, 8}, false, cuda::MatvecPath::Tensor,
                    type == TensorType::Q8_0 ? size_t(9000) : size_t(5000)});
    }
}

TEST(CudaMatvec, InvalidExpertIdGivesNaNForThatProblemOnly) {
    REQUIRE_DEVICE();
    for (auto path : {cuda::MatvecPath::Tensor, cuda::MatvecPath::Simple})
        check_case({TensorType::Q8_0, 40, 128, 2, 4, {1, 4, -1, 2}, true, path});
}

TEST(CudaMatvec, TensorPathIsDeterministic) {
    REQUIRE_DEVICE();
    // Every output is summed in a fixed order, split columns included (their partial sums are
    // added in split order): two runs on the same inputs agree bit for bit (a race would show up
    // as a difference). [1000, 2048] at T = 8 is one split per tile; [100, 2048] at T = 1 has 4
    // tiles, so its columns are split to fill the device.
    for (auto [rows, T] : {std::pair<int64_t, int>{1000, 8}, {100, 1}}) {
        SCOPED_TRACE("rows " + std::to_string(rows) + " T " + std::to_string(T));
        HostStack w = make_weights(TensorType::Q8_0, rows, 2048, 1);
        std::vector<float> x = make_x(1, T, 2048, 2048);
        cuda::DeviceWeight dw = cuda::upload(w.stack.first);
        const size_t ny = size_t(T) * size_t(rows);
        cuda::DeviceBuffer dx(x.size() * 4), dy(ny * 4);
        dx.upload(x.data(), x.size() * 4);
        cuda::MatvecArgs a;
        a.x = dx.as<const float>();
        a.ldx = 2048;
        a.T = T;
        a.y = dy.as<float>();
        a.ldy = rows;
        ASSERT_TRUE(cuda::tensor_path_supported(dw.mat));  // Auto takes the tensor path for Q8_0
        const size_t wsb = cuda::matvec_workspace_bytes(dw.mat, a);
        cuda::DeviceBuffer ws(wsb);
        std::vector<float> y1(ny), y2(ny);
        for (auto* out : {&y1, &y2}) {
            dy.fill_bytes(0xff);
            cuda::matvec(dw.mat, a, ws.get(), wsb);
            cuda::synchronize();
            dy.download(out->data(), ny * 4);
        }
        EXPECT_EQ(std::memcmp(y1.data(), y2.data(), ny * 4), 0);
        for (float v : y1) ASSERT_TRUE(std::isfinite(v));
    }
}

// x packed once (q8_0_pack_x) for several Q8_0 matrices that read it: bitwise what each
// matvec's own pack gives, at T = 1 and 4 with a padded row stride; a packed x made from another
// input or shape is refused, naming it.
TEST(CudaMatvec, PackedXOnceEqualsEachOwnPack) {
    REQUIRE_DEVICE();
    const int64_t cols = 4096, ldx = cols + 32;
    for (int T : {1, 4}) {
        SCOPED_TRACE("T " + std::to_string(T));
        std::vector<float> x = make_x(1, T, cols, ldx);
        cuda::DeviceBuffer dx(x.size() * 4);
        dx.upload(x.data(), x.size() * 4);
        cuda::DeviceBuffer packed(cuda::q8_0_packed_x_bytes(cols, T));
        const cuda::PackedX px = cuda::q8_0_pack_x(dx.as<const float>(), ldx, cols, T, packed.get(), nullptr);
        for (int64_t rows : {512, 1000}) {
            HostStack w = make_weights(TensorType::Q8_0, rows, cols, 1);
            cuda::DeviceWeight dw = cuda::upload(w.stack.first);
            const size_t ny = size_t(T) * size_t(rows);
            cuda::DeviceBuffer dy(ny * 4);
            cuda::MatvecArgs a;
            a.x = dx.as<const float>();
            a.ldx = ldx;
            a.T = T;
            a.y = dy.as<float>();
            a.ldy = rows;
            std::vector<float> own(ny), shared(ny);
            const size_t wsb = cuda::matvec_workspace_bytes(dw.mat, a);
            ASSERT_GT(wsb, 0u);
            cuda::DeviceBuffer ws(wsb);
            dy.fill_bytes(0xff);
            cuda::matvec(dw.mat, a, ws.get(), wsb);
            cuda::synchronize();
            dy.download(own.data(), ny * 4);
            a.packed = px;
            EXPECT_EQ(cuda::matvec_workspace_bytes(dw.mat, a), 0u);
            dy.fill_bytes(0xff);
            cuda::matvec(dw.mat, a, nullptr, 0);
            cuda::synchronize();
            dy.download(shared.data(), ny * 4);
            EXPECT_EQ(std::memcmp(own.data(), shared.data(), ny * 4), 0) << "rows " << rows;
            for (float v : shared) ASSERT_TRUE(std::isfinite(v));
            a.x = dx.as<const float>() + 32;  // another input than the one packed
            try {
                cuda::matvec(dw.mat, a, nullptr, 0);
                ADD_FAILURE() << "a packed x of another input was taken";
            } catch (const dsv4::Error& e) {
                EXPECT_NE(std::string(e.what()).find("packed x"), std::string::npos) << e.what();
            }
        }
    }
}

// Argument checks happen on the host before any CUDA call, so these run without a device.
TEST(CudaMatvecArgs, RejectsBadArguments) {
    alignas(16) static uint8_t fake[64];
    cuda::DeviceMat w;
    w.type = TensorType::Q8_0;
    w.rows = 4;
    w.cols = 64;
    w.row_bytes = 80;  // the device layout: 16 bytes of scales, 2 x 32 quants
    w.data = fake;
    float xy[8];
    cuda::MatvecArgs a;
    a.x = xy;
    a.y = xy;
    a.ldx = 64;
    a.ldy = 4;
    for (int T : {0, 9, -1}) {
        a.T = T;
        EXPECT_THROW(cuda::matvec_workspace_bytes(w, a), dsv4::Error) << "T = " << T;
    }
    a.T = 2;
    a.ldx = 10;
    EXPECT_THROW(cuda::matvec_workspace_bytes(w, a), dsv4::Error);  // ldx < cols
    a.ldx = 64;
    a.n = 2;  // two problems, one matrix, no ids
    a.y_stride = 8;
    EXPECT_THROW(cuda::matvec_workspace_bytes(w, a), dsv4::Error);
    a.n = 1;
    w.row_bytes = 68;  // GGUF's two blocks: shorter than the device row
    EXPECT_THROW(cuda::matvec_workspace_bytes(w, a), dsv4::Error);
    w.row_bytes = 80;
    w.cols = 50;  // not whole Q8_0 blocks
    EXPECT_THROW(cuda::matvec_workspace_bytes(w, a), dsv4::Error);
    w.cols = 64;
    w.type = TensorType::Q2_K;  // 64 values are not a whole 256-value Q2_K super-block
    w.row_bytes = 84;
    EXPECT_THROW(cuda::matvec_workspace_bytes(w, a), dsv4::Error);
    w.cols = 256;  // one super-block: the int8 kernel takes it, with its packed x as workspace
    a.ldx = 256;
    EXPECT_GT(cuda::matvec_workspace_bytes(w, a), 0u);
    EXPECT_EQ(cuda::matvec_workspace_bytes(w, a), cuda::int8_matvec_workspace_bytes(w, a));
    cuda::MatvecOptions tensor_path;
    tensor_path.path = cuda::MatvecPath::Tensor;  // the 16-bit / Q8_0 kernels: no Q2_K
    EXPECT_THROW(cuda::matvec_workspace_bytes(w, a, tensor_path), dsv4::Error);
    EXPECT_FALSE(cuda::tensor_path_supported(w));
    w.cols = 64;
    a.ldx = 64;
    w.type = TensorType::F32;   // no tensor path for F32: asking for it is an error
    w.row_bytes = 256;
    cuda::MatvecOptions opt;
    opt.path = cuda::MatvecPath::Tensor;
    EXPECT_THROW(cuda::matvec_workspace_bytes(w, a, opt), dsv4::Error);
    EXPECT_EQ(cuda::matvec_workspace_bytes(w, a), 0u);  // Auto: the simple path needs no workspace
    EXPECT_FALSE(cuda::tensor_path_supported(w));
    w.type = TensorType::Q8_0;
    w.row_bytes = 80;
    EXPECT_TRUE(cuda::tensor_path_supported(w));
    // The packed x: T = 2 tokens x one 128-column group x (512 bytes of limbs + 4 scales).
    EXPECT_EQ(cuda::matvec_workspace_bytes(w, a), 2u * (512 + 16));
    w.row_bytes = 88;  // rows not 16-byte multiples: no int8 tensor path
    EXPECT_FALSE(cuda::tensor_path_supported(w));
}

}  // namespace
