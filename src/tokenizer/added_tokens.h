// Finds added tokens (control and user-defined, e.g. "<｜User｜>") in input text, so they are
// taken as whole units before pre-tokenization, as Hugging Face does: at the leftmost position
// where any of them starts, the longest one wins.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

namespace dsv4 {

class AddedTokenMatcher {
public:
    // control: matched only when the caller asks for special tokens to be parsed.
    void add(std::string_view text, int32_t id, bool control);

    struct Match {
        size_t len = 0;  // 0: none starts here
        int32_t id = -1;
    };
    // The longest added token starting at byte pos of text.
    Match longest_at(std::string_view text, size_t pos, bool with_control) const;
    // Whether some added token starts with this byte (a fast pre-check).
    bool may_start(uint8_t byte) const { return first_[byte]; }

private:
    // A byte trie; node 0 is the root. Children are kept in a flat edge list per node, which
    // is small because added tokens share long prefixes ("<｜").
    struct Node {
        std::vector<std::pair<uint8_t, int32_t>> next;
        int32_t id = -1;
        bool control = false;
    };
    std::vector<Node> nodes_{1};
    bool first_[256] = {};
};

}  // namespace dsv4
