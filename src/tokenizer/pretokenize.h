// The pre-tokenizer of DeepSeek-V3 (tokenizer.ggml.pre = "deepseek-v3"): three regex Splits
// with the "Isolated" behaviour, applied one after the other to each piece the previous one
// produced, then byte-level mapping without a regex of its own.
#pragma once
#include <string_view>
#include <vector>

namespace dsv4 {

// The Split regexes exactly as DeepSeek-V3's tokenizer.json writes them, in order. They are
// the specification that pretokenize_deepseek_v3 implements by hand; a tokenizer.json whose
// pre_tokenizer differs from them is refused rather than tokenized wrongly.
extern const char* const kDeepSeekV3SplitRegexes[3];

// Splits text (a section of input free of added tokens) and appends the pieces, as views into
// text, to out. Concatenated, the pieces are exactly text.
void pretokenize_deepseek_v3(std::string_view text, std::vector<std::string_view>& out);

}  // namespace dsv4
