// Device memory for the CUDA backend, usable from plain C++ (no CUDA headers): an owning
// buffer, and weight matrices uploaded in their stored GGUF format, except that Q8_0 rows are
// rearranged into the device layout of q8_0_device.h (scales apart, quants 16-byte aligned; the
// same 34 bytes per 32 values). Kernels dequantise as they read, so no full-precision copy exists.
#pragma once
#include <cstddef>
#include <cstdint>

#include "backend/cuda/device_query.h"
#include "io/gguf.h"
#include "model/weights.h"

struct CUstream_st;  // cudaStream_t is CUstream_st*; declared here so that callers need no CUDA headers

namespace dsv4::cuda {

using Stream = CUstream_st*;  // nullptr: the default stream

// cudaMalloc'ed bytes (256-byte aligned), freed on destruction. Move-only.
class DeviceBuffer {
public:
    DeviceBuffer() = default;
    explicit DeviceBuffer(size_t bytes);  // throws naming the size when the device is out of memory
    ~DeviceBuffer();
    DeviceBuffer(DeviceBuffer&& o) noexcept;
    DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(const DeviceBuffer&) = delete;

    void* get() const { return ptr_; }
    template <class T>
    T* as() const { return static_cast<T*>(ptr_); }
    size_t size() const { return bytes_; }

    // Synchronous copies (they throw when [offset, offset + n) is outside the buffer).
    void upload(const void* src, size_t n, size_t offset = 0);
    void download(void* dst, size_t n, size_t offset = 0) const;
    void fill_bytes(int value);  // every byte set to value (tests poison outputs with 0xff = NaN floats)

private:
    void* ptr_ = nullptr;
    size_t bytes_ = 0;
};

// A [rows, cols] weight matrix, or `count` of them back to back (an expert stack: matrix e
// starts e * rows * row_bytes bytes after matrix 0), in device memory in its device format.
// y = x · Wᵀ maps cols -> rows, as for the CPU's Mat.
struct DeviceMat {
    gguf::TensorType type = gguf::TensorType::F32;
    int64_t rows = 0, cols = 0;
    size_t row_bytes = 0;
    int64_t count = 1;
    const uint8_t* data = nullptr;  // device pointer, 16-byte aligned

    size_t matrix_bytes() const { return size_t(rows) * row_bytes; }
    size_t bytes() const { return matrix_bytes() * size_t(count); }
};

// Bytes of one row of cols values in the device format: GGUF's row, or q8dev::row_bytes for Q8_0.
size_t device_row_bytes(gguf::TensorType type, int64_t cols);

// A weight and the device memory that holds it.
struct DeviceWeight {
    DeviceBuffer buffer;
    DeviceMat mat;
};

// Copies a host matrix (for instance one bound to the memory-mapped GGUF) or an expert stack to
// the device: byte for byte, Q8_0 converted to the device layout on the way.
DeviceWeight upload(const Mat& m);
DeviceWeight upload(const MatStack& s);

// Waits for all work on the device; throws with the first asynchronous error.
void synchronize();

}  // namespace dsv4::cuda
