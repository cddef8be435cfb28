// dsv4 serve: the OpenAI- and Anthropic-compatible HTTP server (src/server/, docs/SERVER.md).
// Runs until SIGINT or SIGTERM, then cancels what is running and exits 0.
#include <pthread.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>

#include "cli/registry.h"
#include "core/error.h"
#include "core/trace.h"
#include "model/model.h"
#include "runtime/default_model.h"
#include "runtime/spec_factory.h"
#include "server/server.h"
#include "tokenizer/tokenizer.h"

namespace dsv4::cli {

namespace {
struct ServeArgs {
    std::string model, host = "127.0.0.1", name, api_key, spec = "off", trace, backend = "cpu";
    int gpus = 1;
    int spec_cap = spec::ControllerOptions{}.cap;
    double spec_verify_cost = spec::ControllerOptions{}.verify_cost;
    std::vector<std::string> aliases;
    int port = 8080;
    long ctx = 0, parallel = 2, max_queue = 64, cache_mib = 1024, cache_entries = 32, max_tokens = 4096;
    long band = 2048, frontier = 5, http_threads = 0, max_body_mib = 32;
    double timeout = 600, headroom_gib = 4;
    SamplingParams sampling;
    bool think = false, quiet = false;
};

int run_serve(ServeArgs& a) {
    if (a.api_key.empty())
        if (const char* k = std::getenv("DSV4_API_KEY")) a.api_key = k;
    const spec::SpecChoice spec_choice = spec::parse_spec(a.spec);  // before anything is loaded
    const std::string path = model_path_or_default(a.model);
    Model model(path, a.backend, a.gpus);
    if (!has_tokenizer(model.file()))
        fail(path, ": the file has no tokenizer (convert it with tokenizer.json beside config.json, or --tokenizer)");
    Tokenizer tok(model.file());

    server::ServerOptions o;
    o.host = a.host;
    o.port = a.port;
    o.model_name = a.name.empty() ? std::filesystem::path(path).stem().string() : a.name;
    o.aliases = a.aliases;
    o.api_key = a.api_key;
    o.ctx = a.ctx;
    o.timeout_s = a.timeout;
    o.max_body_bytes = size_t(a.max_body_mib) << 20;
    o.http_threads = int(a.http_threads);
    o.limits.default_max_tokens = a.max_tokens;
    o.limits.sampling = a.sampling;
    o.limits.thinking = a.think;
    o.scheduler.parallel = int(a.parallel);
    o.scheduler.max_queue = int(a.max_queue);
    o.scheduler.cache_bytes = size_t(a.cache_mib) << 20;
    o.scheduler.cache_entries = size_t(a.cache_entries);
    o.scheduler.prefill.band = a.band;
    o.scheduler.prefill.frontier_bands = int(a.frontier);
    o.scheduler.prefill.admission.headroom_bytes = uint64_t(a.headroom_gib * double(uint64_t(1) << 30));
    const spec::DrafterFactory drafters(spec_choice, model, o.scheduler.prefill);
    o.scheduler.drafters = &drafters;
    o.scheduler.spec.cap = a.spec_cap;
    o.scheduler.spec.verify_cost = a.spec_verify_cost;
    o.scheduler.spec.validate();
    if (!a.quiet) o.log = [](const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); };

    // Every thread the server starts inherits this mask, so the signals reach only sigwait.
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, nullptr);
    std::signal(SIGPIPE, SIG_IGN);  // a client that hangs up must not kill the server

