// dsv4 quality: the statistics on constructed logits (KLD of equal rows is 0, a known KLD, top-1,
// greedy prefix, the limit rule), tapes and arm strings, and whole comparisons on a fixture
// model: equal arms (also with different prefill schedules) give KLD 0 and pass; a perturbed
// copy of the model fails the limit; the command's exit status and receipt.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <random>
#include <sys/wait.h>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "fixture_util.h"
#include "io/gguf.h"
#include "runtime/arm.h"
#include "runtime/quality.h"
#include "runtime/tape.h"

using namespace dsv4;

namespace {

// mini_flash as GGUF (float32), converted once; and a copy whose output head is scaled (a
// deliberately perturbed arm: every position's distribution sharpens).
struct Files {
    test::TempDir dir;  // a function-local static: removed at exit
    std::string model, perturbed;
    Files() {
        model = test::convert_fixture("mini_flash", dir.path());
        gguf::Reader in(model);
        gguf::Writer w(in.alignment());
        for (const auto& [k, v] : in.metadata())
            if (k != "general.alignment") w.set(k, v);
        for (const gguf::TensorInfo& t : in.tensors()) {
            std::vector<uint8_t> bytes(t.data, t.data + t.nbytes);
            if (t.name == "output.weight") {
                if (t.type != gguf::TensorType::F32) throw std::runtime_error("output.weight is not F32");
                float* x = reinterpret_cast<float*>(bytes.data());
                for (size_t i = 0; i < bytes.size() / 4; ++i) x[i] *= 3.0f;
            }
            w.add_tensor(t.name, t.type, t.ne, std::move(bytes));
        }
        perturbed = dir.file("perturbed.gguf");
        w.write(perturbed);
    }
};
const Files& files() {
    static Files f;
    return f;
}

std::vector<int32_t> random_tokens(int64_t n, int64_t vocab, uint64_t seed) {
    std::mt19937_64 g(seed);
    std::vector<int32_t> t;
    for (int64_t i = 0; i < n; ++i) t.push_back(int32_t(g() % uint64_t(vocab)));
    return t;
}

int run_cli(const std::string& args) {
    int st = std::system((std::string(DSV4_BINARY) + " " + args).c_str());
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

}  // namespace

TEST(QualityStats, KldOfEqualRowsIsZeroAndShiftInvariant) {
    std::vector<float> p = {1.0f, -2.0f, 0.5f, 3.0f}, q = p;
    EXPECT_EQ(kld_logits(p.data(), q.data(), 4), 0.0);
    for (float& x : q) x += 7.0f;  // softmax does not see a constant shift
    EXPECT_NEAR(kld_logits(p.data(), q.data(), 4), 0.0, 1e-12);
}

TEST(QualityStats, KldMatchesAHandComputedValue) {
    // P = (1/2, 1/2), Q = (3/4, 1/4): KLD(P||Q) = 0.5 ln(2/3) + 0.5 ln 2 = 0.5 ln(4/3).
    std::vector<float> p = {0.0f, 0.0f}, q = {float(std::log(3.0)), 0.0f};
    EXPECT_NEAR(kld_logits(p.data(), q.data(), 2), 0.5 * std::log(4.0 / 3.0), 1e-7);
    // Not symmetric: KLD(Q||P) = 0.75 ln 1.5 + 0.25 ln 0.5.
    EXPECT_NEAR(kld_logits(q.data(), p.data(), 2), 0.75 * std::log(1.5) + 0.25 * std::log(0.5), 1e-7);
    std::vector<float> bad = {0.0f, NAN};
    EXPECT_THROW(kld_logits(bad.data(), p.data(), 2), Error);
}

TEST(QualityStats, PairStatsCountTopOneAndMeans) {
    // Row 0: same argmax (index 2); row 1: argmax 0 vs 1.
    std::vector<float> p = {0, 0, 5, 9, 0, 0}, q = {0, 1, 5, 0, 9, 0};
    PairStats s;
    s.add_rows(p.data(), q.data(), 2, 3);
    EXPECT_EQ(s.positions, 2);
    EXPECT_EQ(s.top1_agree, 1);
    EXPECT_DOUBLE_EQ(s.top1(), 0.5);
    const double k0 = kld_logits(p.data(), q.data(), 3), k1 = kld_logits(p.data() + 3, q.data() + 3, 3);
    EXPECT_NEAR(s.kld_mean(), (k0 + k1) / 2, 1e-12);
    EXPECT_DOUBLE_EQ(s.kld_max, std::max(k0, k1));
    PairStats t;
    t.add(p.data(), p.data(), 3);
    s.merge(t);
    EXPECT_EQ(s.positions, 3);
    EXPECT_NEAR(s.kld_mean(), (k0 + k1) / 3, 1e-12);
}

TEST(QualityStats, GreedyPrefixAndLimitRule) {
    EXPECT_EQ(common_prefix({1, 2, 3, 4}, {1, 2, 9, 4}), 2);
    EXPECT_EQ(common_prefix({1, 2}, {1, 2, 3}), 2);
    EXPECT_EQ(common_prefix({}, {1}), 0);
    EXPECT_EQ(common_prefix({5}, {6}), 0);
    LimitRule r;
    EXPECT_DOUBLE_EQ(r.limit(0.0), 0.006);
    EXPECT_DOUBLE_EQ(r.limit(0.001), 0.006);
    EXPECT_DOUBLE_EQ(r.limit(0.01), 0.0125);
    r.fixed = 0.02;
    EXPECT_DOUBLE_EQ(r.limit(1.0), 0.02);
    EXPECT_EQ(r.describe(), "fixed 0.02");
}

TEST(QualityArm, ParsesKeysAndRejectsBadOnes) {
    ArmOptions a = parse_arm("model=x.gguf band=512, frontier=2 backend=cpu threads=3", "--a");
    EXPECT_EQ(a.model, "x.gguf");
    EXPECT_EQ(a.band, 512);
    EXPECT_EQ(a.frontier, 2);
    EXPECT_EQ(a.threads, 3);
    ArmOptions d = parse_arm("", "--b");
    EXPECT_EQ(d.band, 2048);
    EXPECT_EQ(d.frontier, 5);
    EXPECT_TRUE(d.model.empty());
    auto message = [](const std::string& s) {
        try {
            parse_arm(s, "--b");
        } catch (const UsageError& e) {
            return std::string(e.what());
        }
        return std::string("no error");
    };
    EXPECT_NE(message("band=0").find("band=0 is not a positive integer"), std::string::npos);
    EXPECT_NE(message("band=12x").find("band=12x"), std::string::npos);
    EXPECT_NE(message("colour=red").find("unknown key 'colour'"), std::string::npos);
    EXPECT_NE(message("band").find("not key=value"), std::string::npos);
    EXPECT_EQ(parse_arm("backend=cuda", "--b").backend, "cuda");
    EXPECT_EQ(parse_arm("backend=cuda gpus=4", "--b").gpus, 4);
    EXPECT_EQ(d.gpus, 1);
    EXPECT_NE(message("gpus=0").find("gpus=0"), std::string::npos);
    EXPECT_NE(message("gpus=65").find("more than 64"), std::string::npos);
    EXPECT_NE(message("backend=tpu").find("backend=tpu"), std::string::npos);
    ArmOptions t2 = parse_arm("threads=2", "--a"), t3 = parse_arm("threads=3", "--b");
    EXPECT_THROW(apply_arm_threads({t2, t3}), UsageError);
}

TEST(QualityTape, RoundTripsAndChecksTokenizerAndVocabulary) {
    test::TempDir dir;
    const std::string p = dir.file("t.tokens");
    std::vector<int32_t> ids = random_tokens(40, 300, 1);
    write_tape(p, ids, "abcdef0123456789", 384, "src.txt");
    Tape t = read_tape(p);
    EXPECT_EQ(t.tokens, ids);
    EXPECT_EQ(t.name, "t");
    EXPECT_EQ(t.tokenizer, "abcdef0123456789");
    EXPECT_EQ(t.vocab, 384);
    EXPECT_EQ(t.source, "src.txt");
    EXPECT_NO_THROW(check_tape(t, 384, "abcdef0123456789"));
    EXPECT_NO_THROW(check_tape(t, 384, ""));  // a model without a tokenizer: only the vocabulary is checked
    EXPECT_THROW(check_tape(t, 384, "ffffffffffffffff"), Error);
    EXPECT_THROW(check_tape(t, 100, "abcdef0123456789"), Error);
    test::write_file(dir.file("bad.tokens"), std::string("1 2 x3\n"));
    try {
        read_tape(dir.file("bad.tokens"));
        FAIL() << "no error";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("'x3' is not a token id"), std::string::npos) << e.what();
    }
    EXPECT_THROW(read_tapes(dir.path().string()), Error);  // one bad tape fails the set
    std::filesystem::remove(dir.file("bad.tokens"));
    ASSERT_EQ(read_tapes(dir.path().string()).size(), 1u);
    test::TempDir empty;
    EXPECT_THROW(read_tapes(empty.path().string()), UsageError);
}

