// A small fixed thread pool: parallel_for splits [0, n) into contiguous chunks, one per worker.
#pragma once
#include <cstddef>
#include <functional>

namespace dsv4 {

// Number of workers (DSV4_THREADS, else the hardware concurrency).
int thread_count();

// Runs fn(begin, end) over disjoint chunks covering [0, n), the caller's thread included;
// returns when all are done. Chunks are at least `grain` long. Nested calls run serially.
void parallel_for(size_t n, const std::function<void(size_t, size_t)>& fn, size_t grain = 1);

}  // namespace dsv4
