#include "core/local_group.h"

#include <chrono>
#include <cstring>
#include <exception>
#include <thread>

#include "core/error.h"

namespace dsv4 {

class LocalGroup::Member : public Communicator {
public:
    Member(LocalGroup& g, int rank) : g_(g), rank_(rank) {}
    int rank() const override { return rank_; }
    int size() const override { return g_.size(); }

    void all_reduce_sum(float* data, size_t n) override {
        auto t0 = std::chrono::steady_clock::now();
        {
            std::lock_guard<std::mutex> lk(g_.m_);
            if (rank_ == 0) g_.posted_n_ = n;
            g_.posted_[size_t(rank_)] = data;
        }
        g_.barrier();  // every rank's buffer is posted
        if (g_.posted_n_ != n) {
            g_.abort();
            fail("all_reduce_sum: rank ", rank_, " passed ", n, " floats, rank 0 ", g_.posted_n_);
        }
        // Each rank sums every rank's buffer in rank order into its own scratch, then waits
        // until all have read before anyone overwrites its buffer.
        sum_.assign(g_.posted_[0], g_.posted_[0] + n);
        for (int r = 1; r < size(); ++r) {
            const float* src = g_.posted_[size_t(r)];
            for (size_t i = 0; i < n; ++i) sum_[i] += src[i];
        }
        g_.barrier();
        std::memcpy(data, sum_.data(), n * sizeof(float));
        g_.barrier();  // no rank posts the next buffer while another still copies
        stats_.calls += 1;
        stats_.bytes += int64_t(n * sizeof(float));
        stats_.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }

private:
    LocalGroup& g_;
    int rank_;
    std::vector<float> sum_;
};

LocalGroup::LocalGroup(int ranks) {
    if (ranks < 1) fail("a group needs at least one rank, not ", ranks);
    posted_.resize(size_t(ranks), nullptr);
    for (int r = 0; r < ranks; ++r) members_.push_back(std::make_unique<Member>(*this, r));
}

LocalGroup::~LocalGroup() = default;

Communicator& LocalGroup::member(int rank) {
    if (rank < 0 || rank >= size()) fail("rank ", rank, " is not in a group of ", size());
    return *members_[size_t(rank)];
}

void LocalGroup::abort() {
    {
        std::lock_guard<std::mutex> lk(m_);
        aborted_ = true;
    }
    cv_.notify_all();
}

void LocalGroup::barrier() {
    std::unique_lock<std::mutex> lk(m_);
    if (aborted_) fail("collective aborted: another rank failed");
    const long gen = generation_;
    if (++arrived_ == size()) {
        arrived_ = 0;
        ++generation_;
        cv_.notify_all();
        return;
    }
    cv_.wait(lk, [&] { return generation_ != gen || aborted_; });
    if (generation_ == gen) fail("collective aborted: another rank failed");
}

void run_ranks(int ranks, const std::function<void(Communicator&)>& fn) {
    LocalGroup group(ranks);
    std::mutex m;
    std::exception_ptr first;
    std::vector<std::thread> threads;
    for (int r = 0; r < ranks; ++r)
        threads.emplace_back([&, r] {
            try {
                fn(group.member(r));
            } catch (...) {
                {
                    std::lock_guard<std::mutex> lk(m);
                    if (!first) first = std::current_exception();
                }
                group.abort();
            }
        });
    for (auto& t : threads) t.join();
    if (first) std::rethrow_exception(first);
}

}  // namespace dsv4
