// Where a speculative verification round of a model on the CUDA backend goes: after a prefill,
// many rounds of mark -> decode of K tokens -> rewind (the work of TargetRounds::round() on a
// rejected round), each part timed on the host around the call (a decode returns its logits, so
// it ends with the device), for K = 1 .. 5, beside plain one-token decode steps. Host-side
// timing on purpose: a mark and a rewind cost host time (one copy call per buffer), not kernels.
// Writes one JSON receipt.
//
//   bench_cuda_spec_round [--model FILE] [--prompt N] [--rounds N] --out receipt.json [--commit HASH]
//
// --model defaults to the embedded model; DSV4_CUDA_GRAPHS=0 times the plain launches.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/device_query.h"
#include "core/error.h"
#include "model/model.h"
#include "runtime/default_model.h"
#include "runtime/session.h"

using namespace dsv4;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {
double ms_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count() * 1e3; }
double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}
}  // namespace

int main(int argc, char** argv) {
    std::string model_path, out_path, commit = "unknown", command;
    int64_t prompt_tokens = 512, rounds = 200;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        auto next = [&]() -> std::string {
            if (i + 1 >= argc) {
                std::fprintf(stderr, "bench_cuda_spec_round: %s needs a value\n", a.c_str());
                std::exit(2);
            }
            return argv[++i];
        };
        if (a == "--model") model_path = next();
        else if (a == "--prompt") prompt_tokens = std::atoll(next().c_str());
        else if (a == "--rounds") rounds = std::atoll(next().c_str());
        else if (a == "--out") out_path = next();
        else if (a == "--commit") commit = next();
        else {
            std::fprintf(stderr, "bench_cuda_spec_round: unknown argument %s (--model FILE --prompt N --rounds N --out FILE --commit HASH)\n",
                         a.c_str());
            return 2;
        }
    }
    for (int i = 0; i < argc; ++i) {
        if (i) command += ' ';
        command += argv[i];
    }
    if (out_path.empty() || prompt_tokens < 1 || rounds < 1) {
        std::fprintf(stderr, "bench_cuda_spec_round: needs --out FILE, and --prompt and --rounds >= 1\n");
        return 2;
    }
    try {
        if (cuda::device_count() == 0) {
            std::fprintf(stderr, "bench_cuda_spec_round: no CUDA device\n");
            return 1;
        }
        cuda::register_cuda_backend();
        const std::string path = model_path_or_default(model_path);
        Model m(path, "cuda");
        const int64_t V = m.config().vocab;
        Session s(m);
        std::vector<int32_t> prompt(static_cast<size_t>(prompt_tokens));
        for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = int32_t((i * 7919 + 11) % size_t(V));
        s.prefill(prompt.data(), prompt_tokens, nullptr);
        constexpr int kMaxK = 5;
        std::vector<float> logits(size_t(kMaxK) * size_t(V));
        std::vector<int32_t> tokens(kMaxK);
        for (int k = 0; k < kMaxK; ++k) tokens[size_t(k)] = int32_t((k * 131 + 7) % V);
        // Every size once first: the first step of a size runs without a graph and sizes scratch.
        for (int K = 1; K <= kMaxK; ++K)
            for (int i = 0; i < 3; ++i) {
                const SessionMark mk = s.mark();
                s.decode(tokens.data(), K, logits.data());
                s.rewind(mk);
            }
        json per_k = json::array();
        for (int K = 1; K <= kMaxK; ++K) {
            std::vector<double> mark, decode, rewind;
            for (int64_t r = 0; r < rounds; ++r) {
                auto t = Clock::now();
                const SessionMark mk = s.mark();
                mark.push_back(ms_since(t));
                t = Clock::now();
                s.decode(tokens.data(), K, logits.data());
                decode.push_back(ms_since(t));
                t = Clock::now();
                s.rewind(mk);
                rewind.push_back(ms_since(t));
            }
            per_k.push_back({{"K", K}, {"mark_ms", median(mark)}, {"decode_ms", median(decode)}, {"rewind_ms", median(rewind)}});
            std::printf("K=%d mark %.3f ms decode %.3f ms rewind %.3f ms (medians of %lld)\n", K, median(mark),
                        median(decode), median(rewind), static_cast<long long>(rounds));
        }
        std::vector<double> plain;
        for (int64_t r = 0; r < rounds; ++r) {
            const auto t = Clock::now();
            s.decode(tokens.data(), 1, logits.data());
            plain.push_back(ms_since(t));
        }
        const double plain_ms = median(plain);
        std::printf("plain one-token step %.3f ms\n", plain_ms);
        const char* graphs = std::getenv("DSV4_CUDA_GRAPHS");
        json receipt = {{"bench", "cuda_spec_round"},
                        {"commit", commit},
                        {"command", command},
                        {"device", cuda::device_name()},
                        {"model", path},
                        {"prompt_tokens", prompt_tokens},
                        {"rounds", rounds},
                        {"cuda_graphs", !(graphs && std::string(graphs) == "0")},
                        {"timing", "host wall time around each call, median over rounds"},
                        {"per_k", per_k},
                        {"plain_step_ms", plain_ms}};
        std::ofstream out(out_path);
        if (!out) fail("cannot write ", out_path);
        out << receipt.dump(1) << "\n";
    } catch (const std::exception& e) {
        std::fprintf(stderr, "bench_cuda_spec_round: %s\n", e.what());
        return 1;
    }
    return 0;
}