    if (!a.trace.empty()) trace::start(a.trace);
    server::Server srv(model, tok, o);
    const int port = srv.start();
    std::fprintf(stderr, "dsv4 serve: listening on http://%s:%d (model '%s', context %lld tokens, %ld parallel sessions%s)\n",
                 a.host.c_str(), port, o.model_name.c_str(), (long long)srv.ctx(), a.parallel,
                 a.api_key.empty() ? "" : ", API key required");
    int sig = 0;
    sigwait(&set, &sig);
    std::fprintf(stderr, "dsv4 serve: %s, stopping\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
    srv.stop();
    if (!a.trace.empty()) trace::print_summary(trace::finish(), stderr);
    return 0;
}

CommandRunner setup(CLI::App& app) {
    auto a = std::make_shared<ServeArgs>();
    a->sampling.temperature = 1.0f;  // the OpenAI and Anthropic default for requests that name none
    CLI::App* c = app.add_subcommand("serve", "OpenAI- and Anthropic-compatible HTTP server (docs/SERVER.md)");
    c->add_option("--model", a->model, "GGUF model file (default: the embedded model)");
    c->add_option("--backend", a->backend, "compute backend (cuda: the GPU)")->check(CLI::IsMember({"cpu", "cuda"}));
    c->add_option("--gpus", a->gpus, "split the model over the first N GPUs (--backend cuda; docs/PARALLEL.md)")
        ->check(CLI::Range(1, 64));
    c->add_option("--host", a->host, "address to listen on")->capture_default_str();
    c->add_option("--port", a->port, "TCP port (0: any free one)")->check(CLI::Range(0, 65535))->capture_default_str();
    c->add_option("--model-name", a->name, "model id clients send (default: the file name without .gguf)");
    c->add_option("--alias", a->aliases, "another model id accepted as this model (repeatable)");
    c->add_option("--api-key", a->api_key, "require this key (Bearer or x-api-key); default $DSV4_API_KEY");
    c->add_option("--ctx", a->ctx, "context length in tokens (0: the model's)")->check(CLI::NonNegativeNumber);
    c->add_option("--parallel", a->parallel, "sessions generating at once")->check(CLI::Range(1, 256))->capture_default_str();
    c->add_option("--max-queue", a->max_queue, "requests waiting beyond those; more get 503")
        ->check(CLI::Range(0, 100000))->capture_default_str();
    c->add_option("--cache-mib", a->cache_mib, "prefix cache budget in MiB")->check(CLI::NonNegativeNumber)->capture_default_str();
    c->add_option("--cache-entries", a->cache_entries, "sessions the prefix cache keeps at most")
        ->check(CLI::NonNegativeNumber)->capture_default_str();
    c->add_option("--timeout", a->timeout, "per-request timeout in seconds")->check(CLI::PositiveNumber)->capture_default_str();
    c->add_option("--max-tokens", a->max_tokens, "max_tokens of requests that name none")
        ->check(CLI::PositiveNumber)->capture_default_str();
    c->add_option("--temp", a->sampling.temperature, "temperature of requests that name none")->capture_default_str();
    c->add_option("--top-p", a->sampling.top_p, "top_p of requests that name none");
    c->add_option("--top-k", a->sampling.top_k, "top_k of requests that name none (0 = off)");
    c->add_option("--min-p", a->sampling.min_p, "min_p of requests that name none (0 = off)");
    c->add_option("--repeat-penalty", a->sampling.repeat_penalty, "repeat_penalty of requests that name none (1 = off)");
    c->add_flag("--think", a->think, "chat requests that do not say think first (reasoning on)");
    c->add_option("--spec", a->spec, "speculative decoding: off | mtp | draft:FILE | dspark:FILE (one drafter per session)")
        ->capture_default_str();
    c->add_option("--spec-cap", a->spec_cap, "speculative decoding: most draft tokens per round")->capture_default_str();
    c->add_option("--spec-verify-cost", a->spec_verify_cost,
                  "speculative decoding: the cost of one more verified token, in one-token forwards (0: the "
                  "backend's estimate, on the CPU max(0.25, 1.1 / threads))")
        ->capture_default_str();
    c->add_option("--trace", a->trace, "record a Chrome/Perfetto trace until shutdown; written here on exit");
    c->add_option("--band", a->band, "prefill band (tokens attended together)")->check(CLI::PositiveNumber);
    c->add_option("--frontier", a->frontier, "bands per prefill step")->check(CLI::PositiveNumber);
    c->add_option("--headroom-gib", a->headroom_gib, "memory admission: GiB that must stay free")
        ->check(CLI::NonNegativeNumber)->capture_default_str();
    c->add_option("--max-body-mib", a->max_body_mib, "largest request body in MiB")->check(CLI::PositiveNumber)->capture_default_str();
    c->add_option("--http-threads", a->http_threads, "HTTP worker threads (0: parallel + max-queue + 16)")
        ->check(CLI::NonNegativeNumber);
    c->add_flag("-q,--quiet", a->quiet, "no request log on stderr");
    return [a] { return run_serve(*a); };
}

const bool registered = register_command(40, setup);
}  // namespace

}  // namespace dsv4::cli
