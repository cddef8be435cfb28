#include "io/gguf.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>

#include "core/error.h"

namespace dsv4::gguf {

namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" little endian
constexpr uint64_t kMaxDims = 4;

// Bounds-checked little-endian cursor over the mapped file: every read names what it read.
class Cursor {
public:
    Cursor(const uint8_t* p, size_t n, const std::string& path) : p_(p), n_(n), path_(path) {}
    size_t pos() const { return pos_; }
    size_t remaining() const { return n_ - pos_; }

    template <class T>
    T read(const char* what) {
        need(sizeof(T), what);
        T v;
        std::memcpy(&v, p_ + pos_, sizeof(T));
        pos_ += sizeof(T);
        return v;
    }
    std::string read_string(const char* what) {
        uint64_t len = read<uint64_t>(what);
        need(len, what);
        std::string s(reinterpret_cast<const char*>(p_ + pos_), size_t(len));
        pos_ += size_t(len);
        return s;
    }
    void need(uint64_t bytes, const char* what) const {
        if (bytes > remaining())
            fail(path_, ": truncated GGUF while reading ", what, " at byte ", pos_, " (need ", bytes,
                 ", have ", remaining(), ")");
    }
    [[noreturn]] void bad(const std::string& msg) const { fail(path_, ": malformed GGUF: ", msg); }

private:
    const uint8_t* p_;
    size_t n_;
    size_t pos_ = 0;
    const std::string& path_;
};

size_t scalar_size(ValueType t) {
    switch (t) {
        case ValueType::U8: case ValueType::I8: case ValueType::BOOL: return 1;
        case ValueType::U16: case ValueType::I16: return 2;
        case ValueType::U32: case ValueType::I32: case ValueType::F32: return 4;
        case ValueType::U64: case ValueType::I64: case ValueType::F64: return 8;
        case ValueType::STRING: return 8;  // at least the length field
        case ValueType::ARRAY: return 12;  // at least the type and count fields
    }
    return 0;
}

bool value_type_known(uint32_t t) { return t <= uint32_t(ValueType::F64); }

Value read_value(Cursor& c, ValueType type, int depth, const std::string& key) {
    Value v;
    v.type = type;
    switch (type) {
        case ValueType::U8: v.u = c.read<uint8_t>("u8 value"); break;
        case ValueType::I8: v.i = c.read<int8_t>("i8 value"); break;
        case ValueType::U16: v.u = c.read<uint16_t>("u16 value"); break;
        case ValueType::I16: v.i = c.read<int16_t>("i16 value"); break;
        case ValueType::U32: v.u = c.read<uint32_t>("u32 value"); break;
        case ValueType::I32: v.i = c.read<int32_t>("i32 value"); break;
        case ValueType::U64: v.u = c.read<uint64_t>("u64 value"); break;
        case ValueType::I64: v.i = c.read<int64_t>("i64 value"); break;
        case ValueType::F32: v.f = c.read<float>("f32 value"); break;
        case ValueType::F64: v.f = c.read<double>("f64 value"); break;
        case ValueType::BOOL: {
            uint8_t b = c.read<uint8_t>("bool value");
            if (b > 1) c.bad(cat("key '", key, "': bool value ", int(b)));
            v.u = b;
            break;
        }
        case ValueType::STRING: v.s = c.read_string("string value"); break;
        case ValueType::ARRAY: {
            if (depth > 0) c.bad(cat("key '", key, "': nested arrays are not supported"));
            uint32_t et = c.read<uint32_t>("array type");
            if (!value_type_known(et)) c.bad(cat("key '", key, "': unknown array element type ", et));
            uint64_t n = c.read<uint64_t>("array length");
            v.elem = ValueType(et);
            if (n > c.remaining() / scalar_size(v.elem))
                c.bad(cat("key '", key, "': array of ", n, " elements does not fit in the file"));
            v.arr.reserve(static_cast<size_t>(n));
            for (uint64_t k = 0; k < n; ++k) v.arr.push_back(read_value(c, v.elem, depth + 1, key));
            break;
        }
    }
    return v;
}

void put_bytes(std::vector<uint8_t>& out, const void* p, size_t n) {
    const uint8_t* b = static_cast<const uint8_t*>(p);
    out.insert(out.end(), b, b + n);
}
template <class T>
void put(std::vector<uint8_t>& out, T v) {
    put_bytes(out, &v, sizeof(T));
}
void put_string(std::vector<uint8_t>& out, const std::string& s) {
    put<uint64_t>(out, s.size());
    put_bytes(out, s.data(), s.size());
}

void write_value(std::vector<uint8_t>& out, const Value& v) {
    switch (v.type) {
        case ValueType::U8: put<uint8_t>(out, uint8_t(v.u)); break;
        case ValueType::I8: put<int8_t>(out, int8_t(v.i)); break;
        case ValueType::U16: put<uint16_t>(out, uint16_t(v.u)); break;
        case ValueType::I16: put<int16_t>(out, int16_t(v.i)); break;
        case ValueType::U32: put<uint32_t>(out, uint32_t(v.u)); break;
        case ValueType::I32: put<int32_t>(out, int32_t(v.i)); break;
        case ValueType::U64: put<uint64_t>(out, v.u); break;
        case ValueType::I64: put<int64_t>(out, v.i); break;
        case ValueType::F32: put<float>(out, float(v.f)); break;
        case ValueType::F64: put<double>(out, v.f); break;
        case ValueType::BOOL: put<uint8_t>(out, v.u ? 1 : 0); break;
        case ValueType::STRING: put_string(out, v.s); break;
        case ValueType::ARRAY:
            put<uint32_t>(out, uint32_t(v.elem));
            put<uint64_t>(out, v.arr.size());
            for (const Value& e : v.arr) {
                if (e.type != v.elem) fail("GGUF writer: array element type does not match the array's");
                write_value(out, e);
            }
            break;
    }
}

uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

}  // namespace

