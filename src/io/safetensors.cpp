#include "io/safetensors.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/half.h"

namespace dsv4 {

namespace {

bool parse_dtype(const std::string& s, StDType& out) {
    static const std::pair<const char*, StDType> table[] = {
        {"F32", StDType::F32}, {"F16", StDType::F16}, {"BF16", StDType::BF16}, {"F64", StDType::F64},
        {"I64", StDType::I64}, {"I32", StDType::I32}, {"I16", StDType::I16}, {"I8", StDType::I8},
        {"U8", StDType::U8}, {"BOOL", StDType::BOOL}, {"F8_E4M3", StDType::F8_E4M3},
        {"F8_E5M2", StDType::F8_E5M2}, {"F8_E8M0", StDType::F8_E8M0},
    };
    for (const auto& [name, t] : table)
        if (s == name) {
            out = t;
            return true;
        }
    return false;
}

}  // namespace

const char* st_dtype_name(StDType t) {
    switch (t) {
        case StDType::F32: return "F32";
        case StDType::F16: return "F16";
        case StDType::BF16: return "BF16";
        case StDType::F64: return "F64";
        case StDType::I64: return "I64";
        case StDType::I32: return "I32";
        case StDType::I16: return "I16";
        case StDType::I8: return "I8";
        case StDType::U8: return "U8";
        case StDType::BOOL: return "BOOL";
        case StDType::F8_E4M3: return "F8_E4M3";
        case StDType::F8_E5M2: return "F8_E5M2";
        case StDType::F8_E8M0: return "F8_E8M0";
    }
    return "?";
}

size_t st_dtype_size(StDType t) {
    switch (t) {
        case StDType::F64: case StDType::I64: return 8;
        case StDType::F32: case StDType::I32: return 4;
        case StDType::F16: case StDType::BF16: case StDType::I16: return 2;
        default: return 1;
    }
}

int64_t StTensor::elements() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
}

void SafeTensors::add_file(const std::string& path) {
    auto file = std::make_shared<MappedFile>(path);
    const uint8_t* base = file->data();
    size_t size = file->size();
    if (size < 8) fail(path, ": truncated safetensors file (no header length)");
    uint64_t hlen;
    std::memcpy(&hlen, base, 8);
    if (hlen > size - 8) fail(path, ": safetensors header length ", hlen, " exceeds the file size ", size);
    nlohmann::json header;
    try {
        header = nlohmann::json::parse(base + 8, base + 8 + hlen);
    } catch (const std::exception& e) {
        fail(path, ": safetensors header is not valid JSON: ", e.what());
    }
    if (!header.is_object()) fail(path, ": safetensors header is not a JSON object");
    const uint8_t* data = base + 8 + hlen;
    size_t data_size = size - 8 - size_t(hlen);
    // Collected first and merged only when the whole file is valid: a rejected file must not
    // leave tensors behind that point into its (then unmapped) data.
    std::map<std::string, StTensor> added;
    for (auto& [name, entry] : header.items()) {
        if (name == "__metadata__") continue;
        if (!entry.is_object() || !entry.contains("dtype") || !entry.contains("shape") ||
            !entry.contains("data_offsets"))
            fail(path, ": tensor '", name, "': entry needs dtype, shape and data_offsets");
        StTensor t;
        t.name = name;
        t.file = path;
        if (!entry["dtype"].is_string() || !parse_dtype(entry["dtype"].get<std::string>(), t.dtype))
            fail(path, ": tensor '", name, "': unsupported dtype ", entry["dtype"].dump());
        const auto& shape = entry["shape"];
        if (!shape.is_array()) fail(path, ": tensor '", name, "': shape is not an array");
        for (const auto& d : shape) {
            if (!d.is_number_integer() || d.get<int64_t>() < 0)
                fail(path, ": tensor '", name, "': bad shape ", shape.dump());
            t.shape.push_back(d.get<int64_t>());
        }
        const auto& off = entry["data_offsets"];
        if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned())
            fail(path, ": tensor '", name, "': bad data_offsets ", off.dump());
        uint64_t b = off[0].get<uint64_t>(), e = off[1].get<uint64_t>();
        if (b > e || e > data_size)
            fail(path, ": tensor '", name, "': data_offsets [", b, ", ", e, "] outside the ", data_size,
                 "-byte data section (truncated file?)");
        // Saturating at 2^64 (more than any byte count): with every dim below 2^63 nothing wraps.
        const unsigned __int128 cap = (unsigned __int128)1 << 64;
        unsigned __int128 want = (unsigned __int128)st_dtype_size(t.dtype);
        for (int64_t d : t.shape) want = std::min<unsigned __int128>(want * (unsigned __int128)d, cap);
        if (want != (unsigned __int128)(e - b))
            fail(path, ": tensor '", name, "': ", e - b, " bytes do not match shape ", shape.dump(), " of ",
                 st_dtype_name(t.dtype));
        t.data = data + b;
        t.nbytes = size_t(e - b);
        if (tensors_.count(name)) fail(path, ": tensor '", name, "' appears in two shards");
        added.emplace(name, std::move(t));
    }
    tensors_.merge(added);
    files_.push_back(std::move(file));
}

SafeTensors SafeTensors::open_dir(const std::string& dir) {
    namespace fs = std::filesystem;
    std::vector<std::string> shards;
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(dir, ec))
        if (entry.is_regular_file() && entry.path().extension() == ".safetensors")
            shards.push_back(entry.path().string());
    if (ec) fail(dir, ": cannot list the folder: ", ec.message());
    if (shards.empty()) fail(dir, ": no .safetensors files in the folder");
    std::sort(shards.begin(), shards.end());
    SafeTensors st;
    for (const auto& s : shards) st.add_file(s);
    return st;
}

const StTensor* SafeTensors::find(const std::string& name) const {
    auto it = tensors_.find(name);
    return it == tensors_.end() ? nullptr : &it->second;
}

std::vector<float> SafeTensors::to_f32(const StTensor& t) const {
    size_t n = size_t(t.elements());
    std::vector<float> out(n);
    switch (t.dtype) {
        case StDType::F32:
            std::memcpy(out.data(), t.data, n * 4);
            break;
        case StDType::F64:
            for (size_t i = 0; i < n; ++i) {
                double v;
                std::memcpy(&v, t.data + 8 * i, 8);
                out[i] = float(v);
            }
            break;
        case StDType::F16:
        case StDType::BF16:
            for (size_t i = 0; i < n; ++i) {
                uint16_t h;
                std::memcpy(&h, t.data + 2 * i, 2);
                out[i] = t.dtype == StDType::F16 ? f16_to_f32(h) : bf16_to_f32(h);
            }
            break;
        default:
            fail(t.file, ": tensor '", t.name, "' has dtype ", st_dtype_name(t.dtype),
                 ", which is not a float type that can be converted here");
    }
    return out;
}

}  // namespace dsv4
