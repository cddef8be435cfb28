// Peak resident memory of this process, resettable between benchmark runs (Linux: VmHWM in
// /proc/self/status, reset by writing "5" to /proc/self/clear_refs). RSS counts the model's
// memory-mapped weight pages the run touched, as well as heap.
#pragma once
#include <cstdint>

namespace dsv4 {

// Resets the peak to the current RSS; false where the kernel does not allow it (the peak is
// then the process's peak so far).
bool reset_peak_host_bytes();
// The peak RSS in bytes since the last reset (or process start); 0 when unreadable.
int64_t peak_host_bytes();

}  // namespace dsv4
