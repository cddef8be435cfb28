// dsv4 bench: cold and warm timed runs of prefill + greedy decode (runtime/bench.h), with a
// readable table on stdout and a JSON receipt (DESIGN.md "Formats" keys). --b (or --compare
// with --a and --b) times two arms interleaved A B A B and reports the B/A ratio of each pair.
// --trace FILE records a Chrome trace of the runs and prints the per-op table.
#include <cstdio>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>

#include "cli/registry.h"
#include "core/error.h"
#include "core/progress.h"
#include "core/trace.h"
#include "model/model.h"
#include "runtime/arm.h"
#include "runtime/bench.h"
#include "runtime/bench_roofline.h"
#include "runtime/receipt.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/tokenizer.h"
#ifdef DSV4_HAVE_CUDA
#include "backend/cuda/cuda_backend.h"
#endif

namespace dsv4::cli {

namespace {
struct BenchArgs {
    std::string model, synthetic, a, b, json, trace, experts = "q2_k", dense = "q8_0";
    int layers = 0;
    std::string filler = std::string(DSV4_SOURCE_DIR) + "/models/retrieval_filler.txt";
    std::string prompt = "512";
    long gen = 64, repeats = 3;
    unsigned long long seed = 1;
    bool compare = false, no_roofline = false;
};

nlohmann::json spread_json(const Spread& s) {
    return {{"median", s.median}, {"min", s.min}, {"max", s.max}, {"n", s.n}};
}

std::string read_text(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

#ifdef DSV4_HAVE_CUDA
gguf::TensorType weight_type(const std::string& name, const std::string& what) {
    if (name == "q8_0") return gguf::TensorType::Q8_0;
    if (name == "q2_k") return gguf::TensorType::Q2_K;
    if (name == "mxfp4") return gguf::TensorType::MXFP4;
    if (name == "bf16") return gguf::TensorType::BF16;
    if (name == "f16") return gguf::TensorType::F16;
    throw UsageError(cat(what, " ", name, ": not a weight type (q8_0, q2_k, mxfp4, bf16, f16)"));
}
#endif

// A synthetic model (random weights made on the device), keyed like a model file.
std::unique_ptr<Model> open_synthetic(const BenchArgs& args) {
#ifdef DSV4_HAVE_CUDA
    cuda::SyntheticOptions o;
    o.shape = args.synthetic;
    o.layers = args.layers;
    o.experts = weight_type(args.experts, "--experts");
    o.dense = weight_type(args.dense, "--dense");
    o.seed = args.seed;
    std::fprintf(stderr, "bench: making %s with random weights on the device...\n", args.synthetic.c_str());
    return cuda::make_synthetic_model(o);
#else
    throw UsageError(cat("--synthetic ", args.synthetic, ": synthetic models run on the CUDA backend, which this "
                         "build does not have"));
#endif
}

// The generation loop of a speculative arm needs a tokenizer (end of sequence, text); a synthetic
// model has none, so it gets the byte alphabet plus placeholder tokens up to its vocabulary
// (bench decodes past end of sequence and ignores the text).
TokenizerSpec placeholder_tokenizer(const ModelConfig& c) {
    TokenizerSpec t;
    for (int b = 0; b < 256 && b < c.vocab; ++b) t.tokens.push_back(byte_level::encode_byte(uint8_t(b)));
    for (int i = int(t.tokens.size()); i < c.vocab; ++i) t.tokens.push_back("<t" + std::to_string(i) + ">");
    t.types.assign(t.tokens.size(), TokenType::Normal);
    t.bos = c.bos;
    t.eos = c.eos;
    t.source = "placeholder tokenizer of a synthetic model";
    return t;
}

// "2048,8192" -> {2048, 8192}; each a positive token count.
std::vector<int64_t> parse_lengths(const std::string& text) {
    std::vector<int64_t> out;
    size_t at = 0;
    while (at <= text.size()) {
        const size_t comma = std::min(text.find(',', at), text.size());
        const std::string item = text.substr(at, comma - at);
        char* end = nullptr;
        const long long v = std::strtoll(item.c_str(), &end, 10);
        if (item.empty() || *end != '\0' || v < 1 || v > (1LL << 30))
            throw UsageError(cat("--prompt ", text, ": '", item, "' is not a token count (1 .. 2^30)"));
        out.push_back(v);
        at = comma + 1;
    }
    return out;
}

// F.json -> F-p<N>.json ("-" stays stdout).
std::string per_length_path(const std::string& path, int64_t n) {
    if (path.empty() || path == "-") return path;
    const size_t dot = path.rfind('.');
    const size_t slash = path.rfind('/');
    const bool ext = dot != std::string::npos && (slash == std::string::npos || dot > slash);
    return (ext ? path.substr(0, dot) : path) + "-p" + std::to_string(n) + (ext ? path.substr(dot) : "");
}

int run_bench(const BenchArgs& args) {
    if (args.synthetic.empty() && args.layers) throw UsageError("--layers needs --synthetic");
    if (args.compare && args.b.empty()) throw UsageError("--compare needs the two arms: --a OPTS --b OPTS");
    std::vector<ArmOptions> opts = {parse_arm(args.a, "--a")};
    if (!args.b.empty()) opts.push_back(parse_arm(args.b, "--b"));
    apply_arm_threads(opts);

    std::map<std::string, std::unique_ptr<Model>> models;
    std::vector<std::string> paths;
    std::vector<BenchArm> arms;
    std::vector<std::unique_ptr<spec::DrafterFactory>> drafters;
    std::vector<std::unique_ptr<Tokenizer>> tokenizers;
    for (ArmOptions& o : opts) {
        // Synthetic weights live on the GPU: their arms run there unless told otherwise.
        if (!args.synthetic.empty() && o.text.find("backend=") == std::string::npos) o.backend = "cuda";
        std::string p = args.synthetic.empty() ? arm_model_path(o, args.model) : "synthetic:" + args.synthetic;
        const std::string key = cat(p, "@", o.backend, "x", o.gpus);
        if (!args.synthetic.empty() && o.backend != "cuda")
            throw UsageError(cat("--synthetic: synthetic models run on the CUDA backend only (backend=", o.backend, ")"));
        if (!args.synthetic.empty() && o.gpus != 1)
            throw UsageError(cat("--synthetic with gpus=", o.gpus, ": synthetic weights are made for one GPU only so far "
                                 "(docs/PARALLEL.md); bench a GGUF file over several GPUs"));
        if (!models.count(key))
            models[key] = args.synthetic.empty() ? std::make_unique<Model>(p, o.backend, o.gpus) : open_synthetic(args);
        paths.push_back(p);
        BenchArm arm{models[key].get(), arm_prefill_options(o), {}};
        drafters.push_back(std::make_unique<spec::DrafterFactory>(spec::parse_spec(o.spec), *arm.model, arm.prefill));
        if (drafters.back()->enabled()) {
            if (!arm.model->has_file())
                tokenizers.push_back(std::make_unique<Tokenizer>(placeholder_tokenizer(arm.model->config())));
            else if (!has_tokenizer(arm.model->file()))
                fail(p, ": speculative arms need a model file with a tokenizer");
            else
                tokenizers.push_back(std::make_unique<Tokenizer>(arm.model->file()));
            arm.decode.drafters = drafters.back().get();
            arm.decode.tokenizer = tokenizers.back().get();
            arm.decode.spec.cap = o.spec_cap;
            if (o.spec_verify_cost > 0) arm.decode.spec.verify_cost = o.spec_verify_cost;
            arm.decode.spec.validate();
        }
        arms.push_back(arm);
    }
    const Model& first = *arms[0].model;
    for (const BenchArm& a : arms)
        if (a.model->config().vocab != first.config().vocab)
            fail("the arms' vocabularies differ: they cannot share one prompt");
    // Text when the model has a tokenizer and the filler file is there, else random ids.
    std::unique_ptr<Tokenizer> tok;
    std::string filler, prompt_source = "random ids (seed " + std::to_string(args.seed) + ")";
    if (first.has_file() && has_tokenizer(first.file())) {
        filler = read_text(args.filler);
        if (!filler.empty()) {
            tok = std::make_unique<Tokenizer>(first.file());
            prompt_source = "text: " + args.filler;
        }
    }

    // The ceilings of the device the arms run on, measured in this run (the CPU's, or the GPU's
    // through the backend when the arms run there).
    const ForwardBackend* device = first.backend();
    for (const BenchArm& a : arms)
        if ((a.model->backend() != nullptr) != (device != nullptr))
            throw UsageError("bench: both arms run on the same backend (the roofline is one device's)");
    MachinePeak peak;
    std::string peak_method;
    if (!args.no_roofline) {
        if (device) {
            ForwardBackend::Peak p = device->measure_peak();
            peak.read_bytes_s = p.read_bytes_s;
            peak.flop_s = p.flop_s;
            peak_method = p.method;
        } else {
            peak = measure_machine();
        }
    }
    auto traffic_of = [](const Model& m) {
        if (!m.backend()) return model_traffic(m);
        return ModelTraffic{m.backend()->decode_bytes_per_token(), m.backend()->prefill_flop_per_token()};
    };
    auto model_desc = [&](const Model& m, const std::string& path) -> nlohmann::json {
        if (m.has_file()) return model_json(path);
        return {{"synthetic", m.name()}, {"layers", m.config().n_layers},
                {"weight_bytes", m.backend()->weight_bytes()}};
    };

    const std::vector<int64_t> prompt_lengths = parse_lengths(args.prompt);
    if (prompt_lengths.size() > 1 && !args.trace.empty())
        throw UsageError("--trace takes one prompt length, not a list");
    for (int64_t n_prompt : prompt_lengths) {
        std::vector<int32_t> prompt = bench_prompt(first.config().vocab, tok.get(), filler, n_prompt, args.seed);
        const std::string json_path = prompt_lengths.size() > 1 ? per_length_path(args.json, n_prompt) : args.json;
        if (!args.trace.empty()) trace::start(args.trace);
        const int64_t n_runs = int64_t(arms.size()) * (args.repeats + 1);
        Progress progress("bench", n_runs, "runs");
        std::vector<BenchRun> runs =
            bench_interleaved(arms, prompt, args.gen, int(args.repeats), [&](const BenchRun&) { progress.add(1); });
        progress.finish();
        trace::Summary tsum;
        if (!args.trace.empty()) tsum = trace::finish();

        const char* names[] = {"A", "B"};
        std::printf("%-4s %-5s %8s %14s %6s %14s %10s\n", "arm", "run", "prompt", "prefill tok/s", "gen", "decode tok/s",
                    "peak MiB");
        for (const BenchRun& r : runs) {
            std::string which = r.cold ? "cold" : std::to_string(r.repeat);
            std::printf("%-4s %-5s %8lld %14.1f %6lld %14.1f %10.1f\n", names[r.arm], which.c_str(),
                        (long long)r.prompt_tokens, r.prefill_tok_s, (long long)r.gen_tokens, r.decode_tok_s,
                        double(r.peak_host_bytes) / 1048576.0);
        }

        nlohmann::json j = receipt_header(DSV4_SOURCE_DIR, own_command_line());
        j["kind"] = "bench";
        j["model"] = model_desc(first, paths[0]);
        j["backend"] = first.backend_name();
        if (device) j["device"] = {{"gpu", device->device()}, {"host", j["device"]}};
        j["prompt_tokens"] = int64_t(prompt.size());
        j["gen_tokens"] = args.gen;
        j["repeats"] = args.repeats;
        j["prompt_source"] = prompt_source;
        j["order"] = arms.size() == 2 ? "cold A, cold B, then A B per repeat" : "cold, then repeats";
        if (!args.no_roofline) j["roofline"] = nullptr;
        nlohmann::json arm_rows = nlohmann::json::array();
        for (size_t a = 0; a < arms.size(); ++a) {
            std::vector<double> pre, dec;
            int64_t peak_bytes = 0;
            bool same_tokens = true;
            const BenchRun* cold = nullptr;
            for (const BenchRun& r : runs) {
                if (r.arm != int(a)) continue;
                peak_bytes = std::max(peak_bytes, r.peak_host_bytes);
                if (r.cold) {
                    cold = &r;
                    continue;
                }
                pre.push_back(r.prefill_tok_s);
                dec.push_back(r.decode_tok_s);
                same_tokens = same_tokens && r.tokens == cold->tokens;
            }
            Spread sp = spread(pre), sd = spread(dec);
            nlohmann::json row = arm_json(opts[a], paths[a]);
            row["model"] = a == 0 || paths[a] != paths[0] ? model_desc(*arms[a].model, paths[a]) : j["model"];
            row["cold"] = {{"prefill_tok_s", cold->prefill_tok_s}, {"decode_tok_s", cold->decode_tok_s},
                           {"prefill_s", cold->prefill_s}, {"decode_s", cold->decode_s}};
            row["warm"] = {{"prefill_tok_s", spread_json(sp)}, {"decode_tok_s", spread_json(sd)}};
            row["prefill_tok_s"] = sp.median;
            row["decode_tok_s"] = sd.median;
            row["prompt_tokens"] = int64_t(prompt.size());
            row["gen_tokens"] = args.gen;
            row["peak_host_bytes"] = peak_bytes;
            if (const ForwardBackend* b = arms[a].model->backend())
                row["peak_device_bytes"] = b->peak_device_bytes();
            else
                row["peak_device_bytes"] = nullptr;
            row["greedy_tokens_equal_across_runs"] = same_tokens;
            // Speculative figures of the warm runs added up (the cold run's are in "cold").
            spec::SpecStats warm_spec;
            for (const BenchRun& r : runs)
                if (r.arm == int(a) && !r.cold) warm_spec.add(r.spec);
            row["spec_stats"] = spec::to_json(warm_spec);
            if (!args.no_roofline) {
                ModelTraffic t = traffic_of(*arms[a].model);
                row["roofline"] = roofline_json(t, peak);
                if (device) row["roofline"]["method"] = peak_method;
                row["decode_roofline_pct"] =
                    peak.read_bytes_s > 0 ? 100.0 * t.decode_bytes_per_token * sd.median / peak.read_bytes_s : 0.0;
                row["prefill_roofline_pct"] =
                    peak.flop_s > 0 ? 100.0 * t.prefill_flop_per_token * sp.median / peak.flop_s : 0.0;
            } else {
                row["decode_roofline_pct"] = nullptr;
                row["prefill_roofline_pct"] = nullptr;
            }
            std::printf("%s warm: prefill %.1f tok/s (min %.1f, max %.1f), decode %.1f tok/s (min %.1f, max %.1f); "
                        "cold: prefill %.1f, decode %.1f tok/s; peak %.1f MiB",
                        names[a], sp.median, sp.min, sp.max, sd.median, sd.min, sd.max, cold->prefill_tok_s,
                        cold->decode_tok_s, double(peak_bytes) / 1048576.0);
            if (!args.no_roofline)
                std::printf("; roofline prefill %.1f%%, decode %.1f%%", row["prefill_roofline_pct"].get<double>(),
                            row["decode_roofline_pct"].get<double>());
            std::printf("%s\n", same_tokens ? "" : " (greedy tokens differ between runs!)");
            arm_rows.push_back(row);
        }
        j["arms"] = arm_rows;
        // The single-arm figures at the top level, under the DESIGN.md key names.
        for (const char* k : {"prefill_tok_s", "decode_tok_s", "peak_host_bytes", "peak_device_bytes", "prefill_roofline_pct",
                              "decode_roofline_pct"})
            j[k] = arm_rows[0][k];
        if (!args.no_roofline) j["roofline"] = arm_rows[0]["roofline"];
        if (arms.size() == 2) {
            nlohmann::json pairs = nlohmann::json::array();
            std::vector<double> rp, rd;
            for (int rep = 1; rep <= args.repeats; ++rep) {
                const BenchRun *ra = nullptr, *rb = nullptr;
                for (const BenchRun& r : runs)
                    if (r.repeat == rep) (r.arm == 0 ? ra : rb) = &r;
                double p = ra->prefill_tok_s > 0 ? rb->prefill_tok_s / ra->prefill_tok_s : 0;
                double d = ra->decode_tok_s > 0 ? rb->decode_tok_s / ra->decode_tok_s : 0;
                rp.push_back(p);
                rd.push_back(d);
                pairs.push_back({{"repeat", rep}, {"prefill_ratio_b_over_a", p}, {"decode_ratio_b_over_a", d}});
            }
            Spread sp = spread(rp), sd = spread(rd);
            j["pairs"] = pairs;
            j["prefill_ratio_b_over_a"] = spread_json(sp);
            j["decode_ratio_b_over_a"] = spread_json(sd);
            std::printf("B/A per pair: prefill median %.3f (min %.3f, max %.3f), decode median %.3f (min %.3f, max %.3f)\n",
                        sp.median, sp.min, sp.max, sd.median, sd.min, sd.max);
        }
        if (!args.trace.empty()) {
            nlohmann::json ops = nlohmann::json::array();
            for (const trace::OpStats& o : tsum.ops)
                ops.push_back({{"op", o.name}, {"calls", o.calls}, {"total_ms", o.total_ms}, {"self_ms", o.self_ms},
                               {"self_share_frac", o.self_share}});
            j["trace"] = {{"path", tsum.path}, {"events", tsum.events}, {"ops", ops}};
            trace::print_summary(tsum, stderr);
        }
        if (!args.json.empty()) write_json_file(json_path, j);
    }
    return 0;
}

CommandRunner setup(CLI::App& app) {
    auto a = std::make_shared<BenchArgs>();
    CLI::App* c = app.add_subcommand("bench", "time prefill and decode (cold, warm repeats; --b compares two arms A B A B)");
    auto* m = c->add_option("--model", a->model, "GGUF model file (default: the embedded model)");
    c->add_option("--synthetic", a->synthetic, "a synthetic model by name (flash), random weights on the GPU")
        ->excludes(m);
    c->add_option("--layers", a->layers, "with --synthetic: the first N layers of the shape (0 = all)")
        ->check(CLI::Range(0, 1000));
    c->add_option("--experts", a->experts, "with --synthetic: routed expert format (q2_k, mxfp4, q8_0)");
    c->add_option("--dense", a->dense, "with --synthetic: format of every other matrix (q8_0, bf16, f16)");
    c->add_option("--prompt", a->prompt,
                  "prompt tokens; a comma list (2048,8192) runs each length in turn, one receipt each "
                  "(--json F.json writes F-p2048.json, ...)");
    c->add_option("--gen", a->gen, "generated tokens (the first comes from the prefill)")->check(CLI::Range(1L, 1L << 30));
    c->add_option("--repeats", a->repeats, "warm runs per arm after the cold one")->check(CLI::Range(1, 10000));
    c->add_option("--a", a->a, "arm A options, e.g. \"band=512 frontier=2\"");
    c->add_option("--b", a->b, "arm B options: time both arms interleaved");
    c->add_flag("--compare", a->compare, "compare --a and --b (implied by --b)");
    c->add_option("--json", a->json, "write the JSON receipt here ('-' = stdout)");
    c->add_option("--trace", a->trace, "write a Chrome/Perfetto trace of the runs here and print the per-op table");
    c->add_option("--seed", a->seed, "seed of the random prompt (models without a tokenizer)");
    c->add_option("--filler", a->filler, "prompt text (default: models/retrieval_filler.txt)");
    c->add_flag("--no-roofline", a->no_roofline, "skip measuring bandwidth and peak (the *_roofline_pct keys are null)");
    return [a] { return run_bench(*a); };
}

const bool registered = register_command(45, setup);
}  // namespace

}  // namespace dsv4::cli
