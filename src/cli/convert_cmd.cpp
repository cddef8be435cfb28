#include <cstdio>

#include "cli/commands.h"
#include "core/error.h"
#include "io/convert_hf.h"

namespace dsv4::cli {

namespace {
gguf::TensorType parse_type(const std::string& s) {
    if (s == "f32") return gguf::TensorType::F32;
    if (s == "f16") return gguf::TensorType::F16;
    if (s == "bf16") return gguf::TensorType::BF16;
    if (s == "q8_0") return gguf::TensorType::Q8_0;
    if (s == "mxfp4") return gguf::TensorType::MXFP4;
    throw UsageError(cat("unknown tensor type '", s, "'"));
}
}  // namespace

int run_convert(const ConvertArgs& a) {
    ConvertOptions o;
    o.hf_dir = a.hf;
    o.out_path = a.out;
    o.dtype = parse_type(a.dtype);
    o.experts_same = a.experts == "SAME";
    if (!o.experts_same) o.experts = parse_type(a.experts);
    ConvertReport r = convert_hf(o);
    if (!r.notes.empty()) std::fprintf(stderr, "%s", r.notes.c_str());
    std::fprintf(stderr, "convert: wrote %zu tensors to %s", r.tensors, a.out.c_str());
    if (r.skipped) std::fprintf(stderr, " (%zu MTP tensors not converted)", r.skipped);
    std::fprintf(stderr, "\n");
    return 0;
}

}  // namespace dsv4::cli
