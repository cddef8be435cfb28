// SHA-256 (FIPS 180-4), for the model identity in receipts and the output hashes of evals.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace dsv4 {

class Sha256 {
public:
    Sha256();
    void update(const void* data, size_t n);
    void update(std::string_view s) { update(s.data(), s.size()); }
    std::string hex();  // finishes; the object is spent afterwards

private:
    void block(const uint8_t* p);
    uint32_t h_[8];
    uint8_t buf_[64];
    size_t fill_ = 0;
    uint64_t bytes_ = 0;
};

std::string sha256_hex(std::string_view data);
// Of a whole file (read in 1 MiB pieces); throws dsv4::Error naming the file when unreadable.
std::string sha256_file(const std::string& path);

}  // namespace dsv4
