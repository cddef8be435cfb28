// dsv4 convert: Hugging Face safetensors + config.json -> GGUF.
#include <cstdio>
#include <memory>

#include "cli/registry.h"
#include "core/error.h"
#include "io/convert_hf.h"

namespace dsv4::cli {

namespace {
struct ConvertArgs {
    std::string hf, out, dtype = "f32", experts = "SAME", tokenizer;
};

gguf::TensorType parse_type(const std::string& s) {
    if (s == "f32") return gguf::TensorType::F32;
    if (s == "f16") return gguf::TensorType::F16;
    if (s == "bf16") return gguf::TensorType::BF16;
    if (s == "q8_0") return gguf::TensorType::Q8_0;
    if (s == "mxfp4") return gguf::TensorType::MXFP4;
    throw UsageError(cat("unknown tensor type '", s, "'"));
}

int run_convert(const ConvertArgs& a) {
    ConvertOptions o;
    o.hf_dir = a.hf;
    o.out_path = a.out;
    o.dtype = parse_type(a.dtype);
    o.experts_same = a.experts == "SAME";
    if (!o.experts_same) o.experts = parse_type(a.experts);
    o.tokenizer_json = a.tokenizer;
    ConvertReport r = convert_hf(o);
    if (!r.notes.empty()) std::fprintf(stderr, "%s", r.notes.c_str());
    std::fprintf(stderr, "convert: wrote %zu tensors to %s", r.tensors, a.out.c_str());
    if (!r.tokenizer.empty()) std::fprintf(stderr, " with the tokenizer of %s", r.tokenizer.c_str());
    if (r.skipped) std::fprintf(stderr, " (%zu MTP tensors not converted)", r.skipped);
    std::fprintf(stderr, "\n");
    return 0;
}

CommandRunner setup(CLI::App& app) {
    auto a = std::make_shared<ConvertArgs>();
    CLI::App* c = app.add_subcommand("convert", "Hugging Face safetensors + config.json -> GGUF");
    c->add_option("--hf", a->hf, "checkpoint folder (config.json, *.safetensors)")->required();
    c->add_option("--out", a->out, "output GGUF file")->required();
    c->add_option("--dtype", a->dtype, "type of the large matrices")
        ->check(CLI::IsMember({"f32", "f16", "bf16", "q8_0"}));
    c->add_option("--experts", a->experts, "type of the routed experts")
        ->check(CLI::IsMember({"SAME", "mxfp4", "q8_0"}));
    c->add_option("--tokenizer", a->tokenizer, "tokenizer.json to embed (default: the one in --hf, if any)");
    return [a] { return run_convert(*a); };
}

const bool registered = register_command(10, setup);
}  // namespace

}  // namespace dsv4::cli