TEST(QualityRun, TeacherForcedRowsEqualOneFullForwardAndGreedyIsTheArgmaxChain) {
    Model m(files().model);
    const int64_t V = m.config().vocab;
    std::vector<int32_t> toks = random_tokens(37, V, 2);
    State st(m.config());
    std::vector<float> full(size_t(37 * V));
    m.forward(toks.data(), 37, st, full.data());
    QualityArm arm{&m, {}};
    arm.prefill.band = 4;
    arm.prefill.frontier_bands = 2;  // steps of 8 rows: 5 steps, the last one short
    std::vector<float> rows(full.size(), NAN);
    int calls = 0;
    std::vector<int32_t> greedy = run_arm(arm, toks, 5, [&](int64_t r0, int64_t n, const float* x) {
        EXPECT_EQ(r0, 8 * calls);
        ++calls;
        std::copy(x, x + n * V, rows.begin() + r0 * V);
    });
    EXPECT_EQ(calls, 5);
    for (size_t i = 0; i < full.size(); ++i) ASSERT_NEAR(rows[i], full[i], 1e-4f * (1 + std::fabs(full[i]))) << i;
    // The greedy continuation: the argmax chain of full forwards over tape + continuation.
    ASSERT_EQ(greedy.size(), 5u);
    std::vector<int32_t> all = toks;
    all.insert(all.end(), greedy.begin(), greedy.end());
    State st2(m.config());
    std::vector<float> l2(all.size() * size_t(V));
    m.forward(all.data(), int64_t(all.size()), st2, l2.data());
    for (size_t i = 0; i < greedy.size(); ++i) EXPECT_EQ(greedy[i], argmax_row(l2.data() + (36 + i) * V, V)) << i;
}

