// dsv4 quality: teacher-forced comparison of two arms on frozen token tapes (runtime/quality.h
// says what is measured). Prints a table, writes a JSON receipt, and exits 0 when every tape
// is within the limit, 3 when one is not (1: runtime failure, 2: bad arguments).
#include <cstdio>
#include <map>
#include <memory>

#include "cli/registry.h"
#include "core/error.h"
#include "core/progress.h"
#include "model/model.h"
#include "runtime/arm.h"
#include "runtime/quality.h"
#include "runtime/receipt.h"
#include "runtime/tape.h"
#include "tokenizer/tokenizer.h"

namespace dsv4::cli {

namespace {
struct QualityArgs {
    std::string model, a, b, tapes = std::string(DSV4_SOURCE_DIR) + "/models/tapes", json;
    double limit = -1;
    long greedy = 32, max_tokens = 0;
};

nlohmann::json pair_json(const PairStats& p) {
    return {{"positions", p.positions}, {"kld_mean_nats", p.kld_mean()}, {"kld_max_nats", p.kld_max},
            {"top1_agreement_frac", p.top1()}};
}

int run_quality(const QualityArgs& args) {
    ArmOptions oa = parse_arm(args.a, "--a"), ob = parse_arm(args.b, "--b");
    apply_arm_threads({oa, ob});
    QualityOptions qo;
    qo.greedy_tokens = args.greedy;
    if (args.limit >= 0) qo.limit.fixed = args.limit;
    std::vector<Tape> tapes = read_tapes(args.tapes);
    if (args.max_tokens > 0)
        for (Tape& t : tapes)
            if (int64_t(t.tokens.size()) > args.max_tokens) t.tokens.resize(size_t(args.max_tokens));

    // One Model per distinct file and backend: arms that differ only in schedule share the weights;
    // backend= and gpus= choose where an arm's forwards run (as in bench).
    const std::string pa = arm_model_path(oa, args.model), pb = arm_model_path(ob, args.model);
    auto key = [](const std::string& p, const ArmOptions& o) { return cat(p, "@", o.backend, "x", o.gpus); };
    std::map<std::string, std::unique_ptr<Model>> models;
    for (const auto& [p, o] : {std::pair<std::string, const ArmOptions&>{pa, oa}, {pb, ob}})
        if (!models.count(key(p, o))) models[key(p, o)] = std::make_unique<Model>(p, o.backend, o.gpus);
    QualityArm A{models[key(pa, oa)].get(), arm_prefill_options(oa)}, B{models[key(pb, ob)].get(), arm_prefill_options(ob)};
    const int64_t V = A.model->config().vocab;
    for (const Model* m : {A.model, B.model})
        if (m->config().vocab != V)
            fail("the arms' vocabularies differ (", V, " and ", m->config().vocab, "): nothing to compare");
    for (const Model* m : {A.model, B.model}) {
        std::string fp = has_tokenizer(m->file()) ? tokenizer_fingerprint(Tokenizer(m->file())) : "";
        for (const Tape& t : tapes) check_tape(t, V, fp);
    }

    int64_t total = 0;
    for (const Tape& t : tapes) total += 4 * int64_t(t.tokens.size());
    Progress progress("quality", total, "tok");
    qo.progress = [&](int64_t n) { progress.add(n); };
    std::vector<TapeResult> results;
    for (const Tape& t : tapes) results.push_back(compare_on_tape(t.name, t.tokens, A, B, qo));
    progress.finish();

    bool pass = true;
    PairStats all;
    for (const TapeResult& r : results) {
        pass = pass && r.pass;
        all.merge(r.cross);
    }
    std::printf("quality: A = \"%s\" (%s), B = \"%s\" (%s); limit %s\n", oa.text.c_str(), pa.c_str(),
                ob.text.c_str(), pb.c_str(), qo.limit.describe().c_str());
    std::printf("%-16s %7s %12s %12s %7s %9s %12s %12s %5s\n", "tape", "tokens", "KLD(A||B)", "max KLD", "top-1",
                "greedy", "noise KLD", "limit", "");
    for (const TapeResult& r : results)
        std::printf("%-16s %7lld %12.3e %12.3e %6.2f%% %4lld/%-4lld %12.3e %12.3e %5s\n", r.name.c_str(),
                    (long long)r.tokens, r.cross.kld_mean(), r.cross.kld_max, 100.0 * r.cross.top1(),
                    (long long)r.greedy_prefix, (long long)r.greedy_tokens, r.noise, r.limit, r.pass ? "pass" : "FAIL");
    std::printf("%-16s %7lld %12.3e %12.3e %6.2f%%   overall: %s\n", "all", (long long)(all.positions / 3),
                all.kld_mean(), all.kld_max, 100.0 * all.top1(), pass ? "PASS" : "FAIL");

    if (!args.json.empty()) {
        nlohmann::json j = receipt_header(DSV4_SOURCE_DIR, own_command_line());
        j["kind"] = "quality";
        j["arms"] = {{"a", arm_json(oa, pa)}, {"b", arm_json(ob, pb)}};
        j["arms"]["a"]["model"] = model_json(pa);
        j["arms"]["b"]["model"] = model_json(pb);
        j["order"] = "A1 B1 B2 A2";
        j["limit_rule"] = qo.limit.describe();
        j["greedy_tokens"] = qo.greedy_tokens;
        j["tapes_dir"] = args.tapes;
        nlohmann::json rows = nlohmann::json::array();
        for (size_t i = 0; i < results.size(); ++i) {
            const TapeResult& r = results[i];
            nlohmann::json t = {{"name", r.name},
                                {"path", tapes[i].path},
                                {"tokens", r.tokens},
                                {"kld_mean_nats", r.cross.kld_mean()},
                                {"kld_max_nats", r.cross.kld_max},
                                {"top1_agreement_frac", r.cross.top1()},
                                {"greedy_prefix_tokens", r.greedy_prefix},
                                {"greedy_prefix_noise_tokens", r.greedy_prefix_noise},
                                {"noise_kld_nats", r.noise},
                                {"limit_kld_nats", r.limit},
                                {"pass", r.pass},
                                {"wall_s", r.wall_s}};
            t["noise_a"] = pair_json(r.noise_a);
            t["noise_b"] = pair_json(r.noise_b);
            rows.push_back(t);
        }
        j["tapes"] = rows;
        j["kld_mean_nats"] = all.kld_mean();
        j["top1_agreement_frac"] = all.top1();
        j["pass"] = pass;
        write_json_file(args.json, j);
    }
    return pass ? 0 : 3;
}

CommandRunner setup(CLI::App& app) {
    auto a = std::make_shared<QualityArgs>();
    CLI::App* c = app.add_subcommand("quality", "teacher-forced KLD / top-1 / greedy comparison of two arms on token tapes");
    c->add_option("--model", a->model, "GGUF model file of arms without model= (default: the embedded model)");
    c->add_option("--a", a->a, "arm A options, e.g. \"band=512 frontier=1\" or \"model=F.gguf\"");
    c->add_option("--b", a->b, "arm B options");
    c->add_option("--tapes", a->tapes, "folder of *.tokens tapes (default: models/tapes)");
    c->add_option("--json", a->json, "write the JSON receipt here ('-' = stdout)");
    c->add_option("--limit", a->limit, "pass limit on mean KLD in nats (default: max(0.006, 1.25 x same-arm noise))")
        ->check(CLI::NonNegativeNumber);
    c->add_option("--greedy", a->greedy, "greedy tokens generated past each tape")->check(CLI::NonNegativeNumber);
    c->add_option("--max-tokens", a->max_tokens, "use at most N tokens of each tape (0 = all)")
        ->check(CLI::NonNegativeNumber);
    return [a] { return run_quality(*a); };
}

const bool registered = register_command(50, setup);
}  // namespace

}  // namespace dsv4::cli
