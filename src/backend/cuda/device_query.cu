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

bool env_switch(const char* name, bool by_default) {
    const char* v = std::getenv(name);
    return v && std::strcmp(v, by_default ? "0" : "1") == 0 ? !by_default : by_default;
}

bool pdl_enabled() {
    static const bool on = env_switch("DSV4_CUDA_PDL", true);
    return on;
}

}  // namespace dsv4::cuda
