#include "runtime/quality.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <mutex>

#include "core/error.h"
#include "core/thread_pool.h"
#include "core/trace.h"

namespace dsv4 {

namespace {
// PairStats over rows, parallel over positions (each KLD is a pass over the vocabulary).
PairStats pair_rows(const float* p, const float* q, int64_t rows, int64_t V) {
    PairStats total;
    std::mutex m;
    parallel_for(size_t(rows), [&](size_t b, size_t e) {
        PairStats part;
        part.add_rows(p + int64_t(b) * V, q + int64_t(b) * V, int64_t(e - b), V);
        std::lock_guard<std::mutex> lk(m);
        total.merge(part);
    }, 16);
    return total;
}
}  // namespace

std::vector<int32_t> run_arm(const QualityArm& arm, std::span<const int32_t> tokens, int64_t n_greedy,
                             const std::function<void(int64_t, int64_t, const float*)>& on_rows) {
    DSV4_TRACE("quality.run_arm");
    const Model& m = *arm.model;
    const int64_t V = m.config().vocab, T = int64_t(tokens.size());
    const int64_t step = arm.prefill.band * arm.prefill.frontier_bands;
    if (step <= 0) throw UsageError("band and frontier must be positive");
    State st(m.config());
    ForwardOptions fo;
    fo.band = arm.prefill.band;
    fo.logits = Logits::All;
    std::vector<float> buf(size_t(std::min(step, T) * V));
    for (int64_t done = 0; done < T;) {
        const int64_t k = std::min(step, T - done);
        m.forward(tokens.data() + done, k, st, buf.data(), fo);
        on_rows(done, k, buf.data());
        done += k;
    }
    std::vector<int32_t> greedy;
    const int64_t last = (T - 1) % step;  // the last row of the last step
    std::vector<float> row(buf.begin() + last * V, buf.begin() + (last + 1) * V);
    const int64_t ctx = m.config().max_positions;
    for (int64_t i = 0; i < n_greedy; ++i) {
        int32_t id = argmax_row(row.data(), V);
        greedy.push_back(id);
        if (i + 1 == n_greedy || (ctx > 0 && st.pos >= ctx)) break;
        m.forward(&id, 1, st, row.data(), fo);
    }
    return greedy;
}

TapeResult compare_on_tape(const std::string& name, std::span<const int32_t> tokens, const QualityArm& a,
                           const QualityArm& b, const QualityOptions& opt) {
    const int64_t V = a.model->config().vocab, T = int64_t(tokens.size());
    if (b.model->config().vocab != V)
        fail("the arms' vocabularies differ (", V, " and ", b.model->config().vocab, "): nothing to compare");
    if (T == 0) fail(name, ": empty tape");
    auto t0 = std::chrono::steady_clock::now();
    TapeResult r;
    r.name = name;
    r.tokens = T;
    r.greedy_tokens = opt.greedy_tokens;
    auto tick = [&](int64_t rows) {
        if (opt.progress) opt.progress(rows);
    };
    std::vector<float> A1(size_t(T * V)), B1(size_t(T * V));
    auto keep = [&](std::vector<float>& dst) {
        return [&dst, V, &tick](int64_t row0, int64_t rows, const float* x) {
            std::memcpy(dst.data() + row0 * V, x, size_t(rows * V) * sizeof(float));
            tick(rows);
        };
    };
    std::vector<int32_t> gA1 = run_arm(a, tokens, opt.greedy_tokens, keep(A1));
    std::vector<int32_t> gB1 = run_arm(b, tokens, opt.greedy_tokens, keep(B1));
    r.cross = pair_rows(A1.data(), B1.data(), T, V);
    std::vector<int32_t> gB2 = run_arm(b, tokens, opt.greedy_tokens, [&](int64_t row0, int64_t rows, const float* x) {
        r.noise_b.merge(pair_rows(B1.data() + row0 * V, x, rows, V));
        r.cross.merge(pair_rows(A1.data() + row0 * V, x, rows, V));
        tick(rows);
    });
    std::vector<int32_t> gA2 = run_arm(a, tokens, opt.greedy_tokens, [&](int64_t row0, int64_t rows, const float* x) {
        r.noise_a.merge(pair_rows(A1.data() + row0 * V, x, rows, V));
        r.cross.merge(pair_rows(x, B1.data() + row0 * V, rows, V));
        tick(rows);
    });
    r.greedy_prefix = common_prefix(gA1, gB1);
    r.greedy_prefix_noise = std::min(common_prefix(gA1, gA2), common_prefix(gB1, gB2));
    r.noise = std::max(r.noise_a.kld_mean(), r.noise_b.kld_mean());
    r.limit = opt.limit.limit(r.noise);
    r.pass = r.cross.kld_mean() <= r.limit;
    r.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return r;
}

}  // namespace dsv4
