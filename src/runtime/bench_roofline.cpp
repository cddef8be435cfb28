#include "runtime/bench_roofline.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <mutex>
#include <vector>

#include "backend/cpu/ops.h"
#include "core/thread_pool.h"

namespace dsv4 {

namespace {
double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }
}  // namespace

ModelTraffic model_traffic(const Model& m) {
    const ModelConfig& c = m.config();
    const double expert_share = c.n_experts > 0 ? double(c.top_k) / double(c.n_experts) : 1.0;
    ModelTraffic t;
    for (const gguf::TensorInfo& ti : m.file().tensors()) {
        if (ti.name.rfind("token_embd", 0) == 0) {  // one row per token
            t.decode_bytes_per_token += double(ti.nbytes) / double(std::max<int64_t>(1, ti.ne.size() > 1 ? ti.ne[1] : 1));
            continue;
        }
        // The MTP block (blk.{n_layers + i}) is not part of the main forward.
        if (ti.name.rfind("blk.", 0) == 0 && std::atoi(ti.name.c_str() + 4) >= c.n_layers) continue;
        const bool expert = ti.name.find("_exps") != std::string::npos;
        const double share = expert ? expert_share : 1.0;
        t.decode_bytes_per_token += double(ti.nbytes) * share;
        // A prefill computes the LM head for its last token only: not a per-token cost.
        const bool head = ti.name.rfind("output.", 0) == 0;
        if (ti.ne.size() >= 2 && !head) t.prefill_flop_per_token += 2.0 * double(ti.elements()) * share;
    }
    return t;
}

MachinePeak measure_machine() {
    MachinePeak p;
    // Bandwidth: dot(x, x) reads one stream of floats; the sum is kept so it is not optimised away.
    const size_t n = (256u << 20) / sizeof(float);
    std::vector<float> buf(n, 1.0f);
    std::atomic<double> sink{0};
    for (int pass = 0; pass < 3; ++pass) {
        double t0 = now_s();
        parallel_for(n / 4096, [&](size_t b, size_t e) {
            float s = cpu::dot(buf.data() + b * 4096, buf.data() + b * 4096, int64_t((e - b) * 4096));
            sink = sink + s;
        });
        double dt = now_s() - t0;
        if (dt > 0) p.read_bytes_s = std::max(p.read_bytes_s, double(n * sizeof(float)) / dt);
    }
    // Arithmetic: each worker repeats dots of two 2 KiB rows (L1-resident) for 0.1 s; best of 3
    // passes, since other work on the machine can only make a pass slower.
    const int workers = thread_count();
    for (int pass = 0; pass < 3; ++pass) {
        std::mutex m;
        double flops = 0, t0 = now_s();
        parallel_for(size_t(workers), [&](size_t b, size_t e) {
            for (size_t w = b; w < e; ++w) {
                std::vector<float> x(512, 1.0001f), y(512, 0.9999f);
                double done = 0, start = now_s();
                float s = 0;
                while (now_s() - start < 0.1) {
                    for (int r = 0; r < 256; ++r) s += cpu::dot(x.data(), y.data(), 512);
                    done += 256.0 * 2 * 512;
                    x[0] = 1.0001f + s * 1e-30f;  // a dependency, so the loop is not hoisted
                }
                std::lock_guard<std::mutex> lk(m);
                flops += done;
            }
        }, 1);
        const double dt = now_s() - t0;
        if (dt > 0) p.flop_s = std::max(p.flop_s, flops / dt);
    }
    (void)sink.load();
    return p;
}

nlohmann::json roofline_json(const ModelTraffic& t, const MachinePeak& p) {
    return {{"bandwidth_bytes_s", p.read_bytes_s},
            {"peak_flop_s", p.flop_s},
            {"decode_bytes_per_token", t.decode_bytes_per_token},
            {"prefill_flop_per_token", t.prefill_flop_per_token},
            {"method",
             "decode: weight bytes per token (experts top_k/n) x decode_tok_s / bandwidth (best of 3 reads of 256 MiB, "
             "all threads); prefill: 2 x active matmul weights x prefill_tok_s / peak (cpu::dot on L1-resident rows, "
             "all threads, best of 3); values near 100% mean the stage runs at the engine's own kernel rate, which "
             "is the ceiling here, not the hardware's FMA peak"}};
}

}  // namespace dsv4
