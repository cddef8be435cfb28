// GGUF v3 reader and writer: round trips of every metadata value type and tensor type,
// alignment, byte-exact layout against a hand-built file, and malformed input (every
// truncation, a fixed-seed fuzz loop, and one test per kind of defect) that must throw
// dsv4::Error naming the problem.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/gguf.h"
#include "test_util.h"

namespace {

using namespace dsv4;
using namespace dsv4::gguf;
using dsv4::test::read_file;
using dsv4::test::TempDir;
using dsv4::test::write_file;
namespace fs = std::filesystem;

// ---------------------------------------------------------------------------------------------
// Expectations written down independently of the code under test.

// ggml's type ids and block layouts (ggml.h / ggml.c type traits).
struct TypeSpec {
    TensorType type;
    uint32_t ggml_id;
    const char* name;
    int64_t block_elems;
    size_t block_bytes;
};
const TypeSpec kTypeSpecs[] = {
    {TensorType::F32, 0, "F32", 1, 4},      {TensorType::F16, 1, "F16", 1, 2},
    {TensorType::Q8_0, 8, "Q8_0", 32, 34},  {TensorType::I8, 24, "I8", 1, 1},
    {TensorType::I16, 25, "I16", 1, 2},     {TensorType::I32, 26, "I32", 1, 4},
    {TensorType::I64, 27, "I64", 1, 8},     {TensorType::F64, 28, "F64", 1, 8},
    {TensorType::BF16, 30, "BF16", 1, 2},   {TensorType::MXFP4, 39, "MXFP4", 32, 17},
};

const TypeSpec& spec_of(TensorType t) {
    for (const TypeSpec& s : kTypeSpecs)
        if (s.type == t) return s;
    throw std::logic_error("no spec for type");
}

size_t expected_bytes(TensorType t, const std::vector<int64_t>& ne) {
    const TypeSpec& s = spec_of(t);
    size_t n = size_t(ne.at(0) / s.block_elems) * s.block_bytes;
    for (size_t d = 1; d < ne.size(); ++d) n *= size_t(ne[d]);
    return n;
}

std::vector<uint8_t> random_bytes(size_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<uint8_t> out(n);
    for (auto& b : out) b = uint8_t(rng());
    return out;
}

Value uint_value(ValueType t, uint64_t v) {
    Value x;
    x.type = t;
    x.u = v;
    return x;
}
Value int_value(ValueType t, int64_t v) {
    Value x;
    x.type = t;
    x.i = v;
    return x;
}

void expect_same_value(const Value& want, const Value& got, const std::string& where) {
    SCOPED_TRACE(where);
    ASSERT_EQ(uint32_t(want.type), uint32_t(got.type));
    switch (want.type) {
        case ValueType::U8: case ValueType::U16: case ValueType::U32: case ValueType::U64: case ValueType::BOOL:
            EXPECT_EQ(want.u, got.u);
            break;
        case ValueType::I8: case ValueType::I16: case ValueType::I32: case ValueType::I64:
            EXPECT_EQ(want.i, got.i);
            break;
        case ValueType::F32:
            EXPECT_EQ(float(want.f), float(got.f));
            break;
        case ValueType::F64:
            EXPECT_EQ(want.f, got.f);
            break;
        case ValueType::STRING:
            EXPECT_EQ(want.s, got.s);
            break;
        case ValueType::ARRAY:
            ASSERT_EQ(uint32_t(want.elem), uint32_t(got.elem));
            ASSERT_EQ(want.arr.size(), got.arr.size());
            for (size_t k = 0; k < want.arr.size(); ++k)
                expect_same_value(want.arr[k], got.arr[k], where + "[" + std::to_string(k) + "]");
            break;
    }
}

bool contains(const std::string& haystack, const std::string& needle) {
    return haystack.find(needle) != std::string::npos;
}

// Loads `path` and returns the dsv4::Error message, or nullopt if it loaded. Any other
// exception escapes and fails the test.
std::optional<std::string> load_error(const std::string& path) {
    try {
        Reader r(path);
        return std::nullopt;
    } catch (const Error& e) {
        return std::string(e.what());
    }
}

// Writes `bytes`, expects the reader to throw dsv4::Error whose message contains the path and
// every one of `parts`.
void expect_load_error(const TempDir& dir, const std::vector<uint8_t>& bytes, std::vector<std::string> parts) {
    std::string path = dir.file("bad.gguf");
    write_file(path, bytes);
    std::optional<std::string> msg = load_error(path);
    ASSERT_TRUE(msg.has_value()) << "the malformed file loaded";
    parts.push_back(path);
    for (const std::string& p : parts) EXPECT_TRUE(contains(*msg, p)) << "message: " << *msg << "\nlacks: " << p;
}

bool exists(const std::string& path) {
    std::error_code ec;
    return fs::exists(fs::symlink_status(path, ec));
}

// ---------------------------------------------------------------------------------------------
// A hand-built GGUF file, field by field, to craft both valid and malformed inputs.

struct Bytes {
    std::vector<uint8_t> b;
    template <class T>
    Bytes& put(T v) {
        const uint8_t* p = reinterpret_cast<const uint8_t*>(&v);
        b.insert(b.end(), p, p + sizeof(T));
        return *this;
    }
    Bytes& str(const std::string& s) {
        put<uint64_t>(s.size());
        b.insert(b.end(), s.begin(), s.end());
        return *this;
    }
};

// A key and its type id; the caller appends the payload.
Bytes kv(const std::string& key, uint32_t type) {
    Bytes out;
    out.str(key).put<uint32_t>(type);
    return out;
}
Bytes kv_u32(const std::string& key, uint32_t v) { return kv(key, 4).put<uint32_t>(v); }
Bytes kv_str(const std::string& key, const std::string& v) { return kv(key, 8).str(v); }

struct RawTensor {
    std::string name;
    std::vector<int64_t> ne;
    uint32_t type;
    uint64_t offset;
};

struct RawGguf {
    uint32_t magic = 0x46554747;  // "GGUF"
    uint32_t version = 3;
    std::optional<uint64_t> n_tensors, n_kv;  // override the real counts
    std::vector<Bytes> kvs;
    std::vector<RawTensor> tensors;
    uint32_t pad_to = 32;  // alignment of the data section
    std::vector<uint8_t> data;

