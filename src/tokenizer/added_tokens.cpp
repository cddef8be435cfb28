#include "tokenizer/added_tokens.h"

namespace dsv4 {

void AddedTokenMatcher::add(std::string_view text, int32_t id, bool control) {
    if (text.empty()) return;  // an empty token would match everywhere
    int32_t node = 0;
    for (char ch : text) {
        const uint8_t b = uint8_t(ch);
        int32_t child = -1;
        for (const auto& [edge, to] : nodes_[size_t(node)].next)
            if (edge == b) child = to;
        if (child < 0) {
            child = int32_t(nodes_.size());
            nodes_[size_t(node)].next.emplace_back(b, child);
            nodes_.emplace_back();
        }
        node = child;
    }
    Node& end = nodes_[size_t(node)];
    if (end.id < 0) {  // the first of two tokens with the same text keeps it
        end.id = id;
        end.control = control;
    }
    first_[uint8_t(text[0])] = true;
}

AddedTokenMatcher::Match AddedTokenMatcher::longest_at(std::string_view text, size_t pos, bool with_control) const {
    Match best;
    int32_t node = 0;
    for (size_t i = pos; i < text.size(); ++i) {
        const uint8_t b = uint8_t(text[i]);
        int32_t child = -1;
        for (const auto& [edge, to] : nodes_[size_t(node)].next)
            if (edge == b) {
                child = to;
                break;
            }
        if (child < 0) break;
        node = child;
        const Node& n = nodes_[size_t(node)];
        if (n.id >= 0 && (with_control || !n.control)) best = {i + 1 - pos, n.id};
    }
    return best;
}

}  // namespace dsv4
