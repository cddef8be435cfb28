#include "backend/cuda/device_memory.h"

#include <utility>

#include "backend/cuda/common.cuh"

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
    w.mat.row_bytes = first.row_bytes;
    w.mat.count = count;
    w.buffer = DeviceBuffer(w.mat.bytes());
    w.buffer.upload(first.data, w.mat.bytes());
    w.mat.data = w.buffer.as<const uint8_t>();
    return w;
}

}  // namespace

DeviceWeight upload(const Mat& m) { return upload_matrices(m, 1); }

DeviceWeight upload(const MatStack& s) {
    if (s.n < 1) fail("CUDA upload: an expert stack of ", s.n, " matrices");
    return upload_matrices(s.first, s.n);
}

void synchronize() { DSV4_CUDA_CHECK(cudaDeviceSynchronize()); }

}  // namespace dsv4::cuda
