// dsv4 bench: the statistics (median/min/max), prompts (exact length, deterministic), the
// A B A B schedule with cold first runs, deterministic greedy tokens, peak memory accounting,
// SHA-256 (model identity in receipts), and the command's receipt and trace.
#include <gtest/gtest.h>

#include <cstdlib>
#include <set>
#include <sys/wait.h>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "fixture_util.h"
#include "runtime/bench.h"
#include "runtime/bench_memory.h"
#include "runtime/bench_roofline.h"
#include "runtime/receipt.h"
#include "runtime/sha256.h"

using namespace dsv4;

namespace {
struct Files {
    test::TempDir dir;  // a function-local static: removed at exit
    std::string model;  // mini_flash with the byte tokenizer
    Files() {
        ConvertOptions o;
        o.hf_dir = test::fixture_dir("mini_flash").string();
        o.out_path = dir.file("m.gguf");
        o.tokenizer_json = test::byte_tokenizer_json();
        o.quiet = true;
        convert_hf(o);
        model = o.out_path;
    }
};
const Files& files() {
    static Files f;
    return f;
}
int run_cli(const std::string& args) {
    int st = std::system((std::string(DSV4_BINARY) + " " + args).c_str());
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}
}  // namespace

TEST(Bench, SpreadIsMedianMinMax) {
    Spread a = spread({3, 1, 2});
    EXPECT_EQ(a.median, 2);
    EXPECT_EQ(a.min, 1);
    EXPECT_EQ(a.max, 3);
    EXPECT_EQ(a.n, 3);
    Spread b = spread({4, 1, 3, 2});
    EXPECT_DOUBLE_EQ(b.median, 2.5);
    EXPECT_EQ(spread({}).n, 0);
}

