// The CUDA backend's entry point so far: how many CUDA devices this process can use.
// (The kernels of the CUDA backend arrive with the CUDA issue; see docs/PERFORMANCE.md.)
#pragma once

namespace dsv4::cuda {

// Number of visible CUDA devices, 0 when there is no driver or no device.
int device_count();

}  // namespace dsv4::cuda
