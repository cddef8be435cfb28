#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

#include "cli/commands.h"
#include "core/error.h"
#include "model/model.h"

namespace dsv4::cli {

namespace {
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
}  // namespace

int run_logits(const LogitsArgs& a) {
    if (a.backend == "cuda") fail("--backend cuda: this build has no CUDA backend yet");
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
    Model model(a.model);
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

}  // namespace dsv4::cli
