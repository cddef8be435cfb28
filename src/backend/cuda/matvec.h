// The decode-critical op: y[T, rows] = x[T, cols] · Wᵀ for T = 1..8 tokens (decode and
// speculative verification) over a weight in device memory in its stored format, dequantised
// inside the kernel; and the same for several matrices of an expert stack at once.
//
// Two implementations:
//   Tensor, Q8_0 at T <= kQ8Int8MaxTokens (4): int8 tensor cores over Q8_0's device layout
//     (matvec_int8.h, q8_0_device.h), x split into four int8 limbs per value (exact to 2^-22 of
//     its block's largest value), each block's exact int32 limb sums scaled in float32.
//   Tensor, 16-bit (F16, BF16, Q8_0 above 4 tokens; cols % 32 == 0): weights streamed once
//     through shared memory with 16-byte asynchronous copies and multiplied on the tensor cores (mma.sync m16n8k16, tokens
//     as the n = 8 side). Each block first converts its columns of x into two 16-bit limbs per
//     value, x = hi + lo, so the products keep about 22 (f16 limbs) or 16 (bf16 limbs) bits of
//     x: float32-grade results, not bf16-grade. Q8_0 and F16 weights are exact in f16, so their
//     x limbs are f16 with a power-of-two scale (no overflow, no precision lost); BF16 weights
//     use bf16 limbs. Q8_0's block scale multiplies each 32-column partial sum in float32, as
//     the CPU reference does. Column splits are added in a fixed order (deterministic).
//   Simple (every type, any whole blocks of cols): one warp per output row, float32 on the CUDA
//     cores, each value read through load_elem. The oracle for every other path, and the path
//     for MXFP4 weights.
//   Int8 tensor cores for Q2_K (matvec_int8.h), taken by Auto: the codes times their
//     sub-block scales as int8 against the same x limbs, and a second set of MMAs for the mins.
//   Dedicated CUDA-core kernels, taken by Auto (never by Simple): Q2_K at T = 1 with 2048, 4096,
//     8192 or 16384 columns and 16-byte aligned inputs (a lane keeps 64 inputs in registers across
//     rows and uses sum (a q - m) x = a sum q x - m sum x per sub-block; faster than the int8
//     kernel there), F32 with 16-byte aligned rows and inputs (the router).
// docs/PERFORMANCE.md has the design, the measured bandwidth and the receipts.
#pragma once
#include <cstddef>
#include <cstdint>

#include "backend/cuda/device_memory.h"

namespace dsv4::cuda {

constexpr int kMaxMatvecTokens = 8;

// x already split into the int8 kernel's limbs by q8_0_pack_x (matvec_int8.h): Q8_0 matrices
// that the int8 kernel takes and that read this same x then skip their own pack launch (the
// attention's input feeds up to seven of them). The x, ldx, cols and T it was made from are
// checked against each use.
struct PackedX {
    const void* data = nullptr;  // null: none
    const float* x = nullptr;
    int64_t ldx = 0, cols = 0;
    int T = 0;
};

// One call computes n problems. Problem p multiplies matrix ids[p] of w (ids null: matrix p)
// with its T input rows and writes its T output rows. All pointers are device pointers.
struct MatvecArgs {
    const float* x = nullptr;  // problem p, token t: x + p * x_stride + t * ldx  (cols floats)
    int64_t ldx = 0;
    int64_t x_stride = 0;      // floats between problems' inputs; 0: every problem reads the same x
    int T = 1;                 // tokens, 1..kMaxMatvecTokens
    float* y = nullptr;        // problem p, token t: y + p * y_stride + t * ldy  (rows floats)
    int64_t ldy = 0;
    int64_t y_stride = 0;
    int n = 1;
    const int32_t* ids = nullptr;  // [n] matrix index per problem, each in [0, w.count); an index
                                   // outside that range makes that problem's outputs NaN
    PackedX packed;                // used by the int8 Q8_0 kernel only (one input: x_stride 0)
};

enum class MatvecPath { Auto, Simple, Tensor };

struct MatvecOptions {
    MatvecPath path = MatvecPath::Auto;  // Auto: Tensor where supported, else Simple
    // Upper bound on the shared memory that holds the packed x of one block (0: all that fits).
    // When x does not fit, the columns are split over blocks whose partial sums are added in a
    // fixed order; tests lower this to exercise that path on small shapes.
    size_t x_smem_limit = 0;
};

// Whether the tensor path takes this weight (type Q8_0, F16 or BF16, cols a multiple of 32).
bool tensor_path_supported(const DeviceMat& w);

// Bytes of workspace matvec needs for these arguments: 0 except on the tensor path when the
// columns are split over more blocks than one cluster holds (x too wide for shared memory).
size_t matvec_workspace_bytes(const DeviceMat& w, const MatvecArgs& a, MatvecOptions opt = {});

// y = x · Wᵀ for every problem, asynchronously on the stream. Throws (naming the value) on bad
// arguments: T outside 1..8, a type or shape the chosen path does not take, a workspace too small.
void matvec(const DeviceMat& w, const MatvecArgs& a, void* workspace, size_t workspace_bytes, Stream stream = nullptr,
            MatvecOptions opt = {});

}  // namespace dsv4::cuda
