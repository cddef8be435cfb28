// Counters and gauges for GET /metrics, in the Prometheus text exposition format (version
// 0.0.4): requests by endpoint and status, tokens, prefill/decode time and rates, prefix-cache
// hits, cancellations, the queue and the memory the process holds. Updated from many threads.
#pragma once
#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include "server/timings.h"

namespace dsv4::server {

// What only the server knows at scrape time.
struct MetricsGauges {
    int64_t queue_depth = 0;      // requests waiting for a session slot
    int64_t active_sessions = 0;  // requests being prefilled or decoded
    int64_t parallel = 0;         // session slots
    int64_t cache_entries = 0;
    int64_t cache_bytes = 0;
    int64_t cache_budget_bytes = 0;
    int64_t cache_evictions = 0;
    int64_t resident_bytes = 0;   // process RSS
    int64_t available_bytes = 0;  // host memory available (what admission compares with)
};

class Metrics {
public:
    Metrics();

    // One HTTP request answered (any endpoint, any status). Counted before the response is
    // written, so a client that has its answer always finds it counted.
    void answered(const std::string& endpoint, int status);
    // How long a request took, from its arrival to its last byte (a stream ends after the count).
    void duration(double seconds);
    // One generation that ran (completed, stopped, cancelled or timed out).
    void generation(const ServerTimings& t);
    void prefix_cache(bool hit);
    void cancelled(const std::string& reason);  // "disconnect", "timeout"
    void refused(const std::string& reason);    // "queue_full", "memory"

    std::string render(const MetricsGauges& g) const;

    // Process RSS from /proc/self/statm (0 where unavailable).
    static int64_t resident_bytes();

private:
    static constexpr std::array<double, 12> kBuckets{0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 600};

    mutable std::mutex m_;
    std::map<std::pair<std::string, int>, uint64_t> requests_;
    std::array<uint64_t, kBuckets.size() + 1> latency_buckets_{};  // last one: +Inf
    double latency_sum_ = 0;
    uint64_t latency_count_ = 0;
    uint64_t generations_ = 0;
    uint64_t prompt_tokens_ = 0, cached_tokens_ = 0, prefill_tokens_ = 0, generated_tokens_ = 0, decode_steps_ = 0,
             decoded_tokens_ = 0;
    double prefill_s_ = 0, decode_s_ = 0, queue_s_ = 0;
    double last_prefill_tok_s_ = 0, last_decode_tok_s_ = 0;
    uint64_t cache_hits_ = 0, cache_misses_ = 0;
    std::map<std::string, uint64_t> cancelled_, refused_;
    uint64_t spec_rounds_ = 0, spec_drafted_ = 0, spec_accepted_ = 0;
};

}  // namespace dsv4::server
