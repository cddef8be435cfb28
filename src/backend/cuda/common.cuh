// Internal to the CUDA backend (CUDA types allowed): error checks and the per-element
// dequantisation of a weight row in its device format (GGUF's, except Q8_0: q8_0_device.h),
// shared by every kernel that reads weights on the plain (CUDA-core) path.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <utility>

#include "backend/cuda/q8_0_device.h"
#include "core/error.h"

namespace dsv4::cuda {

#define DSV4_CUDA_CHECK(expr)                                                                         \
    do {                                                                                              \
        cudaError_t err_ = (expr);                                                                    \
        if (err_ != cudaSuccess)                                                                      \
            ::dsv4::fail("CUDA error ", cudaGetErrorString(err_), " in ", #expr, " (", __FILE__, ":", \
                         __LINE__, ")");                                                              \
    } while (0)

// After every launch: a bad configuration is reported here, not at the next unrelated call.
#define DSV4_LAUNCH_CHECK() DSV4_CUDA_CHECK(cudaGetLastError())

// Stored weight formats, numbered as GGUF numbers them (gguf::TensorType), usable as template
// arguments in device code.
enum WType : int { kF32 = 0, kF16 = 1, kQ8_0 = 8, kQ2_K = 10, kBF16 = 30, kMXFP4 = 39 };

__device__ __forceinline__ float e2m1(unsigned code) {
    // 0, .5, 1, 1.5, 2, 3, 4, 6 and their negatives (bit 3 = sign)
    const float mag[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
    float v = mag[code & 7];
    return (code & 8) ? -v : v;
}

// 2^(e-127); e = 0 is 2^-127, a subnormal float (0x00400000), as the CPU reference computes it.
__device__ __forceinline__ float e8m0(uint8_t e) { return __int_as_float(e == 0 ? 0x00400000 : int(e) << 23); }

// Element i of a weight row: the scalar path (oracle kernels, formats without a fast path).
// Same arithmetic as cpu::dequant_row: Q8_0 is d * q, MXFP4 e2m1 * 2^(E-127), and Q2_K
// (d * sc) * q - dmin * mn with every product and the difference rounded separately (the CPU
// reference is compiled without FMA contraction, so neither may the device fuse them), in float.
template <int TYPE>
__device__ __forceinline__ float load_elem(const uint8_t* row, int64_t i) {
    if constexpr (TYPE == kF32) {
        return reinterpret_cast<const float*>(row)[i];
    } else if constexpr (TYPE == kF16) {
        return __half2float(reinterpret_cast<const __half*>(row)[i]);
    } else if constexpr (TYPE == kBF16) {
        return __bfloat162float(reinterpret_cast<const __nv_bfloat16*>(row)[i]);
    } else if constexpr (TYPE == kQ8_0) {  // the device layout (q8_0_device.h)
        const __half d = *reinterpret_cast<const __half*>(row + q8dev::scale_offset(i / 32));
        return __half2float(d) * float(int8_t(row[q8dev::quant_offset(i / 32) + i % 32]));
    } else if constexpr (TYPE == kQ2_K) {
        // Super-blocks of 256 values in 84 bytes: scale/min codes [16], 2-bit quants [64] at 16,
        // f16 d at 80, f16 dmin at 82 (2-byte aligned: super-blocks and rows have even lengths).
        const uint8_t* sb = row + (i / 256) * 84;
        const int j = int(i % 256);
        const unsigned sc = sb[j / 16];
        const float d = __half2float(*reinterpret_cast<const __half*>(sb + 80));
        const float dmin = __half2float(*reinterpret_cast<const __half*>(sb + 82));
        const unsigned q = (unsigned(sb[16 + 32 * (j / 128) + j % 32]) >> (2 * ((j % 128) / 32))) & 3u;
        const float a = __fmul_rn(d, float(sc & 15u)), m = __fmul_rn(dmin, float(sc >> 4));
        return __fsub_rn(__fmul_rn(a, float(q)), m);
    } else {
        static_assert(TYPE == kMXFP4, "unknown weight type");
        const uint8_t* blk = row + (i / 32) * 17;
        const int j = int(i % 32);
        const uint8_t b = blk[1 + (j & 15)];
        return e2m1(j < 16 ? (b & 15) : (b >> 4)) * e8m0(blk[0]);
    }
}

// Calls f.template operator()<TYPE>() for a runtime GGUF type number.
template <class F>
void dispatch_wtype(int type, F&& f) {
    switch (type) {
        case kF32: f.template operator()<kF32>(); return;
        case kF16: f.template operator()<kF16>(); return;
        case kBF16: f.template operator()<kBF16>(); return;
        case kQ8_0: f.template operator()<kQ8_0>(); return;
        case kMXFP4: f.template operator()<kMXFP4>(); return;
        case kQ2_K: f.template operator()<kQ2_K>(); return;
    }
    fail("CUDA backend: unsupported weight type ", type);
}

// Programmatic dependent launch (docs/CUDA.md, "Launch overlap"). The forward's kernels are
// launched with launch() below, which lets each start while its predecessor on the stream still
// runs; so every such kernel calls grid_dependency_wait() before it touches memory that an earlier
// kernel writes or reads (weights, which nothing writes during a forward, may be read before it),
// and allow_dependents() once its own blocks are past that wait, so that the next kernel's blocks
// are scheduled and wait in turn while this one runs. Both are no-ops in a kernel launched plainly.
__device__ __forceinline__ void grid_dependency_wait() { asm volatile("griddepcontrol.wait;\n" ::: "memory"); }
__device__ __forceinline__ void allow_dependents() { asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory"); }
// The first statement of most kernels: wait for the predecessor, then let the successor launch.
__device__ __forceinline__ void grid_begin() {
    grid_dependency_wait();
    allow_dependents();
}

// Whether launch() asks for programmatic dependent launch: unless DSV4_CUDA_PDL=0 (read once;
// docs/CUDA.md, "Launch overlap"). launch_pdl() always does:
// the two launches that were dependent before every kernel could be (the int8 matvec after its
// pack, the split attention's combine).
bool pdl_enabled();

// A forward kernel's launch (every kernel so launched begins with grid_begin(), or waits with
// grid_dependency_wait() before its first dependent access). launch_ex adds up to two launch
// attributes (a cluster shape).
template <class... Params, class... Args>
void launch_with(bool pdl, void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                 const cudaLaunchAttribute* extra, int n_extra, Args&&... args) {
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = stream;
    cudaLaunchAttribute attrs[3] = {};
    if (n_extra < 0 || n_extra > 2) fail("CUDA launch: ", n_extra, " extra launch attributes (at most 2)");
    int n = 0;
    for (int i = 0; i < n_extra; ++i) attrs[n++] = extra[i];
    if (pdl) {
        attrs[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        attrs[n].val.programmaticStreamSerializationAllowed = 1;
        ++n;
    }
    cfg.attrs = attrs;
    cfg.numAttrs = unsigned(n);
    DSV4_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...));
}
template <class... Params, class... Args>
void launch_ex(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
               const cudaLaunchAttribute* extra, int n_extra, Args&&... args) {
    launch_with(pdl_enabled(), kernel, grid, block, smem, stream, extra, n_extra, std::forward<Args>(args)...);
}
template <class... Params, class... Args>
void launch_pdl(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream, Args&&... args) {
    launch_with(true, kernel, grid, block, smem, stream, nullptr, 0, std::forward<Args>(args)...);
}

template <class... Params, class... Args>
void launch(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream, Args&&... args) {
    launch_ex(kernel, grid, block, smem, stream, nullptr, 0, std::forward<Args>(args)...);
}

inline unsigned ceil_div(int64_t a, int64_t b) { return unsigned((a + b - 1) / b); }

// The current device's multiprocessor count and opt-in shared memory per block (queried once
// per device; the kernels size their grids and shared-memory budgets from them).
struct DeviceLimits {
    int sms = 0;
    size_t smem_optin = 0;
};
const DeviceLimits& device_limits();

// The rotation of cpu::Rope::apply on one pair (angle = float(pos) * inv_freq[i], cos/sin in
// double of it, rounded to float), rounded as there (no fused multiply-adds). Shared by rope and
// the kernels that fuse it (compress, rmsnorm_rope).
__device__ __forceinline__ void rotate_pair(float& x0, float& x1, float angle, bool inverse) {
    double sd, cd;
    sincos(double(angle), &sd, &cd);
    const float c = float(cd);
    float s = float(sd);
    if (inverse) s = -s;
    const float y0 = __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, s));
    const float y1 = __fadd_rn(__fmul_rn(x1, c), __fmul_rn(x0, s));
    x0 = y0;
    x1 = y1;
}
}  // namespace dsv4::cuda
