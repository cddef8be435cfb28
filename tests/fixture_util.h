// Access to the transformers reference fixtures (tests/fixtures/<name>/), shared by the tests
// that run the engine on them.
#pragma once
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "io/convert_hf.h"
#include "test_util.h"

namespace dsv4::test {

inline std::filesystem::path fixture_dir(const std::string& name) {
    return std::filesystem::path(DSV4_SOURCE_DIR) / "tests" / "fixtures" / name;
}

// tokens.txt: the fixture's token ids.
inline std::vector<int32_t> fixture_tokens(const std::string& name) {
    std::ifstream in(fixture_dir(name) / "tokens.txt");
    std::vector<int32_t> out;
    int32_t t;
    while (in >> t) out.push_back(t);
    return out;
}

// logits.f32: transformers' logits, [n_tokens, vocab].
inline std::vector<float> fixture_logits(const std::string& name) {
    std::vector<uint8_t> b = read_file((fixture_dir(name) / "logits.f32").string());
    std::vector<float> out(b.size() / 4);
    std::memcpy(out.data(), b.data(), out.size() * 4);
    return out;
}

// Converts the fixture's checkpoint to <dir>/<name>.gguf and returns that path.
inline std::string convert_fixture(const std::string& name, const std::filesystem::path& dir,
                                   gguf::TensorType dtype = gguf::TensorType::F32) {
    ConvertOptions o;
    o.hf_dir = fixture_dir(name).string();
    o.out_path = (dir / (name + ".gguf")).string();
    o.dtype = dtype;
    o.quiet = true;
    convert_hf(o);
    return o.out_path;
}

}  // namespace dsv4::test
