// y = x · Wᵀ for any number of tokens (see gemm.h): T <= 8 goes to matvec, T >= 16 on supported
// weights to the tensor kernel (gemm_tc.cu), the rest (and the oracle) to the tiled float32 kernel
// below.
//
// Tiled kernel: one block of 256 threads computes a tile of kTM = 64 tokens x kTN = 128 output
// rows, walking the columns in steps of kTK = 32 (one Q8_0/MXFP4 block, an eighth of a Q2_K
// super-block, so every format decodes whole pieces of a step):
//   * Each thread fetches 16 consecutive weights of one row (thread t: row t/2, half t%2) in their
//     stored format into registers (raw bytes, no arithmetic), and 8 x values (lane = column,
//     warp w tokens w, w+8, ...), for step s+1 while the block multiplies step s; after a
//     barrier it decodes the weights to float (the CPU reference's arithmetic) and stores both
//     into shared memory: ws[row][k], xs[token][k], rows padded to 36 floats.
//   * Thread (tm, tn) = (t/16, t%16) accumulates tokens tm + 16i (i < 4) x rows tn + 16j (j < 8)
//     in 32 float32 registers; per 4 columns it reads 4 float4 of x (two addresses per warp:
//     broadcasts) and 8 float4 of w (a quarter-warp reads 8 consecutive rows, 36 floats apart, so
//     bank groups 4 apart: no conflicts). The decoded stores are conflict-free too (a quarter
//     warp writes rows r..r+3, halves 0/1, at bank offsets 0, 4, ..., 28).
//   * Columns past cols (plain types with cols % 32 != 0), tokens past the tile's count and rows
//     past w.rows are zero in shared memory, and only valid outputs are written.
// gemm_experts runs the same body with blockIdx.z = expert: the block's tokens are rows
// offsets[e] + 64 * blockIdx.x .. of x, and blocks past the expert's row count return at once.
#include "backend/cuda/gemm.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "backend/cuda/common.cuh"
#include "backend/cuda/gemm_tc.cuh"
#include "backend/cuda/matvec.h"

namespace dsv4::cuda {

namespace {

using gemm_detail::WChunk;

constexpr int kTM = 64, kTN = 128, kTK = 32, kThreads = 256, kLd = kTK + 4;
static_assert(kThreads == 2 * kTN, "one thread per 16-weight half row of a step");
static_assert(kTM % (kThreads / 32) == 0, "x tile rows per warp");

struct GemmParams {
    const uint8_t* w;     // matrix 0
    size_t row_bytes, matrix_bytes;
    int64_t rows, cols;
    const float* x;
    int64_t ldx;
    float* y;
    int64_t ldy;
    int64_t T;                 // gemm: tokens
    const int32_t* offsets;    // gemm_experts: [count + 1]
    int vec;                   // plain-type rows are 16-byte aligned (vector loads)
};

template <int TYPE, bool EXPERTS>
__global__ void __launch_bounds__(kThreads, 2) gemm_kernel(const GemmParams p) {
    grid_begin();
    __shared__ __align__(16) float xs[kTM * kLd];
    __shared__ __align__(16) float ws[kTN * kLd];

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;

    // The block's tokens: [m0, m0 + ntok) of x / y, and its weight matrix.
    int64_t m0, ntok;
    const uint8_t* wmat = p.w;
    if constexpr (EXPERTS) {
        const int e = int(blockIdx.z);
        const int64_t begin = p.offsets[e], end = p.offsets[e + 1];
        m0 = begin + int64_t(blockIdx.x) * kTM;
        if (m0 >= end) return;  // the whole block: no barrier has been reached yet
        ntok = min(int64_t(kTM), end - m0);
        wmat += size_t(e) * p.matrix_bytes;
    } else {
        m0 = int64_t(blockIdx.x) * kTM;
        ntok = min(int64_t(kTM), p.T - m0);
    }
    const int64_t n0 = int64_t(blockIdx.y) * kTN;
    const float* xb = p.x + m0 * p.ldx;
    const bool vec = p.vec != 0;

    // Loader roles: weights of row n0 + lr, columns 16 * lh .. + 15 of the step; x column lane
    // for tokens warp + 8 * i.
    const int lr = tid >> 1, lh = tid & 1;
    const uint8_t* wrow = n0 + lr < p.rows ? wmat + size_t(n0 + lr) * p.row_bytes : nullptr;
    constexpr int kXPer = kTM / (kThreads / 32);

    WChunk<TYPE> wc;
    float xr[kXPer];
    auto fetch = [&](int64_t kt) {
        wc.fetch(wrow, kt + 16 * lh, p.cols, vec);
        const int64_t k = kt + lane;
#pragma unroll
        for (int i = 0; i < kXPer; ++i) {
            const int m = warp + 8 * i;
            xr[i] = m < ntok && k < p.cols ? __ldg(xb + int64_t(m) * p.ldx + k) : 0.0f;
        }
    };
    auto store = [&]() {
        float o[16];
        wc.decode(o);
        float4* dst = reinterpret_cast<float4*>(ws + lr * kLd + 16 * lh);
#pragma unroll
        for (int q = 0; q < 4; ++q) dst[q] = make_float4(o[4 * q], o[4 * q + 1], o[4 * q + 2], o[4 * q + 3]);
#pragma unroll
        for (int i = 0; i < kXPer; ++i) xs[(warp + 8 * i) * kLd + lane] = xr[i];
    };

    const int tm = tid >> 4, tn = tid & 15;
    float acc[4][8];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[i][j] = 0.0f;

    fetch(0);
    for (int64_t kt = 0; kt < p.cols; kt += kTK) {
        store();
        __syncthreads();
        if (kt + kTK < p.cols) fetch(kt + kTK);  // in flight while this step is multiplied
#pragma unroll
        for (int kk = 0; kk < kTK; kk += 4) {
            float4 xv[4];
#pragma unroll
            for (int i = 0; i < 4; ++i) xv[i] = *reinterpret_cast<const float4*>(xs + (tm + 16 * i) * kLd + kk);
#pragma unroll
            for (int j = 0; j < 8; ++j) {
                const float4 wv = *reinterpret_cast<const float4*>(ws + (tn + 16 * j) * kLd + kk);
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    acc[i][j] = fmaf(xv[i].x, wv.x, acc[i][j]);
                    acc[i][j] = fmaf(xv[i].y, wv.y, acc[i][j]);
                    acc[i][j] = fmaf(xv[i].z, wv.z, acc[i][j]);
                    acc[i][j] = fmaf(xv[i].w, wv.w, acc[i][j]);
                }
            }
        }
        __syncthreads();  // every thread is done with this step's tiles before they are replaced
    }

