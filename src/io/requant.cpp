#include "io/requant.h"

#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <vector>

#include "backend/cpu/quant.h"
#include "core/error.h"
#include "io/names.h"

namespace dsv4 {

using gguf::TensorType;

bool is_routed_expert_tensor(const std::string& name) {
    const std::string prefix = "blk.";
    if (name.compare(0, prefix.size(), prefix) != 0) return false;
    size_t i = prefix.size(), digits = 0;
    while (i < name.size() && std::isdigit(static_cast<unsigned char>(name[i]))) ++i, ++digits;
    if (digits == 0 || i >= name.size() || name[i] != '.') return false;
    const std::string suffix = name.substr(i + 1);
    return suffix == names::kFfnGateExps || suffix == names::kFfnUpExps || suffix == names::kFfnDownExps;
}

namespace {

// One expert stack re-encoded row by row (a row is ne[0] values; every expert's rows follow
// one another), through float32: the source type's exact decoded values are what is quantised.
std::vector<uint8_t> reencode(const std::string& file, const gguf::TensorInfo& t, TensorType to) {
    const int64_t n = t.ne[0], rows = t.elements() / n;
    const size_t in_rb = cpu::row_bytes(t.type, n), out_rb = cpu::row_bytes(to, n);
    std::vector<uint8_t> out(out_rb * size_t(rows));
    std::vector<float> row(static_cast<size_t>(n));
    for (int64_t r = 0; r < rows; ++r) {
        try {
            cpu::dequant_row(t.type, t.data + in_rb * size_t(r), n, row.data());
            cpu::quantize_row(to, row.data(), n, out.data() + out_rb * size_t(r));
        } catch (const Error& e) {
            fail(file, ": tensor '", t.name, "' row ", r, ": ", e.what());
        }
    }
    return out;
}

}  // namespace

RequantReport requant_experts(const RequantOptions& o) {
    if (!cpu::is_float_weight_type(o.experts))
        fail("cannot re-encode experts as ", gguf::type_name(o.experts), " (not a weight type)");
    gguf::Reader in(o.in_path);
    gguf::Writer w(in.alignment());
    for (const auto& [key, value] : in.metadata()) w.set(key, value);

    RequantReport rep;
    const int64_t block = gguf::type_block_elems(o.experts);
    for (const gguf::TensorInfo& t : in.tensors()) {
        const gguf::TensorInfo* tp = &t;
        const bool expert = is_routed_expert_tensor(t.name);
        std::string keep_reason;
        if (expert && t.type == o.experts) keep_reason = "already " + std::string(gguf::type_name(o.experts));
        else if (expert && !cpu::is_float_weight_type(t.type))
            fail(o.in_path, ": expert tensor '", t.name, "' has type ", gguf::type_name(t.type),
                 ", which is not a weight type");
        else if (expert && t.ne[0] % block != 0)  // lossless fallback: the source encoding stays
            keep_reason = "rows of " + std::to_string(t.ne[0]) + " are not whole " + gguf::type_name(o.experts) +
                          " blocks";
        if (expert && keep_reason.empty()) {
            const std::string file = o.in_path;
            const TensorType to = o.experts;
            w.add_tensor(t.name, to, t.ne, [=](std::vector<uint8_t>& out) { out = reencode(file, *tp, to); });
            ++rep.requantised;
        } else {
            if (expert) rep.notes += t.name + ": " + keep_reason + ", kept as " + gguf::type_name(t.type) + "\n";
            w.add_tensor(t.name, t.type, t.ne, [tp](std::vector<uint8_t>& out) { out.assign(tp->data, tp->data + tp->nbytes); });
        }
        ++rep.tensors;
    }
    const bool tty = !o.quiet && isatty(2);
    w.write(o.out_path, [&](size_t i, size_t total) {
        if (tty) std::fprintf(stderr, "\rrequant: writing tensor %zu/%zu", i + 1, total);
    });
    if (tty) std::fprintf(stderr, "\n");
    return rep;
}

}  // namespace dsv4
