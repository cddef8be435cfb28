// Trace scopes: Chrome / Perfetto trace-event JSON ("X" complete events) of named scopes, and a
// per-op summary table. Off unless trace::start() was called; a scope then costs one relaxed
// load and a branch on entry and a branch on exit, and nothing is recorded.
//
//     trace::start("out.json");            // begin recording (clears earlier events)
//     { DSV4_TRACE("matmul"); ... }         // a scope; DSV4_TRACE_ARG("layer", l) adds an int
//     trace::Summary s = trace::finish();   // stop, write the file, return the summary
//     trace::print_summary(s, stderr);
//
// Events go to per-thread buffers (no lock on the hot path), so scopes may open inside
// parallel_for workers; each thread is one track ("tid") in the viewer. Scope names must be
// string literals (only the pointer is stored).
#pragma once
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace dsv4::trace {

namespace detail {
inline std::atomic<bool> g_enabled{false};
int64_t now_ns();
void record(const char* name, int64_t arg, int64_t t0_ns, int64_t t1_ns);
}  // namespace detail

inline bool enabled() { return detail::g_enabled.load(std::memory_order_relaxed); }

class Scope {
public:
    explicit Scope(const char* name, int64_t arg = -1) {
        if (enabled()) {
            name_ = name;
            arg_ = arg;
            t0_ = detail::now_ns();
        }
    }
    ~Scope() {
        if (name_) detail::record(name_, arg_, t0_, detail::now_ns());
    }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

private:
    const char* name_ = nullptr;
    int64_t arg_ = -1;
    int64_t t0_ = 0;
};

struct OpStats {
    std::string name;
    int64_t calls = 0;
    double total_ms = 0;  // inclusive: nested scopes counted inside their parents too
    double self_ms = 0;   // exclusive: minus the time of scopes nested inside (same thread)
    double self_share = 0;  // self_ms / sum of all self_ms (the column sums to 1)
};

struct Summary {
    std::string path;       // the file written ("" when none)
    int64_t events = 0;
    int64_t dropped = 0;    // scopes not kept because a thread's buffer was full
    double wall_ms = 0;     // from start() to finish()
    std::vector<OpStats> ops;  // by self time, largest first
};

// Starts recording; the JSON goes to path at finish() (an empty path records without a file,
// for the summary alone). Throws dsv4::Error when path cannot be created (checked now, so a
// bad path fails before the work it was to trace). Each thread keeps at most
// max_events_per_thread scopes (32 bytes each), so a long-running server cannot grow without
// bound; later ones are counted as dropped. Call start() and finish() while no traced work
// runs (a server: before it starts and after it stops).
void start(const std::string& path, int64_t max_events_per_thread = 8'000'000);
bool active();
// Stops recording, writes the file (when start() had a path) and returns the summary.
// Without a start() it returns an empty summary.
Summary finish();
// The table: op, calls, total ms, self ms, self share.
void print_summary(const Summary& s, std::FILE* out);

}  // namespace dsv4::trace

#define DSV4_TRACE_CAT2(a, b) a##b
#define DSV4_TRACE_CAT(a, b) DSV4_TRACE_CAT2(a, b)
// A scope named `name` (a string literal) until the end of the enclosing block.
#define DSV4_TRACE(name) ::dsv4::trace::Scope DSV4_TRACE_CAT(dsv4_trace_scope_, __LINE__)(name)
// The same with an integer argument (a layer index, a token count) shown in the viewer; the
// summary groups by name alone.
#define DSV4_TRACE_ARG(name, arg) \
    ::dsv4::trace::Scope DSV4_TRACE_CAT(dsv4_trace_scope_, __LINE__)(name, static_cast<int64_t>(arg))