const char* type_name(TensorType t) {
    switch (t) {
        case TensorType::F32: return "F32";
        case TensorType::F16: return "F16";
        case TensorType::Q8_0: return "Q8_0";
        case TensorType::Q2_K: return "Q2_K";
        case TensorType::I8: return "I8";
        case TensorType::I16: return "I16";
        case TensorType::I32: return "I32";
        case TensorType::I64: return "I64";
        case TensorType::F64: return "F64";
        case TensorType::BF16: return "BF16";
        case TensorType::MXFP4: return "MXFP4";
    }
    return "?";
}

bool type_known(uint32_t t) {
    switch (TensorType(t)) {
        case TensorType::F32: case TensorType::F16: case TensorType::Q8_0: case TensorType::Q2_K: case TensorType::I8:
        case TensorType::I16: case TensorType::I32: case TensorType::I64: case TensorType::F64:
        case TensorType::BF16: case TensorType::MXFP4:
            return true;
    }
    return false;
}

int64_t type_block_elems(TensorType t) {
    if (t == TensorType::Q2_K) return 256;  // one super-block
    return (t == TensorType::Q8_0 || t == TensorType::MXFP4) ? 32 : 1;
}

size_t type_block_bytes(TensorType t) {
    switch (t) {
        case TensorType::F32: case TensorType::I32: return 4;
        case TensorType::F16: case TensorType::BF16: case TensorType::I16: return 2;
        case TensorType::I8: return 1;
        case TensorType::I64: case TensorType::F64: return 8;
        case TensorType::Q8_0: return 34;   // f16 scale + 32 int8
        case TensorType::MXFP4: return 17;  // e8m0 scale + 16 bytes of nibbles
        case TensorType::Q2_K: return 84;   // 16 scale/min bytes + 64 bytes of 2-bit quants + f16 d, dmin
    }
    return 0;
}

size_t tensor_bytes(TensorType t, const std::vector<int64_t>& ne) {
    if (ne.empty()) fail("tensor with no dimensions");
    int64_t be = type_block_elems(t);
    if (ne[0] % be != 0) fail("row length ", ne[0], " is not a multiple of the ", type_name(t), " block of ", be);
    // Checked after every factor: each stays below 2^63, so the product cannot wrap.
    const unsigned __int128 limit = std::numeric_limits<size_t>::max() / 2;
    unsigned __int128 bytes = (unsigned __int128)(ne[0] / be) * type_block_bytes(t);
    if (bytes > limit) fail("tensor too large");
    for (size_t d = 1; d < ne.size(); ++d) {
        bytes *= (unsigned __int128)ne[d];
        if (bytes > limit) fail("tensor too large");
    }
    return size_t(bytes);
}

