#include "core/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace dsv4 {
namespace {

// Workers poll for the next region a while before they sleep, and so does the caller waiting
// for them: a decode-sized region is tens of microseconds of work and a condition-variable
// wake-up on each side costs as much (on the embedded model with 2 threads a 2-token forward
// took 6.0 ms with sleeping workers, 3.6 ms with polling ones, one token 2.4 ms either way).
// Sleeping under the mutex is the fallback after kSpin polls, so an idle pool costs nothing.
class Pool {
public:
    explicit Pool(int n) {
        for (int i = 1; i < n; ++i) workers_.emplace_back([this, i] { loop(i); });
    }
    ~Pool() {
        {
            std::lock_guard<std::mutex> lk(m_);
            stop_ = true;
        }
        cv_.notify_all();
        for (auto& t : workers_) t.join();
    }
    int size() const { return int(workers_.size()) + 1; }

    void run(const std::function<void(int)>& job) {
        std::unique_lock<std::mutex> run_lock(run_m_);  // one parallel region at a time
        {
            std::lock_guard<std::mutex> lk(m_);
            job_ = &job;
            error_ = nullptr;
            pending_.store(int(workers_.size()), std::memory_order_relaxed);
            generation_.store(generation_.load(std::memory_order_relaxed) + 1, std::memory_order_release);
        }
        cv_.notify_all();  // wakes the sleeping workers; polling ones see the generation
        std::exception_ptr mine;
        try {
            job(0);
        } catch (...) {
            mine = std::current_exception();
        }
        for (int i = 0; i < kSpin && pending_.load(std::memory_order_acquire) != 0; ++i) pause();
        if (pending_.load(std::memory_order_acquire) != 0) {
            std::unique_lock<std::mutex> lk(m_);
            done_cv_.wait(lk, [this] { return pending_.load(std::memory_order_acquire) == 0; });
        }
        std::lock_guard<std::mutex> lk(m_);
        job_ = nullptr;
        if (mine) std::rethrow_exception(mine);
        if (error_) std::rethrow_exception(error_);
    }

private:
    // Polls before sleeping: about 0.4 ms of pause instructions on the CI machine's cores, longer
    // than the gaps between the regions of one forward, short next to a user's idle time.
    static constexpr int kSpin = 20000;

    static void pause() {
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#else
        std::this_thread::yield();
#endif
    }

    void loop(int index) {
        long seen = 0;
        for (;;) {
            for (int i = 0; i < kSpin && generation_.load(std::memory_order_acquire) == seen; ++i) pause();
            const std::function<void(int)>* job;
            {
                std::unique_lock<std::mutex> lk(m_);
                cv_.wait(lk, [&] { return stop_ || generation_.load(std::memory_order_relaxed) != seen; });
                if (stop_) return;
                seen = generation_.load(std::memory_order_relaxed);
                job = job_;
            }
            try {
                (*job)(index);
            } catch (...) {
                std::lock_guard<std::mutex> lk(m_);
                if (!error_) error_ = std::current_exception();
            }
            if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
                std::lock_guard<std::mutex> lk(m_);  // a caller that went to sleep waits on it
                done_cv_.notify_one();
            }
        }
    }

    std::vector<std::thread> workers_;
    std::mutex m_, run_m_;
    std::condition_variable cv_, done_cv_;
    const std::function<void(int)>* job_ = nullptr;
    std::atomic<long> generation_{0};
    std::atomic<int> pending_{0};
    bool stop_ = false;
    std::exception_ptr error_;
};

thread_local bool in_parallel_region = false;

Pool& pool() {
    static Pool p(thread_count());
    return p;
}

}  // namespace

int thread_count() {
    static int n = [] {
        if (const char* env = std::getenv("DSV4_THREADS")) {
            int v = std::atoi(env);
            if (v > 0) return v;
        }
        return std::max(1, int(std::thread::hardware_concurrency()));
    }();
    return n;
}

void parallel_for(size_t n, const std::function<void(size_t, size_t)>& fn, size_t grain) {
    if (n == 0) return;
    size_t workers = size_t(thread_count());
    size_t chunks = std::min(workers, std::max<size_t>(1, n / std::max<size_t>(1, grain)));
    if (chunks <= 1 || in_parallel_region) {
        fn(0, n);
        return;
    }
    Pool& p = pool();
    size_t per = (n + chunks - 1) / chunks;
    p.run([&](int index) {
        // Each worker takes chunks index, index + size, ... so any pool size covers all chunks.
        in_parallel_region = true;
        for (size_t c = size_t(index); c < chunks; c += size_t(p.size())) {
            size_t b = c * per, e = std::min(n, b + per);
            if (b < e) fn(b, e);
        }
        in_parallel_region = false;
    });
}

}  // namespace dsv4
