#include "server/metrics.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>

namespace dsv4::server {

Metrics::Metrics() = default;

void Metrics::answered(const std::string& endpoint, int status) {
    std::lock_guard<std::mutex> lk(m_);
    ++requests_[{endpoint, status}];
}

void Metrics::duration(double seconds) {
    std::lock_guard<std::mutex> lk(m_);
    size_t b = 0;
    while (b < kBuckets.size() && seconds > kBuckets[b]) ++b;
    ++latency_buckets_[b];
    latency_sum_ += seconds;
    ++latency_count_;
}

void Metrics::generation(const ServerTimings& t) {
    std::lock_guard<std::mutex> lk(m_);
    ++generations_;
    prompt_tokens_ += uint64_t(t.prompt_tokens);
    cached_tokens_ += uint64_t(t.cached_tokens);
    prefill_tokens_ += uint64_t(t.prefilled_tokens());
    generated_tokens_ += uint64_t(t.generated_tokens);
    decode_steps_ += uint64_t(t.decode_steps);
    decoded_tokens_ += uint64_t(t.decoded_tokens());
    prefill_s_ += t.prefill_s;
    decode_s_ += t.decode_s;
    queue_s_ += t.queue_s;
    if (t.prefill_s > 0 && t.prefilled_tokens() > 0) last_prefill_tok_s_ = t.prefill_tok_s();
    if (t.decode_s > 0 && t.decode_steps > 0) last_decode_tok_s_ = t.decode_tok_s();
    if (t.speculative) {
        spec_rounds_ += uint64_t(t.speculative->rounds);
        spec_drafted_ += uint64_t(t.speculative->drafted_tokens);
        spec_accepted_ += uint64_t(t.speculative->accepted_tokens);
    }
}

void Metrics::prefix_cache(bool hit) {
    std::lock_guard<std::mutex> lk(m_);
    ++(hit ? cache_hits_ : cache_misses_);
}

void Metrics::cancelled(const std::string& reason) {
    std::lock_guard<std::mutex> lk(m_);
    ++cancelled_[reason];
}

void Metrics::refused(const std::string& reason) {
    std::lock_guard<std::mutex> lk(m_);
    ++refused_[reason];
}

int64_t Metrics::resident_bytes() {
    std::ifstream f("/proc/self/statm");
    int64_t size = 0, resident = 0;
    if (!(f >> size >> resident)) return 0;
    return resident * int64_t(sysconf(_SC_PAGESIZE));
}

namespace {
void family(std::ostringstream& o, const char* name, const char* type, const char* help) {
    o << "# HELP " << name << ' ' << help << "\n# TYPE " << name << ' ' << type << '\n';
}
template <class V>
void sample(std::ostringstream& o, const char* name, V v) {
    o << name << ' ' << v << '\n';
}
}  // namespace

std::string Metrics::render(const MetricsGauges& g) const {
    std::lock_guard<std::mutex> lk(m_);
    std::ostringstream o;
    o.precision(10);
    family(o, "dsv4_requests_total", "counter", "HTTP requests answered, by endpoint and status code.");
    for (const auto& [key, n] : requests_)
        o << "dsv4_requests_total{endpoint=\"" << key.first << "\",status=\"" << key.second << "\"} " << n << '\n';
    family(o, "dsv4_request_duration_seconds", "histogram", "Time from a request's arrival to its last byte.");
    uint64_t cum = 0;
    for (size_t b = 0; b < kBuckets.size(); ++b) {
        cum += latency_buckets_[b];
        o << "dsv4_request_duration_seconds_bucket{le=\"" << kBuckets[b] << "\"} " << cum << '\n';
    }
    cum += latency_buckets_[kBuckets.size()];
    o << "dsv4_request_duration_seconds_bucket{le=\"+Inf\"} " << cum << '\n';
    sample(o, "dsv4_request_duration_seconds_sum", latency_sum_);
    sample(o, "dsv4_request_duration_seconds_count", latency_count_);

    family(o, "dsv4_generations_total", "counter", "Generations run (finished, stopped, cancelled or timed out).");
    sample(o, "dsv4_generations_total", generations_);
    family(o, "dsv4_prompt_tokens_total", "counter", "Prompt tokens of all generations.");
    sample(o, "dsv4_prompt_tokens_total", prompt_tokens_);
    family(o, "dsv4_cached_prompt_tokens_total", "counter", "Prompt tokens served from the prefix cache (not prefilled).");
    sample(o, "dsv4_cached_prompt_tokens_total", cached_tokens_);
    family(o, "dsv4_prefill_tokens_total", "counter", "Prompt tokens prefilled.");
    sample(o, "dsv4_prefill_tokens_total", prefill_tokens_);
    family(o, "dsv4_generated_tokens_total", "counter", "Tokens sampled.");
    sample(o, "dsv4_generated_tokens_total", generated_tokens_);
    family(o, "dsv4_decode_steps_total", "counter", "Decode forwards run.");
    sample(o, "dsv4_decode_steps_total", decode_steps_);
    family(o, "dsv4_prefill_seconds_total", "counter", "Time spent prefilling.");
    sample(o, "dsv4_prefill_seconds_total", prefill_s_);
    family(o, "dsv4_decode_seconds_total", "counter", "Time spent decoding.");
    sample(o, "dsv4_decode_seconds_total", decode_s_);
    family(o, "dsv4_queue_seconds_total", "counter", "Time requests waited for a session slot.");
    sample(o, "dsv4_queue_seconds_total", queue_s_);
    family(o, "dsv4_prefill_tokens_per_second", "gauge", "Prefill rate of the last generation that prefilled.");
    sample(o, "dsv4_prefill_tokens_per_second", last_prefill_tok_s_);
    family(o, "dsv4_decode_tokens_per_second", "gauge", "Decode rate of the last generation that decoded.");
    sample(o, "dsv4_decode_tokens_per_second", last_decode_tok_s_);
    family(o, "dsv4_prefill_tokens_per_second_avg", "gauge", "Prefill tokens / prefill seconds over all generations.");
    sample(o, "dsv4_prefill_tokens_per_second_avg", prefill_s_ > 0 ? double(prefill_tokens_) / prefill_s_ : 0.0);
    family(o, "dsv4_decode_tokens_per_second_avg", "gauge",
           "Tokens out of decode forwards / decode seconds over all generations.");
    sample(o, "dsv4_decode_tokens_per_second_avg", decode_s_ > 0 ? double(decoded_tokens_) / decode_s_ : 0.0);

    family(o, "dsv4_prefix_cache_requests_total", "counter", "Generations by prefix-cache outcome.");
    o << "dsv4_prefix_cache_requests_total{result=\"hit\"} " << cache_hits_ << '\n';
    o << "dsv4_prefix_cache_requests_total{result=\"miss\"} " << cache_misses_ << '\n';
    family(o, "dsv4_prefix_cache_entries", "gauge", "Sessions held by the prefix cache.");
    sample(o, "dsv4_prefix_cache_entries", g.cache_entries);
    family(o, "dsv4_prefix_cache_bytes", "gauge", "Bytes of the sessions held by the prefix cache.");
    sample(o, "dsv4_prefix_cache_bytes", g.cache_bytes);
    family(o, "dsv4_prefix_cache_budget_bytes", "gauge", "The prefix cache's byte budget.");
    sample(o, "dsv4_prefix_cache_budget_bytes", g.cache_budget_bytes);
    family(o, "dsv4_prefix_cache_evictions_total", "counter", "Sessions dropped from the prefix cache to stay in budget.");
    sample(o, "dsv4_prefix_cache_evictions_total", g.cache_evictions);

    family(o, "dsv4_cancelled_total", "counter", "Generations stopped early, by reason.");
    for (const char* r : {"disconnect", "timeout"}) {
        auto it = cancelled_.find(r);
        o << "dsv4_cancelled_total{reason=\"" << r << "\"} " << (it == cancelled_.end() ? 0 : it->second) << '\n';
    }
    family(o, "dsv4_refused_total", "counter", "Requests refused with 503, by reason.");
    for (const char* r : {"queue_full", "memory"}) {
        auto it = refused_.find(r);
        o << "dsv4_refused_total{reason=\"" << r << "\"} " << (it == refused_.end() ? 0 : it->second) << '\n';
    }

    family(o, "dsv4_speculative_rounds_total", "counter", "Speculative verification rounds (0 without speculative decoding).");
    sample(o, "dsv4_speculative_rounds_total", spec_rounds_);
    family(o, "dsv4_speculative_drafted_tokens_total", "counter", "Tokens proposed by the drafter.");
    sample(o, "dsv4_speculative_drafted_tokens_total", spec_drafted_);
    family(o, "dsv4_speculative_accepted_tokens_total", "counter", "Drafted tokens the model accepted.");
    sample(o, "dsv4_speculative_accepted_tokens_total", spec_accepted_);

    family(o, "dsv4_queue_depth", "gauge", "Requests waiting for a session slot.");
    sample(o, "dsv4_queue_depth", g.queue_depth);
    family(o, "dsv4_active_sessions", "gauge", "Requests being prefilled or decoded.");
    sample(o, "dsv4_active_sessions", g.active_sessions);
    family(o, "dsv4_parallel_sessions", "gauge", "Session slots (--parallel).");
    sample(o, "dsv4_parallel_sessions", g.parallel);
    family(o, "dsv4_process_resident_bytes", "gauge", "Resident memory of the server process.");
    sample(o, "dsv4_process_resident_bytes", g.resident_bytes);
    family(o, "dsv4_host_available_bytes", "gauge", "Host memory available (MemAvailable, lowered to the cgroup limit).");
    sample(o, "dsv4_host_available_bytes", g.available_bytes);
    return o.str();
}

}  // namespace dsv4::server
