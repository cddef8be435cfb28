// Lookup in the generated run table; the Basic Multilingual Plane, where almost all text
// lives, is expanded once into a flat array so the common case is one load.
#include "tokenizer/unicode_class.h"

#include <algorithm>
#include <array>

namespace dsv4::unicode {
namespace {

CharClass search_runs(uint32_t cp) {
    // The last run whose first code point is <= cp.
    const uint32_t key = (cp << 3) | 7u;
    const uint32_t* end = kClassRuns + kClassRunCount;
    const uint32_t* it = std::upper_bound(kClassRuns, end, key);
    return static_cast<CharClass>(*(it - 1) & 7u);
}

const std::array<CharClass, 0x10000>& bmp_table() {
    static const std::array<CharClass, 0x10000> table = [] {
        std::array<CharClass, 0x10000> t{};
        for (uint32_t cp = 0; cp < 0x10000; ++cp) t[cp] = search_runs(cp);
        return t;
    }();
    return table;
}

}  // namespace

CharClass char_class(uint32_t cp) {
    if (cp < 0x10000) return bmp_table()[cp];
    if (cp > 0x10FFFF) return CharClass::Other;
    return search_runs(cp);
}

bool is_whitespace(uint32_t cp) {
    if (cp < 0x80) return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20;
    switch (cp) {
    case 0x85: case 0xA0: case 0x1680: case 0x2028: case 0x2029: case 0x202F: case 0x205F: case 0x3000:
        return true;
    default:
        return cp >= 0x2000 && cp <= 0x200A;
    }
}

}  // namespace dsv4::unicode
