// Dense projections on the device for any number of tokens: y = x · Wᵀ over a weight in its
// stored format (dequantised inside the kernels, never expanded into a float copy in memory),
// and the grouped form for routed experts (token rows grouped by expert, one weight matrix each).
//
// Paths (GemmPath::Auto):
//   * T <= kMaxMatvecTokens: matvec (the decode weight stream);
//   * T >= kMinTensorTokens and Q8_0 (cols % 32 == 0) or Q2_K (cols % 256 == 0) weights (F16 and
//     BF16 forms exist but are off, gemm_tc.cu): the tensor path (gemm_tc.cu): x packed once per
//     call into two 16-bit limbs (x = hi + lo; f16 limbs with a per-token power-of-two scale for
//     Q8_0/F16/Q2_K, bf16 limbs for BF16), weights dequantised inside the kernel (Q2_K as two f16
//     limbs of the decoded weight with a power-of-two scale per row and super-block), two
//     mma.sync per fragment (three for Q2_K) with float32 accumulation, the Q8_0 d and the Q2_K
//     2^-k applied to partial sums in float32: float32-grade results (about 22 bits of x with f16
//     limbs, 16 with bf16 limbs), deterministic;
//   * everything else: the float32 tiled kernel (CUDA cores: every product and sum in float32,
//     the CPU reference's precision), which is also the tensor path's oracle.
// The environment variable DSV4_GEMM_PATH=simt|tensor (read once) forces that kernel for T > 8
// (tensor only where it takes the weight; matvec keeps T <= 8); GemmOptions::path forces a kernel
// per call for every T (tests compare both; Tensor on a weight it does not take throws).
//
// Precision of the tensor path: DSV4_GEMM_PRECISION (read once) = f32 (the default: two limbs,
// float32-grade as above) or f16: one f16 limb of x (the same per-token power-of-two scale, 11
// significant bits) and of the Q2_K weights (w 2^k rounded to f16), Q8_0 codes exact, one MMA per
// fragment (three times fewer for Q2_K, half for Q8_0): each product within about 2^-11 |x||w|
// (2 x 2^-11 for Q2_K), so |error| <= 2^-10 sum |x||w| plus float32 accumulation; the cuBLAS
// fp16 grade, finer than bf16. The matvec (T <= 8) and float32 kernels do not change.
// GemmOptions::precision sets it per call (tests, benchmarks).
#pragma once
#include <cstdint>

#include "backend/cuda/device_memory.h"
#include "backend/cuda/matvec.h"

namespace dsv4::cuda {

// A view of rows [r0, r1) of w (the grouped output projection multiplies each head group by its
// own rows of o_a).
DeviceMat slice_rows(const DeviceMat& w, int64_t r0, int64_t r1);

// Device scratch that gemm may need (matvec's packed x); grows on demand, kept between calls.
constexpr int kMinTensorTokens = 16;

enum class GemmPath { Auto, Simt, Tensor };
enum class GemmPrecision { Auto, F32, F16 };  // Auto: what DSV4_GEMM_PRECISION says

// Internal options (tests, benchmarks). path: Auto as above (or what DSV4_GEMM_PATH says); Simt:
// the float32 tiled kernel for every T (matvec included); Tensor: the tensor kernel for every T
// (throws on a weight it does not take).
struct GemmOptions {
    GemmPath path = GemmPath::Auto;
    GemmPrecision precision = GemmPrecision::Auto;
    PackedX packed;  // x's int8 limbs, for a matvec-sized Q8_0 product (matvec.h)
};

// What DSV4_GEMM_PRECISION asks for (F32 or F16), read once; throws naming a value other than
// f32 or f16 (the backend calls it when it starts, so a typo stops the run before it measures).
GemmPrecision gemm_env_precision();
// The precision a call with these options runs at: opt.precision, or the environment's for Auto.
GemmPrecision gemm_precision(const GemmOptions& opt);
// What DSV4_GEMM_PATH makes of GemmPath::Auto (Simt, Tensor, or Auto for anything else), read once.
GemmPath gemm_env_path();

// Whether the tensor path takes this weight (Q8_0 with cols % 32 == 0, Q2_K with cols % 256 == 0).
bool gemm_tensor_supported(const DeviceMat& w);

class GemmWorkspace {
public:
    void* get(size_t bytes);  // at least `bytes`, 256-byte aligned; reallocates (synchronising) when too small
    const void* data() const { return buf_.get(); }  // the current buffer (changes when get() reallocates)
private:
    DeviceBuffer buf_;
};

// y[t * ldy + r] = sum_i x[t * ldx + i] * W[r, i] for t < T, r < w.rows (w.count must be 1).
// ldx >= w.cols, ldy >= w.rows. W: F32, F16, BF16, Q8_0, MXFP4 or Q2_K, rows of whole blocks
// (cols a multiple of 32 for Q8_0/MXFP4, of 256 for Q2_K). Only the T x w.rows outputs are
// written (padding between output rows is left alone); T = 0 does nothing. Asynchronous on the
// stream. Throws naming the value on bad arguments (T < 0, strides, unsupported type or shape).
void gemm(const DeviceMat& w, const float* x, int64_t ldx, int64_t T, float* y, int64_t ldy, GemmWorkspace& ws,
          Stream stream = nullptr);
void gemm(const DeviceMat& w, const float* x, int64_t ldx, int64_t T, float* y, int64_t ldy, GemmWorkspace& ws,
          Stream stream, GemmOptions opt);

// Routed experts: rows of x are grouped by expert; expert e owns rows offsets[e] .. offsets[e+1]
// (offsets: [w.count + 1] ints on the device, non-decreasing, offsets[0] = 0). For those rows
// y[row, :] = x[row, :] · W_eᵀ with W_e matrix e of the stack. max_rows bounds any one expert's
// row count (the grid is sized from it; the caller knows it without reading offsets back: a
// token picks an expert at most once, so T tokens give at most T rows per expert).
// x: [N, w.cols] contiguous, y: [N, w.rows] contiguous; rows of x past offsets[w.count] belong to
// no expert and their y rows are not written. Same weight types as gemm; no matvec path.
// This form has no workspace and does not know N, so it cannot pack x: it runs the float32 tiled
// kernel. The form below, given N (n_rows >= offsets[w.count]) and a workspace, takes the tensor
// path where gemm would (max_rows >= kMinTensorTokens, a supported weight), else the tiled kernel.
void gemm_experts(const DeviceMat& w, const float* x, const int32_t* offsets, int64_t max_rows, float* y,
                  Stream stream = nullptr);
void gemm_experts(const DeviceMat& w, const float* x, const int32_t* offsets, int64_t max_rows, int64_t n_rows,
                  float* y, GemmWorkspace& ws, Stream stream = nullptr, GemmOptions opt = {});

}  // namespace dsv4::cuda
