// The path every generation endpoint shares: parse and tokenize on the HTTP thread, queue the
// job, wait for admission (so a 503 can still be a status), then answer whole or as a stream.
// While it waits, the client's connection is probed: a client that leaves cancels its job, in
// the queue or mid-generation, and frees its slot for the others.
#include <chrono>
#include <ctime>
#include <random>

#include "core/error.h"
#include "server/client_probe.h"
#include "server/json_fields.h"
#include "server/prompt.h"
#include "server/server_impl.h"

namespace dsv4::server {

namespace {

using namespace std::chrono_literals;

// One generation request, shared by the handler and (streaming) its content provider, which
// httplib calls after the handler has returned.
struct Flow {
    Flow(const httplib::Request& req, Metrics& m) : probe(req), metrics(m) {}

    GenRequest g;
    BuiltPrompt prompt;
    ResponseMeta meta;
    std::shared_ptr<Job> job;
    std::unique_ptr<OutputParser> parser;
    std::unique_ptr<StreamEncoder> enc;
    ClientProbe probe;
    Metrics& metrics;
    Clock::time_point deadline;
    Clock::time_point last_write;
    bool started = false;
    bool cancelled = false;

    void cancel(CancelReason why) {
        if (cancelled) return;
        cancelled = true;
        job->cancel(why);
        metrics.cancelled(why == CancelReason::Timeout ? "timeout" : "disconnect");
    }

    std::vector<OutputEvent> feed(const std::string& piece) {
        if (piece.empty()) return {};
        if (g.kind == GenRequest::Kind::Chat) return parser->push(piece);
        OutputEvent e;
        e.kind = OutputEvent::Kind::Text;
        e.text = piece;
        return {e};
    }
    std::vector<OutputEvent> end() { return g.kind == GenRequest::Kind::Chat ? parser->finish() : std::vector<OutputEvent>{}; }

