// The CUDA forward split over ranks (model/shard.h; forward.h's CudaBackend with a shard)
// against the one-GPU CUDA forward: each fixture and the shipped Q8_0 model, a prefill in bands
// then decode steps, MTP included, over 2 and 3 ranks that share one GPU (StagedGroup: sums
// through the host) and, where two GPUs are visible, over 2 GPUs through NCCL. Every rank gets
// bitwise the same logits (they all receive the same sums); against one GPU within 1e-4 of the
// logit scale with the same argmax, the bound test_cuda_model uses for CUDA against the CPU
// (float32 on both sides, partial sums in another order, the tensor-core matvec's 22-bit limbs).
//
// Skips (reported as skipped) where no CUDA device is visible.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "../fixture_util.h"
#include "backend/cuda/device_communicators.h"
#include "backend/cuda/device_query.h"
#include "backend/cuda/device_state.h"
#include "backend/cuda/forward.h"
#include "core/error.h"
#include "model/model.h"
#include "runtime/default_model.h"

namespace {

using namespace dsv4;

#define REQUIRE_DEVICES(n) \
    if (cuda::device_count() < (n)) GTEST_SKIP() << "needs " << (n) << " CUDA device(s), " << cuda::device_count() << " visible"

struct RunOut {
    std::vector<float> logits, mtp;
};

// A prefill of all but the last 6 tokens (bands of 7), then 6 decode steps; then the MTP block
// over the streams.
RunOut run_backend(const ForwardBackend& b, const Model& m, const std::vector<int32_t>& tokens) {
    const ModelConfig& c = m.config();
    const int64_t T = int64_t(tokens.size()), V = c.vocab, nD = int64_t(c.hc_mult) * c.hidden;
    RunOut out;
    out.logits.resize(size_t(T * V));
    std::vector<float> hidden(size_t(T * nD));
    State st(c);
    ForwardOptions o;
    o.band = 7;
    for (int64_t p = 0; p < T;) {
        const int64_t n = p == 0 ? T - 6 : 1;
        o.hidden = &hidden[size_t(p * nD)];
        b.forward(&tokens[size_t(p)], n, st, &out.logits[size_t(p * V)], o);
        p += n;
    }
    if (m.has_mtp()) {
        State ms(m.mtp_config());
        out.mtp.resize(size_t((T - 1) * V));
        b.mtp_forward(hidden.data(), &tokens[1], T - 1, ms, out.mtp.data(), ForwardOptions{});
    }
    return out;
}

void expect_close(const std::vector<float>& want, const std::vector<float>& got, int64_t V, const std::string& what) {
    ASSERT_EQ(want.size(), got.size()) << what;
    float scale = 0, diff = 0;
    for (size_t i = 0; i < want.size(); ++i) {
        scale = std::max(scale, std::fabs(want[i]));
        diff = std::max(diff, std::isnan(got[i]) ? INFINITY : std::fabs(want[i] - got[i]));
    }
    int mismatches = 0;
    for (size_t r = 0; r * size_t(V) < want.size(); ++r) {
        const float* a = &want[r * size_t(V)];
        const float* b = &got[r * size_t(V)];
        mismatches += (std::max_element(a, a + V) - a) != (std::max_element(b, b + V) - b);
    }
    std::printf("[cuda shard %s] max|diff| %.3g of %.3g, %d argmax mismatches\n", what.c_str(), diff, scale, mismatches);
    EXPECT_LE(diff, 1e-4f * scale) << what;
    EXPECT_EQ(mismatches, 0) << what;
}

// Runs the model over `ranks` rank backends, rank r on GPU device_of(r) with member(r) as its
// communicator, one thread each, and compares every rank with the one-GPU run.
void check_sharded(const Model& m, const std::vector<int32_t>& tokens, int ranks, const std::function<int(int)>& device_of,
                   const std::function<Communicator&(int)>& member, const std::function<void()>& abort,
                   const std::string& what) {
    cuda::CudaBackend one(m.config(), cuda::upload_weights(m.config(), m.weights()));
    const RunOut want = run_backend(one, m, tokens);
    std::vector<RunOut> outs(static_cast<size_t>(ranks));
    std::vector<std::string> errors(static_cast<size_t>(ranks));
    std::vector<std::thread> threads;
    for (int r = 0; r < ranks; ++r)
        threads.emplace_back([&, r] {
            try {
                if (cudaSetDevice(device_of(r)) != cudaSuccess) fail("cudaSetDevice(", device_of(r), ")");
                const ShardPlan plan = m.shard_plan(r, ranks);
                Shard shard{plan, &member(r)};
                cuda::CudaBackend b(m.config(), cuda::upload_weights(m.config(), m.weights(), &plan), &shard);
                outs[size_t(r)] = run_backend(b, m, tokens);
            } catch (const std::exception& e) {
                errors[size_t(r)] = e.what();
                abort();
            }
        });
    for (auto& t : threads) t.join();
    for (int r = 0; r < ranks; ++r) ASSERT_EQ(errors[size_t(r)], "") << what << " rank " << r;
    for (int r = 1; r < ranks; ++r) {
        EXPECT_EQ(outs[size_t(r)].logits, outs[0].logits) << what << " rank " << r;
        EXPECT_EQ(outs[size_t(r)].mtp, outs[0].mtp) << what << " rank " << r;
    }
    const int64_t V = m.config().vocab;
    expect_close(want.logits, outs[0].logits, V, what + " logits");
    if (m.has_mtp()) expect_close(want.mtp, outs[0].mtp, V, what + " mtp");
}

void check_staged(const Model& m, const std::vector<int32_t>& tokens, int ranks, const std::string& what) {
    std::vector<cuda::Stream> streams(static_cast<size_t>(ranks), cuda::forward_stream());
    cuda::StagedGroup group(ranks, streams);
    check_sharded(m, tokens, ranks, [](int) { return 0; },
                  [&](int r) -> Communicator& { return group.member(r); }, [&] { group.abort(); },
                  what + " staged x" + std::to_string(ranks));
}

std::vector<int32_t> first_tokens(const std::string& fixture, size_t n) {
    std::vector<int32_t> t = test::fixture_tokens(fixture);
    t.resize(std::min(t.size(), n));
    return t;
}

}  // namespace