Value Value::u32(uint32_t v) { Value x; x.type = ValueType::U32; x.u = v; return x; }
Value Value::i32(int32_t v) { Value x; x.type = ValueType::I32; x.i = v; return x; }
Value Value::u64(uint64_t v) { Value x; x.type = ValueType::U64; x.u = v; return x; }
Value Value::f32(float v) { Value x; x.type = ValueType::F32; x.f = v; return x; }
Value Value::f64(double v) { Value x; x.type = ValueType::F64; x.f = v; return x; }
Value Value::boolean(bool v) { Value x; x.type = ValueType::BOOL; x.u = v ? 1 : 0; return x; }
Value Value::str(std::string v) { Value x; x.type = ValueType::STRING; x.s = std::move(v); return x; }
Value Value::array(ValueType elem, std::vector<Value> items) {
    Value x;
    x.type = ValueType::ARRAY;
    x.elem = elem;
    x.arr = std::move(items);
    return x;
}

bool Value::is_number() const {
    return type != ValueType::STRING && type != ValueType::ARRAY;
}

double Value::number() const {
    switch (type) {
        case ValueType::U8: case ValueType::U16: case ValueType::U32: case ValueType::U64: case ValueType::BOOL:
            return double(u);
        case ValueType::I8: case ValueType::I16: case ValueType::I32: case ValueType::I64:
            return double(i);
        case ValueType::F32: case ValueType::F64:
            return f;
        default:
            fail("value is not a number");
    }
}

int64_t Value::integer() const {
    switch (type) {
        case ValueType::U8: case ValueType::U16: case ValueType::U32: case ValueType::U64: case ValueType::BOOL:
            if (u > uint64_t(std::numeric_limits<int64_t>::max())) fail("integer value too large");
            return int64_t(u);
        case ValueType::I8: case ValueType::I16: case ValueType::I32: case ValueType::I64:
            return i;
        default:
            fail("value is not an integer");
    }
}

int64_t TensorInfo::elements() const {
    int64_t n = 1;
    for (int64_t d : ne) n *= d;
    return n;
}

