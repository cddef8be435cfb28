#include "backend/cuda/device_communicators.h"

#include <dlfcn.h>
#include <nccl.h>

#include <atomic>
#include <chrono>
#include <mutex>

#include "backend/cuda/common.cuh"
#include "core/error.h"

namespace dsv4::cuda {

namespace {

// The NCCL entry points we use, resolved from libnccl.so.2 on first use.
struct NcclApi {
    decltype(&ncclCommInitAll) comm_init_all = nullptr;
    decltype(&ncclCommDestroy) comm_destroy = nullptr;
    decltype(&ncclCommAbort) comm_abort = nullptr;
    decltype(&ncclAllReduce) all_reduce = nullptr;
    decltype(&ncclGetErrorString) error_string = nullptr;
};

const NcclApi& nccl() {
    static std::once_flag once;
    static NcclApi api;
    static std::string error;
    std::call_once(once, [] {
        void* lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
        if (!lib) lib = dlopen("libnccl.so", RTLD_NOW | RTLD_LOCAL);
        if (!lib) {
            const char* why = dlerror();
            error = cat("several GPUs need NCCL, and libnccl.so.2 could not be loaded (", why ? why : "not found",
                        "); it comes with the CUDA toolkit: add its lib64 folder to LD_LIBRARY_PATH");
            return;
        }
        const auto get = [&](const char* name) {
            void* f = dlsym(lib, name);
            if (!f && error.empty()) error = cat("libnccl.so.2 has no ", name, " (NCCL older than 2.x?)");
            return f;
        };
        api.comm_init_all = reinterpret_cast<decltype(api.comm_init_all)>(get("ncclCommInitAll"));
        api.comm_destroy = reinterpret_cast<decltype(api.comm_destroy)>(get("ncclCommDestroy"));
        api.comm_abort = reinterpret_cast<decltype(api.comm_abort)>(get("ncclCommAbort"));
        api.all_reduce = reinterpret_cast<decltype(api.all_reduce)>(get("ncclAllReduce"));
        api.error_string = reinterpret_cast<decltype(api.error_string)>(get("ncclGetErrorString"));
    });
    if (!error.empty()) fail(error);
    return api;
}

void nccl_check(ncclResult_t r, const char* what) {
    if (r != ncclSuccess) fail("NCCL ", what, ": ", nccl().error_string(r));
}

}  // namespace

class NcclGroup::Member : public Communicator {
public:
    Member(ncclComm_t comm, int rank, int size, cudaStream_t stream)
        : comm_(comm), rank_(rank), size_(size), stream_(stream) {}
    ~Member() override {
        if (ncclComm_t c = comm_.load()) nccl().comm_destroy(c);
    }
    // From another thread than the rank's own (the one that saw a rank fail).
    void abort() {
        if (ncclComm_t c = comm_.exchange(nullptr)) nccl().comm_abort(c);
    }
    int rank() const override { return rank_; }
    int size() const override { return size_; }
    // Queued on the stream: later work on it sees the sum. seconds counts the host side only
    // (the collective itself is asynchronous; the bench times the device with events).
    void all_reduce_sum(float* data, size_t n) override {
        auto t0 = std::chrono::steady_clock::now();
        ncclComm_t comm = comm_.load();
        if (!comm) fail("NCCL all-reduce: the group was aborted after a rank failed");
        nccl_check(nccl().all_reduce(data, data, n, ncclFloat32, ncclSum, comm, stream_), "all-reduce");
        stats_.calls += 1;
        stats_.bytes += int64_t(n * sizeof(float));
        stats_.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }

private:
    std::atomic<ncclComm_t> comm_;
    int rank_, size_;
    cudaStream_t stream_;
};

NcclGroup::NcclGroup(const std::vector<int>& devices, const std::vector<cudaStream_t>& streams) {
    const int n = int(devices.size());
    if (n < 1) fail("an NCCL group needs at least one GPU");
    if (!streams.empty() && int(streams.size()) != n) fail("an NCCL group of ", n, " GPUs got ", streams.size(), " streams");
    int visible = 0;
    DSV4_CUDA_CHECK(cudaGetDeviceCount(&visible));
    for (int i = 0; i < n; ++i) {
        if (devices[size_t(i)] < 0 || devices[size_t(i)] >= visible)
            fail("GPU ", devices[size_t(i)], " is not one of the ", visible, " visible CUDA devices");
        for (int j = 0; j < i; ++j)
            if (devices[size_t(j)] == devices[size_t(i)])
                fail("GPU ", devices[size_t(i)], " named twice (NCCL takes one rank per GPU)");
    }
    std::vector<ncclComm_t> comms(size_t(n), nullptr);
    nccl_check(nccl().comm_init_all(comms.data(), n, devices.data()), "init");
    for (int r = 0; r < n; ++r)
        members_.push_back(std::make_unique<Member>(comms[size_t(r)], r, n, streams.empty() ? nullptr : streams[size_t(r)]));
}

NcclGroup::~NcclGroup() = default;

void NcclGroup::abort() {
    for (auto& m : members_) m->abort();
}

Communicator& NcclGroup::member(int rank) {
    if (rank < 0 || rank >= size()) fail("rank ", rank, " is not in an NCCL group of ", size());
    return *members_[size_t(rank)];
}

class StagedGroup::Member : public Communicator {
public:
    Member(Communicator& host, cudaStream_t stream) : host_(host), stream_(stream) {}
    int rank() const override { return host_.rank(); }
    int size() const override { return host_.size(); }
    // Synchronous: the device buffer holds the sum when this returns.
    void all_reduce_sum(float* data, size_t n) override {
        auto t0 = std::chrono::steady_clock::now();
        staging_.resize(n);
        DSV4_CUDA_CHECK(cudaMemcpyAsync(staging_.data(), data, n * sizeof(float), cudaMemcpyDeviceToHost, stream_));
        DSV4_CUDA_CHECK(cudaStreamSynchronize(stream_));
        host_.all_reduce_sum(staging_.data(), n);
        DSV4_CUDA_CHECK(cudaMemcpyAsync(data, staging_.data(), n * sizeof(float), cudaMemcpyHostToDevice, stream_));
        DSV4_CUDA_CHECK(cudaStreamSynchronize(stream_));
        stats_.calls += 1;
        stats_.bytes += int64_t(n * sizeof(float));
        stats_.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }

private:
    Communicator& host_;
    cudaStream_t stream_;
    std::vector<float> staging_;
};

StagedGroup::StagedGroup(int ranks, const std::vector<cudaStream_t>& streams) : host_(ranks) {
    if (!streams.empty() && int(streams.size()) != ranks) fail("a staged group of ", ranks, " got ", streams.size(), " streams");
    for (int r = 0; r < ranks; ++r)
        members_.push_back(std::make_unique<Member>(host_.member(r), streams.empty() ? nullptr : streams[size_t(r)]));
}

StagedGroup::~StagedGroup() = default;

Communicator& StagedGroup::member(int rank) {
    if (rank < 0 || rank >= size()) fail("rank ", rank, " is not in a staged group of ", size());
    return *members_[size_t(rank)];
}

}  // namespace dsv4::cuda