TEST(Bench, Sha256KnownVectors) {
    EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    EXPECT_EQ(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
              "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    Sha256 pieces;  // the same message fed in odd pieces
    std::string m(1000, 'a');
    for (size_t i = 0; i < m.size(); i += 7) pieces.update(m.substr(i, 7));
    EXPECT_EQ(pieces.hex(), sha256_hex(m));
    test::TempDir dir;
    test::write_file(dir.file("f"), m);
    EXPECT_EQ(sha256_file(dir.file("f")), sha256_hex(m));
    EXPECT_THROW(sha256_file(dir.file("missing")), Error);
}

TEST(Bench, ReceiptNamesTheCommit) {
    const std::string c = git_commit(DSV4_SOURCE_DIR);
    if (!std::filesystem::exists(std::filesystem::path(DSV4_SOURCE_DIR) / ".git")) GTEST_SKIP() << "not a git checkout";
    ASSERT_GE(c.size(), 40u) << c;
    EXPECT_EQ(c.find_first_not_of("0123456789abcdef"), 40u == c.size() ? std::string::npos : 40u) << c;
    if (c.size() > 40) {
        EXPECT_EQ(c.substr(40), "-dirty");
    }
    test::TempDir not_a_repo;
    EXPECT_EQ(git_commit(not_a_repo.path().string()), "unknown");
    EXPECT_EQ(git_commit(""), "unknown");
    EXPECT_EQ(command_line(3, std::vector<const char*>{"dsv4", "--a", "band=4 frontier=1"}.data()),
              "dsv4 --a 'band=4 frontier=1'");
}

TEST(Bench, ReceiptNamesTheSwitchesThatAreSet) {
    unsetenv("DSV4_CUDA_PRECAPTURE");
    unsetenv("DSV4_CUDA_GRAPHS");
    const bool threads_set = std::getenv("DSV4_THREADS") != nullptr;
    nlohmann::json h = receipt_header(DSV4_SOURCE_DIR, "dsv4 bench");
    EXPECT_EQ(h.contains("switches"), threads_set || std::getenv("DSV4_GEMM_PATH") || std::getenv("DSV4_GEMM_PRECISION"));
    setenv("DSV4_CUDA_PRECAPTURE", "0", 1);
    h = receipt_header(DSV4_SOURCE_DIR, "dsv4 bench");
    unsetenv("DSV4_CUDA_PRECAPTURE");
    ASSERT_TRUE(h.contains("switches"));
    EXPECT_EQ(h["switches"]["DSV4_CUDA_PRECAPTURE"], "0");
    EXPECT_FALSE(h["switches"].contains("DSV4_CUDA_GRAPHS"));
}

TEST(Bench, PromptsHaveTheAskedLengthAndAreDeterministic) {
    std::vector<int32_t> r1 = bench_prompt(384, nullptr, "", 100, 3), r2 = bench_prompt(384, nullptr, "", 100, 3);
    EXPECT_EQ(r1.size(), 100u);
    EXPECT_EQ(r1, r2);
    EXPECT_NE(r1, bench_prompt(384, nullptr, "", 100, 4));
    for (int32_t t : r1) EXPECT_LT(t, 384);
    Model m(files().model);
    Tokenizer tok(m.file());
    std::vector<int32_t> t = bench_prompt(m.config().vocab, &tok, "abc def", 50, 1);
    ASSERT_EQ(t.size(), 50u);  // the text repeated to length
    if (tok.add_bos() && tok.bos_id() >= 0) {
        EXPECT_EQ(t[0], tok.bos_id());
    }
    EXPECT_THROW(bench_prompt(384, nullptr, "", 0, 1), UsageError);
}

TEST(Bench, InterleavesArmsColdFirstAndIsDeterministic) {
    Model m(files().model);
    PrefillOptions a, b;
    a.admission.headroom_bytes = b.admission.headroom_bytes = 0;
    b.band = 5;
    b.frontier_bands = 1;
    std::vector<int32_t> prompt = bench_prompt(m.config().vocab, nullptr, "", 24, 9);
    int seen = 0;
    std::vector<BenchRun> runs = bench_interleaved({{&m, a, {}}, {&m, b, {}}}, prompt, 5, 2, [&](const BenchRun&) { ++seen; });
    ASSERT_EQ(runs.size(), 6u);
    EXPECT_EQ(seen, 6);
    for (size_t i = 0; i < runs.size(); ++i) {
        EXPECT_EQ(runs[i].arm, int(i % 2));
        EXPECT_EQ(runs[i].repeat, int(i / 2));
        EXPECT_EQ(runs[i].cold, i < 2);
        EXPECT_EQ(runs[i].prompt_tokens, 24);
        EXPECT_EQ(runs[i].gen_tokens, 5);
        EXPECT_EQ(runs[i].decode_steps, 4);
        EXPECT_GT(runs[i].prefill_s, 0);
        EXPECT_GT(runs[i].decode_tok_s, 0);
        EXPECT_NEAR(runs[i].prefill_tok_s, 24 / runs[i].prefill_s, 1e-6 * runs[i].prefill_tok_s);
        EXPECT_EQ(runs[i].tokens, runs[0].tokens);  // greedy, and chunking is invisible
    }
    EXPECT_THROW(bench_interleaved({{&m, a, {}}}, prompt, 0, 1), UsageError);
    EXPECT_THROW(bench_interleaved({{&m, a, {}}}, prompt, 5, 0), UsageError);
}

TEST(Bench, PeakHostBytesSeesAnAllocationAndResets) {
    if (!reset_peak_host_bytes()) GTEST_SKIP() << "/proc/self/clear_refs is not writable here";
    const int64_t before = peak_host_bytes();
    ASSERT_GT(before, 0);
    {
        std::vector<char> big(size_t(96) << 20, 1);  // touched: resident
        EXPECT_GE(peak_host_bytes(), before + (int64_t(90) << 20));
    }
    ASSERT_TRUE(reset_peak_host_bytes());
    EXPECT_LT(peak_host_bytes(), before + (int64_t(90) << 20));
}

TEST(Bench, ModelTrafficCountsActiveExpertsOnly) {
    Model m(files().model);
    ModelTraffic t = model_traffic(m);
    size_t file_bytes = 0, expert_bytes = 0;
    for (const gguf::TensorInfo& ti : m.file().tensors()) {
        file_bytes += ti.nbytes;
        if (ti.name.find("_exps") != std::string::npos) expert_bytes += ti.nbytes;
    }
    ASSERT_GT(expert_bytes, 0u);
    EXPECT_GT(t.decode_bytes_per_token, 0);
    EXPECT_LT(t.decode_bytes_per_token, double(file_bytes - expert_bytes) + double(expert_bytes) * 0.99);
    EXPECT_GT(t.prefill_flop_per_token, 0);
}

TEST(BenchCli, ReceiptHasTheDesignKeysAndTheTraceHasOps) {
    test::TempDir dir;
    const std::string base = "bench --model " + files().model + " --prompt 20 --gen 4 --repeats 2 --no-roofline";
    ASSERT_EQ(run_cli(base + " --json " + dir.file("b.json") + " --trace " + dir.file("t.json") + " > " +
                      dir.file("out.txt") + " 2> " + dir.file("err.txt")),
              0);
    nlohmann::json j = nlohmann::json::parse(test::read_text(dir.file("b.json")));
    for (const char* k : {"commit", "command", "device", "model", "prompt_tokens", "gen_tokens", "prefill_tok_s",
                          "decode_tok_s", "peak_host_bytes", "prefill_roofline_pct", "decode_roofline_pct",
                          "peak_device_bytes", "arms", "trace"})
        EXPECT_TRUE(j.contains(k)) << k;
    EXPECT_EQ(j["kind"], "bench");
    EXPECT_EQ(j["prompt_tokens"], 20);
    EXPECT_EQ(j["model"]["sha256"], sha256_file(files().model));
    EXPECT_NE(j["command"].get<std::string>().find("--prompt 20"), std::string::npos);
    EXPECT_GT(j["prefill_tok_s"].get<double>(), 0);
    EXPECT_EQ(j["arms"][0]["warm"]["decode_tok_s"]["n"], 2);
    EXPECT_TRUE(j["arms"][0]["greedy_tokens_equal_across_runs"].get<bool>());
    EXPECT_FALSE(j["device"]["cpu"].get<std::string>().empty());
    nlohmann::json t = nlohmann::json::parse(test::read_text(dir.file("t.json")));
    std::set<std::string> names;
    for (const auto& e : t["traceEvents"]) names.insert(e["name"].get<std::string>());
    for (const char* n : {"bench.run", "bench.prefill", "bench.decode", "forward", "layer", "matmul", "attention", "moe"})
        EXPECT_TRUE(names.count(n)) << n;
    EXPECT_NE(test::read_text(dir.file("err.txt")).find("self %"), std::string::npos);  // the per-op table

    // Two arms: A B A B, with a B/A ratio per pair.
    ASSERT_EQ(run_cli(base + " --a band=8 --b 'band=3 frontier=1' --json " + dir.file("c.json") + " > /dev/null"), 0);
    nlohmann::json c = nlohmann::json::parse(test::read_text(dir.file("c.json")));
    ASSERT_EQ(c["arms"].size(), 2u);
    ASSERT_EQ(c["pairs"].size(), 2u);
    EXPECT_GT(c["pairs"][0]["prefill_ratio_b_over_a"].get<double>(), 0);
    EXPECT_EQ(c["arms"][1]["band"], 3);

    EXPECT_EQ(run_cli(base + " --compare 2> /dev/null"), 2);  // --compare needs --b
    EXPECT_EQ(run_cli(base + " --a band=x 2> /dev/null"), 2);
    EXPECT_EQ(run_cli("bench --model " + files().model + " --prompt 0 2> /dev/null"), 2);
}
