// The rule that makes programmatic dependent launch safe (src/backend/cuda/common.cuh, launch()):
// a kernel launched so may start while its predecessor still runs, so it must wait
// (grid_begin() or grid_dependency_wait()) before it touches what an earlier kernel writes. This
// test reads the CUDA backend's sources (it runs without a GPU, in CI) and checks that every
// __global__ function either waits, or is only ever launched plainly (name<<<...>>>), never through
// launch(), launch_ex() or cudaLaunchKernelEx.
#include <gtest/gtest.h>

#include <cctype>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;

std::string read_file(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

// Index of the bracket closing the one at `open` (same kind), or npos.
size_t matching(const std::string& s, size_t open) {
    const char o = s[open], c = o == '(' ? ')' : '}';
    int depth = 0;
    for (size_t i = open; i < s.size(); ++i) {
        if (s[i] == o) ++depth;
        if (s[i] == c && --depth == 0) return i;
    }
    return std::string::npos;
}

bool is_ident(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

struct Kernel {
    std::string file;
    bool waits = false;
    size_t name_at = 0;  // where the definition names it
};

// Every __global__ function of one source: its name, whether its body waits, where it is named.
void find_kernels(const std::string& file, const std::string& s, std::multimap<std::string, Kernel>& out) {
    for (size_t at = s.find("__global__"); at != std::string::npos; at = s.find("__global__", at + 1)) {
        size_t paren = s.find('(', at);
        // Skip __launch_bounds__(...): the name is the identifier before the parameter list.
        while (paren != std::string::npos && s.compare(paren - 17, 17, "__launch_bounds__") == 0)
            paren = s.find('(', matching(s, paren));
        ASSERT_NE(paren, std::string::npos) << file;
        size_t e = paren;
        while (e > at && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
        size_t b = e;
        while (b > at && is_ident(s[b - 1])) --b;
        const std::string name = s.substr(b, e - b);
        const size_t close = matching(s, paren);
        const size_t brace = s.find('{', close);
        const size_t end = matching(s, brace);
        ASSERT_NE(end, std::string::npos) << file << ": " << name;
        const std::string body = s.substr(brace, end - brace);
        Kernel k{file, body.find("grid_begin()") != std::string::npos ||
                           body.find("grid_dependency_wait()") != std::string::npos,
                 b};
        out.emplace(name, k);
    }
}

TEST(CudaLaunchRule, EveryProgrammaticallyLaunchedKernelWaits) {
    const fs::path dir = fs::path(DSV4_SOURCE_DIR) / "src" / "backend" / "cuda";
    ASSERT_TRUE(fs::is_directory(dir)) << dir;
    std::map<std::string, std::string> sources;
    for (const auto& entry : fs::directory_iterator(dir))
        if (entry.path().extension() == ".cu" || entry.path().extension() == ".cuh")
            sources[entry.path().filename().string()] = read_file(entry.path());
    std::multimap<std::string, Kernel> kernels;
    for (const auto& [file, s] : sources) find_kernels(file, s, kernels);
    ASSERT_GT(kernels.size(), 20u) << "the parser found too few kernels";

    int waiting = 0;
    for (const auto& [name, k] : kernels) {
        if (k.waits) {
            ++waiting;
            continue;
        }
        // A kernel that does not wait: every use of its name outside its own body must be a plain
        // launch, name[<template args>]<<<.
        for (const auto& [file, s] : sources) {
            for (size_t at = s.find(name); at != std::string::npos; at = s.find(name, at + 1)) {
                if ((at > 0 && is_ident(s[at - 1])) || is_ident(s[at + name.size()])) continue;
                if (file == k.file && at == k.name_at) continue;  // its definition
                const size_t line = s.rfind('\n', at);
                if (s.substr(line + 1, at - line - 1).find("//") != std::string::npos) continue;  // a comment
                size_t after = at + name.size();
                if (s[after] == '<' && s.compare(after, 3, "<<<") != 0) {
                    int depth = 0;
                    for (; after < s.size(); ++after) {
                        if (s[after] == '<') ++depth;
                        if (s[after] == '>' && --depth == 0) break;
                    }
                    ++after;
                }
                EXPECT_EQ(s.compare(after, 3, "<<<"), 0)
                    << name << " (" << k.file << ") does not wait for its predecessor, but " << file
                    << " uses it other than in a plain <<<>>> launch: " << s.substr(at, 80);
            }
        }
    }
    EXPECT_GT(waiting, 20) << "most forward kernels begin with grid_begin()";
}

}  // namespace
