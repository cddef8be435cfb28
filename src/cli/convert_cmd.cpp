// dsv4 convert: Hugging Face safetensors + config.json -> GGUF (or GGUF -> GGUF with the routed
// experts re-encoded: --from-gguf).
#include <cstdio>
#include <memory>

#include "cli/registry.h"
#include "core/error.h"
#include "io/convert_dspark.h"
#include "io/convert_hf.h"
#include "io/requant.h"

namespace dsv4::cli {

namespace {
struct ConvertArgs {
    std::string hf, dspark, from_gguf, out, dtype = "f32", experts = "SAME", tokenizer;
    bool dtype_given = false;
};

gguf::TensorType parse_type(const std::string& s) {
    if (s == "f32") return gguf::TensorType::F32;
    if (s == "f16") return gguf::TensorType::F16;
    if (s == "bf16") return gguf::TensorType::BF16;
    if (s == "q8_0") return gguf::TensorType::Q8_0;
    if (s == "mxfp4") return gguf::TensorType::MXFP4;
    if (s == "q2_k") return gguf::TensorType::Q2_K;
    throw UsageError(cat("unknown tensor type '", s, "'"));
}

// --from-gguf: only the routed experts change, so the options that shape the rest do not apply.
int run_requant(const ConvertArgs& a) {
    if (a.experts == "SAME") throw UsageError("--from-gguf re-encodes the routed experts: give --experts TYPE");
    if (a.dtype_given || !a.tokenizer.empty())
        throw UsageError("--from-gguf keeps every non-expert tensor and the tokenizer: drop --dtype / --tokenizer");
    RequantOptions o;
    o.in_path = a.from_gguf;
    o.out_path = a.out;
    o.experts = parse_type(a.experts);
    RequantReport r = requant_experts(o);
    if (!r.notes.empty()) std::fprintf(stderr, "%s", r.notes.c_str());
    std::fprintf(stderr, "convert: wrote %zu tensors to %s, %zu expert tensor(s) re-encoded as %s\n", r.tensors,
                 a.out.c_str(), r.requantised, gguf::type_name(o.experts));
    return 0;
}

int run_convert(const ConvertArgs& a) {
    if (int(!a.hf.empty()) + int(!a.dspark.empty()) + int(!a.from_gguf.empty()) != 1)
        throw UsageError("give exactly one of --hf, --dspark and --from-gguf");
    if (!a.from_gguf.empty()) return run_requant(a);
    if (!a.dspark.empty()) {
        DsparkConvertOptions d;
        d.dir = a.dspark;
        d.out_path = a.out;
        d.dtype = parse_type(a.dtype);
        size_t n = convert_dspark(d);
        std::fprintf(stderr, "convert: wrote the DSpark drafter (%zu tensors) to %s\n", n, a.out.c_str());
        return 0;
    }
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
    if (r.mtp_blocks) std::fprintf(stderr, ", %d MTP block(s)", r.mtp_blocks);
    if (r.skipped) std::fprintf(stderr, " (%zu mtp.* tensors without an e_proj not converted)", r.skipped);
    std::fprintf(stderr, "\n");
    return 0;
}

CommandRunner setup(CLI::App& app) {
    auto a = std::make_shared<ConvertArgs>();
    CLI::App* c = app.add_subcommand("convert", "Hugging Face safetensors + config.json -> GGUF, or GGUF -> GGUF");
    c->add_option("--hf", a->hf, "checkpoint folder (config.json, *.safetensors; mtp.* tensors become the MTP block)");
    c->add_option("--dspark", a->dspark, "DSpark drafter folder (dspark.safetensors, dspark_config.json)");
    c->add_option("--from-gguf", a->from_gguf, "GGUF file whose routed experts to re-encode as --experts (all else copied)");
    c->add_option("--out", a->out, "output GGUF file")->required();
    CLI::Option* dtype = c->add_option("--dtype", a->dtype, "type of the large matrices")
        ->check(CLI::IsMember({"f32", "f16", "bf16", "q8_0"}));
    c->add_option("--experts", a->experts, "type of the routed experts (q2_k: 2.625 bits per weight)")
        ->check(CLI::IsMember({"SAME", "mxfp4", "q8_0", "q2_k"}));
    c->add_option("--tokenizer", a->tokenizer, "tokenizer.json to embed (default: the one in --hf, if any)");
    return [a, dtype] {
        a->dtype_given = dtype->count() > 0;
        return run_convert(*a);
    };
}

const bool registered = register_command(10, setup);
}  // namespace

}  // namespace dsv4::cli
