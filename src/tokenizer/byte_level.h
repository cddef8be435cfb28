// GPT-2's byte-level alphabet: every byte gets a printable stand-in character, so that BPE
// vocabularies store arbitrary bytes as text (byte 0x20, the space, is "Ġ", U+0120).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

namespace dsv4::byte_level {

// The UTF-8 text of the stand-in character of byte b.
const std::string& encode_byte(uint8_t b);

// Maps a vocabulary token's text back to the bytes it stands for. Returns false (out is then
// unspecified) when the text has a character outside the alphabet: such a token (an added
// token such as "<｜User｜>") stands for its own text, as Hugging Face's ByteLevel decoder has it.
bool decode_text(std::string_view text, std::string& out);

}  // namespace dsv4::byte_level
