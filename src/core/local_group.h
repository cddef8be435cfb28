// Ranks that are threads of this process: the Communicator the CPU sharded forward and its
// tests use (the CUDA backend's ranks use NCCL). Sums are taken in rank order, so every rank
// gets bit-identical results and a run is reproducible.
#pragma once
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "core/communicator.h"

namespace dsv4 {

class LocalGroup {
public:
    explicit LocalGroup(int ranks);
    ~LocalGroup();
    int size() const { return int(members_.size()); }
    Communicator& member(int rank);
    // Wakes every rank waiting in a collective with an Error (a rank that failed calls it, so
    // the others do not wait for it forever); later collectives fail at once.
    void abort();

private:
    class Member;
    friend class Member;
    // Waits until all ranks have arrived at this barrier; throws once the group is aborted.
    void barrier();

    std::vector<std::unique_ptr<Member>> members_;
    std::vector<float*> posted_;
    size_t posted_n_ = 0;
    std::mutex m_;
    std::condition_variable cv_;
    int arrived_ = 0;
    long generation_ = 0;
    bool aborted_ = false;
};

// Runs fn(comm) on `ranks` threads, one member of a new LocalGroup each, and waits for all.
// A rank that throws aborts the group (so no other waits for it forever); the first error
// thrown, the failing rank's own, is rethrown here.
void run_ranks(int ranks, const std::function<void(Communicator&)>& fn);

}  // namespace dsv4
