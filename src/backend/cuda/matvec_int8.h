// The int8 tensor-core decode matvec (matvec.h): Q8_0 for T <= kQ8Int8MaxTokens over the device
// layout of q8_0_device.h, and Q2_K (GGUF layout) for every T up to kMaxMatvecTokens. x is split
// into int8 limbs by a first small launch into the workspace (or once, by q8_0_pack_x, for
// several matrices that read the same x). The Q8_0 kernel takes every T up to kMaxMatvecTokens
// (the tests run it there too), but above kQ8Int8MaxTokens matvec takes the 16-bit tensor kernel,
// which is faster there: the int8 one issues 8 MMAs per 128 columns whatever T is, and its x
// limbs grow with T.
#pragma once
#include <cstddef>

#include "backend/cuda/matvec.h"

namespace dsv4::cuda {

// The most tokens for which matvec takes this kernel: measured on an H100 (docs/CUDA.md), it is
// up to 2x faster than the 16-bit kernel at T = 1, about even at T = 4 and up to 1.8x slower at 8.
constexpr int kQ8Int8MaxTokens = 4;

// Q8_0 in the device layout (row_bytes = q8dev::row_bytes(cols)), a 16-byte aligned base.
bool q8_0_matvec_supported(const DeviceMat& w);
// Q2_K rows of whole super-blocks (cols % 256 == 0) at 4-byte aligned addresses.
bool q2_k_matvec_supported(const DeviceMat& w);

// The packed x: per input (n when x_stride != 0, else 1), token and 128-column group, 512 bytes
// of limbs and 4 float scales. 0 when a.packed holds x already (checked by the matvec).
size_t int8_matvec_workspace_bytes(const DeviceMat& w, const MatvecArgs& a);

void q8_0_matvec(const DeviceMat& w, const MatvecArgs& a, void* ws, size_t ws_bytes, Stream stream);
void q2_k_matvec(const DeviceMat& w, const MatvecArgs& a, void* ws, size_t ws_bytes, Stream stream);

// x [T, cols] (row stride ldx) packed once for several int8 matvecs with cols columns
// (MatvecArgs::packed): into out, q8_0_packed_x_bytes(cols, T) bytes, 16-byte aligned.
size_t q8_0_packed_x_bytes(int64_t cols, int T);
PackedX q8_0_pack_x(const float* x, int64_t ldx, int64_t cols, int T, void* out, Stream stream);

}  // namespace dsv4::cuda
