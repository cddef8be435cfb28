#include "backend/cuda/sharded_backend.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "backend/cuda/common.cuh"
#include "backend/cuda/device_communicators.h"
#include "backend/cuda/device_query.h"
#include "backend/cuda/device_state.h"
#include "backend/cuda/forward.h"
#include "core/error.h"

namespace dsv4::cuda {

namespace {

// One thread per GPU, its device current for good; run(fn) runs fn(rank) on every one at once
// and returns when all are done, rethrowing the first error.
class RankThreads {
public:
    explicit RankThreads(int n) : errors_(size_t(n)) {
        for (int r = 0; r < n; ++r) threads_.emplace_back([this, r] { loop(r); });
    }
    ~RankThreads() {
        {
            std::lock_guard<std::mutex> lk(m_);
            stop_ = true;
        }
        cv_.notify_all();
        for (auto& t : threads_) t.join();
    }
    int size() const { return int(threads_.size()); }

    // on_error(rank) is called from the failing rank's thread, at once (so that peers blocked
    // in a collective can be released while run still waits for them).
    void run(const std::function<void(int)>& fn, const std::function<void(int)>& on_error) {
        std::unique_lock<std::mutex> lk(m_);
        job_ = &fn;
        on_error_ = &on_error;
        pending_ = size();
        for (auto& e : errors_) e = nullptr;
        ++generation_;
        cv_.notify_all();
        done_.wait(lk, [&] { return pending_ == 0; });
        job_ = nullptr;
        for (auto& e : errors_)
            if (e) std::rethrow_exception(e);
    }

private:
    void loop(int r) {
        long seen = 0;
        for (;;) {
            const std::function<void(int)>* job;
            const std::function<void(int)>* on_error;
            {
                std::unique_lock<std::mutex> lk(m_);
                cv_.wait(lk, [&] { return stop_ || generation_ != seen; });
                if (stop_) return;
                seen = generation_;
                job = job_;
                on_error = on_error_;
            }
            std::exception_ptr err;
            try {
                DSV4_CUDA_CHECK(cudaSetDevice(r));
                (*job)(r);
            } catch (...) {
                err = std::current_exception();
                try {
                    (*on_error)(r);
                } catch (...) {
                }
            }
            std::lock_guard<std::mutex> lk(m_);
            errors_[size_t(r)] = err;
            if (--pending_ == 0) done_.notify_all();
        }
    }

