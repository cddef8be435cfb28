// What CUDA devices this process can use (plain C++; callable where no driver is installed).
#pragma once
#include <string>

namespace dsv4::cuda {

// Number of visible CUDA devices, 0 when there is no driver or no device.
int device_count();

// The current device's name, e.g. "NVIDIA H200" (throws when there is no device).
std::string device_name();

// An on/off environment switch (DSV4_CUDA_GRAPHS, ...; docs/TOOLS.md): by_default unless set to
// the other value ("0" turns a default-on switch off, "1" a default-off one on).
bool env_switch(const char* name, bool by_default);

}  // namespace dsv4::cuda