    float* yb = p.y + m0 * p.ldy;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const int m = tm + 16 * i;
        if (m >= ntok) continue;
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            const int64_t n = n0 + tn + 16 * j;
            if (n < p.rows) yb[int64_t(m) * p.ldy + n] = acc[i][j];
        }
    }
}

// ---- host side ----

bool tiled_type(int t) { return t == kF32 || t == kF16 || t == kBF16 || t == kQ8_0 || t == kMXFP4 || t == kQ2_K; }

// The weight checks both entry points share.
void check_weight(const DeviceMat& w, const char* who) {
    if (!w.data) fail(who, ": the weight has no device data");
    if (w.rows < 1 || w.cols < 1 || w.count < 1) fail(who, ": weight shape [", w.rows, ", ", w.cols, "] x ", w.count);
    const int t = int(w.type);
    if (!tiled_type(t)) fail(who, ": unsupported weight type ", gguf::type_name(w.type));
    const int64_t be = gguf::type_block_elems(w.type);
    if (w.cols % be != 0)
        fail(who, ": ", gguf::type_name(w.type), " rows of ", w.cols, " values are not whole blocks of ", be);
    const size_t need = device_row_bytes(w.type, w.cols);
    if (w.row_bytes < need)
        fail(who, ": row_bytes ", w.row_bytes, " < ", need, " for ", w.cols, " ", gguf::type_name(w.type), " values");
    // The kernels read F32 and Q2_K (d, dmin, quants) as 4-byte words, F16/BF16 as 2-byte ones and
    // Q8_0's quants (the device layout) as 16-byte ones.
    const size_t align = t == kQ8_0 ? 16 : (t == kF32 || t == kQ2_K) ? 4 : t == kMXFP4 ? 1 : 2;
    if (w.row_bytes % align != 0 || reinterpret_cast<uintptr_t>(w.data) % align != 0)
        fail(who, ": ", gguf::type_name(w.type), " rows of ", w.row_bytes, " bytes at ",
             static_cast<const void*>(w.data), " are not ", align, "-byte aligned");
}

GemmParams make_params(const DeviceMat& w, const float* x, int64_t ldx, float* y, int64_t ldy) {
    GemmParams p{};
    p.w = w.data;
    p.row_bytes = w.row_bytes;
    p.matrix_bytes = w.matrix_bytes();
    p.rows = w.rows;
    p.cols = w.cols;
    p.x = x;
    p.ldx = ldx;
    p.y = y;
    p.ldy = ldy;
    p.vec = w.row_bytes % 16 == 0 && (reinterpret_cast<uintptr_t>(w.data) & 15) == 0;
    return p;
}

