// dsv4 tokenize: text -> token ids with a model's tokenizer; writes a quality tape (--tape) or
// prints the ids. Used by scripts/make_tapes.py, so tapes come from the engine's own tokenizer.
#include <cstdio>
#include <fstream>
#include <iterator>
#include <memory>

#include "cli/registry.h"
#include "core/error.h"
#include "model/model.h"
#include "runtime/default_model.h"
#include "runtime/tape.h"
#include "tokenizer/tokenizer.h"

namespace dsv4::cli {

namespace {
struct TokenizeArgs {
    std::string model, text, file, tape, source;
    bool bos = false;
    long max_tokens = 0;
};

int run_tokenize(const TokenizeArgs& a) {
    std::string text = a.text;
    if (!a.file.empty()) {
        std::ifstream in(a.file, std::ios::binary);
        if (!in) fail(a.file, ": cannot open");
        text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }
    if (text.empty()) throw UsageError("tokenize needs text: --text T or --file F");
    const std::string path = model_path_or_default(a.model);
    gguf::Reader file(path);
    if (!has_tokenizer(file)) fail(path, ": the file has no tokenizer");
    Tokenizer tok(file);
    // parse_special: tapes of chat and tool-call text must hold the control tokens as ids.
    std::vector<int32_t> ids = tok.encode(text, a.bos && tok.bos_id() >= 0, true);
    if (a.max_tokens > 0 && int64_t(ids.size()) > a.max_tokens) ids.resize(size_t(a.max_tokens));
    if (!a.tape.empty()) {
        std::string source = !a.source.empty() ? a.source : a.file.empty() ? "--text" : a.file;
        write_tape(a.tape, ids, tokenizer_fingerprint(tok), int64_t(tok.vocab_size()), source);
        std::fprintf(stderr, "wrote %s: %zu tokens\n", a.tape.c_str(), ids.size());
        return 0;
    }
    for (size_t i = 0; i < ids.size(); ++i) std::printf("%s%d", i ? " " : "", ids[i]);
    std::printf("\n");
    return 0;
}

CommandRunner setup(CLI::App& app) {
    auto a = std::make_shared<TokenizeArgs>();
    CLI::App* c = app.add_subcommand("tokenize", "text to token ids (prints them, or writes a quality tape)");
    c->add_option("--model", a->model, "GGUF model file whose tokenizer to use (default: the embedded model)");
    auto* t = c->add_option("--text", a->text, "the text");
    auto* f = c->add_option("--file", a->file, "read the text from a file");
    t->excludes(f);
    c->add_flag("--bos", a->bos, "prepend the BOS token");
    c->add_option("--max-tokens", a->max_tokens, "keep the first N tokens (0 = all)")->check(CLI::NonNegativeNumber);
    c->add_option("--tape", a->tape, "write a tape file (# dsv4 tape v1 header + ids) here");
    c->add_option("--source", a->source, "the source name recorded in the tape header (default: the file)");
    return [a] { return run_tokenize(*a); };
}

const bool registered = register_command(75, setup);
}  // namespace

}  // namespace dsv4::cli
