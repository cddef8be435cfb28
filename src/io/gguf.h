// GGUF v3: a memory-mapped reader that validates every field, and a streaming writer.
// Layout (little endian): magic "GGUF", version, n_tensors, n_kv, the key/value pairs, the
// tensor infos (name, dims fastest-first, type, offset), padding to the alignment, the data.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/mapped_file.h"

namespace dsv4::gguf {

enum class ValueType : uint32_t {
    U8 = 0, I8 = 1, U16 = 2, I16 = 3, U32 = 4, I32 = 5, F32 = 6, BOOL = 7,
    STRING = 8, ARRAY = 9, U64 = 10, I64 = 11, F64 = 12,
};

// ggml type ids of the tensor types dsv4 reads and writes.
enum class TensorType : uint32_t {
    F32 = 0, F16 = 1, Q8_0 = 8, Q2_K = 10, I8 = 24, I16 = 25, I32 = 26, I64 = 27, F64 = 28, BF16 = 30, MXFP4 = 39,
};

const char* type_name(TensorType t);
bool type_known(uint32_t t);
int64_t type_block_elems(TensorType t);  // values per block (1 for plain types)
size_t type_block_bytes(TensorType t);   // bytes per block
size_t tensor_bytes(TensorType t, const std::vector<int64_t>& ne);  // throws if ne[0] is not whole blocks

// One metadata value. Scalars keep their exact type; arrays hold their elements.
struct Value {
    ValueType type = ValueType::U32;
    uint64_t u = 0;    // U8..U64, BOOL
    int64_t i = 0;     // I8..I64
    double f = 0;      // F32, F64
    std::string s;     // STRING
    ValueType elem = ValueType::U8;  // ARRAY element type
    std::vector<Value> arr;          // ARRAY

    static Value u32(uint32_t v);
    static Value i32(int32_t v);
    static Value u64(uint64_t v);
    static Value f32(float v);
    static Value f64(double v);
    static Value boolean(bool v);
    static Value str(std::string v);
    static Value array(ValueType elem, std::vector<Value> items);

    bool is_number() const;
    double number() const;   // any numeric or bool type
    int64_t integer() const; // integer or bool types only (throws otherwise)
};

struct TensorInfo {
    std::string name;
    std::vector<int64_t> ne;  // ggml order: ne[0] is the fastest-varying (row length)
    TensorType type = TensorType::F32;
    uint64_t offset = 0;      // from the start of the data section
    size_t nbytes = 0;
    const uint8_t* data = nullptr;
    int64_t elements() const;
};

class Reader {
public:
    explicit Reader(const std::string& path);

    const std::string& path() const { return file_->path(); }
    uint32_t version() const { return version_; }
    uint32_t alignment() const { return alignment_; }

    const std::vector<std::pair<std::string, Value>>& metadata() const { return kv_; }
    const Value* find(const std::string& key) const;
    const Value& get(const std::string& key) const;  // throws naming the key and file
    std::string get_string(const std::string& key) const;
    int64_t get_int(const std::string& key) const;
    double get_number(const std::string& key) const;

    const std::vector<TensorInfo>& tensors() const { return tensors_; }
    const TensorInfo* find_tensor(const std::string& name) const;

private:
    std::shared_ptr<MappedFile> file_;
    uint32_t version_ = 0;
    uint32_t alignment_ = 32;
    std::vector<std::pair<std::string, Value>> kv_;
    std::map<std::string, size_t> kv_index_;
    std::vector<TensorInfo> tensors_;
    std::map<std::string, size_t> tensor_index_;
};

// Writes a GGUF file. Tensor data is produced lazily, one tensor at a time, so a converter
// never holds the whole model in memory. The file appears under its name only when complete.
class Writer {
public:
    using Producer = std::function<void(std::vector<uint8_t>& out)>;

    explicit Writer(uint32_t alignment = 32) : alignment_(alignment) {}
    void set(const std::string& key, Value v);
    void add_tensor(const std::string& name, TensorType type, std::vector<int64_t> ne, Producer produce);
    void add_tensor(const std::string& name, TensorType type, std::vector<int64_t> ne, std::vector<uint8_t> bytes);
    // progress(i, n) is called before tensor i of n is produced.
    void write(const std::string& path, const std::function<void(size_t, size_t)>& progress = {}) const;

private:
    struct Pending {
        std::string name;
        TensorType type;
        std::vector<int64_t> ne;
        Producer produce;
    };
    uint32_t alignment_;
    std::vector<std::pair<std::string, Value>> kv_;
    std::vector<Pending> tensors_;
};

}  // namespace dsv4::gguf
