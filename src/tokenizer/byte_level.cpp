// The mapping is GPT-2's bytes_to_unicode(): the printable bytes '!'..'~', 0xA1..0xAC and
// 0xAE..0xFF stand for themselves (as code points); the other 68 bytes, in ascending order,
// take the code points from U+0100 on.
#include "tokenizer/byte_level.h"

#include <array>

#include "tokenizer/utf8.h"

namespace dsv4::byte_level {
namespace {

bool stands_for_itself(int b) { return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE); }

std::string to_utf8(uint32_t cp) {
    std::string s;
    if (cp < 0x80) {
        s += char(cp);
    } else {  // the alphabet stays below U+0800
        s += char(0xC0 | (cp >> 6));
        s += char(0x80 | (cp & 0x3F));
    }
    return s;
}

struct Tables {
    std::array<uint32_t, 256> code_point{};
    std::array<std::string, 256> text;
    std::array<int16_t, 0x200> byte_of{};  // code point -> byte, -1 outside the alphabet

    Tables() {
        byte_of.fill(-1);
        uint32_t next = 0x100;
        for (int b = 0; b < 256; ++b) {
            code_point[b] = stands_for_itself(b) ? uint32_t(b) : next++;
            text[b] = to_utf8(code_point[b]);
            byte_of[code_point[b]] = int16_t(b);
        }
    }
};

const Tables& tables() {
    static const Tables t;
    return t;
}

}  // namespace

const std::string& encode_byte(uint8_t b) { return tables().text[b]; }

bool decode_text(std::string_view text, std::string& out) {
    const Tables& t = tables();
    out.clear();
    for (size_t i = 0; i < text.size();) {
        const utf8::Decoded d = utf8::decode(text, i);
        if (d.cp >= t.byte_of.size() || t.byte_of[d.cp] < 0) return false;
        out += char(t.byte_of[d.cp]);
        i += d.len;
    }
    return true;
}

}  // namespace dsv4::byte_level
