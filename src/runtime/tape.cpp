#include "runtime/tape.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "runtime/sha256.h"

namespace dsv4 {

namespace {
std::string header_field(const std::string& line, const std::string& key) {
    std::istringstream in(line);
    for (std::string w; in >> w;)
        if (w.rfind(key + "=", 0) == 0) return w.substr(key.size() + 1);
    return "";
}
}  // namespace

Tape read_tape(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) fail(path, ": cannot open the tape");
    Tape t;
    t.path = path;
    t.name = std::filesystem::path(path).stem().string();
    std::string line;
    bool first = true;
    while (std::getline(in, line)) {
        if (first && line.rfind("#", 0) == 0) {
            if (line.find("dsv4 tape v1") == std::string::npos) fail(path, ": the header is not '# dsv4 tape v1 ...'");
            t.tokenizer = header_field(line, "tokenizer");
            t.source = header_field(line, "source");
            std::string v = header_field(line, "vocab");
            if (!v.empty()) t.vocab = std::atoll(v.c_str());
            first = false;
            continue;
        }
        first = false;
        std::istringstream words(line);
        for (std::string w; words >> w;) {
            char* end = nullptr;
            errno = 0;
            long v = std::strtol(w.c_str(), &end, 10);
            if (*end != '\0' || errno != 0 || v < 0 || v > 0x7fffffff) fail(path, ": '", w, "' is not a token id");
            t.tokens.push_back(int32_t(v));
        }
    }
    if (t.tokens.empty()) fail(path, ": the tape has no token ids");
    return t;
}

std::vector<Tape> read_tapes(const std::string& dir) {
    std::error_code ec;
    if (!std::filesystem::is_directory(dir, ec)) throw UsageError(cat("--tapes ", dir, ": not a folder"));
    std::vector<std::string> files;
    for (const auto& e : std::filesystem::directory_iterator(dir, ec))
        if (e.is_regular_file() && e.path().extension() == ".tokens") files.push_back(e.path().string());
    std::sort(files.begin(), files.end());
    if (files.empty()) throw UsageError(cat("--tapes ", dir, ": no *.tokens files"));
    std::vector<Tape> out;
    for (const std::string& f : files) out.push_back(read_tape(f));
    return out;
}

void write_tape(const std::string& path, const std::vector<int32_t>& ids, const std::string& fingerprint,
                int64_t vocab, const std::string& source) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    if (!out) fail(path, ": cannot create the tape");
    out << "# dsv4 tape v1 tokenizer=" << fingerprint << " vocab=" << vocab << " source=" << source
        << " tokens=" << ids.size() << "\n";
    // 16 ids a line: diffable, and short lines for editors.
    for (size_t i = 0; i < ids.size(); ++i) out << ids[i] << ((i % 16 == 15 || i + 1 == ids.size()) ? "\n" : " ");
    if (!out) fail(path, ": write failed");
}

std::string tokenizer_fingerprint(const Tokenizer& tok) {
    Sha256 h;
    const TokenizerSpec& s = tok.spec();
    for (const std::string& t : s.tokens) {
        h.update(t);
        h.update("\n", 1);
    }
    h.update("\x1e", 1);
    for (const std::string& m : s.merges) {
        h.update(m);
        h.update("\n", 1);
    }
    return h.hex().substr(0, 16);
}

void check_tape(const Tape& t, int64_t vocab, const std::string& fingerprint) {
    if (!t.tokenizer.empty() && !fingerprint.empty() && t.tokenizer != fingerprint)
        fail(t.path, ": made with tokenizer ", t.tokenizer, ", the model's is ", fingerprint,
             " (remake the tapes: scripts/make_tapes.py)");
    for (int32_t id : t.tokens)
        if (id >= vocab) fail(t.path, ": token ", id, " is outside the model's vocabulary of ", vocab);
}

}  // namespace dsv4
