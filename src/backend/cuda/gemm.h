// Dense projections on the device for any number of tokens: y = x · Wᵀ over a weight in its
// stored format (dequantised inside the kernels, never expanded into a float copy in memory),
// and the grouped form for routed experts (token rows grouped by expert, one weight matrix each).
//
// T <= kMaxMatvecTokens goes to matvec (the decode weight stream); larger T to a tiled kernel
// that stages dequantised weight tiles and activation tiles in shared memory and accumulates in
// float32 (the CPU reference's precision: every product and sum in float32).
#pragma once
#include <cstdint>

#include "backend/cuda/device_memory.h"

namespace dsv4::cuda {

// A view of rows [r0, r1) of w (the grouped output projection multiplies each head group by its
// own rows of o_a).
DeviceMat slice_rows(const DeviceMat& w, int64_t r0, int64_t r1);

// Device scratch that gemm may need (matvec's packed x); grows on demand, kept between calls.
class GemmWorkspace {
public:
    void* get(size_t bytes);  // at least `bytes`, 256-byte aligned; reallocates (synchronising) when too small
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

// Routed experts: rows of x are grouped by expert; expert e owns rows offsets[e] .. offsets[e+1]
// (offsets: [w.count + 1] ints on the device, non-decreasing, offsets[0] = 0). For those rows
// y[row, :] = x[row, :] · W_eᵀ with W_e matrix e of the stack. max_rows bounds any one expert's
// row count (the grid is sized from it; the caller knows it without reading offsets back: a
// token picks an expert at most once, so T tokens give at most T rows per expert).
// x: [N, w.cols] contiguous, y: [N, w.rows] contiguous; rows of x past offsets[w.count] belong to
// no expert and their y rows are not written. Same weight types as gemm; float32 on the tiled
// kernel for every expert (no matvec path).
void gemm_experts(const DeviceMat& w, const float* x, const int32_t* offsets, int64_t max_rows, float* y,
                  Stream stream = nullptr);

}  // namespace dsv4::cuda
