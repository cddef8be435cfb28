// safetensors reader: an 8-byte header length, a JSON header {name: {dtype, shape,
// data_offsets}}, then the raw little-endian data. Memory-mapped; every entry is validated.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/mapped_file.h"

namespace dsv4 {

enum class StDType { F32, F16, BF16, F64, I64, I32, I16, I8, U8, BOOL, F8_E4M3, F8_E5M2, F8_E8M0 };

const char* st_dtype_name(StDType t);
size_t st_dtype_size(StDType t);

struct StTensor {
    std::string name;
    StDType dtype;
    std::vector<int64_t> shape;  // PyTorch order (slowest first)
    const uint8_t* data = nullptr;
    size_t nbytes = 0;
    std::string file;  // the shard it lives in
    int64_t elements() const;
};

// One or more shards (model.safetensors or model-0000N-of-0000M.safetensors in a folder).
class SafeTensors {
public:
    void add_file(const std::string& path);
    static SafeTensors open_dir(const std::string& dir);  // every *.safetensors file in dir

    const StTensor* find(const std::string& name) const;
    const std::map<std::string, StTensor>& all() const { return tensors_; }

    // The tensor converted to float32 (F32/F16/BF16/F64 only); throws naming the tensor otherwise.
    std::vector<float> to_f32(const StTensor& t) const;

private:
    std::vector<std::shared_ptr<MappedFile>> files_;
    std::map<std::string, StTensor> tensors_;
};

}  // namespace dsv4
