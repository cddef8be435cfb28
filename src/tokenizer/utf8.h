// Strict UTF-8 decoding, one code point at a time. A byte that does not start a well-formed
// sequence (stray continuation, overlong form, surrogate, beyond U+10FFFF, truncated) decodes
// alone as kInvalidCodePoint, so any byte string can be tokenized and decodes back unchanged.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace dsv4::utf8 {

inline constexpr uint32_t kInvalidCodePoint = 0x110000;

struct Decoded {
    uint32_t cp;
    uint32_t len;  // bytes consumed, 1..4
};

inline Decoded decode(std::string_view s, size_t i) {
    const auto b = [&](size_t k) { return static_cast<uint8_t>(s[k]); };
    const uint8_t c0 = b(i);
    if (c0 < 0x80) return {c0, 1};
    const size_t left = s.size() - i;
    const auto cont = [&](size_t k) { return k < left && (b(i + k) & 0xC0) == 0x80; };
    if (c0 >= 0xC2 && c0 <= 0xDF && cont(1)) return {uint32_t(c0 & 0x1F) << 6 | (b(i + 1) & 0x3F), 2};
    if (c0 >= 0xE0 && c0 <= 0xEF && cont(1) && cont(2)) {
        const uint32_t cp = uint32_t(c0 & 0x0F) << 12 | uint32_t(b(i + 1) & 0x3F) << 6 | (b(i + 2) & 0x3F);
        if (cp >= 0x800 && (cp < 0xD800 || cp > 0xDFFF)) return {cp, 3};
    }
    if (c0 >= 0xF0 && c0 <= 0xF4 && cont(1) && cont(2) && cont(3)) {
        const uint32_t cp = uint32_t(c0 & 0x07) << 18 | uint32_t(b(i + 1) & 0x3F) << 12 |
                            uint32_t(b(i + 2) & 0x3F) << 6 | (b(i + 3) & 0x3F);
        if (cp >= 0x10000 && cp <= 0x10FFFF) return {cp, 4};
    }
    return {kInvalidCodePoint, 1};
}

}  // namespace dsv4::utf8