    std::vector<std::thread> threads_;
    std::mutex m_;
    std::condition_variable cv_, done_;
    const std::function<void(int)>* job_ = nullptr;
    const std::function<void(int)>* on_error_ = nullptr;
    std::vector<std::exception_ptr> errors_;
    int pending_ = 0;
    long generation_ = 0;
    bool stop_ = false;
};

// Makes device `d` current until the end of the scope, then the one that was.
class DeviceScope {
public:
    explicit DeviceScope(int d) {
        DSV4_CUDA_CHECK(cudaGetDevice(&prev_));
        DSV4_CUDA_CHECK(cudaSetDevice(d));
    }
    ~DeviceScope() { cudaSetDevice(prev_); }

private:
    int prev_ = 0;
};

// Every rank's own State (its CudaState on its GPU). Copies, marks and rewinds go rank by
// rank with that rank's device current, so that device memory is made on the right GPU.
class ShardedState final : public DeviceState {
public:
    ShardedState(const ModelConfig& c, int ranks, int64_t pos) {
        ranks_.reserve(size_t(ranks));
        for (int r = 0; r < ranks; ++r) {
            ranks_.emplace_back(c);
            ranks_.back().pos = pos;
        }
    }
    ~ShardedState() override {
        while (!ranks_.empty()) {
            try {
                DeviceScope on(int(ranks_.size()) - 1);  // each rank's memory freed on its device
                ranks_.pop_back();
            } catch (...) {
                ranks_.pop_back();
            }
        }
    }
    std::unique_ptr<DeviceState> clone() const override {
        auto c = std::unique_ptr<ShardedState>(new ShardedState());
        for (size_t r = 0; r < ranks_.size(); ++r) {
            DeviceScope on{int(r)};  // braces: "on(int(r))" would declare a function
            c->ranks_.push_back(ranks_[r]);
        }
        return c;
    }
    std::shared_ptr<const void> mark() const override {
        auto marks = std::make_shared<std::vector<StateMark>>();
        for (size_t r = 0; r < ranks_.size(); ++r) {
            DeviceScope on{int(r)};  // braces: "on(int(r))" would declare a function
            marks->push_back(ranks_[r].mark());
        }
        return marks;
    }
    void rewind(const std::shared_ptr<const void>& mark) override {
        const auto& marks = *static_cast<const std::vector<StateMark>*>(mark.get());
        if (marks.size() != ranks_.size()) fail("a multi-GPU state mark belongs to another split");
        for (size_t r = 0; r < ranks_.size(); ++r) {
            DeviceScope on{int(r)};  // braces: "on(int(r))" would declare a function
            ranks_[r].rewind(marks[r]);
        }
    }
    // Bytes over all GPUs (each rank keeps the whole latent state: docs/PARALLEL.md).
    void add_bytes(StateBytes& b) const override {
        for (const State& s : ranks_) {
            StateBytes one = s.bytes();
            b.window += one.window;
            b.compressed += one.compressed;
            b.indexer += one.indexer;
            b.partial += one.partial;
        }
    }
    State& rank(int r) { return ranks_[size_t(r)]; }

private:
    ShardedState() = default;
    std::vector<State> ranks_;
};

class ShardedBackend final : public ForwardBackend {
public:
    ShardedBackend(const Model& m, int gpus)
        : cfg_(m.config()), mtp_cfg_(m.mtp_config()), threads_(gpus), ranks_(size_t(gpus)) {
        std::vector<Stream> streams(static_cast<size_t>(gpus));
        std::vector<int> devices(static_cast<size_t>(gpus));
        std::vector<ShardPlan> plans;
        for (int r = 0; r < gpus; ++r) {
            devices[size_t(r)] = r;
            plans.push_back(m.shard_plan(r, gpus));
        }
        threads_.run([&](int r) { streams[size_t(r)] = forward_stream(); }, [](int) {});
        group_ = std::make_unique<NcclGroup>(devices, streams);
        for (int r = 0; r < gpus; ++r) shards_.push_back(Shard{plans[size_t(r)], &group_->member(r)});
        threads_.run(
            [&](int r) {
                const Shard& s = shards_[size_t(r)];
                ranks_[size_t(r)] = std::make_unique<CudaBackend>(cfg_, upload_weights(cfg_, m.weights(), &s.plan), &s);
            },
            [](int) {});
        device_ = cat(gpus, " x ", ranks_[0]->device());
    }
    ~ShardedBackend() override {
        // Each rank's weights and scratch are freed on its own thread (its device current).
        try {
            threads_.run([&](int r) { ranks_[size_t(r)].reset(); }, [](int) {});
        } catch (...) {
        }
    }

    std::string name() const override { return "cuda"; }
    std::string device() const override { return device_; }

    void forward(const int32_t* tokens, int64_t T, State& st, float* logits, const ForwardOptions& opt) const override {
        ShardedState& ss = state_of(st, cfg_);
        run_ranks([&](int r) {
            State& rs = ss.rank(r);
            rs.pos = st.pos;
            ForwardOptions o = opt;
            if (r != 0) o.hidden = nullptr;  // every rank holds the same streams and logits
            std::vector<float> discard;
            float* out = logits;
            if (r != 0 && logits && opt.logits != Logits::None) {
                discard.resize(size_t(opt.logits == Logits::Last ? 1 : T) * size_t(cfg_.vocab));
                out = discard.data();
            }
            ranks_[size_t(r)]->forward(tokens, T, rs, out, o);
        });
        st.pos += T;
    }
    void mtp_forward(const float* hidden, const int32_t* next, int64_t T, State& st, float* logits,
                     const ForwardOptions& opt) const override {
        ShardedState& ss = state_of(st, mtp_cfg_);
        run_ranks([&](int r) {
            State& rs = ss.rank(r);
            rs.pos = st.pos;
            ForwardOptions o = opt;
            if (r != 0) o.hidden = nullptr;
            std::vector<float> discard;
            float* out = logits;
            if (r != 0 && logits && opt.logits != Logits::None) {
                discard.resize(size_t(opt.logits == Logits::Last ? 1 : T) * size_t(cfg_.vocab));
                out = discard.data();
            }
            ranks_[size_t(r)]->mtp_forward(hidden, next, T, rs, out, o);
        });
        st.pos += T;
    }
    void mtp_head(const float* out, int64_t rows, float* logits) const override {
        run_ranks([&](int r) {
            std::vector<float> discard;
            if (r != 0) discard.resize(size_t(rows) * size_t(cfg_.vocab));
            ranks_[size_t(r)]->mtp_head(out, rows, r == 0 ? logits : discard.data());
        });
    }