class CudaShardFixture : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaShardFixture, StagedRanksOnOneGpuMatchOneGpu) {
    REQUIRE_DEVICES(1);
    const std::string name = GetParam();
    test::TempDir tmp;
    Model m(test::convert_fixture(name, tmp.path()));
    const std::vector<int32_t> tokens = first_tokens(name, 96);
    for (int ranks : {2, 3}) check_staged(m, tokens, ranks, name);
}

INSTANTIATE_TEST_SUITE_P(All, CudaShardFixture, ::testing::Values("mini_flash", "long_seq", "odd_order"));

TEST(CudaShardShipped, StagedRanksOnOneGpuMatchOneGpu) {
    REQUIRE_DEVICES(1);
    Model m(default_model_path());
    check_staged(m, test::filler_tokens(m, 72), 2, "dsv4-tiny");
}

TEST(CudaShardNccl, TwoGpusMatchOneGpu) {
    REQUIRE_DEVICES(2);
    Model m(default_model_path());
    // The streams are made per device inside each rank's thread; NCCL is given them there.
    std::vector<cuda::Stream> streams(2);
    for (int r = 0; r < 2; ++r) {
        if (cudaSetDevice(r) != cudaSuccess) FAIL() << "cudaSetDevice(" << r << ")";
        streams[size_t(r)] = cuda::forward_stream();
    }
    cudaSetDevice(0);
    cuda::NcclGroup group({0, 1}, streams);
    check_sharded(m, test::filler_tokens(m, 72), 2, [](int r) { return r; },
                  [&](int r) -> Communicator& { return group.member(r); }, [] {}, "dsv4-tiny nccl x2");
}
