// Byte-pair merging by rank, as Hugging Face's BPE model does it.
#pragma once
#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <vector>

namespace dsv4 {

class BpeMerges {
public:
    // Adds the merge of lowest rank not yet seen: left + right -> merged (token ids). A pair
    // already present keeps its earlier, better rank.
    void add(int32_t left, int32_t right, int32_t merged);
    size_t size() const { return rank_.size(); }

    // Rewrites symbols (the token ids of a word's single bytes) into the word's tokens.
    void apply(std::vector<int32_t>& symbols) const;

private:
    struct Merge {
        int32_t rank;
        int32_t merged;
    };
    static uint64_t key(int32_t left, int32_t right) { return uint64_t(uint32_t(left)) << 32 | uint32_t(right); }
    const Merge* find(int32_t left, int32_t right) const;

    std::unordered_map<uint64_t, Merge> rank_;
};

}  // namespace dsv4
