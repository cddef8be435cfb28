#include "cli/commands.h"

namespace dsv4::cli {

Commands::Commands(CLI::App& app) {
    convert_ = app.add_subcommand("convert", "Hugging Face safetensors + config.json -> GGUF");
    convert_->add_option("--hf", convert_args_.hf, "checkpoint folder (config.json, *.safetensors)")->required();
    convert_->add_option("--out", convert_args_.out, "output GGUF file")->required();
    convert_->add_option("--dtype", convert_args_.dtype, "type of the large matrices")
        ->check(CLI::IsMember({"f32", "f16", "bf16", "q8_0"}));
    convert_->add_option("--experts", convert_args_.experts, "type of the routed experts")
        ->check(CLI::IsMember({"SAME", "mxfp4", "q8_0"}));

    logits_ = app.add_subcommand("logits", "write the logits of every position as float32 [n_tokens, vocab]");
    logits_->add_option("--model", logits_args_.model, "GGUF model file")->required();
    auto* tok = logits_->add_option("--tokens", logits_args_.tokens, "token ids, e.g. \"1 2 3\"");
    auto* tf = logits_->add_option("--tokens-file", logits_args_.tokens_file, "file of whitespace-separated token ids");
    tok->excludes(tf);
    logits_->add_option("--out", logits_args_.out, "output file")->required();
    logits_->add_option("--chunk", logits_args_.chunk, "prefill in chunks of N tokens (0 = one chunk)")
        ->check(CLI::NonNegativeNumber);
    logits_->add_option("--backend", logits_args_.backend, "compute backend")->check(CLI::IsMember({"cpu", "cuda"}));
}

int Commands::run() {
    if (convert_->parsed()) return run_convert(convert_args_);
    if (logits_->parsed()) return run_logits(logits_args_);
    return 2;
}

}  // namespace dsv4::cli
