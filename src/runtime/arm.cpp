#include "runtime/arm.h"

#include <cerrno>
#include <cstdlib>

#include "core/error.h"
#include "core/thread_pool.h"
#include "runtime/default_model.h"
#include "runtime/spec_factory.h"

namespace dsv4 {

namespace {
int64_t parse_positive(const std::string& what, const std::string& key, const std::string& v) {
    char* end = nullptr;
    errno = 0;
    long long x = std::strtoll(v.c_str(), &end, 10);
    if (v.empty() || *end != '\0' || errno != 0 || x <= 0 || x > (1LL << 40))
        throw UsageError(cat(what, ": ", key, "=", v, " is not a positive integer"));
    return int64_t(x);
}
}  // namespace

ArmOptions parse_arm(const std::string& opts, const std::string& what) {
    ArmOptions a;
    a.text = opts;
    std::string s = opts;
    for (char& ch : s)
        if (ch == ',') ch = ' ';
    size_t i = 0;
    while (i < s.size()) {
        while (i < s.size() && s[i] == ' ') ++i;
        if (i >= s.size()) break;
        size_t j = s.find(' ', i);
        if (j == std::string::npos) j = s.size();
        std::string item = s.substr(i, j - i);
        i = j;
        size_t eq = item.find('=');
        if (eq == std::string::npos || eq == 0)
            throw UsageError(cat(what, ": '", item, "' is not key=value (keys: model, band, frontier, backend, gpus, threads, spec, spec_cap, spec_verify_cost)"));
        std::string key = item.substr(0, eq), v = item.substr(eq + 1);
        if (key == "model") {
            if (v.empty()) throw UsageError(cat(what, ": model= needs a file"));
            a.model = v;
        } else if (key == "band") {
            a.band = parse_positive(what, key, v);
        } else if (key == "frontier") {
            int64_t f = parse_positive(what, key, v);
            if (f > 1 << 20) throw UsageError(cat(what, ": frontier=", v, " is too large"));
            a.frontier = int(f);
        } else if (key == "threads") {
            int64_t t = parse_positive(what, key, v);
            if (t > 4096) throw UsageError(cat(what, ": threads=", v, " is too large"));
            a.threads = int(t);
        } else if (key == "spec") {
            spec::parse_spec(v);  // refuses a bad value now, with its name
            a.spec = v;
        } else if (key == "spec_cap") {
            int64_t c = parse_positive(what, key, v);
            if (c > 16) throw UsageError(cat(what, ": spec_cap=", v, " is above 16"));
            a.spec_cap = int(c);
        } else if (key == "spec_verify_cost") {
            char* end = nullptr;
            double x = std::strtod(v.c_str(), &end);
            if (v.empty() || *end != '\0' || !(x > 0) || x > 1e3)
                throw UsageError(cat(what, ": spec_verify_cost=", v, " is not a positive number"));
            a.spec_verify_cost = x;
        } else if (key == "gpus") {
            int64_t g = parse_positive(what, key, v);
            if (g > 64) throw UsageError(cat(what, ": gpus=", v, " is more than 64"));
            a.gpus = int(g);
        } else if (key == "backend") {
            if (v != "cpu" && v != "cuda") throw UsageError(cat(what, ": backend=", v, " is not a backend (cpu, cuda)"));
            a.backend = v;
        } else {
            throw UsageError(cat(what, ": unknown key '", key, "' (keys: model, band, frontier, backend, gpus, threads, spec, spec_cap, spec_verify_cost)"));
        }
    }
    return a;
}

std::string arm_model_path(const ArmOptions& a, const std::string& fallback) {
    return model_path_or_default(a.model.empty() ? fallback : a.model);
}

PrefillOptions arm_prefill_options(const ArmOptions& a) {
    PrefillOptions p;
    p.band = a.band;
    p.frontier_bands = a.frontier;
    return p;
}

void apply_arm_threads(const std::vector<ArmOptions>& arms) {
    int want = 0;
    for (const ArmOptions& a : arms) {
        if (a.threads == 0) continue;
        if (want != 0 && a.threads != want)
            throw UsageError(cat("arms ask for ", want, " and ", a.threads,
                                 " threads; the thread pool is sized once per process, so arms must agree"));
        want = a.threads;
    }
    if (want == 0) return;
    ::setenv("DSV4_THREADS", std::to_string(want).c_str(), 1);
    if (thread_count() != want)
        throw UsageError(cat("threads=", want, ": the thread pool already runs ", thread_count(), " threads"));
}

nlohmann::json arm_json(const ArmOptions& a, const std::string& model_path) {
    return {{"opts", a.text},       {"model", model_path}, {"band", a.band},        {"frontier", a.frontier},
            {"backend", a.backend}, {"gpus", a.gpus}, {"threads", a.threads}, {"spec", a.spec},       {"spec_cap", a.spec_cap},
            {"spec_verify_cost", a.spec_verify_cost}};
}

}  // namespace dsv4
