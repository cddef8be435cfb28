// Communicators whose buffers are device memory (core/communicator.h: all_reduce_sum on a device
// pointer, in the order of the member's stream), for a model split over ranks on GPUs:
//   NcclGroup:   one rank per GPU of this host through NCCL. libnccl.so.2 is loaded when a
//                group is made, so builds and single-GPU runs never need it; a missing library
//                or a failed NCCL call throws an Error naming it.
//   StagedGroup: ranks that share one GPU (NCCL refuses two ranks on one device): each sum goes
//                device -> host, through a LocalGroup, and back. Slow, and for tests only: it
//                runs the sharded CUDA path on a machine with one GPU.
// Internal to the backend's CUDA sources and tests (it names CUDA runtime types).
#pragma once
#include <cuda_runtime.h>

#include <memory>
#include <vector>

#include "core/communicator.h"
#include "core/local_group.h"

namespace dsv4::cuda {

class NcclGroup {
public:
    // One rank per entry of `devices` (CUDA device ordinals, each at most once); rank r's
    // collectives run on streams[r] (null: that device's default stream).
    NcclGroup(const std::vector<int>& devices, const std::vector<cudaStream_t>& streams = {});
    ~NcclGroup();
    NcclGroup(const NcclGroup&) = delete;
    NcclGroup& operator=(const NcclGroup&) = delete;
    int size() const { return int(members_.size()); }
    // Rank r's communicator: call it from a thread whose current device is devices[r]
    // (one host thread per GPU, as NCCL expects of ncclAllReduce outside a group call).
    Communicator& member(int rank);
    // Aborts every rank's communicator (ncclCommAbort): collectives waiting for a rank that
    // failed end with an error instead of hanging. The group cannot be used afterwards.
    void abort();

private:
    class Member;
    std::vector<std::unique_ptr<Member>> members_;
};

class StagedGroup {
public:
    // `ranks` ranks whose buffers are on the current device; rank r's sums wait for streams[r].
    explicit StagedGroup(int ranks, const std::vector<cudaStream_t>& streams = {});
    ~StagedGroup();
    int size() const { return host_.size(); }
    Communicator& member(int rank);
    void abort() { host_.abort(); }

private:
    class Member;
    LocalGroup host_;
    std::vector<std::unique_ptr<Member>> members_;
};

}  // namespace dsv4::cuda
