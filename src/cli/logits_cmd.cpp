// dsv4 logits: the logits of every position of a token sequence, as float32 [n_tokens, vocab].
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

#include <memory>

#include "cli/registry.h"
#include "core/error.h"
#include "model/model.h"

namespace dsv4::cli {

namespace {
struct LogitsArgs {
    std::string model, tokens, tokens_file, out, backend = "cpu";
    int gpus = 1;
    long chunk = 0;
};

std::vector<int32_t> parse_tokens(const std::string& text, const std::string& where) {
    std::vector<int32_t> out;
    std::istringstream in(text);
    std::string word;
    while (in >> word) {
        char* end = nullptr;
        errno = 0;
        long v = std::strtol(word.c_str(), &end, 10);
        if (*end != '\0' || errno != 0 || v < 0 || v > 0x7fffffff)
            throw UsageError(cat(where, ": '", word, "' is not a token id"));
        out.push_back(int32_t(v));
    }
    if (out.empty()) throw UsageError(cat(where, ": no token ids"));
    return out;
}
int run_logits(const LogitsArgs& a) {
    std::vector<int32_t> tokens;
    if (!a.tokens_file.empty()) {
        std::ifstream in(a.tokens_file);
        if (!in) fail(a.tokens_file, ": cannot open");
        std::stringstream ss;
        ss << in.rdbuf();
        tokens = parse_tokens(ss.str(), a.tokens_file);
    } else if (!a.tokens.empty()) {
        tokens = parse_tokens(a.tokens, "--tokens");
    } else {
        throw UsageError("logits needs --tokens or --tokens-file");
    }
    Model model(a.model, a.backend, a.gpus);
    const ModelConfig& c = model.config();
    for (int32_t t : tokens)
        if (t >= c.vocab) throw UsageError(cat("token id ", t, " is outside the vocabulary of ", c.vocab));
    const int64_t T = int64_t(tokens.size()), V = c.vocab;
    std::vector<float> logits(static_cast<size_t>(T * V));
    State state(c);
    int64_t chunk = a.chunk > 0 ? a.chunk : T;
    for (int64_t b = 0; b < T; b += chunk) {
        int64_t n = std::min(chunk, T - b);
        model.forward(tokens.data() + b, n, state, logits.data() + b * V);
    }
    std::string tmp = a.out + ".partial";
    FILE* f = std::fopen(tmp.c_str(), "wb");
    if (!f) fail(a.out, ": cannot create: ", std::strerror(errno));
    size_t wrote = std::fwrite(logits.data(), 4, logits.size(), f);
    if (std::fclose(f) != 0 || wrote != logits.size()) {
        std::remove(tmp.c_str());
        fail(a.out, ": write failed");
    }
    if (std::rename(tmp.c_str(), a.out.c_str()) != 0) fail(a.out, ": cannot rename into place");
    return 0;
}

CommandRunner setup(CLI::App& app) {
    auto a = std::make_shared<LogitsArgs>();
    CLI::App* c = app.add_subcommand("logits", "write the logits of every position as float32 [n_tokens, vocab]");
    c->add_option("--model", a->model, "GGUF model file")->required();
    auto* tok = c->add_option("--tokens", a->tokens, "token ids, e.g. \"1 2 3\"");
    auto* tf = c->add_option("--tokens-file", a->tokens_file, "file of whitespace-separated token ids");
    tok->excludes(tf);
    c->add_option("--out", a->out, "output file")->required();
    c->add_option("--chunk", a->chunk, "prefill in chunks of N tokens (0 = one chunk)")->check(CLI::NonNegativeNumber);
    c->add_option("--backend", a->backend, "compute backend")->check(CLI::IsMember({"cpu", "cuda"}));
    c->add_option("--gpus", a->gpus, "split the model over the first N GPUs (--backend cuda; docs/PARALLEL.md)")
        ->check(CLI::Range(1, 64));
    return [a] { return run_logits(*a); };
}

const bool registered = register_command(70, setup);
}  // namespace

}  // namespace dsv4::cli
