// What CUDA devices this process can use (plain C++; callable where no driver is installed).
#pragma once
#include <string>

namespace dsv4::cuda {

// Number of visible CUDA devices, 0 when there is no driver or no device.
int device_count();

// The current device's name, e.g. "NVIDIA H200" (throws when there is no device).
std::string device_name();

}  // namespace dsv4::cuda
