// A parsed request to the token ids the model sees: chat requests through the V4 chat template,
// text requests through the tokenizer as they are (or taken as given token ids).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "server/gen_request.h"
#include "tokenizer/tokenizer.h"

namespace dsv4::server {

struct BuiltPrompt {
    std::vector<int32_t> tokens;
    bool thinking = false;  // the prompt opens a <think> block: the output starts as reasoning
    std::string echo_text;  // what /v1/completions echo=true prepends (the prompt as text)
};

// Throws ApiError 400 for a template problem (a tool call whose arguments are not a JSON object)
// or token ids outside the vocabulary; the length check is the caller's (it knows the context).
BuiltPrompt build_prompt(const GenRequest& g, const Tokenizer& tok);

}  // namespace dsv4::server
