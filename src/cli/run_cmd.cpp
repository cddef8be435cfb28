// dsv4 run: generate from a prompt, streaming the text to stdout; the stage timings go to
// stderr as one final line. Ctrl-C stops generation cleanly (a second Ctrl-C kills).
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>

#include "cli/registry.h"
#include "core/error.h"
#include "core/progress.h"
#include "core/trace.h"
#include "model/model.h"
#include "runtime/default_model.h"
#include "runtime/generator.h"
#include "runtime/spec_factory.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace dsv4::cli {

namespace {
struct RunArgs {
    std::string model, prompt, prompt_file, spec = "off", trace, backend = "cpu";
    int gpus = 1;
    long n = 256;
    long band = 2048, frontier = 5;
    int spec_cap = 4;
    double spec_verify_cost = spec::ControllerOptions{}.verify_cost, spec_draft_cost = -1;
    SamplingParams sampling;
    bool chat = false, think = false, verbose = false, ignore_eos = false;
    std::vector<std::string> stop;
};

std::atomic<bool> g_cancel{false};

extern "C" void on_sigint(int) {
    if (g_cancel.load()) {
        std::signal(SIGINT, SIG_DFL);
        std::raise(SIGINT);
    }
    g_cancel.store(true);
}

struct Cancelled {};

std::string read_prompt(const RunArgs& a) {
    if (!a.prompt_file.empty()) {
        std::ifstream in(a.prompt_file, std::ios::binary);
        if (!in) fail(a.prompt_file, ": cannot open");
        std::stringstream ss;
        ss << in.rdbuf();
        return ss.str();
    }
    return a.prompt;
}

void print_state_report(const ModelConfig& c, const State& st, std::FILE* out) {
    StateGrowth g = state_growth(c);
    int n_csa = 0, n_hca = 0, n_swa = 0;
    for (AttnType t : c.attn) (t == AttnType::CSA ? n_csa : t == AttnType::HCA ? n_hca : n_swa)++;
    std::fprintf(out,
                 "state per token: CSA %.1f B/layer x %d, HCA %.1f B/layer x %d, sliding 0 B x %d; "
                 "all layers %.1f B/token; windows %zu B/layer (fixed)\n",
                 g.csa_per_token, n_csa, g.hca_per_token, n_hca, n_swa, g.all_layers_per_token, g.fixed_per_layer);
    StateBytes b = st.bytes();
    std::fprintf(out, "state now (%lld tokens): window %zu B, compressed %zu B, indexer %zu B, partial %zu B, total %zu B\n",
                 (long long)st.pos, b.window, b.compressed, b.indexer, b.partial, b.total());
}

// " | spec ...": what speculative decoding did, or why it did not run.
std::string spec_summary(const spec::SpecStats& s) {
    if (s.rounds == 0) return s.method == "off" ? cat(" | spec: off (", s.off_reason, ")")
                                                : cat(" | spec ", s.method, ": off (", s.off_reason, ")");
    char buf[320];
    std::snprintf(buf, sizeof buf,
                  " | spec %s: acceptance %.1f%% (%lld/%lld), %lld rounds, %.2f accepted/round, width %.2f, "
                  "%lld plain, draft %.3f s, verify %.3f s",
                  s.method.c_str(), 100.0 * s.acceptance(), (long long)s.accepted_tokens, (long long)s.drafted_tokens,
                  (long long)s.rounds, s.mean_accepted(), s.mean_width(), (long long)s.plain_rounds, s.draft_s, s.verify_s);
    return buf;
}

int run_generate(const RunArgs& a) {
    const spec::SpecChoice spec_choice = spec::parse_spec(a.spec);  // before anything is loaded
    spec::ControllerOptions spec_options;
    spec_options.cap = a.spec_cap;
    spec_options.verify_cost = a.spec_verify_cost;
    spec_options.draft_cost = a.spec_draft_cost;
    spec_options.validate();
    a.sampling.validate();
    std::string text = read_prompt(a);
    if (text.empty()) throw UsageError("run needs a prompt: -p TEXT or --file F");

    Model model(model_path_or_default(a.model), a.backend, a.gpus);
    if (!has_tokenizer(model.file()))
        fail(a.model.empty() ? "the default model" : a.model,
             ": the file has no tokenizer (convert it with tokenizer.json beside config.json, or --tokenizer)");
    Tokenizer tok(model.file());
    std::vector<int32_t> prompt;
    if (a.chat) {
        ChatOptions co;
        co.thinking = a.think;
        co.bos = tok.bos_id() >= 0 ? tok.token_text(tok.bos_id()) : "";
        prompt = tok.encode(render_chat({{ChatMessage::Role::User, text, "", {}}}, co), false);
    } else {
        prompt = tok.encode(text, tok.add_bos() && tok.bos_id() >= 0);
    }

    PrefillOptions po;
    po.band = a.band;
    po.frontier_bands = int(a.frontier);
    std::unique_ptr<Progress> bar;  // shown only on a terminal, and only for multi-step prefills
    po.progress = [&](int64_t done, int64_t total) {
        if (g_cancel.load()) throw Cancelled{};
        if (total <= po.band) return;
        if (!bar) bar = std::make_unique<Progress>("prefill", total, "tok");
        bar->update(done);
        if (done == total) bar->finish();
    };
    Session session(model, po);
    const spec::DrafterFactory drafters(spec_choice, model, po);
    std::unique_ptr<spec::Drafter> drafter = drafters.make();
    GenerateOptions go;
    go.drafter = drafter.get();
    go.spec = spec_options;
    go.max_tokens = a.n;
    go.sampling = a.sampling;
    go.stop = a.stop;
    go.ignore_eos = a.ignore_eos;
    GenerateEvents ev;
    ev.on_text = [](std::string_view piece) {
        std::fwrite(piece.data(), 1, piece.size(), stdout);
        std::fflush(stdout);
    };
    ev.cancel = &g_cancel;

    if (!a.trace.empty()) trace::start(a.trace);
    std::signal(SIGINT, on_sigint);
    GenerateStats st;
    try {
        st = generate(session, tok, prompt, go, ev);
    } catch (const Cancelled&) {
        std::signal(SIGINT, SIG_DFL);
        if (!a.trace.empty()) trace::print_summary(trace::finish(), stderr);
        std::fprintf(stderr, "\ncancelled during prefill\n");
        return 130;
    }
    std::signal(SIGINT, SIG_DFL);
    if (!a.trace.empty()) trace::print_summary(trace::finish(), stderr);
    std::fprintf(stdout, "\n");
    std::fflush(stdout);
    if (a.verbose) print_state_report(model.config(), session.state(), stderr);
    std::fprintf(stderr,
                 "prompt %lld tokens, prefill %.1f tok/s (%.3f s) | generated %lld tokens, decode %.1f tok/s (%.3f s)%s | "
                 "stop: %s\n",
                 (long long)st.prompt_tokens, st.prefill_tok_s(), st.prefill_s, (long long)st.gen_tokens,
                 st.decode_tok_s(), st.decode_s, spec_summary(st.spec).c_str(), to_string(st.stop));
    return st.stop == StopReason::Cancelled ? 130 : 0;
}

CommandRunner setup(CLI::App& app) {
    auto a = std::make_shared<RunArgs>();
    CLI::App* c = app.add_subcommand("run", "generate text from a prompt, streaming it to stdout");
    c->add_option("--model", a->model, "GGUF model file (default: the embedded model)");
    c->add_option("--backend", a->backend, "compute backend (cuda: the GPU)")->check(CLI::IsMember({"cpu", "cuda"}));
    c->add_option("--gpus", a->gpus, "split the model over the first N GPUs (--backend cuda; docs/PARALLEL.md)")
        ->check(CLI::Range(1, 64));
    c->add_option("--trace", a->trace, "write a Chrome/Perfetto trace (JSON) here and print the per-op table");
    auto* p = c->add_option("-p,--prompt", a->prompt, "prompt text");
    auto* f = c->add_option("--file", a->prompt_file, "read the prompt from a file");
    p->excludes(f);
    c->add_option("-n,--max-tokens", a->n, "tokens to generate at most")->check(CLI::NonNegativeNumber);
    c->add_option("--temp", a->sampling.temperature, "sampling temperature (0 = greedy)");
    c->add_option("--top-k", a->sampling.top_k, "keep the k most likely tokens (0 = off)");
    c->add_option("--top-p", a->sampling.top_p, "nucleus sampling mass (1 = off)");
    c->add_option("--min-p", a->sampling.min_p, "drop tokens below min_p x the top probability (0 = off)");
    c->add_option("--repeat-penalty", a->sampling.repeat_penalty, "penalty on recent tokens (1 = off)");
    c->add_option("--repeat-last-n", a->sampling.repeat_last_n, "how many recent tokens the penalty sees (-1 = all)");
    c->add_option("--seed", a->sampling.seed, "random seed of the sampler");
    c->add_option("--stop", a->stop, "stop string (repeatable)");
    c->add_flag("--ignore-eos", a->ignore_eos, "keep generating past the end-of-sequence token");
    c->add_flag("--chat", a->chat, "wrap the prompt as a user turn of the chat template");
    c->add_flag("--think", a->think, "with --chat: open a thinking block");
    c->add_option("--spec", a->spec, "speculative decoding: off | mtp (the model's MTP block) | draft:FILE (a draft model of the same "
                  "vocabulary) | dspark:FILE (a DSpark block drafter)");
    c->add_option("--spec-cap", a->spec_cap, "speculative decoding: most draft tokens per round (1..16)");
    c->add_option("--spec-verify-cost", a->spec_verify_cost,
                  "speculative decoding: cost of one more verified token, in decode steps (controller; 0: the "
                  "backend's estimate, on the CPU max(0.25, 1.1 / threads))");
    c->add_option("--spec-draft-cost", a->spec_draft_cost,
                  "speculative decoding: cost of drafting one token, in decode steps (< 0: the drafter's estimate)");
    c->add_option("--band", a->band, "prefill band (tokens attended together)")->check(CLI::PositiveNumber);
    c->add_option("--frontier", a->frontier, "bands per prefill step")->check(CLI::PositiveNumber);
    c->add_flag("-v,--verbose", a->verbose, "print the decode state's bytes per token and layer type");
    return [a] { return run_generate(*a); };
}

const bool registered = register_command(20, setup);
}  // namespace

}  // namespace dsv4::cli
