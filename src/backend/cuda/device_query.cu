#include <cuda_runtime.h>

#include <cstdlib>
#include <cstring>

#include "backend/cuda/common.cuh"
#include "backend/cuda/device_query.h"

namespace dsv4::cuda {

int device_count() {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) return 0;
    return n;
}

std::string device_name() {
    int dev = 0;
    DSV4_CUDA_CHECK(cudaGetDevice(&dev));
    cudaDeviceProp prop{};
    DSV4_CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));
    return prop.name;
}

const DeviceLimits& device_limits() {
    // One device per process so far (the backend never switches devices), so one cached copy.
    static const DeviceLimits limits = [] {
        int dev = 0, sms = 0, optin = 0;
        DSV4_CUDA_CHECK(cudaGetDevice(&dev));
        DSV4_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
        DSV4_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
        return DeviceLimits{sms, size_t(optin)};
    }();
    return limits;
}

bool pdl_enabled() {
    static const bool on = [] {
        const char* v = std::getenv("DSV4_CUDA_PDL");
        return v && std::strcmp(v, "1") == 0;
    }();
    return on;
}

}  // namespace dsv4::cuda
