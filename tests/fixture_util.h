// Access to the transformers reference fixtures (tests/fixtures/<name>/), shared by the tests
// that run the engine on them.
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "io/convert_hf.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"
#include "test_util.h"

namespace dsv4::test {

// The source tree: $DSV4_SOURCE_DIR when set (binaries built on one machine and run on another,
// like the device tests on the GPU machine), else where this build was configured.
inline std::filesystem::path source_dir() {
    const char* e = std::getenv("DSV4_SOURCE_DIR");
    return std::filesystem::path(e && *e ? e : DSV4_SOURCE_DIR);
}

inline std::filesystem::path fixture_dir(const std::string& name) { return source_dir() / "tests" / "fixtures" / name; }

// tokens.txt: the fixture's token ids.
inline std::vector<int32_t> fixture_tokens(const std::string& name) {
    std::ifstream in(fixture_dir(name) / "tokens.txt");
    std::vector<int32_t> out;
    int32_t t;
    while (in >> t) out.push_back(t);
    return out;
}

// BOS, then the model's encoding of models/retrieval_filler.txt, the first n ids in all: the
// text the tests of the shipped model run it on.
inline std::vector<int32_t> filler_tokens(const Model& m, int64_t n) {
    Tokenizer tok(m.file());
    std::ifstream in(source_dir() / "models" / "retrieval_filler.txt");
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::vector<int32_t> ids = {m.config().bos};
    for (int32_t id : tok.encode(text.substr(0, 20000), false)) ids.push_back(id);
    ids.resize(size_t(std::min<int64_t>(n, int64_t(ids.size()))));
    return ids;
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

// The byte-level test tokenizer (tests/fixtures/byte_tokenizer), small enough for every fixture.
inline std::string byte_tokenizer_json() {
    return (fixture_dir("byte_tokenizer") / "tokenizer.json").string();
}

// A checkpoint converted with the byte-level tokenizer embedded (generate() needs one) and loaded;
// the GGUF's temp folder goes at once (the mapping stays valid after the unlink).
struct TextModel {
    std::unique_ptr<Model> model;
    std::unique_ptr<Tokenizer> tok;
};
inline TextModel load_text_model(const std::string& hf_dir, gguf::TensorType dtype = gguf::TensorType::F32) {
    TempDir dir;
    ConvertOptions o;
    o.hf_dir = hf_dir;
    o.out_path = dir.file("m.gguf");
    o.tokenizer_json = byte_tokenizer_json();
    o.dtype = dtype;
    o.quiet = true;
    convert_hf(o);
    TextModel m;
    m.model = std::make_unique<Model>(o.out_path);
    m.tok = std::make_unique<Tokenizer>(m.model->file());
    return m;
}
// A fixture as a TextModel, loaded once per (fixture, weight type) for the whole test binary.
inline const TextModel& text_fixture(const std::string& name, gguf::TensorType dtype = gguf::TensorType::F32) {
    static std::mutex mu;  // tests with threads (the server's) may ask at once
    static std::map<std::pair<std::string, int>, TextModel> cache;
    std::lock_guard<std::mutex> lock(mu);
    TextModel& m = cache[{name, int(dtype)}];
    if (!m.model) m = load_text_model(fixture_dir(name).string(), dtype);
    return m;
}

}  // namespace dsv4::test