template <bool EXPERTS>
void launch(const DeviceMat& w, const GemmParams& p, dim3 grid, cudaStream_t stream) {
    dispatch_wtype(int(w.type),
                   [&]<int TYPE>() { cuda::launch(gemm_kernel<TYPE, EXPERTS>, grid, kThreads, 0, stream, p); });
    DSV4_LAUNCH_CHECK();
}

// x limbs of the tensor GEMM: two (float32-grade) or one (DSV4_GEMM_PRECISION=f16).
int limbs_of(const GemmOptions& opt) { return gemm_precision(opt) == GemmPrecision::F16 ? 1 : 2; }

// The path for this weight and token count (T: tokens, or max_rows for experts).
// opt.path Tensor throws on a weight the tensor kernel does not take; DSV4_GEMM_PATH=tensor
// falls back to the float32 kernel there (so that a whole forward still runs under it).
GemmPath choose(const DeviceMat& w, int64_t T, GemmOptions opt, const char* who) {
    const bool ok = gemm_detail::tc_supported(w);
    if (opt.path == GemmPath::Tensor) {
        if (!ok)
            fail(who, ": the tensor path takes Q8_0/F16/BF16/Q2_K weights with cols % 32 == 0, not ",
                 gguf::type_name(w.type), " with cols ", w.cols);
        return GemmPath::Tensor;
    }
    if (opt.path == GemmPath::Simt) return GemmPath::Simt;
    const GemmPath e = gemm_env_path();
    if (e == GemmPath::Simt) return GemmPath::Simt;
    if (e == GemmPath::Tensor) return ok ? GemmPath::Tensor : GemmPath::Simt;
    return T >= kMinTensorTokens && ok ? GemmPath::Tensor : GemmPath::Simt;
}

}  // namespace

DeviceMat slice_rows(const DeviceMat& w, int64_t r0, int64_t r1) {
    if (w.count != 1) fail("CUDA slice_rows: the weight is a stack of ", w.count, " matrices, not one");
    if (r0 < 0 || r1 <= r0 || r1 > w.rows)
        fail("CUDA slice_rows: rows [", r0, ", ", r1, ") of a matrix of ", w.rows, " rows");
    DeviceMat s = w;
    s.rows = r1 - r0;
    s.data = w.data ? w.data + size_t(r0) * w.row_bytes : nullptr;
    return s;
}

bool gemm_tensor_supported(const DeviceMat& w) { return gemm_detail::tc_supported(w); }

GemmPrecision gemm_env_precision() {
    static const GemmPrecision p = [] {
        const char* v = std::getenv("DSV4_GEMM_PRECISION");
        if (!v || !*v || std::strcmp(v, "f32") == 0) return GemmPrecision::F32;
        if (std::strcmp(v, "f16") == 0) return GemmPrecision::F16;
        fail("DSV4_GEMM_PRECISION=", v, ": expected f32 (float32-grade, the default) or f16");
    }();
    return p;
}

GemmPrecision gemm_precision(const GemmOptions& opt) {
    return opt.precision == GemmPrecision::Auto ? gemm_env_precision() : opt.precision;
}

// DSV4_GEMM_PATH, read once: "simt" or "tensor" force that path, anything else (or unset) is Auto.
GemmPath gemm_env_path() {
    static const GemmPath p = [] {
        const char* v = std::getenv("DSV4_GEMM_PATH");
        if (v && std::strcmp(v, "simt") == 0) return GemmPath::Simt;
        if (v && std::strcmp(v, "tensor") == 0) return GemmPath::Tensor;
        return GemmPath::Auto;
    }();
    return p;
}

void* GemmWorkspace::get(size_t bytes) {
    if (bytes > buf_.size()) {
        // Work queued earlier may still read the old buffer: wait for it before freeing.
        DSV4_CUDA_CHECK(cudaDeviceSynchronize());
        buf_ = DeviceBuffer();
        buf_ = DeviceBuffer((bytes + 255) / 256 * 256);
    }
    return buf_.get();
}

void gemm(const DeviceMat& w, const float* x, int64_t ldx, int64_t T, float* y, int64_t ldy, GemmWorkspace& ws,
          Stream stream) {
    gemm(w, x, ldx, T, y, ldy, ws, stream, GemmOptions{});
}

