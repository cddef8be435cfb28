// dsv4 eval retrieval: the long-context key retrieval test (runtime/retrieval.h). Prints one
// line per trial and the score (trials with all N codes exact / trials); the JSON receipt has
// every answer and the output hash. Deterministic for a seed.
#include <cstdio>
#include <memory>

#include "cli/registry.h"
#include "core/error.h"
#include "core/progress.h"
#include "model/model.h"
#include "runtime/arm.h"
#include "runtime/default_model.h"
#include "runtime/receipt.h"
#include "runtime/retrieval.h"
#include "runtime/sha256.h"
#include "tokenizer/tokenizer.h"

namespace dsv4::cli {

namespace {
struct EvalArgs {
    std::string model, opts, json;
    std::string names = std::string(DSV4_SOURCE_DIR) + "/models/retrieval_names.txt";
    std::string filler = std::string(DSV4_SOURCE_DIR) + "/models/retrieval_filler.txt";
    long keys = 5, tokens = 9000, trials = 1;
    unsigned long long seed = 1;
    bool print_prompt = false;
};

int run_retrieval(const EvalArgs& a) {
    ArmOptions arm = parse_arm(a.opts, "--opts");
    apply_arm_threads({arm});
    const std::string path = arm_model_path(arm, a.model);
    Model model(path, arm.backend, arm.gpus);
    const ModelConfig& c = model.config();
    if (!has_tokenizer(model.file())) fail(path, ": the file has no tokenizer; retrieval needs one");
    if (c.max_positions > 0 && a.tokens + 16 > c.max_positions)
        throw UsageError(cat("--tokens ", a.tokens, ": the context length is ", c.max_positions,
                             " (leave 16 tokens for the answer)"));
    Tokenizer tok(model.file());
    RetrievalData data = load_retrieval_data(a.names, a.filler);

    nlohmann::json rows = nlohmann::json::array();
    int passed = 0, keys_ok = 0, far = 0, far_ok = 0;  // far: facts beyond the sliding window
    Sha256 all;
    for (long i = 0; i < a.trials; ++i) {
        const uint64_t seed = a.seed + uint64_t(i);
        RetrievalTask task = build_task_for_tokens(data, tok, int(a.keys), a.tokens, seed);
        if (a.print_prompt && i == 0)
            std::printf("%s\n\n%s\n-----\n", task.body.c_str(), question_text(task.names[size_t(task.order[0])]).c_str());
        PrefillOptions po = arm_prefill_options(arm);
        std::unique_ptr<Progress> bar;
        po.progress = [&](int64_t done, int64_t total) {
            if (!bar) bar = std::make_unique<Progress>(cat("trial ", i + 1, "/", a.trials, " prefill"), total, "tok");
            bar->update(done);
        };
        Session s(model, po);
        RetrievalTrial r = run_trial(s, tok, task, seed);
        if (bar) bar->finish();
        passed += r.pass;
        keys_ok += r.n_correct;
        all.update(r.output_sha256);
        std::printf("trial %ld seed %llu: %d/%ld keys exact, %s; prompt %lld tokens (prefill %.2f s, %.0f tok/s), "
                    "answers sha256 %.16s\n",
                    i + 1, (unsigned long long)seed, r.n_correct, a.keys, r.pass ? "pass" : "fail",
                    (long long)r.prompt_tokens, r.prefill_s, r.prefill_s > 0 ? double(r.shared_tokens) / r.prefill_s : 0.0,
                    r.output_sha256.c_str());
        for (size_t q = 0; q < r.answers.size(); ++q) {
            const int k = task.order[q];
            std::printf("  %-12s code %s  answer \"%s\"  %lld tokens back%s\n", task.names[size_t(k)].c_str(),
                        task.codes[size_t(k)].c_str(), r.answers[q].c_str(), (long long)r.distance_tokens[q],
                        r.correct[q] ? "" : "  (wrong)");
            if (r.distance_tokens[q] > c.window) {
                far += 1;
                far_ok += r.correct[q];
            }
        }
        nlohmann::json t = {{"seed", seed},          {"prompt_tokens", r.prompt_tokens},
                            {"shared_tokens", r.shared_tokens}, {"keys_correct", r.n_correct},
                            {"pass", r.pass},        {"output_sha256", r.output_sha256},
                            {"prefill_s", r.prefill_s}, {"answer_s", r.answer_s}};
        nlohmann::json qs = nlohmann::json::array();
        for (size_t q = 0; q < r.answers.size(); ++q) {
            const int k = task.order[q];
            qs.push_back({{"name", task.names[size_t(k)]},
                          {"code", task.codes[size_t(k)]},
                          {"answer", r.answers[q]},
                          {"correct", bool(r.correct[q])},
                          {"distance_tokens", r.distance_tokens[q]},
                          {"fact_offset_frac", double(task.fact_offsets[size_t(k)]) / double(task.body.size())}});
        }
        t["questions"] = qs;
        rows.push_back(t);
    }
    const std::string output_sha = all.hex();
    if (!a.json.empty()) {
        nlohmann::json j = receipt_header(DSV4_SOURCE_DIR, own_command_line());
        j["kind"] = "eval_retrieval";
        j["model"] = model_json(path);
        j["arm"] = arm_json(arm, path);
        j["keys"] = a.keys;
        j["target_tokens"] = a.tokens;
        j["seed"] = a.seed;
        j["trials"] = rows;
        j["score_frac"] = double(passed) / double(a.trials);
        j["keys_correct_frac"] = double(keys_ok) / double(a.trials * a.keys);
        j["sliding_window"] = c.window;
        j["beyond_window_keys"] = far;
        j["beyond_window_keys_correct"] = far_ok;
        j["output_sha256"] = output_sha;
        write_json_file(a.json, j);
    }
    std::printf("retrieval: score %d/%ld trials with all %ld keys exact (%.1f%%), keys %d/%ld (%d/%d beyond the "
                "%d-token sliding window), output sha256 %s\n",
                passed, a.trials, a.keys, 100.0 * passed / double(a.trials), keys_ok, a.trials * a.keys, far_ok, far,
                c.window, output_sha.c_str());
    return 0;
}

CommandRunner setup(CLI::App& app) {
    auto a = std::make_shared<EvalArgs>();
    CLI::App* e = app.add_subcommand("eval", "evaluations of the model");
    e->require_subcommand(1);
    CLI::App* r = e->add_subcommand("retrieval", "find N codes hidden in a long prompt; graded strictly (all N exact)");
    r->add_option("--model", a->model, "GGUF model file (default: the embedded model)");
    r->add_option("--keys", a->keys, "facts hidden in the prompt")->check(CLI::Range(1, 100));
    r->add_option("--tokens", a->tokens, "prompt length in tokens (at most)")->check(CLI::Range(64L, 1L << 30));
    r->add_option("--seed", a->seed, "seed of the first trial (trial i uses seed + i)");
    r->add_option("--trials", a->trials, "trials, each a new prompt")->check(CLI::Range(1, 100000));
    r->add_option("--opts", a->opts, "engine options, as an arm string (\"band=512 frontier=2\")");
    r->add_option("--names", a->names, "names file (default: models/retrieval_names.txt)");
    r->add_option("--filler", a->filler, "filler text (default: models/retrieval_filler.txt)");
    r->add_flag("--print-prompt", a->print_prompt, "print the first trial's prompt (first question) before the results");
    r->add_option("--json", a->json, "write the JSON receipt here ('-' = stdout)");
    return [a, r] { return r->parsed() ? run_retrieval(*a) : 2; };
}

const bool registered = register_command(55, setup);
}  // namespace

}  // namespace dsv4::cli
