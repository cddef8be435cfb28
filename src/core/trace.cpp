#include "core/trace.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>

#include "core/error.h"

namespace dsv4::trace {

namespace {
struct Event {
    const char* name;
    int64_t arg;
    int64_t t0, t1;
};

struct Buffer {
    int tid = 0;
    std::vector<Event> events;
    int64_t dropped = 0;
};

struct Registry {
    std::mutex m;
    std::vector<std::unique_ptr<Buffer>> buffers;  // never freed: pool threads outlive traces
    std::string path;
    int64_t t_start = 0;
    std::atomic<int64_t> cap{0};
};

Registry& registry() {
    static Registry r;
    return r;
}

thread_local Buffer* tl_buffer = nullptr;

Buffer& my_buffer() {
    if (!tl_buffer) {
        Registry& r = registry();
        std::lock_guard<std::mutex> lk(r.m);
        r.buffers.push_back(std::make_unique<Buffer>());
        r.buffers.back()->tid = int(r.buffers.size());
        r.buffers.back()->events.reserve(4096);
        tl_buffer = r.buffers.back().get();
    }
    return *tl_buffer;
}

void write_escaped(std::FILE* f, const char* s) {
    for (; *s; ++s) {
        if (*s == '"' || *s == '\\') std::fputc('\\', f);
        if (static_cast<unsigned char>(*s) >= 0x20) std::fputc(*s, f);
    }
}

void write_json(const std::string& path, const std::vector<Buffer*>& bufs, int64_t t_start) {
    std::string tmp = path + ".partial";
    std::FILE* f = std::fopen(tmp.c_str(), "wb");
    if (!f) fail(path, ": cannot create the trace file");
    std::fprintf(f, "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n");
    bool first = true;
    for (const Buffer* b : bufs) {
        std::fprintf(f, "%s{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":1,\"tid\":%d,\"args\":{\"name\":\"thread %d\"}}",
                     first ? "" : ",\n", b->tid, b->tid);
        first = false;
        for (const Event& e : b->events) {
            std::fprintf(f, ",\n{\"ph\":\"X\",\"cat\":\"dsv4\",\"name\":\"");
            write_escaped(f, e.name);
            std::fprintf(f, "\",\"pid\":1,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f", b->tid, double(e.t0 - t_start) / 1e3,
                         double(e.t1 - e.t0) / 1e3);
            if (e.arg >= 0) std::fprintf(f, ",\"args\":{\"n\":%lld}", (long long)e.arg);
            std::fputc('}', f);
        }
    }
    std::fprintf(f, "\n]}\n");
    if (std::fclose(f) != 0) {
        std::remove(tmp.c_str());
        fail(path, ": writing the trace failed");
    }
    if (std::rename(tmp.c_str(), path.c_str()) != 0) fail(path, ": cannot rename the trace into place");
}

// Inclusive and exclusive time per name. Scopes of one thread nest (they are RAII), so after
// sorting by start (longer first on ties) a stack of open scopes finds each one's parent.
std::vector<OpStats> summarise(const std::vector<Buffer*>& bufs) {
    std::map<std::string, OpStats> by_name;
    for (const Buffer* b : bufs) {
        std::vector<Event> ev = b->events;
        std::sort(ev.begin(), ev.end(), [](const Event& x, const Event& y) {
            return x.t0 != y.t0 ? x.t0 < y.t0 : x.t1 > y.t1;
        });
        std::vector<int64_t> child(ev.size(), 0);
        std::vector<size_t> stack;
        for (size_t i = 0; i < ev.size(); ++i) {
            while (!stack.empty() && ev[stack.back()].t1 <= ev[i].t0) stack.pop_back();
            if (!stack.empty()) child[stack.back()] += ev[i].t1 - ev[i].t0;
            stack.push_back(i);
        }
        for (size_t i = 0; i < ev.size(); ++i) {
            OpStats& s = by_name[ev[i].name];
            s.name = ev[i].name;
            s.calls += 1;
            s.total_ms += double(ev[i].t1 - ev[i].t0) / 1e6;
            s.self_ms += double(ev[i].t1 - ev[i].t0 - child[i]) / 1e6;
        }
    }
    std::vector<OpStats> out;
    double self_sum = 0;
    for (auto& [name, s] : by_name) {
        out.push_back(s);
        self_sum += s.self_ms;
    }
    for (OpStats& s : out) s.self_share = self_sum > 0 ? s.self_ms / self_sum : 0;
    std::sort(out.begin(), out.end(), [](const OpStats& a, const OpStats& b) {
        return a.self_ms != b.self_ms ? a.self_ms > b.self_ms : a.name < b.name;
    });
    return out;
}
}  // namespace

namespace detail {
int64_t now_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
}
void record(const char* name, int64_t arg, int64_t t0, int64_t t1) {
    Buffer& b = my_buffer();
    if (int64_t(b.events.size()) >= registry().cap.load(std::memory_order_relaxed)) {
        ++b.dropped;
        return;
    }
    b.events.push_back({name, arg, t0, t1});
}
}  // namespace detail

void start(const std::string& path, int64_t max_events_per_thread) {
    Registry& r = registry();
    if (!path.empty()) {
        // Fail now rather than after the work: the .partial file finish() writes must be creatable.
        std::string tmp = path + ".partial";
        std::FILE* f = std::fopen(tmp.c_str(), "wb");
        if (!f) fail(path, ": cannot create the trace file");
        std::fclose(f);
        std::remove(tmp.c_str());
    }
    std::lock_guard<std::mutex> lk(r.m);
    for (auto& b : r.buffers) {
        b->events.clear();
        b->dropped = 0;
    }
    r.cap = std::max<int64_t>(0, max_events_per_thread);
    r.path = path;
    r.t_start = detail::now_ns();
    detail::g_enabled.store(true, std::memory_order_relaxed);
}

bool active() { return enabled(); }

Summary finish() {
    Summary s;
    if (!enabled()) return s;
    detail::g_enabled.store(false, std::memory_order_relaxed);
    Registry& r = registry();
    std::lock_guard<std::mutex> lk(r.m);
    std::vector<Buffer*> bufs;
    for (auto& b : r.buffers) {
        s.dropped += b->dropped;
        if (!b->events.empty()) bufs.push_back(b.get());
    }
    s.path = r.path;
    s.wall_ms = double(detail::now_ns() - r.t_start) / 1e6;
    for (const Buffer* b : bufs) s.events += int64_t(b->events.size());
    s.ops = summarise(bufs);
    if (!r.path.empty()) write_json(r.path, bufs, r.t_start);
    for (auto& b : r.buffers) b->events.clear();
    return s;
}

void print_summary(const Summary& s, std::FILE* out) {
    std::fprintf(out, "trace: %lld events over %.1f ms%s%s", (long long)s.events, s.wall_ms,
                 s.path.empty() ? "" : ", written to ", s.path.c_str());
    if (s.dropped) std::fprintf(out, " (%lld more dropped: the per-thread limit was reached)", (long long)s.dropped);
    std::fprintf(out, "; self time is summed over threads\n");
    std::fprintf(out, "%-24s %10s %12s %12s %7s\n", "op", "calls", "total ms", "self ms", "self %");
    for (const OpStats& o : s.ops)
        std::fprintf(out, "%-24s %10lld %12.3f %12.3f %6.1f%%\n", o.name.c_str(), (long long)o.calls, o.total_ms,
                     o.self_ms, 100.0 * o.self_share);
}

}  // namespace dsv4::trace