TEST(QualityRun, EqualArmsHaveZeroKldAndPass) {
    Model m(files().model);
    std::vector<int32_t> toks = random_tokens(50, m.config().vocab, 3);
    QualityArm a{&m, {}}, b{&m, {}};
    b.prefill.band = 3;
    b.prefill.frontier_bands = 1;
    QualityOptions o;
    o.greedy_tokens = 6;
    int64_t progressed = 0;
    o.progress = [&](int64_t n) { progressed += n; };
    TapeResult r = compare_on_tape("rand", toks, a, b, o);
    EXPECT_EQ(progressed, 4 * 50);
    EXPECT_EQ(r.cross.positions, 3 * 50);  // the three cross pairs
    EXPECT_EQ(r.noise_a.positions, 50);
    EXPECT_LT(r.cross.kld_mean(), 1e-9);
    EXPECT_EQ(r.noise, 0.0);  // the CPU backend is deterministic
    EXPECT_DOUBLE_EQ(r.cross.top1(), 1.0);
    EXPECT_EQ(r.greedy_prefix, 6);
    EXPECT_EQ(r.greedy_prefix_noise, 6);
    EXPECT_DOUBLE_EQ(r.limit, 0.006);
    EXPECT_TRUE(r.pass);
}

TEST(QualityRun, APerturbedArmFailsTheLimitAndAFixedLimitIsObeyed) {
    Model m(files().model), p(files().perturbed);
    std::vector<int32_t> toks = random_tokens(40, m.config().vocab, 4);
    QualityArm a{&m, {}}, b{&p, {}};
    QualityOptions o;
    o.greedy_tokens = 4;
    TapeResult r = compare_on_tape("rand", toks, a, b, o);
    EXPECT_GT(r.cross.kld_mean(), 0.006);
    EXPECT_EQ(r.noise, 0.0);
    EXPECT_FALSE(r.pass);
    // Scaling logits keeps the argmax: top-1 agrees everywhere though the KLD is large.
    EXPECT_DOUBLE_EQ(r.cross.top1(), 1.0);
    o.limit.fixed = r.cross.kld_mean() * 2;
    EXPECT_TRUE(compare_on_tape("rand", toks, a, b, o).pass);
}

