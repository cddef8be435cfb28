#include "server/scheduler.h"

#include <algorithm>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "core/error.h"
#include "runtime/admission.h"

namespace dsv4::server {

namespace {
double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// Thrown from the prefill progress callback to stop a prefill between steps.
struct PrefillCancelled {};

// The job the calling worker thread is running: a session's progress callback is fixed when the
// session is made, but a cached session serves many jobs, one at a time, on whichever worker
// takes it, so the callback looks up the current job's flag here.
thread_local const std::atomic<bool>* t_cancel = nullptr;

struct CancelScope {
    explicit CancelScope(const std::atomic<bool>* f) { t_cancel = f; }
    ~CancelScope() { t_cancel = nullptr; }
};

size_t mark_bytes(const SessionMark& m) {
    size_t b = 0;
    for (const StateMark::Layer& l : m.state.layers) {
        b += l.window.size() * sizeof(float);
        for (const CompressorState* c : {&l.comp, &l.idx})
            b += (c->buf_kv.size() + c->buf_gate.size() + c->prev_kv.size() + c->prev_gate.size()) * sizeof(float);
    }
    return b;
}
}  // namespace

// ---- Job ----

Job::Job(std::vector<int32_t> prompt, GenerateOptions gen, Clock::time_point arrival)
    : prompt_(std::move(prompt)), gen_(std::move(gen)), arrival_(arrival) {}

void Job::wait(std::chrono::milliseconds max, Until until) {
    std::unique_lock<std::mutex> lk(m_);
    cv_.wait_for(lk, max, [&] {
        return done_ || (until == Until::Admitted && admitted_) || (until == Until::Text && !text_.empty());
    });
}

std::string Job::take_text() {
    std::lock_guard<std::mutex> lk(m_);
    std::string t;
    t.swap(text_);
    return t;
}

bool Job::admitted() const {
    std::lock_guard<std::mutex> lk(m_);
    return admitted_;
}

bool Job::done() const {
    std::lock_guard<std::mutex> lk(m_);
    return done_;
}

std::optional<ApiError> Job::error() const {
    std::lock_guard<std::mutex> lk(m_);
    return error_;
}

void Job::cancel(CancelReason why) {
    {
        std::lock_guard<std::mutex> lk(m_);
        if (why_ == CancelReason::None) why_ = why;
    }
    cancel_flag_.store(true);
    cv_.notify_all();
}

CancelReason Job::cancel_reason() const {
    std::lock_guard<std::mutex> lk(m_);
    return why_;
}

GenerateStats Job::stats() const {
    std::lock_guard<std::mutex> lk(m_);
    return stats_;
}

ServerTimings Job::timings() const {
    std::lock_guard<std::mutex> lk(m_);
    return timings_;
}

int64_t Job::cached_tokens() const {
    std::lock_guard<std::mutex> lk(m_);
    return cached_;
}

void Job::set_admitted(int64_t cached) {
    {
        std::lock_guard<std::mutex> lk(m_);
        admitted_ = true;
        cached_ = cached;
    }
    cv_.notify_all();
}

void Job::append(std::string_view text) {
    {
        std::lock_guard<std::mutex> lk(m_);
        text_.append(text);
    }
    cv_.notify_all();
}

void Job::finish(GenerateStats stats, ServerTimings t) {
    {
        std::lock_guard<std::mutex> lk(m_);
        stats_ = std::move(stats);
        timings_ = std::move(t);
        done_ = true;
    }
    cv_.notify_all();
}

void Job::fail(ApiError e) {
    {
        std::lock_guard<std::mutex> lk(m_);
        error_ = std::move(e);
        done_ = true;
    }
    cv_.notify_all();
}

// ---- Scheduler ----

Scheduler::Scheduler(const Model& model, const Tokenizer& tok, SchedulerOptions options, Metrics& metrics)
    : model_(model), tok_(tok), opt_(std::move(options)), metrics_(metrics), cache_(opt_.cache_bytes, opt_.cache_entries) {
    if (opt_.parallel < 1) throw UsageError(cat("--parallel ", opt_.parallel, " must be at least 1"));
    if (opt_.max_queue < 0) throw UsageError(cat("--max-queue ", opt_.max_queue, " must not be negative"));
    for (int i = 0; i < opt_.parallel; ++i) workers_.emplace_back([this] { worker(); });
}

Scheduler::~Scheduler() { shutdown(); }

void Scheduler::shutdown() {
    std::deque<std::shared_ptr<Job>> queued;
    {
        std::lock_guard<std::mutex> lk(m_);
        if (stopping_ && workers_.empty()) return;
        stopping_ = true;
        queued.swap(queue_);
        for (auto& j : running_) j->cancel(CancelReason::Shutdown);
    }
    for (auto& j : queued) {
        j->cancel(CancelReason::Shutdown);
        j->fail(ApiError(ErrorKind::Overloaded, "the server is shutting down"));
    }
    cv_.notify_all();
    for (auto& w : workers_) w.join();
    workers_.clear();
    cache_.clear();
}

std::shared_ptr<Job> Scheduler::submit(std::vector<int32_t> prompt, GenerateOptions gen, Clock::time_point arrival) {
    auto job = std::make_shared<Job>(std::move(prompt), std::move(gen), arrival);
    {
        std::lock_guard<std::mutex> lk(m_);
        if (stopping_) throw ApiError(ErrorKind::Overloaded, "the server is shutting down");
        if (int64_t(queue_.size()) >= opt_.max_queue && active_.load() + int64_t(queue_.size()) >= opt_.parallel) {
            metrics_.refused("queue_full");
            throw ApiError(ErrorKind::Overloaded,
                           cat("the server is busy: ", queue_.size(), " requests are waiting for ", opt_.parallel,
                               " sessions (raise --parallel or --max-queue, or retry later)"),
                           "", "queue_full");
        }
        queue_.push_back(job);
    }
    cv_.notify_one();
    return job;
}

int64_t Scheduler::queue_depth() const {
    std::lock_guard<std::mutex> lk(m_);
    return int64_t(queue_.size());
}

std::unique_ptr<Session> Scheduler::new_session() const {
    PrefillOptions po = opt_.prefill;
    po.progress = [](int64_t, int64_t) {
        if (t_cancel && t_cancel->load()) throw PrefillCancelled{};
    };
    return std::make_unique<Session>(model_, po);
}

size_t Scheduler::cached_bytes(const Cached& c) {
    const Session& s = *c.session;
    size_t b = s.state().bytes().total() + s.tokens().size() * sizeof(int32_t) + s.last_logits().size() * sizeof(float);
    if (c.mark) b += mark_bytes(*c.mark);
    return b;
}

void Scheduler::worker() {
    for (;;) {
        std::shared_ptr<Job> job;
        {
            std::unique_lock<std::mutex> lk(m_);
            cv_.wait(lk, [&] { return stopping_ || !queue_.empty(); });
            if (queue_.empty()) return;  // stopping
            job = queue_.front();
            queue_.pop_front();
            running_.push_back(job);
            ++active_;
        }
        if (job->cancel_flag_.load()) {
            // Its client left (or it timed out) while it waited: nothing to compute.
            ServerTimings t;
            t.prompt_tokens = int64_t(job->prompt().size());
            t.queue_s = seconds(Clock::now() - job->arrival());
            t.total_s = t.queue_s;
            t.stop = to_string(StopReason::Cancelled);
            GenerateStats st;
            st.prompt_tokens = t.prompt_tokens;
            st.stop = StopReason::Cancelled;
            job->finish(st, t);
        } else {
            try {
                run(*job);
            } catch (const std::exception& e) {
                job->fail(ApiError(ErrorKind::Internal, e.what()));
            }
        }
        bool idle;
        {
            std::lock_guard<std::mutex> lk(m_);
            running_.erase(std::find(running_.begin(), running_.end(), job));
            --active_;
            idle = active_.load() == 0 && queue_.empty();
        }
#if defined(__GLIBC__)
        // Prefill scratch is freed in pieces below glibc's mmap threshold; give the pages back
        // once nothing runs, so the resident size falls back to the model plus the cache.
        if (idle) malloc_trim(0);
#else
        (void)idle;
#endif
    }
}

void Scheduler::run(Job& job) {
    const Clock::time_point start = Clock::now();
    const std::vector<int32_t>& prompt = job.prompt();
    const size_t L = prompt.size();
    const ModelConfig& cfg = model_.config();

    std::optional<PrefixCache<Cached>::Taken> taken = cache_.take(prompt);
    Cached c;
    Reuse reuse;
    if (taken) {
        c = std::move(taken->value);
        reuse = taken->reuse;
    }
    const size_t cached = reuse.tokens;

    // Admission before touching the session, so a refused request leaves a cached one intact.
    try {
        admit(estimate_prefill(cfg, int64_t(L - cached), opt_.prefill.band * opt_.prefill.frontier_bands, false),
              opt_.prefill.admission, cat("prefill of ", L - cached, " tokens"));
    } catch (const Error& e) {
        if (c.session) {
            std::vector<int32_t> held = c.session->tokens();
            std::optional<size_t> mark_n;
            if (c.mark) mark_n = c.mark->n_tokens;
            size_t bytes = cached_bytes(c);
            cache_.put(std::move(held), mark_n, bytes, std::move(c));
        }
        metrics_.refused("memory");
        job.fail(ApiError(ErrorKind::Overloaded, e.what(), "", "insufficient_memory"));
        return;
    }
    if (!c.session) c.session = new_session();
    if (!c.drafter && opt_.drafters && opt_.drafters->enabled()) c.drafter = opt_.drafters->make();
    if (reuse.rewind) c.session->rewind(*c.mark);
    metrics_.prefix_cache(cached > 0);
    job.set_admitted(int64_t(cached));

    ServerTimings t;
    t.prompt_tokens = int64_t(L);
    t.cached_tokens = int64_t(cached);
    t.cache_hit = cached > 0;
    t.queue_s = seconds(start - job.arrival());

    GenerateEvents ev;
    ev.on_text = [&job](std::string_view piece) { job.append(piece); };
    ev.cancel = &job.cancel_flag_;
    GenerateStats st;
    double own_prefill_s = 0;
    try {
        CancelScope scope(&job.cancel_flag_);
        // Prefill all but the last prompt token here and mark there: that is the point the next
        // turn of this conversation can come back to (see prefix_cache.h). generate() then
        // prefills the last token and samples.
        const Clock::time_point t0 = Clock::now();
        if (cached + 1 < L) c.session->prefill(prompt.data() + cached, int64_t(L - 1 - cached), nullptr);
        if (c.session->tokens().size() + 1 == L) c.mark = c.session->mark();
        own_prefill_s = seconds(Clock::now() - t0);
        GenerateOptions go = job.options();
        go.drafter = c.drafter.get();
        go.spec = opt_.spec;
        st = opt_.generate ? opt_.generate(*c.session, tok_, prompt, go, ev) : generate(*c.session, tok_, prompt, go, ev);
    } catch (const PrefillCancelled&) {
        // Stopped between prefill steps: the session's logits do not match its tokens, drop it.
        t.prefill_s = own_prefill_s;
        t.total_s = seconds(Clock::now() - job.arrival());
        t.stop = to_string(StopReason::Cancelled);
        st.prompt_tokens = int64_t(L);
        st.cached_tokens = int64_t(cached);
        st.stop = StopReason::Cancelled;
        metrics_.generation(t);
        job.finish(st, t);
        return;
    } catch (const UsageError& e) {
        job.fail(ApiError(ErrorKind::InvalidRequest, e.what()));
        return;
    } catch (const std::exception& e) {
        job.fail(ApiError(ErrorKind::Internal, e.what()));
        return;
    }
    t.prefill_s = own_prefill_s + st.prefill_s;
    t.generated_tokens = st.gen_tokens;
    t.decode_steps = st.decode_steps;
    t.decode_s = st.decode_s;
    if (c.drafter) {
        SpeculativeTimings sp;
        sp.method = st.spec.method;
        sp.rounds = st.spec.rounds;
        sp.drafted_tokens = st.spec.drafted_tokens;
        sp.accepted_tokens = st.spec.accepted_tokens;
        t.speculative = sp;
    }
    t.total_s = seconds(Clock::now() - job.arrival());
    t.stop = to_string(st.stop);
    st.cached_tokens = int64_t(cached);

    // Back into the cache before the job reports done, so a client's next request finds it.
    if (c.mark && c.mark->n_tokens > c.session->tokens().size()) c.mark.reset();
    std::vector<int32_t> held = c.session->tokens();
    std::optional<size_t> mark_n;
    if (c.mark) mark_n = c.mark->n_tokens;
    size_t bytes = cached_bytes(c);
    cache_.put(std::move(held), mark_n, bytes, std::move(c));
    metrics_.generation(t);
    job.finish(std::move(st), t);
}

}  // namespace dsv4::server