Reader::Reader(const std::string& path) : file_(std::make_shared<MappedFile>(path)) {
    const std::string& p = file_->path();
    Cursor c(file_->data(), file_->size(), p);
    if (file_->size() < 4 || c.read<uint32_t>("magic") != kMagic) fail(p, ": not a GGUF file (bad magic)");
    version_ = c.read<uint32_t>("version");
    if (version_ != 3) fail(p, ": GGUF version ", version_, " is not supported (need 3)");
    uint64_t n_tensors = c.read<uint64_t>("tensor count");
    uint64_t n_kv = c.read<uint64_t>("metadata count");
    if (n_kv > c.remaining() / 12) c.bad(cat("metadata count ", n_kv, " does not fit in the file"));
    if (n_tensors > c.remaining() / 24) c.bad(cat("tensor count ", n_tensors, " does not fit in the file"));

    for (uint64_t k = 0; k < n_kv; ++k) {
        std::string key = c.read_string("metadata key");
        if (key.empty()) c.bad(cat("metadata key ", k, " is empty"));
        uint32_t t = c.read<uint32_t>("metadata type");
        if (!value_type_known(t)) c.bad(cat("key '", key, "': unknown value type ", t));
        Value v = read_value(c, ValueType(t), 0, key);
        if (kv_index_.count(key)) c.bad(cat("duplicate metadata key '", key, "'"));
        kv_index_[key] = kv_.size();
        kv_.emplace_back(std::move(key), std::move(v));
    }
    if (const Value* a = find("general.alignment")) {
        if (a->type != ValueType::U32 || a->u == 0 || (a->u & (a->u - 1)) != 0)
            c.bad("general.alignment must be a power-of-two u32");
        alignment_ = uint32_t(a->u);
    }

    for (uint64_t k = 0; k < n_tensors; ++k) {
        TensorInfo ti;
        ti.name = c.read_string("tensor name");
        if (ti.name.empty()) c.bad(cat("tensor ", k, " has an empty name"));
        uint32_t nd = c.read<uint32_t>("tensor dimension count");
        if (nd == 0 || nd > kMaxDims) c.bad(cat("tensor '", ti.name, "': ", nd, " dimensions"));
        for (uint32_t d = 0; d < nd; ++d) {
            int64_t n = c.read<int64_t>("tensor dimension");
            if (n <= 0) c.bad(cat("tensor '", ti.name, "': dimension ", d, " is ", n));
            ti.ne.push_back(n);
        }
        uint32_t t = c.read<uint32_t>("tensor type");
        if (!type_known(t)) c.bad(cat("tensor '", ti.name, "': unsupported type id ", t));
        ti.type = TensorType(t);
        ti.offset = c.read<uint64_t>("tensor offset");
        if (ti.offset % alignment_ != 0) c.bad(cat("tensor '", ti.name, "': offset ", ti.offset, " is not aligned"));
        try {
            ti.nbytes = tensor_bytes(ti.type, ti.ne);
        } catch (const Error& e) {
            c.bad(cat("tensor '", ti.name, "': ", e.what()));
        }
        if (tensor_index_.count(ti.name)) c.bad(cat("duplicate tensor '", ti.name, "'"));
        tensor_index_[ti.name] = tensors_.size();
        tensors_.push_back(std::move(ti));
    }

    uint64_t data_start = align_up(c.pos(), alignment_);
    for (TensorInfo& ti : tensors_) {
        if (data_start > file_->size() || ti.offset > file_->size() - data_start ||
            ti.nbytes > file_->size() - data_start - ti.offset)
            fail(p, ": truncated GGUF: tensor '", ti.name, "' (", ti.nbytes, " bytes at offset ", ti.offset,
                 ") extends past the end of the file");
        ti.data = file_->data() + data_start + ti.offset;
    }
}

const Value* Reader::find(const std::string& key) const {
    auto it = kv_index_.find(key);
    return it == kv_index_.end() ? nullptr : &kv_[it->second].second;
}

const Value& Reader::get(const std::string& key) const {
    const Value* v = find(key);
    if (!v) fail(path(), ": missing metadata key '", key, "'");
    return *v;
}

std::string Reader::get_string(const std::string& key) const {
    const Value& v = get(key);
    if (v.type != ValueType::STRING) fail(path(), ": metadata key '", key, "' is not a string");
    return v.s;
}

int64_t Reader::get_int(const std::string& key) const {
    const Value& v = get(key);
    try {
        return v.integer();
    } catch (const Error& e) {
        fail(path(), ": metadata key '", key, "': ", e.what());
    }
}

double Reader::get_number(const std::string& key) const {
    const Value& v = get(key);
    if (!v.is_number()) fail(path(), ": metadata key '", key, "' is not a number");
    return v.number();
}