TEST(QualityCli, ExitStatusTableAndReceipt) {
    test::TempDir dir;
    std::filesystem::create_directory(dir.path() / "tapes");
    Model m(files().model);
    write_tape(dir.file("tapes/one.tokens"), random_tokens(30, m.config().vocab, 5), "", m.config().vocab, "t");
    write_tape(dir.file("tapes/two.tokens"), random_tokens(20, m.config().vocab, 6), "", m.config().vocab, "t");
    const std::string common = "quality --model " + files().model + " --tapes " + dir.file("tapes") + " --greedy 3";
    EXPECT_EQ(run_cli(common + " --a band=4 --b 'band=7 frontier=1' --json " + dir.file("q.json") + " > " +
                      dir.file("out.txt")),
              0);
    nlohmann::json j = nlohmann::json::parse(test::read_text(dir.file("q.json")));
    EXPECT_EQ(j["kind"], "quality");
    EXPECT_TRUE(j["pass"].get<bool>());
    ASSERT_EQ(j["tapes"].size(), 2u);
    EXPECT_EQ(j["tapes"][0]["name"], "one");
    EXPECT_EQ(j["tapes"][0]["tokens"], 30);
    EXPECT_EQ(j["arms"]["b"]["band"], 7);
    EXPECT_EQ(j["arms"]["a"]["model"]["sha256"].get<std::string>().size(), 64u);
    for (const char* k : {"commit", "command", "device", "limit_rule"}) EXPECT_TRUE(j.contains(k)) << k;
    EXPECT_NE(test::read_text(dir.file("out.txt")).find("overall: PASS"), std::string::npos);
    // The perturbed model as arm B: measured, and over the limit (exit 3).
    EXPECT_EQ(run_cli(common + " --b model=" + files().perturbed + " > /dev/null"), 3);
    EXPECT_EQ(run_cli(common + " --b colour=red 2> " + dir.file("err.txt")), 2);
    EXPECT_NE(test::read_text(dir.file("err.txt")).find("unknown key 'colour'"), std::string::npos);
    EXPECT_EQ(run_cli("quality --model " + files().model + " --tapes " + dir.file("none") + " 2> /dev/null"), 2);
}

// backend= reaches the arm's model: without a GPU the CUDA arm stops with an error naming CUDA
// (it once ran on the CPU silently and reported KLD 0); with one, CPU and CUDA logits differ.
TEST(QualityCli, BackendKeyChoosesWhereTheArmRuns) {
    test::TempDir dir;
    std::filesystem::create_directory(dir.path() / "tapes");
    Model m(files().model);
    write_tape(dir.file("tapes/one.tokens"), random_tokens(30, m.config().vocab, 5), "", m.config().vocab, "t");
    const int rc = run_cli("quality --model " + files().model + " --tapes " + dir.file("tapes") +
                           " --greedy 3 --b backend=cuda --json " + dir.file("q.json") + " > /dev/null 2> " +
                           dir.file("err.txt"));
    if (rc == 0) {
        nlohmann::json j = nlohmann::json::parse(test::read_text(dir.file("q.json")));
        EXPECT_EQ(j["arms"]["b"]["backend"], "cuda");
        EXPECT_GT(j["tapes"][0]["kld_mean_nats"].get<double>(), 0.0);
    } else {
        EXPECT_EQ(rc, 1);
        const std::string err = test::read_text(dir.file("err.txt"));
        EXPECT_TRUE(err.find("cuda") != std::string::npos || err.find("CUDA") != std::string::npos) << err;
    }
}
