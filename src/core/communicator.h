// The collective that a model split over several ranks (GPUs, or threads in tests) needs:
// a sum of one float32 buffer over all ranks, the result on every rank. The model's sharded
// forward (model/shard.h) uses nothing else: each sublayer's partial outputs are summed once,
// and the LM head's vocabulary slices are summed into zero-filled full rows.
#pragma once
#include <cstddef>
#include <cstdint>

namespace dsv4 {

class Communicator {
public:
    virtual ~Communicator() = default;
    virtual int rank() const = 0;
    virtual int size() const = 0;
    // data[0..n) = the sum over ranks of every rank's data[0..n). Every rank calls it with the
    // same n, in the same order; it returns when this rank's result is in place.
    virtual void all_reduce_sum(float* data, size_t n) = 0;

    // What this rank has asked of the collective so far (bench receipts report it).
    struct Stats {
        int64_t calls = 0;
        int64_t bytes = 0;     // payload bytes (n * 4 per call)
        double seconds = 0;    // wall time inside all_reduce_sum, waiting for peers included
    };
    const Stats& stats() const { return stats_; }
    void reset_stats() { stats_ = {}; }

protected:
    Stats stats_;
};

}  // namespace dsv4
