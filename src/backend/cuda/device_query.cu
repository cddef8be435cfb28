#include <cuda_runtime.h>

#include "backend/cuda/device_query.h"

namespace dsv4::cuda {

int device_count() {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) return 0;
    return n;
}

}  // namespace dsv4::cuda