void gemm(const DeviceMat& w, const float* x, int64_t ldx, int64_t T, float* y, int64_t ldy, GemmWorkspace& ws,
          Stream stream, GemmOptions opt) {
    if (T < 0) fail("CUDA gemm: T = ", T, " tokens");
    if (T == 0) return;
    check_weight(w, "CUDA gemm");
    if (w.count != 1) fail("CUDA gemm: the weight is a stack of ", w.count, " matrices (gemm_experts takes stacks)");
    if (!x || !y) fail("CUDA gemm: null x or y");
    if (T > 1 && ldx < w.cols) fail("CUDA gemm: ldx ", ldx, " < cols ", w.cols);
    if (T > 1 && ldy < w.rows) fail("CUDA gemm: ldy ", ldy, " < rows ", w.rows);

    if (T <= kMaxMatvecTokens && opt.path == GemmPath::Auto) {  // GemmOptions force a path for every T
        MatvecArgs a;
        a.x = x;
        a.ldx = ldx;
        a.T = int(T);
        a.y = y;
        a.ldy = ldy;
        a.n = 1;
        a.packed = opt.packed;
        const size_t bytes = matvec_workspace_bytes(w, a);
        void* buf = bytes ? ws.get(bytes) : nullptr;
        matvec(w, a, buf, bytes, stream);
        return;
    }

    if (choose(w, T, opt, "CUDA gemm") == GemmPath::Tensor) {
        const size_t bytes = gemm_detail::tc_workspace_bytes(w, T);
        gemm_detail::tc_gemm(w, x, T > 1 ? ldx : w.cols, T, y, T > 1 ? ldy : w.rows, ws.get(bytes), bytes, limbs_of(opt), stream);
        return;
    }

    const int64_t row_tiles = (w.rows + kTN - 1) / kTN, tok_tiles = (T + kTM - 1) / kTM;
    if (row_tiles > 65535) fail("CUDA gemm: ", w.rows, " rows make ", row_tiles, " row tiles (at most 65535)");
    if (tok_tiles > 0x7fffffff) fail("CUDA gemm: T = ", T, " tokens");
    GemmParams p = make_params(w, x, ldx, y, ldy);
    p.T = T;
    launch<false>(w, p, dim3(unsigned(tok_tiles), unsigned(row_tiles), 1), stream);
}

void gemm_experts(const DeviceMat& w, const float* x, const int32_t* offsets, int64_t max_rows, float* y,
                  Stream stream) {
    if (max_rows < 0) fail("CUDA gemm_experts: max_rows = ", max_rows);
    check_weight(w, "CUDA gemm_experts");
    if (!x || !y || !offsets) fail("CUDA gemm_experts: null x, y or offsets");
    if (max_rows == 0) return;
    const int64_t row_tiles = (w.rows + kTN - 1) / kTN, tok_tiles = (max_rows + kTM - 1) / kTM;
    if (row_tiles > 65535) fail("CUDA gemm_experts: ", w.rows, " rows make ", row_tiles, " row tiles (at most 65535)");
    if (w.count > 65535) fail("CUDA gemm_experts: ", w.count, " experts (at most 65535)");
    if (tok_tiles > 0x7fffffff) fail("CUDA gemm_experts: max_rows = ", max_rows);
    GemmParams p = make_params(w, x, w.cols, y, w.rows);
    p.offsets = offsets;
    launch<true>(w, p, dim3(unsigned(tok_tiles), unsigned(row_tiles), unsigned(w.count)), stream);
}

void gemm_experts(const DeviceMat& w, const float* x, const int32_t* offsets, int64_t max_rows, int64_t n_rows,
                  float* y, GemmWorkspace& ws, Stream stream, GemmOptions opt) {
    if (max_rows < 0) fail("CUDA gemm_experts: max_rows = ", max_rows);
    if (n_rows < 0) fail("CUDA gemm_experts: n_rows = ", n_rows);
    check_weight(w, "CUDA gemm_experts");
    if (!x || !y || !offsets) fail("CUDA gemm_experts: null x, y or offsets");
    if (max_rows == 0 || n_rows == 0) return;
    if (choose(w, max_rows, opt, "CUDA gemm_experts") == GemmPath::Tensor) {
        const size_t bytes = gemm_detail::tc_workspace_bytes(w, n_rows);
        gemm_detail::tc_gemm_experts(w, x, offsets, max_rows, n_rows, y, ws.get(bytes), bytes, limbs_of(opt), stream);
        return;
    }
    gemm_experts(w, x, offsets, max_rows, y, stream);
}

}  // namespace dsv4::cuda
