// The Q8_0 path of matvec (matvec.h): int8 tensor cores over the device layout of
// q8_0_device.h, x as int8 limbs packed by a first small launch into the workspace.
#pragma once
#include <cstddef>

#include "backend/cuda/matvec.h"

namespace dsv4::cuda {

// Q8_0 in the device layout (row_bytes = q8dev::row_bytes(cols)), a 16-byte aligned base.
bool q8_0_matvec_supported(const DeviceMat& w);

// The packed x: per input (n when x_stride != 0, else 1), token and 128-column group, 512 bytes
// of limbs and 4 float scales.
size_t q8_0_matvec_workspace_bytes(const DeviceMat& w, const MatvecArgs& a);

void q8_0_matvec(const DeviceMat& w, const MatvecArgs& a, void* ws, size_t ws_bytes, Stream stream);

}  // namespace dsv4::cuda
