#include "backend/cuda/device_memory.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "backend/cuda/common.cuh"
#include "backend/cuda/q8_0_device.h"

namespace dsv4::cuda {

DeviceBuffer::DeviceBuffer(size_t bytes) : bytes_(bytes) {
    if (bytes == 0) return;
    cudaError_t err = cudaMalloc(&ptr_, bytes);
    if (err != cudaSuccess) {
        ptr_ = nullptr;
        bytes_ = 0;
        (void)cudaGetLastError();  // clear the sticky allocation error before reporting it
        fail("CUDA: cannot allocate ", bytes, " bytes of device memory: ", cudaGetErrorString(err));
    }
}

DeviceBuffer::~DeviceBuffer() {
    if (ptr_) cudaFree(ptr_);
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& o) noexcept
    : ptr_(std::exchange(o.ptr_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
        if (ptr_) cudaFree(ptr_);
        ptr_ = std::exchange(o.ptr_, nullptr);
        bytes_ = std::exchange(o.bytes_, 0);
    }
    return *this;
}

void DeviceBuffer::upload(const void* src, size_t n, size_t offset) {
    if (offset > bytes_ || n > bytes_ - offset)
        fail("CUDA upload of ", n, " bytes at offset ", offset, " overruns a buffer of ", bytes_);
    if (n) DSV4_CUDA_CHECK(cudaMemcpy(static_cast<uint8_t*>(ptr_) + offset, src, n, cudaMemcpyHostToDevice));
}

void DeviceBuffer::download(void* dst, size_t n, size_t offset) const {
    if (offset > bytes_ || n > bytes_ - offset)
        fail("CUDA download of ", n, " bytes at offset ", offset, " overruns a buffer of ", bytes_);
    if (n) DSV4_CUDA_CHECK(cudaMemcpy(dst, static_cast<const uint8_t*>(ptr_) + offset, n, cudaMemcpyDeviceToHost));
}

void DeviceBuffer::fill_bytes(int value) {
    if (bytes_) DSV4_CUDA_CHECK(cudaMemset(ptr_, value, bytes_));
}

namespace {

DeviceWeight upload_matrices(const Mat& first, int64_t count) {
    if (!first.data) fail("CUDA upload: the matrix has no data");
    DeviceWeight w;
    w.mat.type = first.type;
    w.mat.rows = first.rows;
    w.mat.cols = first.cols;
    const bool q8 = first.type == gguf::TensorType::Q8_0;
    w.mat.row_bytes = q8 ? q8dev::row_bytes(first.cols) : first.row_bytes;
    w.mat.count = count;
    w.buffer = DeviceBuffer(w.mat.bytes());
    w.mat.data = w.buffer.as<const uint8_t>();
    if (!q8) {
        w.buffer.upload(first.data, w.mat.bytes());
        return w;
    }
    // Q8_0: converted on the host in slices of rows (a bounded staging buffer, whatever the size).
    if (first.cols % 32 != 0 || first.row_bytes != size_t(first.cols / 32) * 34)
        fail("CUDA upload: Q8_0 rows of ", first.row_bytes, " bytes for ", first.cols, " values (34 per 32 expected)");
    const int64_t total = first.rows * count;
    const int64_t slice = std::max<int64_t>(1, int64_t(32u << 20) / int64_t(w.mat.row_bytes));
    std::vector<uint8_t> staging(size_t(std::min(slice, total)) * w.mat.row_bytes);
    for (int64_t r = 0; r < total; r += slice) {
        const int64_t n = std::min(slice, total - r);
        q8dev::from_gguf(first.data + size_t(r) * first.row_bytes, n, first.cols, staging.data());
        w.buffer.upload(staging.data(), size_t(n) * w.mat.row_bytes, size_t(r) * w.mat.row_bytes);
    }
    return w;
}

}  // namespace

size_t device_row_bytes(gguf::TensorType type, int64_t cols) {
    if (type == gguf::TensorType::Q8_0) return q8dev::row_bytes(cols);
    return size_t(cols / gguf::type_block_elems(type)) * gguf::type_block_bytes(type);
}

DeviceWeight upload(const Mat& m) { return upload_matrices(m, 1); }

DeviceWeight upload(const MatStack& s) {
    if (s.n < 1) fail("CUDA upload: an expert stack of ", s.n, " matrices");
    return upload_matrices(s.first, s.n);
}

void synchronize() { DSV4_CUDA_CHECK(cudaDeviceSynchronize()); }

}  // namespace dsv4::cuda
