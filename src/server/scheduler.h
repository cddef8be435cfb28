// The scheduler: a queue of generation jobs served by `parallel` worker threads, each running
// one session at a time through generate(), with the prefix cache in between.
//
// Concurrency: Model::forward is const and allocates its scratch per call, a State belongs to
// one session, and the CPU backend's thread pool runs one parallel region at a time (a second
// caller waits for the pool), so forwards of different sessions may run on different threads
// at once: their parallel regions interleave op by op, which shares the cores between the
// sessions' decode steps instead of letting one request hold the model until it finishes.
// (tests/test_server_runtime.cpp checks that concurrent generations give the same text as
// sequential ones.)
//
// Jobs talk to the HTTP side through their own mutex: the worker appends text and marks
// admission and completion; the request's thread waits, takes text, and cancels (client gone,
// timeout). A cancelled job is skipped if still queued, and stops at the next token (or the
// next prefill step) if running.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "model/model.h"
#include "runtime/generator.h"
#include "runtime/spec_factory.h"
#include "runtime/session.h"
#include "server/api_error.h"
#include "server/metrics.h"
#include "server/prefix_cache.h"
#include "server/timings.h"
#include "tokenizer/tokenizer.h"

namespace dsv4::server {

using Clock = std::chrono::steady_clock;

// What runs one admitted job on its session: dsv4::generate, unless a test puts a scripted
// generation in its place to drive output the random-weight test models never write (tool
// calls, reasoning) through the real HTTP, parsing and streaming paths.
using GenerateFn = std::function<GenerateStats(Session&, const Tokenizer&, std::span<const int32_t>,
                                               const GenerateOptions&, const GenerateEvents&)>;

struct SchedulerOptions {
    int parallel = 2;                          // sessions generating at once
    int max_queue = 64;                        // requests waiting beyond those; more get 503
    size_t cache_bytes = size_t(1) << 30;      // prefix cache budget (State bytes + tokens + logits)
    size_t cache_entries = 32;                 // sessions the prefix cache keeps at most
    PrefillOptions prefill;                    // band, frontier and memory admission of every session
    GenerateFn generate;                       // empty: dsv4::generate
    // Speculative decoding (`--spec`): one drafter per session, made here. Not owned; null or
    // disabled: plain decoding.
    const spec::DrafterFactory* drafters = nullptr;
    spec::ControllerOptions spec;
};

enum class CancelReason { None, Disconnect, Timeout, Shutdown };

class Job {
public:
    Job(std::vector<int32_t> prompt, GenerateOptions gen, Clock::time_point arrival);

    enum class Until { Admitted, Text, Done };
    // Blocks until the job is admitted (past the queue and memory admission), has new text, or
    // is done, as `until` says (done always ends the wait), or until `max` has passed.
    void wait(std::chrono::milliseconds max, Until until);
    std::string take_text();   // the text generated since the last call
    bool admitted() const;     // running, past memory admission
    bool done() const;         // finished, failed or cancelled
    std::optional<ApiError> error() const;  // why it failed (queue timeout, memory, engine)

    // Stops the job (idempotent; the first reason sticks).
    void cancel(CancelReason why);
    CancelReason cancel_reason() const;

    // Valid once done() without error().
    GenerateStats stats() const;
    ServerTimings timings() const;
    int64_t cached_tokens() const;  // known once admitted()

    const std::vector<int32_t>& prompt() const { return prompt_; }
    const GenerateOptions& options() const { return gen_; }
    Clock::time_point arrival() const { return arrival_; }

private:
    friend class Scheduler;
    void set_admitted(int64_t cached);
    void append(std::string_view text);
    void finish(GenerateStats stats, ServerTimings t);
    void fail(ApiError e);

    const std::vector<int32_t> prompt_;
    const GenerateOptions gen_;
    const Clock::time_point arrival_;
    std::atomic<bool> cancel_flag_{false};

    mutable std::mutex m_;
    std::condition_variable cv_;
    std::string text_;
    bool admitted_ = false, done_ = false;
    int64_t cached_ = 0;
    CancelReason why_ = CancelReason::None;
    std::optional<ApiError> error_;
    GenerateStats stats_;
    ServerTimings timings_;
};

class Scheduler {
public:
    Scheduler(const Model& model, const Tokenizer& tok, SchedulerOptions options, Metrics& metrics);
    ~Scheduler();  // cancels everything and joins the workers
    Scheduler(const Scheduler&) = delete;
    Scheduler& operator=(const Scheduler&) = delete;

    // Queues a job; throws ApiError (Overloaded) when the queue is full or shutting down.
    std::shared_ptr<Job> submit(std::vector<int32_t> prompt, GenerateOptions gen, Clock::time_point arrival);

    void shutdown();

    int64_t queue_depth() const;
    int64_t active() const { return active_.load(); }
    const SchedulerOptions& options() const { return opt_; }
    size_t cache_entries() const { return cache_.size(); }
    size_t cache_bytes() const { return cache_.bytes(); }
    uint64_t cache_evictions() const { return cache_.evictions(); }

private:
    // A session resting in the prefix cache, with its mark one token before its last prompt's end.
    struct Cached {
        std::unique_ptr<Session> session;
        std::unique_ptr<spec::Drafter> drafter;  // follows the session (its own state) when speculating
        std::optional<SessionMark> mark;
    };

    void worker();
    void run(Job& job);
    std::unique_ptr<Session> new_session() const;
    static size_t cached_bytes(const Cached& c);

    const Model& model_;
    const Tokenizer& tok_;
    const SchedulerOptions opt_;
    Metrics& metrics_;
    PrefixCache<Cached> cache_;

    mutable std::mutex m_;
    std::condition_variable cv_;
    std::deque<std::shared_ptr<Job>> queue_;
    std::vector<std::shared_ptr<Job>> running_;
    bool stopping_ = false;
    std::atomic<int64_t> active_{0};
    std::vector<std::thread> workers_;
};

}  // namespace dsv4::server
