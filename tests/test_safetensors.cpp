// safetensors reader: hand-built files (8-byte little-endian header length, JSON header, data)
// loaded with add_file and open_dir, float conversions against known bit patterns, malformed
// headers and truncations that must throw dsv4::Error naming the problem, and the real
// fixtures checked against their config.json.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/safetensors.h"
#include "test_util.h"

namespace {

using namespace dsv4;
using dsv4::test::read_file;
using dsv4::test::read_text;
using dsv4::test::TempDir;
using dsv4::test::write_file;
using nlohmann::json;
namespace fs = std::filesystem;

// ---------------------------------------------------------------------------------------------
// Building files

template <class T>
std::vector<uint8_t> to_bytes(const std::vector<T>& xs) {
    std::vector<uint8_t> out(xs.size() * sizeof(T));
    if (!xs.empty()) std::memcpy(out.data(), xs.data(), out.size());
    return out;
}

// The raw file: header length, header text, data.
std::vector<uint8_t> st_raw(const std::string& header, const std::vector<uint8_t>& data) {
    std::vector<uint8_t> out(8);
    uint64_t n = header.size();
    for (int k = 0; k < 8; ++k) out[size_t(k)] = uint8_t(n >> (8 * k));  // little endian
    out.insert(out.end(), header.begin(), header.end());
    out.insert(out.end(), data.begin(), data.end());
    return out;
}

struct Entry {
    std::string name;
    std::string dtype;
    std::vector<int64_t> shape;
    std::vector<uint8_t> bytes;
};

// A well-formed file holding `entries` back to back, with a __metadata__ block.
std::vector<uint8_t> st_file(const std::vector<Entry>& entries) {
    json header = json::object();
    header["__metadata__"] = {{"format", "pt"}};
    std::vector<uint8_t> data;
    for (const Entry& e : entries) {
        header[e.name] = {{"dtype", e.dtype}, {"shape", e.shape}, {"data_offsets", {data.size(), data.size() + e.bytes.size()}}};
        data.insert(data.end(), e.bytes.begin(), e.bytes.end());
    }
    return st_raw(header.dump(), data);
}

bool contains(const std::string& haystack, const std::string& needle) {
    return haystack.find(needle) != std::string::npos;
}

std::optional<std::string> add_error(const std::string& path) {
    try {
        SafeTensors st;
        st.add_file(path);
        return std::nullopt;
    } catch (const Error& e) {
        return std::string(e.what());
    }
}

// Writes `bytes` and expects add_file to throw an Error naming the path and every part.
void expect_add_error(const TempDir& dir, const std::vector<uint8_t>& bytes, std::vector<std::string> parts) {
    std::string path = dir.file("bad.safetensors");
    write_file(path, bytes);
    std::optional<std::string> msg = add_error(path);
    ASSERT_TRUE(msg.has_value()) << "the malformed file loaded";
    parts.push_back(path);
    for (const std::string& p : parts) EXPECT_TRUE(contains(*msg, p)) << "message: " << *msg << "\nlacks: " << p;
}

// A header with one tensor "t" whose entry is `entry`, and `data_size` bytes of data.
std::vector<uint8_t> one_entry(const json& entry, size_t data_size = 8) {
    json header = {{"t", entry}};
    return st_raw(header.dump(), std::vector<uint8_t>(data_size, 0));
}

float bits_to_f32(uint32_t b) {
    float f;
    std::memcpy(&f, &b, 4);
    return f;
}

// Exact comparison that also tells -0 from +0 and accepts NaN for NaN.
void expect_same_float(float want, float got, size_t index) {
    if (std::isnan(want)) {
        EXPECT_TRUE(std::isnan(got)) << "element " << index;
    } else {
        EXPECT_EQ(want, got) << "element " << index;
        EXPECT_EQ(std::signbit(want), std::signbit(got)) << "element " << index;
    }
}

// ---------------------------------------------------------------------------------------------
// Loading and converting

TEST(SafeTensors, F32TensorLoadsWithShapeAndData) {
    TempDir dir;
    std::vector<float> v = {1.0f, -2.5f, 0.1f, 3.4e38f, -0.0f, bits_to_f32(1)};
    std::string path = dir.file("f32.safetensors");
    write_file(path, st_file({{"w", "F32", {2, 3}, to_bytes(v)}}));
    SafeTensors st;
    st.add_file(path);
    ASSERT_EQ(st.all().size(), 1u) << "__metadata__ is not a tensor";
    const StTensor* t = st.find("w");
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(st.find("__metadata__"), nullptr);
    EXPECT_EQ(st.find("missing"), nullptr);
    EXPECT_EQ(t->name, "w");
    EXPECT_EQ(t->dtype, StDType::F32);
    EXPECT_EQ(t->shape, (std::vector<int64_t>{2, 3}));
    EXPECT_EQ(t->elements(), 6);
    EXPECT_EQ(t->nbytes, 24u);
    EXPECT_EQ(t->file, path);
    ASSERT_NE(t->data, nullptr);
    EXPECT_EQ(std::vector<uint8_t>(t->data, t->data + 24), to_bytes(v));
    std::vector<float> f = st.to_f32(*t);
    ASSERT_EQ(f.size(), v.size());
    for (size_t k = 0; k < v.size(); ++k) expect_same_float(v[k], f[k], k);
}

TEST(SafeTensors, F16ConvertsKnownBitPatterns) {
    TempDir dir;
    const std::vector<std::pair<uint16_t, float>> cases = {
        {0x3C00, 1.0f},
        {0xC100, -2.5f},
        {0x2E66, 0.0999755859375f},              // 0.1 rounded to half
        {0x7BFF, 65504.0f},                      // largest finite half
        {0x0001, std::ldexp(1.0f, -24)},         // smallest subnormal
        {0x03FF, 1023 * std::ldexp(1.0f, -24)},  // largest subnormal
        {0x0400, std::ldexp(1.0f, -14)},         // smallest normal
        {0x8000, -0.0f},
        {0x7C00, std::numeric_limits<float>::infinity()},
        {0xFC00, -std::numeric_limits<float>::infinity()},
        {0x7E00, std::numeric_limits<float>::quiet_NaN()},
    };
    std::vector<uint16_t> bits;
    for (const auto& c : cases) bits.push_back(c.first);
    std::string path = dir.file("f16.safetensors");
    write_file(path, st_file({{"h", "F16", {int64_t(bits.size())}, to_bytes(bits)}}));
    SafeTensors st;
    st.add_file(path);
    const StTensor* t = st.find("h");
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(t->dtype, StDType::F16);
    EXPECT_EQ(t->nbytes, 2 * bits.size());
    std::vector<float> f = st.to_f32(*t);
    ASSERT_EQ(f.size(), cases.size());
    for (size_t k = 0; k < cases.size(); ++k) expect_same_float(cases[k].second, f[k], k);
}

TEST(SafeTensors, BF16ConvertsKnownBitPatterns) {
    TempDir dir;
    const std::vector<std::pair<uint16_t, float>> cases = {
        {0x3F80, 1.0f},
        {0xC020, -2.5f},
        {0x3DCD, 0.10009765625f},             // 0.1 rounded to bfloat16
        {0x7F7F, bits_to_f32(0x7F7F0000)},    // largest finite
        {0x0001, bits_to_f32(0x00010000)},    // a subnormal
        {0x8000, -0.0f},
        {0x7F80, std::numeric_limits<float>::infinity()},
        {0x7FC0, std::numeric_limits<float>::quiet_NaN()},
    };
    std::vector<uint16_t> bits;
    for (const auto& c : cases) bits.push_back(c.first);
    std::string path = dir.file("bf16.safetensors");
    write_file(path, st_file({{"b", "BF16", {2, int64_t(bits.size() / 2)}, to_bytes(bits)}}));
    SafeTensors st;
    st.add_file(path);
    const StTensor* t = st.find("b");
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(t->dtype, StDType::BF16);
    std::vector<float> f = st.to_f32(*t);
    ASSERT_EQ(f.size(), cases.size());
    for (size_t k = 0; k < cases.size(); ++k) expect_same_float(cases[k].second, f[k], k);
    EXPECT_NEAR(f[2], 0.1, std::ldexp(1.0, -12)) << "0x3DCD is 0.1 within half a bfloat16 ulp (2^-11 at 0.1)";
    EXPECT_NE(f[2], 0.1f);
}

TEST(SafeTensors, F64ConvertsByRounding) {
    TempDir dir;
    std::vector<double> v = {0.1, -2.5, 1e300, 1e-300};
    std::string path = dir.file("f64.safetensors");
    write_file(path, st_file({{"d", "F64", {4}, to_bytes(v)}}));
    SafeTensors st;
    st.add_file(path);
    std::vector<float> f = st.to_f32(*st.find("d"));
    ASSERT_EQ(f.size(), 4u);
    EXPECT_EQ(f[0], 0.1f);
    EXPECT_EQ(f[1], -2.5f);
    EXPECT_TRUE(std::isinf(f[2]));
    EXPECT_EQ(f[3], 0.0f);
}

TEST(SafeTensors, EveryDtypeParsesAndNonFloatsRefuseToConvert) {
    struct D {
        const char* name;
        StDType type;
        size_t size;
        bool converts;
    };
    const D dtypes[] = {
        {"F32", StDType::F32, 4, true},         {"F16", StDType::F16, 2, true},
        {"BF16", StDType::BF16, 2, true},       {"F64", StDType::F64, 8, true},
        {"I64", StDType::I64, 8, false},        {"I32", StDType::I32, 4, false},
        {"I16", StDType::I16, 2, false},        {"I8", StDType::I8, 1, false},
        {"U8", StDType::U8, 1, false},          {"BOOL", StDType::BOOL, 1, false},
        {"F8_E4M3", StDType::F8_E4M3, 1, false}, {"F8_E5M2", StDType::F8_E5M2, 1, false},
        {"F8_E8M0", StDType::F8_E8M0, 1, false},
    };
    TempDir dir;
    std::vector<Entry> entries;
    for (const D& d : dtypes) entries.push_back({std::string("t_") + d.name, d.name, {3, 2}, std::vector<uint8_t>(6 * d.size, 0)});
    std::string path = dir.file("all.safetensors");
    write_file(path, st_file(entries));
    SafeTensors st;
    st.add_file(path);
    ASSERT_EQ(st.all().size(), std::size(dtypes));
    for (const D& d : dtypes) {
        SCOPED_TRACE(d.name);
        std::string name = std::string("t_") + d.name;
        const StTensor* t = st.find(name);
        ASSERT_NE(t, nullptr);
        EXPECT_EQ(t->dtype, d.type);
        EXPECT_STREQ(st_dtype_name(d.type), d.name);
        EXPECT_EQ(st_dtype_size(d.type), d.size);
        EXPECT_EQ(t->nbytes, 6 * d.size);
        if (d.converts) {
            EXPECT_EQ(st.to_f32(*t), std::vector<float>(6, 0.0f));
        } else {
            try {
                st.to_f32(*t);
                ADD_FAILURE() << "converted a non-float dtype";
            } catch (const Error& e) {
                EXPECT_TRUE(contains(e.what(), "'" + name + "'")) << e.what();
                EXPECT_TRUE(contains(e.what(), d.name)) << e.what();
            }
        }
    }
}

TEST(SafeTensors, ScalarsAndEmptyTensors) {
    TempDir dir;
    std::string path = dir.file("edge.safetensors");
    write_file(path, st_file({{"scalar", "F32", {}, to_bytes(std::vector<float>{7.0f})},
                              {"empty", "F32", {0, 3}, {}},
                              {"after", "I8", {2}, {1, 2}}}));
    SafeTensors st;
    st.add_file(path);
    const StTensor* s = st.find("scalar");
    ASSERT_NE(s, nullptr);
    EXPECT_TRUE(s->shape.empty());
    EXPECT_EQ(s->elements(), 1);
    EXPECT_EQ(st.to_f32(*s), std::vector<float>{7.0f});
    const StTensor* e = st.find("empty");
    ASSERT_NE(e, nullptr);
    EXPECT_EQ(e->elements(), 0);
    EXPECT_EQ(e->nbytes, 0u);
    EXPECT_TRUE(st.to_f32(*e).empty());
    const StTensor* a = st.find("after");
    ASSERT_NE(a, nullptr);
    EXPECT_EQ(std::vector<uint8_t>(a->data, a->data + 2), (std::vector<uint8_t>{1, 2}));
}

TEST(SafeTensors, OffsetsNeedNotFollowHeaderOrder) {
    TempDir dir;
    // "a" sits after "b" in the data section.
    json header = {{"a", {{"dtype", "I8"}, {"shape", {2}}, {"data_offsets", {3, 5}}}},
                   {"b", {{"dtype", "I8"}, {"shape", {3}}, {"data_offsets", {0, 3}}}}};
    std::string path = dir.file("order.safetensors");
    write_file(path, st_raw(header.dump(), {10, 11, 12, 13, 14}));
    SafeTensors st;
    st.add_file(path);
    EXPECT_EQ(std::vector<uint8_t>(st.find("a")->data, st.find("a")->data + 2), (std::vector<uint8_t>{13, 14}));
    EXPECT_EQ(std::vector<uint8_t>(st.find("b")->data, st.find("b")->data + 3), (std::vector<uint8_t>{10, 11, 12}));
}

TEST(SafeTensors, OpenDirLoadsEveryShard) {
    TempDir dir;
    std::string s1 = dir.file("model-00001-of-00002.safetensors");
    std::string s2 = dir.file("model-00002-of-00002.safetensors");
    write_file(s1, st_file({{"a", "F32", {1}, to_bytes(std::vector<float>{1.0f})},
                            {"b", "F32", {2}, to_bytes(std::vector<float>{2.0f, 3.0f})}}));
    write_file(s2, st_file({{"c", "BF16", {1}, to_bytes(std::vector<uint16_t>{0x4040})}}));
    write_file(dir.file("config.json"), std::string("{}"));
    write_file(dir.file("notes.safetensors.txt"), std::string("not a shard"));
    fs::create_directory(dir.path() / "folder.safetensors");  // not a regular file
    SafeTensors st = SafeTensors::open_dir(dir.path().string());
    ASSERT_EQ(st.all().size(), 3u);
    EXPECT_EQ(st.find("a")->file, s1);
    EXPECT_EQ(st.find("b")->file, s1);
    EXPECT_EQ(st.find("c")->file, s2);
    EXPECT_EQ(st.to_f32(*st.find("b")), (std::vector<float>{2.0f, 3.0f}));
    EXPECT_EQ(st.to_f32(*st.find("c")), std::vector<float>{3.0f});
}

TEST(SafeTensors, AddFileAccumulatesFiles) {
    TempDir dir;
    write_file(dir.file("x.safetensors"), st_file({{"x", "I8", {1}, {5}}}));
    write_file(dir.file("y.safetensors"), st_file({{"y", "I8", {1}, {6}}}));
    SafeTensors st;
    st.add_file(dir.file("x.safetensors"));
    st.add_file(dir.file("y.safetensors"));
    ASSERT_EQ(st.all().size(), 2u);
    EXPECT_EQ(*st.find("x")->data, 5);
    EXPECT_EQ(*st.find("y")->data, 6);
}

TEST(SafeTensors, SameTensorInTwoShardsThrows) {
    TempDir dir;
    write_file(dir.file("model-00001-of-00002.safetensors"), st_file({{"dup", "I8", {1}, {1}}}));
    write_file(dir.file("model-00002-of-00002.safetensors"), st_file({{"dup", "I8", {1}, {2}}}));
    try {
        SafeTensors::open_dir(dir.path().string());
        ADD_FAILURE() << "no error";
    } catch (const Error& e) {
        EXPECT_TRUE(contains(e.what(), "'dup'")) << e.what();
        EXPECT_TRUE(contains(e.what(), "two shards")) << e.what();
    }
}

TEST(SafeTensors, FailedAddFileLeavesTheSetUnchanged) {
    TempDir dir;
    write_file(dir.file("good.safetensors"), st_file({{"g", "I8", {1}, {9}}}));
    // "a_ok" is valid and listed before the bad "b_bad"; a later duplicate of "g" fails too.
    json header = {{"a_ok", {{"dtype", "I8"}, {"shape", {1}}, {"data_offsets", {0, 1}}}},
                   {"b_bad", {{"dtype", "I8"}, {"shape", {4}}, {"data_offsets", {0, 1}}}}};
    write_file(dir.file("bad.safetensors"), st_raw(header.dump(), {1}));
    write_file(dir.file("dup.safetensors"), st_file({{"a_new", "I8", {1}, {3}}, {"g", "I8", {1}, {4}}}));
    SafeTensors st;
    st.add_file(dir.file("good.safetensors"));
    EXPECT_THROW(st.add_file(dir.file("bad.safetensors")), Error);
    EXPECT_THROW(st.add_file(dir.file("dup.safetensors")), Error);
    ASSERT_EQ(st.all().size(), 1u) << "no tensor of a rejected file may stay (its mapping is gone)";
    EXPECT_EQ(st.find("a_ok"), nullptr);
    EXPECT_EQ(st.find("a_new"), nullptr);
    ASSERT_NE(st.find("g"), nullptr);
    EXPECT_EQ(*st.find("g")->data, 9);
}

TEST(SafeTensors, EmptyOrMissingFolderThrows) {
    TempDir dir;
    try {
        SafeTensors::open_dir(dir.path().string());
        ADD_FAILURE() << "no error for an empty folder";
    } catch (const Error& e) {
        EXPECT_TRUE(contains(e.what(), dir.path().string())) << e.what();
        EXPECT_TRUE(contains(e.what(), "no .safetensors")) << e.what();
    }
    write_file(dir.file("config.json"), std::string("{}"));
    EXPECT_THROW(SafeTensors::open_dir(dir.path().string()), Error);
    EXPECT_THROW(SafeTensors::open_dir(dir.file("no_such_folder")), Error);
    EXPECT_THROW(SafeTensors().add_file(dir.file("no_such_file.safetensors")), Error);
}

// ---------------------------------------------------------------------------------------------
// Malformed files

TEST(SafeTensorsMalformed, EveryTruncationThrows) {
    TempDir dir;
    std::vector<uint8_t> full = st_file({{"a", "F32", {2}, to_bytes(std::vector<float>{1, 2})},
                                         {"b", "BF16", {3}, to_bytes(std::vector<uint16_t>{1, 2, 3})}});
    std::string path = dir.file("cut.safetensors");
    write_file(path, full);
    ASSERT_FALSE(add_error(path).has_value()) << "the full file must load";
    uint64_t hlen;
    std::memcpy(&hlen, full.data(), 8);
    for (size_t len = 0; len < full.size(); ++len) {
        SCOPED_TRACE("prefix length " + std::to_string(len));
        write_file(path, full.data(), len);
        std::optional<std::string> msg = add_error(path);
        ASSERT_TRUE(msg.has_value()) << "a truncated file loaded";
        EXPECT_TRUE(contains(*msg, path)) << *msg;
        if (len < 8) {
            EXPECT_TRUE(contains(*msg, "header length")) << *msg;
        } else if (len < 8 + hlen) {
            EXPECT_TRUE(contains(*msg, "exceeds the file size")) << *msg;
        } else {
            EXPECT_TRUE(contains(*msg, "truncated")) << *msg;
        }
    }
}

TEST(SafeTensorsMalformed, HeaderLengthBeyondTheFile) {
    TempDir dir;
    std::vector<uint8_t> good = st_file({{"a", "I8", {1}, {1}}});
    for (uint64_t len : {uint64_t(good.size() - 7), uint64_t(1) << 40, ~uint64_t(0), ~uint64_t(0) - 7}) {
        SCOPED_TRACE(len);
        std::vector<uint8_t> b = good;
        std::memcpy(b.data(), &len, 8);
        expect_add_error(dir, b, {"header length", std::to_string(len)});
    }
}

TEST(SafeTensorsMalformed, InvalidJson) {
    TempDir dir;
    for (const char* text : {"{\"a\": ", "{not json}", "{} trailing", "", "\xff\xfe"}) {
        SCOPED_TRACE(text);
        expect_add_error(dir, st_raw(text, {}), {"not valid JSON"});
    }
}

TEST(SafeTensorsMalformed, HeaderNotAnObject) {
    TempDir dir;
    for (const char* text : {"[]", "5", "\"text\"", "null"}) {
        SCOPED_TRACE(text);
        expect_add_error(dir, st_raw(text, {}), {"not a JSON object"});
    }
}

TEST(SafeTensorsMalformed, EntryMissingAField) {
    TempDir dir;
    const json full = {{"dtype", "I8"}, {"shape", {8}}, {"data_offsets", {0, 8}}};
    for (const char* field : {"dtype", "shape", "data_offsets"}) {
        SCOPED_TRACE(field);
        json e = full;
        e.erase(field);
        expect_add_error(dir, one_entry(e), {"'t'", "dtype, shape and data_offsets"});
    }
    expect_add_error(dir, one_entry(5), {"'t'"});
    expect_add_error(dir, one_entry(json::array({1, 2})), {"'t'"});
    std::string path = dir.file("complete.safetensors");  // sanity: the complete entry loads
    write_file(path, one_entry(full));
    EXPECT_FALSE(add_error(path).has_value());
}

TEST(SafeTensorsMalformed, UnknownDtype) {
    TempDir dir;
    for (const json& dt : {json("F7"), json("f32"), json(""), json(4), json(nullptr)}) {
        SCOPED_TRACE(dt.dump());
        expect_add_error(dir, one_entry({{"dtype", dt}, {"shape", {8}}, {"data_offsets", {0, 8}}}),
                         {"'t'", "dtype"});
    }
}

TEST(SafeTensorsMalformed, BadShape) {
    TempDir dir;
    for (const json& shape : {json(8), json("8"), json::array({-1}), json::array({2.5}), json::array({"8"}),
                              json::array({json::array({8})})}) {
        SCOPED_TRACE(shape.dump());
        expect_add_error(dir, one_entry({{"dtype", "I8"}, {"shape", shape}, {"data_offsets", {0, 8}}}),
                         {"'t'", "shape"});
    }
}

TEST(SafeTensorsMalformed, BadDataOffsets) {
    TempDir dir;
    for (const json& off : {json(0), json::array({0}), json::array({0, 4, 8}), json::array({-1, 7}),
                            json::array({0.0, 8.0}), json::array({"0", "8"})}) {
        SCOPED_TRACE(off.dump());
        expect_add_error(dir, one_entry({{"dtype", "I8"}, {"shape", {8}}, {"data_offsets", off}}),
                         {"'t'", "data_offsets"});
    }
}

TEST(SafeTensorsMalformed, DataOffsetsOutsideTheData) {
    TempDir dir;
    const uint64_t huge = ~uint64_t(0);
    for (const json& off : {json::array({0, 9}), json::array({4, 2}), json::array({8, 16}),
                            json::array({huge - 3, huge}), json::array({huge, 8})}) {
        SCOPED_TRACE(off.dump());
        expect_add_error(dir, one_entry({{"dtype", "I8"}, {"shape", {8}}, {"data_offsets", off}}),
                         {"'t'", "data_offsets", "outside"});
    }
}

TEST(SafeTensorsMalformed, ByteCountNotMatchingTheShape) {
    TempDir dir;
    expect_add_error(dir, one_entry({{"dtype", "F32"}, {"shape", {3}}, {"data_offsets", {0, 8}}}), {"'t'", "8 bytes"});
    expect_add_error(dir, one_entry({{"dtype", "BF16"}, {"shape", {2, 3}}, {"data_offsets", {0, 8}}}), {"'t'"});
    expect_add_error(dir, one_entry({{"dtype", "I8"}, {"shape", {}}, {"data_offsets", {0, 0}}}), {"'t'"});
}

TEST(SafeTensorsMalformed, ShapeWhoseByteCountOverflows) {
    TempDir dir;
    // 4 * 2^62 * 2^62 * 16 bytes is 2^130: a wrapping product would call it 0 bytes.
    const int64_t big = int64_t(1) << 62;
    for (const json& shape : {json::array({big, big, 16}), json::array({big, big, big, big}),
                              json::array({big, 4})}) {
        SCOPED_TRACE(shape.dump());
        expect_add_error(dir, one_entry({{"dtype", "F32"}, {"shape", shape}, {"data_offsets", {0, 0}}}, 0), {"'t'"});
    }
}

// ---------------------------------------------------------------------------------------------
// The real fixtures against their config.json

class SafeTensorsFixture : public ::testing::TestWithParam<std::string> {};

std::string fixture_dir(const std::string& name) { return std::string(DSV4_SOURCE_DIR) + "/tests/fixtures/" + name; }

TEST_P(SafeTensorsFixture, TensorsMatchTheConfig) {
    const std::string dir = fixture_dir(GetParam());
    const std::string path = dir + "/model.safetensors";
    const json cfg = json::parse(read_text(dir + "/config.json"));
    const int64_t vocab = cfg.at("vocab_size"), hidden = cfg.at("hidden_size"), n = cfg.at("num_hidden_layers");
    const int64_t top_k = cfg.at("num_experts_per_tok");

    SafeTensors st = SafeTensors::open_dir(dir);  // other files in the folder are not shards
    SafeTensors single;
    single.add_file(path);
    EXPECT_EQ(st.all().size(), single.all().size());

    // Every header entry, parsed independently, is loaded with its dtype, shape and bytes.
    std::vector<uint8_t> raw = read_file(path);
    uint64_t hlen;
    std::memcpy(&hlen, raw.data(), 8);
    json header = json::parse(raw.begin() + 8, raw.begin() + 8 + std::ptrdiff_t(hlen));
    size_t entries = 0;
    for (const auto& [name, e] : header.items()) {
        if (name == "__metadata__") continue;
        ++entries;
        const StTensor* t = st.find(name);
        ASSERT_NE(t, nullptr) << name;
        EXPECT_EQ(st_dtype_name(t->dtype), e.at("dtype").get<std::string>()) << name;
        EXPECT_EQ(t->shape, e.at("shape").get<std::vector<int64_t>>()) << name;
        size_t b = e.at("data_offsets")[0], end = e.at("data_offsets")[1];
        ASSERT_EQ(t->nbytes, end - b) << name;
        EXPECT_EQ(std::memcmp(t->data, raw.data() + 8 + hlen + b, t->nbytes), 0) << name;
    }
    EXPECT_EQ(st.all().size(), entries);

    const StTensor* emb = st.find("model.embed_tokens.weight");
    ASSERT_NE(emb, nullptr);
    EXPECT_EQ(emb->shape, (std::vector<int64_t>{vocab, hidden}));
    std::vector<float> e = st.to_f32(*emb);
    ASSERT_EQ(int64_t(e.size()), vocab * hidden);
    EXPECT_TRUE(std::all_of(e.begin(), e.end(), [](float x) { return std::isfinite(x); }));
    const StTensor* head = st.find("head.weight") ? st.find("head.weight") : st.find("lm_head.weight");
    ASSERT_NE(head, nullptr);
    EXPECT_EQ(head->shape, (std::vector<int64_t>{vocab, hidden}));
    ASSERT_NE(st.find("model.norm.weight"), nullptr);
    EXPECT_EQ(st.find("model.norm.weight")->shape, std::vector<int64_t>{hidden});

    // The per-layer schedule, read from the JSON: compress rate per layer, hash layers.
    std::vector<int64_t> rate(static_cast<size_t>(n), 0);
    if (cfg.contains("layer_types")) {
        const json& rates = cfg.at("compress_rates");
        for (int64_t l = 0; l < n; ++l) {
            std::string type = cfg["layer_types"][size_t(l)];
            rate[size_t(l)] = type == "sliding_attention" ? 0 : rates.at(type).get<int64_t>();
        }
    } else {
        for (int64_t l = 0; l < n; ++l) rate[size_t(l)] = cfg.at("compress_ratios")[size_t(l)];
    }
    std::vector<bool> hash(static_cast<size_t>(n));
    for (int64_t l = 0; l < n; ++l)
        hash[size_t(l)] = cfg.contains("mlp_layer_types") ? cfg["mlp_layer_types"][size_t(l)] == "hash_moe"
                                                           : l < cfg.at("num_hash_layers").get<int64_t>();

    std::set<int64_t> layers;
    std::regex layer_re(R"(model\.layers\.(\d+)\..*)");
    for (const auto& [name, t] : st.all()) {
        std::smatch m;
        if (std::regex_match(name, m, layer_re)) layers.insert(std::stoll(m[1]));
    }
    ASSERT_EQ(int64_t(layers.size()), n);
    EXPECT_EQ(*layers.rbegin(), n - 1);

    for (int64_t l = 0; l < n; ++l) {
        SCOPED_TRACE("layer " + std::to_string(l));
        std::string p = "model.layers." + std::to_string(l) + ".";
        const StTensor* tid = st.find(p + "ffn.gate.tid2eid") ? st.find(p + "ffn.gate.tid2eid") : st.find(p + "mlp.gate.tid2eid");
        EXPECT_EQ(tid != nullptr, bool(hash[size_t(l)])) << "tid2eid exactly on hash layers";
        if (tid) {
            EXPECT_EQ(tid->dtype, StDType::I64);
            EXPECT_EQ(tid->shape, (std::vector<int64_t>{vocab, top_k}));
        }
        // The compressor's positional bias has one row per compressed position.
        const StTensor* ape = st.find(p + "attn.compressor.ape") ? st.find(p + "attn.compressor.ape")
                                                                 : st.find(p + "self_attn.compressor.position_bias");
        EXPECT_EQ(ape != nullptr, rate[size_t(l)] != 0) << "a compressor exactly on compressed layers";
        if (ape) {
            ASSERT_EQ(ape->shape.size(), 2u);
            EXPECT_EQ(ape->shape[0], rate[size_t(l)]);
        }
    }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, SafeTensorsFixture,
                         ::testing::Values("mini_flash", "legacy_hfnames", "odd_order", "long_seq"));

}  // namespace