    std::vector<uint8_t> bytes() const {
        Bytes out;
        out.put<uint32_t>(magic).put<uint32_t>(version);
        out.put<uint64_t>(n_tensors.value_or(tensors.size()));
        out.put<uint64_t>(n_kv.value_or(kvs.size()));
        for (const Bytes& k : kvs) out.b.insert(out.b.end(), k.b.begin(), k.b.end());
        for (const RawTensor& t : tensors) {
            out.str(t.name).put<uint32_t>(uint32_t(t.ne.size()));
            for (int64_t n : t.ne) out.put<int64_t>(n);
            out.put<uint32_t>(t.type).put<uint64_t>(t.offset);
        }
        while (out.b.size() % pad_to) out.b.push_back(0);
        out.b.insert(out.b.end(), data.begin(), data.end());
        return out.b;
    }
};

// A small valid file: three keys and two tensors ("a": F32 [4] at 0, "b": I8 [8, 2] at 32).
RawGguf base_raw() {
    RawGguf g;
    g.kvs.push_back(kv_str("general.name", "tiny"));
    g.kvs.push_back(kv_u32("x.u32", 7));
    g.kvs.push_back(kv("x.arr", 9).put<uint32_t>(5).put<uint64_t>(3).put<int32_t>(1).put<int32_t>(-2).put<int32_t>(3));
    g.tensors.push_back({"a", {4}, 0, 0});
    g.tensors.push_back({"b", {8, 2}, 24, 32});
    g.data.resize(48);
    for (size_t k = 0; k < g.data.size(); ++k) g.data[k] = uint8_t(k * 7 + 1);
    for (size_t k = 16; k < 32; ++k) g.data[k] = 0;  // padding after "a"
    return g;
}

// A small valid writer-produced file whose last tensor ends exactly at the end of the file.
struct SmallFile {
    std::vector<uint8_t> bytes;
    std::vector<std::string> names;  // in file order (and offset order)
    size_t data_start = 0;
};

SmallFile small_writer_file(const TempDir& dir) {
    Writer w;
    w.set("general.name", Value::str("small"));
    w.set("n.u32", Value::u32(42));
    w.set("n.f32", Value::f32(0.5f));
    w.set("n.strs", Value::array(ValueType::STRING, {Value::str("x"), Value::str("yz")}));
    w.set("n.ints", Value::array(ValueType::I32, {Value::i32(-1), Value::i32(2)}));
    w.add_tensor("w", TensorType::F32, {4, 2}, random_bytes(32, 1));    // 32 bytes
    w.add_tensor("q", TensorType::Q8_0, {32}, random_bytes(34, 2));     // 34 bytes, padded to 64
    w.add_tensor("z", TensorType::BF16, {16}, random_bytes(32, 3));     // 32 bytes, the last
    std::string path = dir.file("small.gguf");
    w.write(path);
    SmallFile f;
    f.bytes = read_file(path);
    f.names = {"w", "q", "z"};
    std::vector<uint8_t> last = random_bytes(32, 3);
    // Precondition of the truncation test: "z" fills the end of the file, so no proper prefix is valid.
    EXPECT_TRUE(std::equal(last.begin(), last.end(), f.bytes.end() - 32));
    f.data_start = f.bytes.size() - 32 - 96;  // "z" sits at offset 96 of the data section
    EXPECT_EQ(f.data_start % 32, 0u);
    return f;
}

// ---------------------------------------------------------------------------------------------
// Metadata round trip

TEST(GgufTypes, IdsNamesAndBlockSizesMatchGgml) {
    for (const TypeSpec& s : kTypeSpecs) {
        SCOPED_TRACE(s.name);
        EXPECT_EQ(uint32_t(s.type), s.ggml_id);
        EXPECT_STREQ(type_name(s.type), s.name);
        EXPECT_TRUE(type_known(s.ggml_id));
        EXPECT_EQ(type_block_elems(s.type), s.block_elems);
        EXPECT_EQ(type_block_bytes(s.type), s.block_bytes);
        EXPECT_EQ(tensor_bytes(s.type, {s.block_elems * 3, 5}), s.block_bytes * 15);
    }
    for (uint32_t id : {2u, 3u, 6u, 7u, 12u, 29u, 31u, 38u, 40u, 1000u}) EXPECT_FALSE(type_known(id)) << id;
}

TEST(GgufMetadata, EveryValueTypeRoundTrips) {
    TempDir dir;
    std::vector<std::pair<std::string, Value>> want = {
        {"v.u8", uint_value(ValueType::U8, 255)},
        {"v.i8", int_value(ValueType::I8, -128)},
        {"v.u16", uint_value(ValueType::U16, 65535)},
        {"v.i16", int_value(ValueType::I16, -32768)},
        {"v.u32", Value::u32(0xfffffffeu)},
        {"v.i32", Value::i32(std::numeric_limits<int32_t>::min())},
        {"v.u64", Value::u64(std::numeric_limits<uint64_t>::max())},
        {"v.i64", int_value(ValueType::I64, std::numeric_limits<int64_t>::min())},
        {"v.f32", Value::f32(3.14159274f)},
        {"v.f32.tiny", Value::f32(1e-38f)},
        {"v.f64", Value::f64(1.0 / 3.0)},
        {"v.f64.big", Value::f64(-1.7976931348623157e308)},
        {"v.true", Value::boolean(true)},
        {"v.false", Value::boolean(false)},
        {"v.str", Value::str("hello")},
        {"v.str.empty", Value::str("")},
        {"v.str.utf8", Value::str("h\xc3\xa9llo \xe2\x9c\x93 \xe6\x97\xa5\xe6\x9c\xac")},
        {"v.str.nul", Value::str(std::string("a\0b", 3))},
        {"v.arr.u8", Value::array(ValueType::U8, {uint_value(ValueType::U8, 0), uint_value(ValueType::U8, 200)})},
        {"v.arr.i16", Value::array(ValueType::I16, {int_value(ValueType::I16, -5), int_value(ValueType::I16, 7)})},
        {"v.arr.i32", Value::array(ValueType::I32, {Value::i32(0), Value::i32(4), Value::i32(-128)})},
        {"v.arr.u64", Value::array(ValueType::U64, {Value::u64(1ull << 40)})},
        {"v.arr.i64", Value::array(ValueType::I64, {int_value(ValueType::I64, -(1ll << 50))})},
        {"v.arr.f32", Value::array(ValueType::F32, {Value::f32(0.1f), Value::f32(-2.5f)})},
        {"v.arr.f64", Value::array(ValueType::F64, {Value::f64(0.1), Value::f64(1e300)})},
        {"v.arr.bool", Value::array(ValueType::BOOL, {Value::boolean(true), Value::boolean(false)})},
        {"v.arr.str", Value::array(ValueType::STRING, {Value::str("a"), Value::str(""), Value::str("\xc3\xbc")})},
        {"v.arr.empty.u32", Value::array(ValueType::U32, {})},
        {"v.arr.empty.str", Value::array(ValueType::STRING, {})},
        {"\xe9\x94\xae.utf8-key", Value::u32(1)},
    };
    Writer w;
    for (const auto& [k, v] : want) w.set(k, v);
    std::string path = dir.file("meta.gguf");
    w.write(path);

    Reader r(path);
    EXPECT_EQ(r.version(), 3u);
    EXPECT_EQ(r.alignment(), 32u);
    EXPECT_TRUE(r.tensors().empty());
    ASSERT_EQ(r.metadata().size(), want.size());
    for (size_t k = 0; k < want.size(); ++k) {
        EXPECT_EQ(r.metadata()[k].first, want[k].first) << "metadata keeps the writer's order";
        expect_same_value(want[k].second, r.metadata()[k].second, want[k].first);
        const Value* found = r.find(want[k].first);
        ASSERT_NE(found, nullptr) << want[k].first;
        expect_same_value(want[k].second, *found, want[k].first);
    }
    EXPECT_EQ(r.find("v.missing"), nullptr);
}

TEST(GgufMetadata, SetReplacesAnExistingKeyInPlace) {
    TempDir dir;
    Writer w;
    w.set("a", Value::u32(1));
    w.set("b", Value::str("x"));
    w.set("a", Value::str("replaced"));
    std::string path = dir.file("m.gguf");
    w.write(path);
    Reader r(path);
    ASSERT_EQ(r.metadata().size(), 2u);
    EXPECT_EQ(r.metadata()[0].first, "a");
    EXPECT_EQ(r.get_string("a"), "replaced");
    EXPECT_EQ(r.get_string("b"), "x");
}

TEST(GgufMetadata, TypedAccessorsConvertOrThrowNamingTheKey) {
    TempDir dir;
    Writer w;
    w.set("s", Value::str("text"));
    w.set("i", int_value(ValueType::I16, -3));
    w.set("u", Value::u64(std::numeric_limits<uint64_t>::max()));
    w.set("f", Value::f32(2.5f));
    w.set("t", Value::boolean(true));
    std::string path = dir.file("acc.gguf");
    w.write(path);
    Reader r(path);
    EXPECT_EQ(r.get_string("s"), "text");
    EXPECT_EQ(r.get_int("i"), -3);
    EXPECT_EQ(r.get_int("t"), 1);
    EXPECT_EQ(r.get_number("f"), 2.5);
    EXPECT_EQ(r.get_number("i"), -3.0);
    EXPECT_EQ(r.get_number("u"), double(std::numeric_limits<uint64_t>::max()));

    auto expect_error = [&](auto&& call, const std::string& key) {
        try {
            call();
            ADD_FAILURE() << "no error for key " << key;
        } catch (const Error& e) {
            EXPECT_TRUE(contains(e.what(), "'" + key + "'")) << e.what();
            EXPECT_TRUE(contains(e.what(), path)) << e.what();
        }
    };
    expect_error([&] { r.get("nope"); }, "nope");
    expect_error([&] { r.get_string("nope"); }, "nope");
    expect_error([&] { r.get_string("i"); }, "i");
    expect_error([&] { r.get_int("f"); }, "f");
    expect_error([&] { r.get_int("s"); }, "s");
    expect_error([&] { r.get_int("u"); }, "u");  // does not fit in int64
    expect_error([&] { r.get_number("s"); }, "s");
}

// ---------------------------------------------------------------------------------------------
// Tensor round trip and alignment

struct TensorCase {
    std::string name;
    TensorType type;
    std::vector<int64_t> ne;
};

// Every tensor type, with 1 to 4 dimensions, sizes that need padding, and a UTF-8 name.
std::vector<TensorCase> all_type_tensors() {
    return {
        {"t.f32", TensorType::F32, {5}},
        {"t.f16", TensorType::F16, {3, 7}},
        {"t.q8_0", TensorType::Q8_0, {64, 3}},
        {"t.i8", TensorType::I8, {1, 1, 1, 1}},
        {"t.i16", TensorType::I16, {2, 3, 4}},
        {"t.i32", TensorType::I32, {7, 1, 2, 2}},
        {"t.i64", TensorType::I64, {3}},
        {"t.f64", TensorType::F64, {2, 2}},
        {"t.bf16.\xc3\xbc", TensorType::BF16, {9, 1, 3}},
        {"t.mxfp4", TensorType::MXFP4, {32, 2, 1, 3}},
    };
}

// Writes every tensor type with `w`, reads the file back and checks metadata-independent facts:
// types, dims, byte counts, data, alignment of every offset and of the data section in the file.
void check_tensor_round_trip(Writer& w, uint32_t alignment, const TempDir& dir) {
    std::vector<TensorCase> cases = all_type_tensors();
    std::vector<std::vector<uint8_t>> data;
    for (size_t k = 0; k < cases.size(); ++k) {
        data.push_back(random_bytes(expected_bytes(cases[k].type, cases[k].ne), uint32_t(100 + k)));
        w.add_tensor(cases[k].name, cases[k].type, cases[k].ne, data.back());
    }
    std::string path = dir.file("tensors.gguf");
    std::vector<std::pair<size_t, size_t>> progress;
    w.write(path, [&](size_t i, size_t n) { progress.emplace_back(i, n); });
    ASSERT_EQ(progress.size(), cases.size());
    for (size_t k = 0; k < progress.size(); ++k) {
        EXPECT_EQ(progress[k].first, k);
        EXPECT_EQ(progress[k].second, cases.size());
    }

    Reader r(path);
    EXPECT_EQ(r.alignment(), alignment);
    ASSERT_EQ(r.tensors().size(), cases.size());

    std::vector<uint8_t> raw = read_file(path);
    // The file header, read independently.
    ASSERT_GE(raw.size(), 24u);
    EXPECT_EQ(std::string(raw.begin(), raw.begin() + 4), "GGUF");
    uint32_t version;
    uint64_t n_tensors;
    std::memcpy(&version, raw.data() + 4, 4);
    std::memcpy(&n_tensors, raw.data() + 8, 8);
    EXPECT_EQ(version, 3u);
    EXPECT_EQ(n_tensors, cases.size());

    // Where the data section starts in the file: found from the first tensor's (random) bytes.
    auto at = std::search(raw.begin(), raw.end(), data[0].begin(), data[0].end());
    ASSERT_NE(at, raw.end());
    const TensorInfo& first = r.tensors()[0];
    size_t data_start = size_t(at - raw.begin()) - size_t(first.offset);
    EXPECT_EQ(data_start % alignment, 0u) << "the data section is aligned in the file";

    for (size_t k = 0; k < cases.size(); ++k) {
        const TensorInfo& t = r.tensors()[k];
        SCOPED_TRACE(cases[k].name);
        EXPECT_EQ(t.name, cases[k].name);
        EXPECT_EQ(uint32_t(t.type), uint32_t(cases[k].type));
        EXPECT_EQ(t.ne, cases[k].ne) << "ggml dims keep their order";
        EXPECT_EQ(t.nbytes, data[k].size());
        int64_t elems = 1;
        for (int64_t n : cases[k].ne) elems *= n;
        EXPECT_EQ(t.elements(), elems);
        EXPECT_EQ(t.offset % alignment, 0u);
        ASSERT_NE(t.data, nullptr);
        EXPECT_EQ(std::vector<uint8_t>(t.data, t.data + t.nbytes), data[k]);
        EXPECT_EQ(t.data - first.data, std::ptrdiff_t(t.offset - first.offset));
        ASSERT_LE(data_start + t.offset + t.nbytes, raw.size());
        EXPECT_TRUE(std::equal(data[k].begin(), data[k].end(), raw.begin() + std::ptrdiff_t(data_start + t.offset)))
            << "the bytes sit at data_start + offset in the file";
        EXPECT_EQ(r.find_tensor(cases[k].name), &t);
        if (k + 1 < cases.size()) {
            EXPECT_LE(t.offset + t.nbytes, r.tensors()[k + 1].offset) << "no overlap";
        }
    }
    EXPECT_EQ(r.find_tensor("t.missing"), nullptr);
}

TEST(GgufTensors, EveryTypeRoundTripsWithDefaultAlignment) {
    TempDir dir;
    Writer w;
    w.set("general.name", Value::str("types"));
    check_tensor_round_trip(w, 32, dir);
}

TEST(GgufTensors, CustomAlignmentFromTheConstructorIsWrittenAndUsed) {
    TempDir dir;
    Writer w(64);
    check_tensor_round_trip(w, 64, dir);
    Reader r(dir.file("tensors.gguf"));
    const Value* a = r.find("general.alignment");
    ASSERT_NE(a, nullptr) << "a non-default alignment must be recorded in the file";
    EXPECT_EQ(uint32_t(a->type), uint32_t(ValueType::U32));
    EXPECT_EQ(a->u, 64u);
}

TEST(GgufTensors, CustomAlignmentFromTheGeneralAlignmentKeyIsUsed) {
    TempDir dir;
    Writer w;
    w.set("general.alignment", Value::u32(128));
    check_tensor_round_trip(w, 128, dir);
}

TEST(GgufTensors, AlignmentOfOneRoundTrips) {
    TempDir dir;
    Writer w(1);
    check_tensor_round_trip(w, 1, dir);
}

TEST(GgufTensors, ZeroTensorsAndZeroKeys) {
    TempDir dir;
    Writer w;
    std::string path = dir.file("empty.gguf");
    w.write(path);
    Reader r(path);
    EXPECT_TRUE(r.metadata().empty());
    EXPECT_TRUE(r.tensors().empty());
    EXPECT_GE(read_file(path).size(), 24u);
}

// ---------------------------------------------------------------------------------------------
// Byte layout against a hand-built file

TEST(GgufLayout, HandBuiltFileLoads) {
    TempDir dir;
    RawGguf g = base_raw();
    std::string path = dir.file("raw.gguf");
    write_file(path, g.bytes());
    Reader r(path);
    EXPECT_EQ(r.get_string("general.name"), "tiny");
    EXPECT_EQ(r.get_int("x.u32"), 7);
    const Value& arr = r.get("x.arr");
    ASSERT_EQ(arr.arr.size(), 3u);
    EXPECT_EQ(arr.arr[1].i, -2);
    ASSERT_EQ(r.tensors().size(), 2u);
    const TensorInfo* a = r.find_tensor("a");
    const TensorInfo* b = r.find_tensor("b");
    ASSERT_TRUE(a && b);
    EXPECT_EQ(a->nbytes, 16u);
    EXPECT_EQ(b->nbytes, 16u);
    EXPECT_EQ(b->ne, (std::vector<int64_t>{8, 2}));
    EXPECT_EQ(uint32_t(b->type), uint32_t(TensorType::I8));
    EXPECT_EQ(std::vector<uint8_t>(a->data, a->data + 16), std::vector<uint8_t>(g.data.begin(), g.data.begin() + 16));
    EXPECT_EQ(std::vector<uint8_t>(b->data, b->data + 16), std::vector<uint8_t>(g.data.begin() + 32, g.data.end()));
}

TEST(GgufLayout, WriterProducesTheSpecifiedBytes) {
    TempDir dir;
    RawGguf g = base_raw();
    Writer w;
    w.set("general.name", Value::str("tiny"));
    w.set("x.u32", Value::u32(7));
    w.set("x.arr", Value::array(ValueType::I32, {Value::i32(1), Value::i32(-2), Value::i32(3)}));
    w.add_tensor("a", TensorType::F32, {4}, std::vector<uint8_t>(g.data.begin(), g.data.begin() + 16));
    w.add_tensor("b", TensorType::I8, {8, 2}, std::vector<uint8_t>(g.data.begin() + 32, g.data.end()));
    std::string path = dir.file("w.gguf");
    w.write(path);
    std::vector<uint8_t> want = g.bytes();
    std::vector<uint8_t> got = read_file(path);
    ASSERT_GE(got.size(), want.size());
    EXPECT_EQ(std::vector<uint8_t>(got.begin(), got.begin() + std::ptrdiff_t(want.size())), want);
    EXPECT_TRUE(std::all_of(got.begin() + std::ptrdiff_t(want.size()), got.end(), [](uint8_t x) { return x == 0; }))
        << "anything after the last tensor is zero padding";
    EXPECT_LT(got.size() - want.size(), 32u);
}

TEST(GgufLayout, HandBuiltCustomAlignmentLoads) {
    TempDir dir;
    RawGguf g = base_raw();
    g.kvs.push_back(kv_u32("general.alignment", 64));
    g.pad_to = 64;
    g.tensors[1].offset = 64;
    g.data.resize(80);
    std::string path = dir.file("a64.gguf");
    write_file(path, g.bytes());
    Reader r(path);
    EXPECT_EQ(r.alignment(), 64u);
    EXPECT_EQ(r.find_tensor("b")->data - r.find_tensor("a")->data, 64);
}

// ---------------------------------------------------------------------------------------------
// Malformed files

TEST(GgufMalformed, MissingEmptyAndNonRegularFiles) {
    TempDir dir;
    EXPECT_THROW(Reader(dir.file("does_not_exist.gguf")), Error);
    EXPECT_THROW(Reader(dir.path().string()), Error);
    expect_load_error(dir, {}, {"bad magic"});
}

TEST(GgufMalformed, EveryTruncationThrows) {
    TempDir dir;
    SmallFile f = small_writer_file(dir);
    ASSERT_FALSE(load_error(dir.file("small.gguf")).has_value()) << "the full file must load";
    Reader full(dir.file("small.gguf"));
    ASSERT_EQ(full.tensors().size(), f.names.size());
    std::string path = dir.file("cut.gguf");
    for (size_t len = 0; len < f.bytes.size(); ++len) {
        SCOPED_TRACE("prefix length " + std::to_string(len));
        write_file(path, f.bytes.data(), len);
        std::optional<std::string> msg = load_error(path);
        ASSERT_TRUE(msg.has_value()) << "a truncated file loaded";
        EXPECT_TRUE(contains(*msg, path)) << *msg;
        if (len >= f.data_start) {
            // Cut inside the data: the message names the first tensor that does not fit.
            std::string cut;
            for (const TensorInfo& t : full.tensors())
                if (f.data_start + t.offset + t.nbytes > len) {
                    cut = t.name;
                    break;
                }
            EXPECT_TRUE(contains(*msg, "truncated")) << *msg;
            EXPECT_TRUE(contains(*msg, "'" + cut + "'")) << *msg;
        } else {
            EXPECT_TRUE(contains(*msg, "truncated") || contains(*msg, "does not fit") || contains(*msg, "bad magic"))
                << *msg;
        }
    }
}

TEST(GgufMalformed, FuzzedFilesLoadOrThrowError) {
    TempDir dir;
    SmallFile f = small_writer_file(dir);
    const uint64_t n = f.bytes.size();
    const uint64_t interesting[] = {0, 1, 2, 3, 4, 5, 7, 8, 9, 12, 13, 16, 31, 32, 33, 64, 127, 128, 255,
                                    0xffff, 0x7fffffff, 0x80000000, 0xffffffff, 1ull << 32, 1ull << 40,
                                    1ull << 62, uint64_t(std::numeric_limits<int64_t>::max()),
                                    uint64_t(std::numeric_limits<int64_t>::min()), ~0ull, ~0ull - 1,
                                    n, n - 8, n + 1, n * 2};
    std::mt19937_64 rng(20240607);
    auto pick = [&](uint64_t bound) { return size_t(rng() % bound); };
    // Most mutations land in the header, where the parsing is. `b` may have been cut.
    std::vector<uint8_t> b;
    auto position = [&](size_t width) {
        size_t limit = std::min(pick(10) < 9 ? f.data_start : size_t(n), b.size()) - width;
        return pick(limit + 1);
    };
    std::string path = dir.file("fuzz.gguf");
    int loaded = 0, rejected = 0;
    for (int iter = 0; iter < 3000; ++iter) {
        b = f.bytes;
        int mutations = 1 + int(pick(3));
        for (int m = 0; m < mutations; ++m) {
            switch (pick(4)) {
                case 0:  // flip a random byte
                    b[position(1)] ^= uint8_t(1 + pick(255));
                    break;
                case 1: {  // overwrite a u64 field
                    uint64_t v = pick(4) == 0 ? rng() : interesting[pick(std::size(interesting))];
                    std::memcpy(b.data() + position(8), &v, 8);
                    break;
                }
                case 2: {  // overwrite a u32 field
                    uint32_t v = uint32_t(pick(4) == 0 ? rng() : interesting[pick(std::size(interesting))]);
                    std::memcpy(b.data() + position(4), &v, 4);
                    break;
                }
                case 3:  // cut the file
                    if (pick(4) == 0) b.resize(pick(b.size() + 1));
                    break;
            }
            if (b.size() < 8) break;
        }
        write_file(path, b);
        try {
            Reader r(path);
            ++loaded;
            for (const TensorInfo& t : r.tensors()) {
                EXPECT_EQ(t.nbytes, expected_bytes(t.type, t.ne)) << "iteration " << iter;
                EXPECT_EQ(t.offset % r.alignment(), 0u) << "iteration " << iter;
                unsigned sum = 0;
                for (size_t k = 0; k < t.nbytes; ++k) sum += t.data[k];  // the bytes must be readable
                (void)sum;
            }
        } catch (const Error&) {
            ++rejected;
        } catch (const std::exception& e) {
            ADD_FAILURE() << "iteration " << iter << ": not a dsv4::Error: " << e.what();
        }
    }
    EXPECT_GT(loaded, 0);
    EXPECT_GT(rejected, 0);
}

TEST(GgufMalformed, BadMagic) {
    TempDir dir;
    RawGguf g = base_raw();
    g.magic = 0x46554746;
    expect_load_error(dir, g.bytes(), {"bad magic"});
}

TEST(GgufMalformed, UnsupportedVersion) {
    TempDir dir;
    for (uint32_t v : {2u, 1u, 4u}) {
        RawGguf g = base_raw();
        g.version = v;
        expect_load_error(dir, g.bytes(), {"version " + std::to_string(v)});
    }
}

TEST(GgufMalformed, UnknownValueType) {
    TempDir dir;
    RawGguf g = base_raw();
    g.kvs.push_back(kv("k.bad", 13).put<uint32_t>(0));
    expect_load_error(dir, g.bytes(), {"'k.bad'", "unknown value type 13"});
}

TEST(GgufMalformed, UnknownArrayElementType) {
    TempDir dir;
    RawGguf g = base_raw();
    g.kvs.push_back(kv("k.arr", 9).put<uint32_t>(77).put<uint64_t>(0));
    expect_load_error(dir, g.bytes(), {"'k.arr'", "77"});
}

TEST(GgufMalformed, NestedArray) {
    TempDir dir;
    RawGguf g = base_raw();
    g.kvs.push_back(kv("k.nested", 9).put<uint32_t>(9).put<uint64_t>(1).put<uint32_t>(4).put<uint64_t>(0));
    expect_load_error(dir, g.bytes(), {"'k.nested'", "nested"});
}

TEST(GgufMalformed, BoolOtherThanZeroOrOne) {
    TempDir dir;
    RawGguf g = base_raw();
    g.kvs.push_back(kv("k.bool", 7).put<uint8_t>(2));
    expect_load_error(dir, g.bytes(), {"'k.bool'"});
}

TEST(GgufMalformed, EmptyKey) {
    TempDir dir;
    RawGguf g = base_raw();
    g.kvs.push_back(kv_u32("", 1));
    expect_load_error(dir, g.bytes(), {"empty"});
}

TEST(GgufMalformed, DuplicateKey) {
    TempDir dir;
    RawGguf g = base_raw();
    g.kvs.push_back(kv_u32("x.u32", 8));
    expect_load_error(dir, g.bytes(), {"duplicate", "'x.u32'"});
}

TEST(GgufMalformed, StringLongerThanTheFile) {
    TempDir dir;
    for (uint64_t len : {uint64_t(1) << 40, ~uint64_t(0), uint64_t(500)}) {
        SCOPED_TRACE(len);
        RawGguf g = base_raw();
        g.kvs.push_back(kv("k.s", 8).put<uint64_t>(len));
        expect_load_error(dir, g.bytes(), {"truncated", "string"});
        RawGguf h = base_raw();  // a key whose own length is too large
        h.kvs.insert(h.kvs.begin(), Bytes().put<uint64_t>(len));
        expect_load_error(dir, h.bytes(), {"truncated", "key"});
        RawGguf t = base_raw();  // a tensor name whose length is too large
        t.tensors.clear();
        t.n_tensors = 1;
        t.data.clear();
        t.kvs.push_back(Bytes().put<uint64_t>(len));
        t.n_kv = t.kvs.size() - 1;
        t.data.assign(64, 0);  // room for the tensor count to pass its bound
        expect_load_error(dir, t.bytes(), {"truncated", "tensor name"});
    }
}

TEST(GgufMalformed, ArrayCountLargerThanTheFile) {
    TempDir dir;
    for (uint32_t elem : {0u, 8u, 10u}) {
        for (uint64_t count : {uint64_t(1) << 40, ~uint64_t(0), uint64_t(1000)}) {
            SCOPED_TRACE(std::to_string(elem) + " x " + std::to_string(count));
            RawGguf g = base_raw();
            g.kvs.push_back(kv("k.big", 9).put<uint32_t>(elem).put<uint64_t>(count));
            expect_load_error(dir, g.bytes(), {"'k.big'", "does not fit"});
        }
    }
    // A count that fits the bound but whose elements run past the end.
    RawGguf g = base_raw();
    g.tensors.clear();
    g.data.clear();
    g.pad_to = 1;  // zero padding would read as empty strings
    g.kvs.push_back(kv("k.strs", 9).put<uint32_t>(8).put<uint64_t>(3).str("abc").put<uint64_t>(100).put<uint64_t>(0));
    expect_load_error(dir, g.bytes(), {"truncated"});
}

TEST(GgufMalformed, CountsLargerThanTheFile) {
    TempDir dir;
    for (uint64_t count : {~uint64_t(0), uint64_t(1) << 40, uint64_t(4)}) {
        RawGguf g = base_raw();
        g.n_kv = count;
        expect_load_error(dir, g.bytes(), {});
        RawGguf h = base_raw();
        h.n_tensors = count;
        expect_load_error(dir, h.bytes(), {});
    }
    RawGguf g = base_raw();
    g.n_kv = ~uint64_t(0);
    expect_load_error(dir, g.bytes(), {"metadata count", "does not fit"});
    RawGguf h = base_raw();
    h.n_tensors = ~uint64_t(0);
    expect_load_error(dir, h.bytes(), {"tensor count", "does not fit"});
}

TEST(GgufMalformed, UnknownTensorType) {
    TempDir dir;
    for (uint32_t id : {2u, 29u, 1000u}) {
        RawGguf g = base_raw();
        g.tensors[1].type = id;
        expect_load_error(dir, g.bytes(), {"'b'", "type id " + std::to_string(id)});
    }
}

TEST(GgufMalformed, TensorWithZeroOrFiveDims) {
    TempDir dir;
    RawGguf g = base_raw();
    g.tensors[1].ne = {};
    expect_load_error(dir, g.bytes(), {"'b'", "0 dimensions"});
    g.tensors[1].ne = {1, 1, 2, 8, 1};
    expect_load_error(dir, g.bytes(), {"'b'", "5 dimensions"});
}

TEST(GgufMalformed, NegativeOrZeroDim) {
    TempDir dir;
    RawGguf g = base_raw();
    g.tensors[1].ne = {8, -2};
    expect_load_error(dir, g.bytes(), {"'b'", "dimension 1 is -2"});
    g.tensors[1].ne = {0, 2};
    expect_load_error(dir, g.bytes(), {"'b'", "dimension 0 is 0"});
}

TEST(GgufMalformed, MisalignedOffset) {
    TempDir dir;
    RawGguf g = base_raw();
    g.tensors[1].offset = 20;
    expect_load_error(dir, g.bytes(), {"'b'", "offset 20", "not aligned"});
}

TEST(GgufMalformed, DuplicateTensor) {
    TempDir dir;
    RawGguf g = base_raw();
    g.tensors[1].name = "a";
    expect_load_error(dir, g.bytes(), {"duplicate tensor", "'a'"});
}

TEST(GgufMalformed, EmptyTensorName) {
    TempDir dir;
    RawGguf g = base_raw();
    g.tensors[1].name = "";
    expect_load_error(dir, g.bytes(), {"empty name"});
}

TEST(GgufMalformed, BlockTypeRowNotWholeBlocks) {
    TempDir dir;
    RawGguf g = base_raw();
    g.tensors[1].type = uint32_t(TensorType::Q8_0);
    g.tensors[1].ne = {33};
    expect_load_error(dir, g.bytes(), {"'b'", "multiple"});
}

TEST(GgufMalformed, TensorDataPastTheEnd) {
    TempDir dir;
    RawGguf g = base_raw();
    g.data.resize(47);
    expect_load_error(dir, g.bytes(), {"'b'", "past the end"});
    for (uint64_t off : {uint64_t(64), uint64_t(1) << 62, ~uint64_t(0) - 31}) {
        RawGguf h = base_raw();
        h.tensors[1].offset = off;
        expect_load_error(dir, h.bytes(), {"'b'", "past the end"});
    }
}

TEST(GgufMalformed, TensorSizeOverflow) {
    TempDir dir;
    // 4 * 2^32 * 2^32 * 2^32 * 2^30 bytes is 2^128: a wrapping product would call it 0 bytes.
    const int64_t g32 = int64_t(1) << 32;
    for (std::vector<int64_t> ne : {std::vector<int64_t>{g32, g32, g32, int64_t(1) << 30},
                                    std::vector<int64_t>{int64_t(1) << 62, int64_t(1) << 62, 4, 4},
                                    std::vector<int64_t>{int64_t(1) << 62, 4}}) {
        RawGguf g = base_raw();
        g.tensors.push_back({"huge", ne, 0, 0});
        expect_load_error(dir, g.bytes(), {"'huge'"});
    }
}

TEST(GgufMalformed, BadGeneralAlignment) {
    TempDir dir;
    std::vector<Bytes> bad = {kv_u32("general.alignment", 0), kv_u32("general.alignment", 48),
                              kv_str("general.alignment", "32"), kv("general.alignment", 10).put<uint64_t>(32)};
    for (const Bytes& k : bad) {
        RawGguf g = base_raw();
        g.kvs.push_back(k);
        expect_load_error(dir, g.bytes(), {"general.alignment"});
    }
}

// ---------------------------------------------------------------------------------------------
// Writer failures

void expect_no_output(const std::string& path) {
    EXPECT_FALSE(exists(path)) << path;
    EXPECT_FALSE(exists(path + ".partial")) << path << ".partial";
}

std::string write_error(const Writer& w, const std::string& path) {
    try {
        w.write(path);
    } catch (const Error& e) {
        return e.what();
    }
    ADD_FAILURE() << "write did not throw";
    return "";
}

TEST(GgufWriter, UnwritablePathThrowsAndLeavesNothing) {
    TempDir dir;
    Writer w;
    w.set("a", Value::u32(1));
    std::string path = dir.file("no_such_dir/out.gguf");
    std::string msg = write_error(w, path);
    EXPECT_TRUE(contains(msg, path)) << msg;
    expect_no_output(path);
}

TEST(GgufWriter, DestinationThatIsAFolderThrowsAndLeavesNoPartial) {
    TempDir dir;
    fs::create_directory(dir.path() / "taken");
    Writer w;
    w.add_tensor("t", TensorType::F32, {2}, random_bytes(8, 5));
    std::string path = dir.file("taken");
    std::string msg = write_error(w, path);
    EXPECT_TRUE(contains(msg, path)) << msg;
    EXPECT_TRUE(fs::is_directory(path));
    EXPECT_FALSE(exists(path + ".partial"));
}

TEST(GgufWriter, ProducerWithWrongByteCountThrowsAndLeavesNothing) {
    TempDir dir;
    for (size_t produced : {size_t(0), size_t(31), size_t(33)}) {
        SCOPED_TRACE(produced);
        Writer w;
        w.add_tensor("ok", TensorType::F32, {4}, random_bytes(16, 6));
        w.add_tensor("short", TensorType::F32, {8}, [produced](std::vector<uint8_t>& out) { out.assign(produced, 1); });
        std::string path = dir.file("wrong.gguf");
        std::string msg = write_error(w, path);
        EXPECT_TRUE(contains(msg, "'short'")) << msg;
        EXPECT_TRUE(contains(msg, std::to_string(produced))) << msg;
        expect_no_output(path);
    }
}

TEST(GgufWriter, ThrowingProducerPropagatesAndLeavesNothing) {
    TempDir dir;
    Writer w;
    w.add_tensor("boom", TensorType::F32, {4}, [](std::vector<uint8_t>&) { throw Error("producer failed"); });
    std::string path = dir.file("boom.gguf");
    EXPECT_EQ(write_error(w, path), "producer failed");
    expect_no_output(path);
}

TEST(GgufWriter, FailedWriteKeepsTheExistingFile) {
    TempDir dir;
    std::string path = dir.file("keep.gguf");
    Writer good;
    good.set("version", Value::u32(1));
    good.write(path);
    std::vector<uint8_t> before = read_file(path);

    Writer bad;
    bad.set("version", Value::u32(2));
    bad.add_tensor("t", TensorType::F16, {4}, [](std::vector<uint8_t>& out) { out.resize(3); });
    write_error(bad, path);
    EXPECT_EQ(read_file(path), before);
    EXPECT_FALSE(exists(path + ".partial"));
    EXPECT_EQ(Reader(path).get_int("version"), 1);
}

TEST(GgufWriter, MixedArrayElementTypesThrowAndLeaveNothing) {
    TempDir dir;
    Writer w;
    w.set("mixed", Value::array(ValueType::U32, {Value::u32(1), Value::str("two")}));
    std::string path = dir.file("mixed.gguf");
    std::string msg = write_error(w, path);
    EXPECT_TRUE(contains(msg, "array")) << msg;
    expect_no_output(path);
}

TEST(GgufWriter, BadAlignmentThrowsAndLeavesNothing) {
    TempDir dir;
    for (uint32_t a : {0u, 24u, 100u}) {
        SCOPED_TRACE(a);
        Writer w(a);
        w.add_tensor("t", TensorType::F32, {2}, random_bytes(8, 7));
        std::string path = dir.file("align.gguf");
        std::string msg = write_error(w, path);
        EXPECT_TRUE(contains(msg, "alignment")) << msg;
        expect_no_output(path);

        Writer k;
        k.set("general.alignment", Value::u32(a));
        std::string kmsg = write_error(k, path);
        EXPECT_TRUE(contains(kmsg, "general.alignment")) << kmsg;
        expect_no_output(path);
    }
    Writer s;
    s.set("general.alignment", Value::str("64"));
    std::string path = dir.file("align.gguf");
    EXPECT_TRUE(contains(write_error(s, path), "general.alignment"));
    expect_no_output(path);
}

TEST(GgufWriter, AddTensorRejectsWhatTheReaderWouldReject) {
    Writer w;
    w.add_tensor("t", TensorType::F32, {2}, std::vector<uint8_t>(8));
    auto expect_error = [&](const std::string& name, TensorType type, std::vector<int64_t> ne) {
        SCOPED_TRACE(name);
        try {
            w.add_tensor(name, type, ne, std::vector<uint8_t>());
            ADD_FAILURE() << "add_tensor accepted it";
        } catch (const Error& e) {
            EXPECT_TRUE(contains(e.what(), "'" + name + "'")) << e.what();
        }
    };
    expect_error("t", TensorType::F32, {2});                 // duplicate
    expect_error("no_dims", TensorType::F32, {});
    expect_error("five_dims", TensorType::F32, {1, 1, 1, 1, 1});
    expect_error("zero_dim", TensorType::F32, {4, 0});
    expect_error("negative_dim", TensorType::F32, {-4});
    expect_error("partial_block", TensorType::Q8_0, {33});
    expect_error("overflow", TensorType::F32, {int64_t(1) << 32, int64_t(1) << 32, int64_t(1) << 32, int64_t(1) << 30});
}

}  // namespace