    // Summed over the GPUs.
    size_t weight_bytes() const override {
        size_t b = 0;
        for (const auto& r : ranks_) b += r->weight_bytes();
        return b;
    }
    size_t peak_device_bytes() const override {
        size_t b = 0;
        for (const auto& r : ranks_) b += r->peak_device_bytes();
        return b;
    }
    // The busiest GPU's share: the ranks read their weights at once, so a token takes as long as
    // the rank with most to read (bench's roofline is then one GPU's bandwidth and peak).
    double decode_bytes_per_token() const override { return busiest(&CudaBackend::decode_bytes_per_token); }
    double prefill_flop_per_token() const override { return busiest(&CudaBackend::prefill_flop_per_token); }
    double mtp_bytes_per_token() const override { return busiest(&CudaBackend::mtp_bytes_per_token); }
    Peak measure_peak() const override {
        Peak p;
        threads_.run([&](int r) {
            if (r == 0) p = ranks_[0]->measure_peak();
        }, [](int) {});
        p.method = "GPU 0 of " + std::to_string(ranks_.size()) + ": " + p.method;
        return p;
    }

private:
    ShardedState& state_of(State& st, const ModelConfig& c) const {
        if (broken_) fail("the model split over ", ranks_.size(), " GPUs stopped after an error (", broken_why_,
                          "); restart the process");
        if (!st.device.get()) st.device.reset(std::make_unique<ShardedState>(c, int(ranks_.size()), st.pos));
        auto* ss = dynamic_cast<ShardedState*>(st.device.get());
        if (!ss) fail("the state belongs to another device backend");
        return *ss;
    }
    // A rank that fails aborts the NCCL group, so that the others' collectives end instead of
    // waiting for it; the backend is unusable afterwards (NCCL cannot resume an aborted group).
    void run_ranks(const std::function<void(int)>& fn) const {
        std::lock_guard<std::mutex> lk(mu_);
        try {
            threads_.run(fn, [&](int) { group_->abort(); });
        } catch (const std::exception& e) {
            if (!broken_) broken_why_ = e.what();
            broken_ = true;
            throw;
        }
    }
    double busiest(double (CudaBackend::*f)() const) const {
        double m = 0;
        for (const auto& r : ranks_) m = std::max(m, ((*r).*f)());
        return m;
    }

    ModelConfig cfg_, mtp_cfg_;
    mutable RankThreads threads_;
    std::unique_ptr<NcclGroup> group_;
    std::vector<Shard> shards_;
    std::vector<std::unique_ptr<CudaBackend>> ranks_;
    std::string device_;
    mutable std::mutex mu_;  // one forward at a time
    mutable bool broken_ = false;
    mutable std::string broken_why_;
};

}  // namespace

std::unique_ptr<ForwardBackend> make_sharded_backend(const Model& m, int gpus) {
    if (gpus < 2) fail("a model split over GPUs needs at least 2, not ", gpus);
    const int visible = device_count();
    if (visible < gpus) fail("--gpus ", gpus, ": only ", visible, " CUDA device(s) visible");
    return std::make_unique<ShardedBackend>(m, gpus);
}

}  // namespace dsv4::cuda