const TensorInfo* Reader::find_tensor(const std::string& name) const {
    auto it = tensor_index_.find(name);
    return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

void Writer::set(const std::string& key, Value v) {
    for (auto& kv : kv_)
        if (kv.first == key) {
            kv.second = std::move(v);
            return;
        }
    kv_.emplace_back(key, std::move(v));
}

void Writer::add_tensor(const std::string& name, TensorType type, std::vector<int64_t> ne, Producer produce) {
    for (const auto& t : tensors_)
        if (t.name == name) fail("GGUF writer: duplicate tensor '", name, "'");
    // Validate the shape as the reader will: 1 to 4 positive dims, whole blocks, a sane size.
    if (ne.empty() || ne.size() > kMaxDims) fail("GGUF writer: tensor '", name, "' has ", ne.size(), " dimensions");
    for (size_t d = 0; d < ne.size(); ++d)
        if (ne[d] <= 0) fail("GGUF writer: tensor '", name, "': dimension ", d, " is ", ne[d]);
    try {
        tensor_bytes(type, ne);
    } catch (const Error& e) {
        fail("GGUF writer: tensor '", name, "': ", e.what());
    }
    tensors_.push_back({name, type, std::move(ne), std::move(produce)});
}

void Writer::add_tensor(const std::string& name, TensorType type, std::vector<int64_t> ne,
                        std::vector<uint8_t> bytes) {
    auto shared = std::make_shared<std::vector<uint8_t>>(std::move(bytes));
    add_tensor(name, type, std::move(ne), [shared](std::vector<uint8_t>& out) { out = *shared; });
}

void Writer::write(const std::string& path, const std::function<void(size_t, size_t)>& progress) const {
    // A general.alignment key set by the caller is the alignment the file declares, so the
    // layout must follow it; otherwise the constructor's alignment is used (and recorded).
    uint32_t alignment = alignment_;
    bool has_alignment = false;
    for (const auto& kv : kv_)
        if (kv.first == "general.alignment") {
            if (kv.second.type != ValueType::U32) fail(path, ": general.alignment must be a u32");
            alignment = uint32_t(kv.second.u);
            has_alignment = true;
        }
    if (alignment == 0 || (alignment & (alignment - 1)) != 0)
        fail(path, ": ", has_alignment ? "general.alignment " : "GGUF alignment ", alignment, " is not a power of two");
    std::vector<uint8_t> head;
    put<uint32_t>(head, kMagic);
    put<uint32_t>(head, 3);
    put<uint64_t>(head, tensors_.size());
    put<uint64_t>(head, kv_.size() + (has_alignment || alignment == 32 ? 0 : 1));
    for (const auto& kv : kv_) {
        put_string(head, kv.first);
        put<uint32_t>(head, uint32_t(kv.second.type));
        write_value(head, kv.second);
    }
    if (!has_alignment && alignment != 32) {
        put_string(head, "general.alignment");
        put<uint32_t>(head, uint32_t(ValueType::U32));
        put<uint32_t>(head, alignment);
    }
    uint64_t offset = 0;
    std::vector<size_t> sizes;
    for (const auto& t : tensors_) {
        put_string(head, t.name);
        put<uint32_t>(head, uint32_t(t.ne.size()));
        for (int64_t n : t.ne) put<int64_t>(head, n);
        put<uint32_t>(head, uint32_t(t.type));
        put<uint64_t>(head, offset);
        size_t nb = tensor_bytes(t.type, t.ne);
        sizes.push_back(nb);
        offset = align_up(offset + nb, alignment);
    }
    head.resize(static_cast<size_t>(align_up(head.size(), alignment)), 0);

    std::string tmp = path + ".partial";
    FILE* f = std::fopen(tmp.c_str(), "wb");
    if (!f) fail(path, ": cannot create: ", std::strerror(errno));
    auto write_or_fail = [&](const void* p, size_t n) {
        if (n && std::fwrite(p, 1, n, f) != n) {
            std::fclose(f);
            std::remove(tmp.c_str());
            fail(path, ": write failed (disk full?)");
        }
    };
    write_or_fail(head.data(), head.size());
    std::vector<uint8_t> buf;
    static const uint8_t zeros[64] = {};
    for (size_t k = 0; k < tensors_.size(); ++k) {
        if (progress) progress(k, tensors_.size());
        buf.clear();
        try {
            tensors_[k].produce(buf);
        } catch (...) {
            std::fclose(f);
            std::remove(tmp.c_str());
            throw;
        }
        if (buf.size() != sizes[k]) {
            std::fclose(f);
            std::remove(tmp.c_str());
            fail("GGUF writer: tensor '", tensors_[k].name, "' produced ", buf.size(), " bytes, expected ", sizes[k]);
        }
        write_or_fail(buf.data(), buf.size());
        size_t pad = size_t(align_up(buf.size(), alignment) - buf.size());
        while (pad > 0) {
            size_t n = pad < sizeof(zeros) ? pad : sizeof(zeros);
            write_or_fail(zeros, n);
            pad -= n;
        }
    }
    if (std::fclose(f) != 0) {
        std::remove(tmp.c_str());
        fail(path, ": write failed");
    }
    if (std::rename(tmp.c_str(), path.c_str()) != 0) {
        std::remove(tmp.c_str());
        fail(path, ": cannot rename the finished file into place: ", std::strerror(errno));
    }
}

}  // namespace dsv4::gguf