    GenResult admitted() const {
        GenResult r;
        r.prompt_tokens = int64_t(prompt.tokens.size());
        r.cached_tokens = job->cached_tokens();
        return r;
    }
    GenResult result() const {
        GenResult r = admitted();
        GenerateStats st = job->stats();
        r.text = st.text;
        r.stop = st.stop;
        r.stop_string = st.stop_string;
        r.completion_tokens = st.gen_tokens;
        r.timings = job->timings();
        if (g.kind == GenRequest::Kind::Chat) r.output = parser->output();
        else r.output.text = st.text;
        return r;
    }
};

enum class Waited { Ready, Gone, TimedOut };

// Waits for the job to reach `until`, probing the client every 50 ms.
Waited wait_for(Flow& f, Job::Until until) {
    for (;;) {
        if (f.job->done() || (until == Job::Until::Admitted && f.job->admitted())) return Waited::Ready;
        f.job->wait(50ms, until);
        if (f.job->done() || (until == Job::Until::Admitted && f.job->admitted())) return Waited::Ready;
        if (f.probe.gone()) return Waited::Gone;
        if (Clock::now() >= f.deadline) return Waited::TimedOut;
    }
}

ApiError timeout_error(double s) {
    return ApiError(ErrorKind::Timeout, cat("the request ran past the server's timeout of ", s, " s (--timeout)"), "",
                    "timeout");
}

// One round of a stream: new text to events, the end when the job is done, a keep-alive when
// quiet, and the client check. false ends the response (the client is gone).
bool pump(Flow& f, httplib::DataSink& sink, double timeout_s) {
    std::string out;
    if (!f.started) {
        f.started = true;
        out += f.enc->start(f.admitted());
    } else {
        f.job->wait(100ms, Job::Until::Text);
    }
    const bool done = f.job->done();  // before take_text: once done, no text can follow
    for (const OutputEvent& e : f.feed(f.job->take_text())) out += f.enc->event(e);
    auto write = [&](const std::string& s) { return s.empty() || sink.write(s.data(), s.size()); };
    if (done) {
        if (auto err = f.job->error()) {
            out += f.enc->error(*err);
        } else {
            for (const OutputEvent& e : f.end()) out += f.enc->event(e);
            const GenResult r = f.result();
            note_generation(r.timings);
            out += f.enc->finish(r);
        }
        const bool ok = write(out);
        sink.done();
        return ok;
    }
    const Clock::time_point now = Clock::now();
    if (now >= f.deadline) {
        f.cancel(CancelReason::Timeout);
        write(out + f.enc->error(timeout_error(timeout_s)));
        sink.done();
        return true;
    }
    if (out.empty() && now - f.last_write > 10s) out = f.enc->keepalive();
    if (!out.empty()) {
        if (!write(out)) {
            f.cancel(CancelReason::Disconnect);
            return false;
        }
        f.last_write = now;
    }
    if (f.probe.gone() || !sink.is_writable()) {
        f.cancel(CancelReason::Disconnect);
        return false;
    }
    return true;
}

uint64_t random_seed() {
    static std::mutex m;
    static std::random_device rd;
    std::lock_guard<std::mutex> lk(m);
    return (uint64_t(rd()) << 32) ^ rd();
}

}  // namespace

void Server::Impl::generation(const Endpoint& ep, const httplib::Request& req, httplib::Response& res) {
    const Clock::time_point arrival = request_arrival();
    const Dialect d = ep.dialect();
    auto f = std::make_shared<Flow>(req, metrics);
    f->deadline = arrival + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(opt.timeout_s));
    try {
        f->g = ep.parse(parse_body(req.body), opt.limits);
        check_model(f->g.model);
        f->prompt = build_prompt(f->g, tok);
        const int64_t n = int64_t(f->prompt.tokens.size());
        if (n >= ctx)
            throw ApiError(ErrorKind::InvalidRequest,
                           cat("the prompt has ", n, " tokens but the context length is ", ctx,
                               " (at least one token must be left to generate): shorten the ",
                               f->g.kind == GenRequest::Kind::Text ? "prompt" : "conversation"),
                           f->g.kind == GenRequest::Kind::Text ? "prompt" : "messages", "context_length_exceeded");
        GenerateOptions go;
        // What does not fit in the context is cut: the answer then ends with a length stop.
        go.max_tokens = std::min(f->g.max_tokens.value_or(opt.limits.default_max_tokens), ctx - n);
        go.sampling = f->g.sampling;
        if (!f->g.seed_given) go.sampling.seed = random_seed();
        go.stop = f->g.stop;
        go.ignore_eos = f->g.ignore_eos;
        if (f->g.echo) f->g.echo_fields["echo_text"] = f->prompt.echo_text;
        f->parser = std::make_unique<OutputParser>(f->prompt.thinking);
        f->meta = {random_id(ep.id_prefix()), int64_t(std::time(nullptr)), f->g.model};
        f->job = scheduler.submit(f->prompt.tokens, go, arrival);
    } catch (const ApiError& e) {
        send_error(res, e, d);
        return;
    } catch (const UsageError& e) {  // a sampling value the runtime refused
        send_error(res, ApiError(ErrorKind::InvalidRequest, e.what()), d);
        return;
    }

    switch (wait_for(*f, f->g.stream ? Job::Until::Admitted : Job::Until::Done)) {
        case Waited::Ready: break;
        case Waited::Gone:
            f->cancel(CancelReason::Disconnect);
            res.status = 499;  // nginx's "client closed request": only the log sees it
            return;
        case Waited::TimedOut:
            f->cancel(CancelReason::Timeout);
            send_error(res, timeout_error(opt.timeout_s), d);
            return;
    }
    if (auto err = f->job->error()) {
        send_error(res, *err, d);
        return;
    }
    if (!f->g.stream) {
        GenResult r = f->result();
        if (f->g.kind == GenRequest::Kind::Chat) {
            f->parser->push(r.text);
            f->parser->finish();
            r.output = f->parser->output();
        }
        note_generation(r.timings);
        res.set_content(ep.body(f->g, r, f->meta).dump(-1, ' ', false, json::error_handler_t::replace),
                        "application/json");
        return;
    }
    f->enc = ep.stream(f->g, f->meta);
    f->last_write = Clock::now();
    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Accel-Buffering", "no");  // tells nginx-style proxies not to buffer the stream
    const double timeout_s = opt.timeout_s;
    res.set_chunked_content_provider(
        "text/event-stream", [f, timeout_s](size_t, httplib::DataSink& sink) { return pump(*f, sink, timeout_s); },
        [f](bool) {
            // However the response ended, a generation still running has nobody to go to.
            if (!f->job->done()) f->cancel(CancelReason::Disconnect);
        });
}

}  // namespace dsv4::server
