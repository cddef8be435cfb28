// The device communicators (backend/cuda/device_communicators.h) that a model split over GPUs
// sums its partial outputs with: NCCL over every visible GPU (one rank alone where only one is
// visible), and the staged group that runs several ranks on one GPU. Sums of small integers
// are exact in float32, so results are compared bitwise. Skipped (reported as skipped) where
// no CUDA device is visible; the multi-GPU case also where fewer than two are.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "backend/cuda/device_communicators.h"
#include "backend/cuda/device_memory.h"
#include "core/error.h"

namespace {

namespace cuda = dsv4::cuda;
using dsv4::Communicator;

#define REQUIRE_DEVICES(n) \
    if (cuda::device_count() < (n)) GTEST_SKIP() << "needs " << (n) << " CUDA device(s), " << cuda::device_count() << " visible"

// Rank r's buffer: value i is r + i % 7; the sum over R ranks is R * (i % 7) + R (R - 1) / 2.
std::vector<float> rank_values(int r, size_t n) {
    std::vector<float> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = float(r) + float(i % 7);
    return v;
}
float expected_sum(int ranks, size_t i) { return float(ranks) * float(i % 7) + float(ranks * (ranks - 1) / 2); }

// Each rank on its own thread (its device current) sums a device buffer of n floats twice.
void check_group(int ranks, const std::vector<int>& device_of, const std::function<Communicator&(int)>& member) {
    const size_t n = 3 * 1024 + 5;  // not a multiple of any chunk size
    std::vector<std::vector<float>> got(static_cast<size_t>(ranks));
    std::vector<std::thread> threads;
    std::vector<std::string> errors(static_cast<size_t>(ranks));
    for (int r = 0; r < ranks; ++r)
        threads.emplace_back([&, r] {
            try {
                if (cudaSetDevice(device_of[size_t(r)]) != cudaSuccess) dsv4::fail("cudaSetDevice");
                cuda::DeviceBuffer buf(n * sizeof(float));
                std::vector<float> v = rank_values(r, n);
                buf.upload(v.data(), n * sizeof(float));
                Communicator& c = member(r);
                c.all_reduce_sum(buf.as<float>(), n);
                c.all_reduce_sum(buf.as<float>(), 1);  // the first value again, summed once more
                if (cudaDeviceSynchronize() != cudaSuccess) dsv4::fail("cudaDeviceSynchronize");
                got[size_t(r)].resize(n);
                buf.download(got[size_t(r)].data(), n * sizeof(float));
                if (c.stats().calls != 2 || c.stats().bytes != int64_t((n + 1) * sizeof(float)))
                    dsv4::fail("rank ", r, " stats: ", c.stats().calls, " calls, ", c.stats().bytes, " bytes");
            } catch (const std::exception& e) {
                errors[size_t(r)] = e.what();
            }
        });
    for (auto& t : threads) t.join();
    for (int r = 0; r < ranks; ++r) {
        ASSERT_EQ(errors[size_t(r)], "") << "rank " << r;
        EXPECT_EQ(got[size_t(r)][0], float(ranks) * expected_sum(ranks, 0)) << "rank " << r;
        for (size_t i = 1; i < n; ++i) ASSERT_EQ(got[size_t(r)][i], expected_sum(ranks, i)) << "rank " << r << " i " << i;
    }
}

}  // namespace

TEST(CudaNccl, OneRankPerVisibleGpu) {
    REQUIRE_DEVICES(1);
    const int n = cuda::device_count();
    std::vector<int> devices(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) devices[size_t(i)] = i;
    cuda::NcclGroup group(devices);
    check_group(n, devices, [&](int r) -> Communicator& { return group.member(r); });
}

TEST(CudaNccl, TwoGpus) {
    REQUIRE_DEVICES(2);
    cuda::NcclGroup group({0, 1});
    check_group(2, {0, 1}, [&](int r) -> Communicator& { return group.member(r); });
}

TEST(CudaNccl, RefusesAGpuTwiceOrMissing) {
    REQUIRE_DEVICES(1);
    EXPECT_THROW(cuda::NcclGroup({0, 0}), dsv4::Error);
    EXPECT_THROW(cuda::NcclGroup({cuda::device_count()}), dsv4::Error);
}

TEST(CudaStaged, ThreeRanksOnOneGpu) {
    REQUIRE_DEVICES(1);
    cuda::StagedGroup group(3);
    check_group(3, {0, 0, 0}, [&](int r) -> Communicator& { return group.member(r); });
}
