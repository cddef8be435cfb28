// The subcommands: each registers its options on the CLI11 app and runs when chosen.
#pragma once
#include <CLI/CLI.hpp>
#include <string>

namespace dsv4::cli {

struct ConvertArgs {
    std::string hf, out, dtype = "f32", experts = "SAME";
};

struct LogitsArgs {
    std::string model, tokens, tokens_file, out, backend = "cpu";
    long chunk = 0;
};

class Commands {
public:
    explicit Commands(CLI::App& app);
    int run();  // the chosen subcommand's exit status

private:
    CLI::App* convert_ = nullptr;
    CLI::App* logits_ = nullptr;
    ConvertArgs convert_args_;
    LogitsArgs logits_args_;
};

int run_convert(const ConvertArgs& a);
int run_logits(const LogitsArgs& a);

}  // namespace dsv4::cli
