// Random weights and inputs generated on the device for the kernel microbenchmarks
// (bench/*.cu): a hash of (seed, index) per value, so a fill is reproducible and needs no host
// copy of gigabytes. Shapes of the values: what quantised N(0, 0.05) weights look like.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "backend/cuda/q8_0_device.h"

namespace bench {

__device__ __forceinline__ uint64_t mix64(uint64_t z) {
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

// Q8_0 weights in the CUDA backend's device layout (q8_0_device.h): `rows` rows of `cols`
// values, row_bytes(cols) apart; scales in [0.5e-3, 1.5e-3], quants uniform in [-127, 127].
// One block (row r, block j) per thread. Unused scale slots of a short last chunk are not
// written (the bench shapes have cols % 256 == 0, so there are none).
__global__ void fill_q8_0(uint8_t* p, int64_t rows, int64_t cols, uint64_t seed) {
    namespace q8dev = dsv4::cuda::q8dev;
    const int64_t nb = cols / 32;
    const size_t rb = q8dev::row_bytes(cols), nblocks = size_t(rows) * size_t(nb);
    for (size_t b = blockIdx.x * size_t(blockDim.x) + threadIdx.x; b < nblocks; b += size_t(gridDim.x) * blockDim.x) {
        uint8_t* row = p + (b / size_t(nb)) * rb;
        const int64_t j = int64_t(b % size_t(nb));
        uint8_t* qs = row + q8dev::quant_offset(j);
        uint64_t h = mix64(seed ^ (b * 0x100000001b3ull));
        const __half d = __float2half(0.5e-3f + 1e-3f * float(h & 0xffff) / 65535.0f);
        const uint16_t dbits = __half_as_ushort(d);
        row[q8dev::scale_offset(j)] = uint8_t(dbits & 0xff);
        row[q8dev::scale_offset(j) + 1] = uint8_t(dbits >> 8);
        for (int k = 0; k < 32; ++k) {
            if ((k & 7) == 0) h = mix64(h);
            qs[k] = uint8_t(int8_t(int((h >> (8 * (k & 7))) & 0xff) % 255 - 127));
        }
    }
}

// Q2_K super-blocks: random scale/min codes and quants, d and dmin in [1e-3, 3e-3].
__global__ void fill_q2_k(uint8_t* p, size_t nsb, uint64_t seed) {
    for (size_t b = blockIdx.x * size_t(blockDim.x) + threadIdx.x; b < nsb; b += size_t(gridDim.x) * blockDim.x) {
        uint8_t* sb = p + b * 84;
        uint64_t h = mix64(seed ^ (b * 0x100000001b3ull));
        for (int j = 0; j < 80; ++j) {
            if ((j & 7) == 0) h = mix64(h);
            sb[j] = uint8_t(h >> (8 * (j & 7)));
        }
        h = mix64(h);
        const uint16_t d = __half_as_ushort(__float2half(1e-3f + 2e-3f * float(h & 0xffff) / 65535.0f));
        const uint16_t dm = __half_as_ushort(__float2half(1e-3f + 2e-3f * float((h >> 16) & 0xffff) / 65535.0f));
        sb[80] = uint8_t(d & 0xff);
        sb[81] = uint8_t(d >> 8);
        sb[82] = uint8_t(dm & 0xff);
        sb[83] = uint8_t(dm >> 8);
    }
}

// bf16 values uniform in [-scale, scale).
__global__ void fill_bf16(uint16_t* p, size_t n, uint64_t seed, float scale) {
    for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
        const uint64_t h = mix64(seed ^ i);
        const float v = scale * (float(h & 0xffffff) / 8388608.0f - 1.0f);
        p[i] = __bfloat16_as_ushort(__float2bfloat16(v));
    }
}

// float32 values uniform in [-1, 1).
__global__ void fill_f32(float* p, size_t n, uint64_t seed) {
    for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
        const uint64_t h = mix64(seed ^ i);
        p[i] = float(h & 0xffffff) / 8388608.0f - 1.0f;
    }
}

__global__ void f32_to_bf16(const float* x, __nv_bfloat16* y, size_t n) {
    for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
        y[i] = __float2bfloat16(x[i]);
}

// A grid-stride launch size for n elements: enough blocks of 256 to fill an H200-sized device.
inline unsigned fill_grid(size_t n) { return unsigned(std::min<size_t>((n + 255) / 256, 132 * 64)); }

}  // namespace bench
