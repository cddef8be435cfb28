// Character classes the DeepSeek-V3 pre-tokenizer regexes ask about: the general-category
// groups \p{L}, \p{M}, \p{N}, \p{P}, \p{S}, and \s. The category data is a generated table
// (unicode_table.cpp), so tokenization does not depend on the system's regex library or its
// Unicode version.
#pragma once
#include <cstddef>
#include <cstdint>

namespace dsv4::unicode {

enum class CharClass : uint8_t { Other = 0, Letter = 1, Mark = 2, Number = 3, Punct = 4, Symbol = 5 };

// Code points above U+10FFFF (used for undecodable bytes, see utf8.h) are Other.
CharClass char_class(uint32_t cp);

// \s as Oniguruma (the regex engine of Hugging Face tokenizers) and llama.cpp define it: the
// Unicode White_Space property. It includes U+0085 and excludes U+FEFF; JavaScript's \s is
// the other way round on both.
bool is_whitespace(uint32_t cp);

extern const char kUnicodeVersion[];   // of the generated table
extern const uint32_t kClassRuns[];    // first_code_point << 3 | class, ascending
extern const size_t kClassRunCount;

}  // namespace dsv4::unicode
