#include "runtime/receipt.h"

#include <cstdio>
#include <ctime>
#include <filesystem>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <map>
#include <mutex>
#include <vector>

#include "core/error.h"
#include "core/thread_pool.h"
#include "runtime/sha256.h"

namespace dsv4 {

namespace {
// Quotes for a POSIX shell (single quotes; a single quote inside becomes '\'').
std::string shell_quote(const std::string& s) {
    std::string q = "'";
    for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return q + "'";
}

std::string run_capture(const std::string& cmd, int& status) {
    std::string out;
    std::FILE* p = ::popen(cmd.c_str(), "r");
    if (!p) {
        status = -1;
        return out;
    }
    char buf[256];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
    status = ::pclose(p);
    while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
    return out;
}
}  // namespace

std::string git_commit(const std::string& source_dir) {
    // A binary built here and run on another machine (the GPU machine gets a copy of the tree
    // without .git) is told its commit.
    if (const char* c = std::getenv("DSV4_COMMIT"); c && *c) return c;
    if (source_dir.empty()) return "unknown";
    const std::string git = "git -C " + shell_quote(source_dir);
    int st = 0;
    std::string head = run_capture(git + " rev-parse HEAD 2>/dev/null", st);
    if (st != 0 || head.size() != 40) return "unknown";
    run_capture(git + " diff --quiet HEAD -- 2>/dev/null", st);
    return st == 0 ? head : head + "-dirty";
}

nlohmann::json device_json() {
    std::string cpu = "unknown";
    std::ifstream in("/proc/cpuinfo");
    for (std::string line; std::getline(in, line);) {
        if (line.rfind("model name", 0) == 0) {
            size_t colon = line.find(':');
            if (colon != std::string::npos) cpu = line.substr(line.find_first_not_of(" \t", colon + 1));
            break;
        }
    }
    return {{"cpu", cpu}, {"threads", thread_count()}, {"backend", "cpu"}};
}

nlohmann::json model_json(const std::string& path) {
    std::error_code ec;
    const std::string canon = std::filesystem::weakly_canonical(path, ec).string();
    const std::string shown = ec || canon.empty() ? path : canon;
    auto bytes = std::filesystem::file_size(path, ec);
    if (ec) fail(path, ": cannot read the file size");
    // Hashing is memoised per process (quality and bench name a file several times), and a file
    // over kFullHashBytes gets a labelled hash of its first and last 64 MiB instead: reading a
    // whole 150 GB checkpoint for every receipt would cost minutes.
    static std::mutex m;
    static std::map<std::string, nlohmann::json> memo;
    std::lock_guard<std::mutex> lk(m);
    auto it = memo.find(shown);
    if (it != memo.end() && it->second["bytes"] == uint64_t(bytes)) return it->second;
    constexpr uint64_t kFullHashBytes = uint64_t(8) << 30, kPart = uint64_t(64) << 20;
    nlohmann::json j = {{"path", shown}, {"bytes", uint64_t(bytes)}};
    if (bytes <= kFullHashBytes) {
        j["sha256"] = sha256_file(path);
    } else {
        std::ifstream in(path, std::ios::binary);
        if (!in) fail(path, ": cannot open to hash");
        Sha256 h;
        std::vector<char> buf(1 << 20);
        for (uint64_t start : {uint64_t(0), uint64_t(bytes) - kPart}) {
            in.seekg(std::streamoff(start));
            for (uint64_t left = kPart; left > 0;) {
                in.read(buf.data(), std::streamsize(std::min<uint64_t>(left, buf.size())));
                if (in.gcount() <= 0) fail(path, ": read error while hashing");
                h.update(buf.data(), size_t(in.gcount()));
                left -= uint64_t(in.gcount());
            }
        }
        j["sha256_head_tail_64mib"] = h.hex();
    }
    memo[shown] = j;
    return j;
}

std::string command_line(int argc, const char* const* argv) {
    std::string s;
    for (int i = 0; i < argc; ++i) {
        std::string a = argv[i];
        bool plain = !a.empty() && a.find_first_of(" \t\n'\"\\$`*?;&|<>()") == std::string::npos;
        s += (i ? " " : "") + (plain ? a : shell_quote(a));
    }
    return s;
}

std::string own_command_line() {
    std::ifstream in("/proc/self/cmdline", std::ios::binary);
    std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::vector<std::string> args;
    for (size_t i = 0; i < all.size();) {
        size_t z = all.find('\0', i);
        if (z == std::string::npos) z = all.size();
        args.push_back(all.substr(i, z - i));
        i = z + 1;
    }
    std::vector<const char*> argv;
    for (const std::string& a : args) argv.push_back(a.c_str());
    return command_line(int(argv.size()), argv.data());
}

nlohmann::json receipt_header(const std::string& source_dir, const std::string& command) {
    char when[32];
    std::time_t now = std::time(nullptr);
    std::tm tm{};
    ::gmtime_r(&now, &tm);
    std::strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
    nlohmann::json h = {{"commit", git_commit(source_dir)}, {"command", command}, {"device", device_json()},
                        {"time_utc", when}};
    if (nlohmann::json sw = switches_json(); !sw.empty()) h["switches"] = sw;
    return h;
}

nlohmann::json switches_json() {
    // The environment switches that change which kernels or threads run (docs/TOOLS.md); a
    // receipt names those that are set, since its command line does not show them.
    nlohmann::json j = nlohmann::json::object();
    for (const char* name : {"DSV4_CUDA_GRAPHS", "DSV4_CUDA_PRECAPTURE", "DSV4_CUDA_PDL", "DSV4_CUDA_SIDE",
                             "DSV4_CUDA_PACK_ONCE", "DSV4_GEMM_PATH", "DSV4_GEMM_PRECISION", "DSV4_THREADS"})
        if (const char* v = std::getenv(name)) j[name] = v;
    return j;
}

void write_json_file(const std::string& path, const nlohmann::json& j) {
    std::string text = j.dump(2) + "\n";
    if (path == "-") {
        std::fwrite(text.data(), 1, text.size(), stdout);
        std::fflush(stdout);
        return;
    }
    std::string tmp = path + ".partial";
    {
        std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
        if (!out) fail(path, ": cannot create");
        out << text;
        if (!out) fail(path, ": write failed");
    }
    std::error_code ec;
    std::filesystem::rename(tmp, path, ec);
    if (ec) fail(path, ": cannot rename into place: ", ec.message());
}

}  // namespace dsv4
